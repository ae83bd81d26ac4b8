"""An answers file for `quantcheck lab scripted --answers FILE`: what one lab server (one
side of an A/B) answers, prompt by prompt.

The file is YAML or JSON: one mapping, each key a prompt and each value its answer.

    capital-au: " The capital of Australia is Canberra."   # a prompt id (with --prompts)
    "Which is larger, 9.11 or 9.9": " 9.9"                 # text found in the prompt
    flaky: [" First variant.", " Second variant."]         # cycled, one per request

A key is a prompt's id when the server is given the prompt set (`--prompts FILE`) and
the set has that id: the answer is for exactly that prompt's text (its messages'
contents, one per line). Any other key is text: the first such key found in a
prompt's text, in file order, picks the answer. An answer is text, or a list of texts
answered in turn to the identical requests of one prompt (a server whose output moves
between repeats). A prompt no key picks gets the default answer, "The answer is N. It
follows from the question." (N from the prompt's text). YAML drops a plain answer's
leading space: quote an answer to keep it, as tokens that start with a space do.

The file is read as every user's YAML file is: a regular file only (a FIFO or a device
such as /dev/zero is refused before a byte is read), of at most MAX_YAML_BYTES, UTF-8.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from ..errors import ConfigFileError
from ..store.files import UnreadableFile, read_regular
from ..store.inputs.prompt_sets import load_prompts
from ..store.inputs.yamlfile import MAX_YAML_BYTES, not_utf8
from .request_body import prompt_text_of

Answer = str | list[str]
TEXT_TAG = "tag:yaml.org,2002:str"
EXAMPLE = 'capital-au: " The capital of Australia is Canberra."'


def load_answers(path: Path) -> dict[str, Answer]:
    """The file's answers by key, in file order; ConfigFileError naming the file, the
    line and the key of anything that is not an answer."""
    try:
        data = read_regular(path, MAX_YAML_BYTES, "answers file")
    except UnreadableFile as exc:
        raise ConfigFileError(str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(not_utf8(path, data, exc.start, "answers file")) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{path}: not valid YAML or JSON: {exc}") from None
    except RecursionError:
        raise ConfigFileError(f"{path}: the answers file nests values too deeply to "
                              "read") from None
    if not isinstance(root, yaml.MappingNode):
        raise ConfigFileError(f"{path}: an answers file is one mapping of prompt (its id, or "
                              f"text found in it) to answer, e.g. {EXAMPLE}")
    answers: dict[str, Answer] = {}
    for key_node, value_node in root.value:
        line = key_node.start_mark.line + 1
        if not isinstance(key_node, yaml.ScalarNode) or not str(key_node.value).strip():
            raise ConfigFileError(f"{path}:{line}: a key must be a prompt's id or text found "
                                  f"in the prompt, e.g. {EXAMPLE}")
        key = str(key_node.value)
        where = f"{path}:{line}: key {key!r}"
        if key in answers:
            raise ConfigFileError(f"{where}: given twice; keep one answer per prompt")
        answers[key] = _answer(value_node, where)
    if not answers:
        raise ConfigFileError(f"{path}: no answers; give at least one, e.g. {EXAMPLE}")
    return answers


def _answer(node: yaml.Node, where: str) -> Answer:
    """An answer node's text, or its list of texts."""
    if isinstance(node, yaml.SequenceNode):
        texts = [_text(item, f"{where}, item {n}") for n, item in enumerate(node.value, 1)]
        if not texts:
            raise ConfigFileError(f"{where}: an empty list; give at least one answer")
        return texts
    return _text(node, where)


def _text(node: yaml.Node, where: str) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise ConfigFileError(f"{where}: the answer must be text or a list of texts, not "
                              f"{'a mapping' if isinstance(node, yaml.MappingNode) else 'a list'}"
                              " inside it")
    if node.tag != TEXT_TAG:
        raise ConfigFileError(f"{where}: the answer {node.value or 'null'} is not text; quote "
                              f"it to answer it as text: \"{node.value}\"")
    return str(node.value)


def split_by_prompt(path: Path, answers: Mapping[str, Answer], prompt_files: list[Path]
                    ) -> tuple[dict[str, Answer], dict[str, Answer]]:
    """(answers by a prompt's exact text, answers by text found in a prompt): a key that
    is an id of the prompt set answers exactly that prompt's text."""
    texts = {prompt.id: prompt_text_of(prompt.request)
             for prompt in load_prompts(prompt_files)} if prompt_files else {}
    exact: dict[str, Answer] = {}
    for key, answer in answers.items():
        if key in texts:
            if texts[key] in exact:
                raise ConfigFileError(f"{path}: key {key!r}: the prompt has the text of another "
                                      "prompt with an answer; one answer serves both")
            exact[texts[key]] = answer
    found_in = {key: answer for key, answer in answers.items() if key not in texts}
    return exact, found_in
