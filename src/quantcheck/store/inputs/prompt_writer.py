"""Prompts written back as the project's YAML prompt set (`quantcheck prompts convert`):
a file to edit by hand that loads back to the same prompts and request bodies."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from ...errors import PromptFileError
from ..files import refuse_overwriting_inputs, write_atomic
from ..records.run_records import Prompt
from .prompt_entries import GREEDY_FIELDS, REQUEST_KEYS, RequestOptions
from .prompt_sets import LoadedSource, load_sources


class _Dumper(yaml.SafeDumper):
    """Multi-line texts as literal blocks (`|`), as a person writes them."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value,
                                   style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def prompt_entry(prompt: Prompt) -> dict[str, object]:
    """The prompt as a prompt set's entry: the fields the loader turns back into this
    request body; greedy fields left out where they are the loader's own."""
    request = dict(prompt.request)
    entry: dict[str, object] = {"id": prompt.id}
    if prompt.category != "general":
        entry["category"] = prompt.category
    if prompt.tags:
        entry["tags"] = list(prompt.tags)
    text_key = "messages" if prompt.api == "chat" else "prompt"
    entry[text_key] = request.pop(text_key)
    entry["max_tokens"] = request.pop("max_tokens")
    for key in REQUEST_KEYS:
        if key in request:
            entry[key] = request.pop(key)
    extra: dict[str, object] = {}
    for key, value in GREEDY_FIELDS.items():
        if key not in request:
            extra[key] = None  # left out of the request (--extra-body with null)
        elif request[key] == value and type(request[key]) is type(value):
            del request[key]
    extra.update(request)
    if extra:
        entry["extra"] = extra
    if prompt.expect is not None:
        entry["expect"] = prompt.expect.to_json()
    return entry


def prompt_set_yaml(prompts: Sequence[Prompt], heading: str = "") -> str:
    """A YAML prompt set holding `prompts`; `heading` becomes its first comment lines."""
    return entries_yaml([prompt_entry(prompt) for prompt in prompts], heading)


def entries_yaml(entries: Sequence[dict[str, object]], heading: str = "") -> str:
    """A YAML prompt set of these entries; `heading` becomes its first comment lines."""
    text = yaml.dump({"prompts": list(entries)}, Dumper=_Dumper, sort_keys=False,
                     allow_unicode=True, width=100)
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in heading.splitlines())
    return comment + text


def convert_prompt_files(paths: Sequence[Path], out: Path, options: RequestOptions,
                         force: bool = False) -> list[LoadedSource]:
    """Load prompt files and write them to `out` as one YAML prompt set (refusing to
    replace a file unless `force`, and refusing, even with it, to write over one of the
    files read); what was read, for the command to tell."""
    refuse_overwriting_inputs(out, paths)
    if out.exists() and not force:
        raise PromptFileError(f"{out}: exists; --force replaces it")
    sources = load_sources(paths, options)
    refuse_overwriting_inputs(out, [read for source in sources for read in source.read])
    mappings = sorted({source.mapping for source in sources if source.mapping})
    heading = (f"Written by `quantcheck prompts convert` from {', '.join(map(str, paths))}"
               + (f" (mapping: {'; '.join(mappings)})" if mappings else "") + ".\n"
               "A prompt set to edit by hand; every field is described in docs/prompts.md.")
    prompts = [prompt for source in sources for prompt in source.prompts]
    write_atomic(out, prompt_set_yaml(prompts, heading).encode("utf-8"))
    return sources
