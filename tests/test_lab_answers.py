"""`quantcheck lab scripted --answers FILE`: a lab server answering what a fixture says,
prompt by prompt, started from the command line as a user's CI starts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck import load_run
from quantcheck.errors import ConfigFileError
from quantcheck.lab.answers import load_answers
from quantcheck.lab.launch import free_port, wait_until_healthy
from quantcheck.store.inputs.yamlfile import MAX_YAML_BYTES

from .conftest import WritePrompts, cli_in_child, invoke

SRC = Path(__file__).parents[1] / "src"
PROMPTS = """
prompts:
  - id: capital-au
    messages: [{role: user, content: "What is the capital of Australia?"}]
    expect: {contains: Canberra}
  - {id: larger, prompt: "Q: Which is larger, 9.11 or 9.9?\\nA:", expect: {number: 9.9}}
  - {id: unknown, prompt: "Q: Something nobody scripted?\\nA:"}
"""


@contextmanager
def lab_scripted(tmp_path: Path, name: str, *args: object) -> Iterator[str]:
    """`quantcheck lab scripted ARGS` in its own process, as a CI job starts it; its URL."""
    port = free_port()
    log = tmp_path / f"{name}.log"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    with log.open("wb") as handle:
        process = subprocess.Popen([sys.executable, "-m", "quantcheck", "lab", "scripted",
                                    "--port", str(port), *map(str, args)],
                                   stdout=handle, stderr=subprocess.STDOUT, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url, process, log, timeout=60)
        yield f"{url}/v1"
    finally:
        process.terminate()
        process.wait(30)


def texts(run: Path) -> dict[str, str | None]:
    return {c.prompt_id: c.text for c in load_run(run).completions()}


def test_each_side_answers_from_its_file_by_id_or_text_and_the_rest_by_default(
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts(PROMPTS)
    a_answers = tmp_path / "a.yaml"
    a_answers.write_text('capital-au: " The capital of Australia is Canberra."\n'
                         '"9.11 or 9.9": " 9.9"\n')
    b_answers = tmp_path / "b.json"  # JSON works as well, one file per side
    b_answers.write_text(json.dumps({"capital-au": " The capital of Australia is Sydney.",
                                     "9.11 or 9.9": [" 9.9", " 9.11"]}))
    with lab_scripted(tmp_path, "a", "--answers", a_answers, "--prompts", prompts) as a, \
            lab_scripted(tmp_path, "b", "--answers", b_answers, "--prompts", prompts,
                         "--dialect", "sglang") as b:
        result = invoke("run", "--a", a, "--b", b, "--prompts", prompts, "--repeats", 2,
                        "--context-tokens", 0, "--out", tmp_path / "report")
    assert result.exit_code == 1, result.output
    a_texts, b_texts = texts(tmp_path / "report" / "a"), texts(tmp_path / "report" / "b")
    assert a_texts["capital-au"] == " The capital of Australia is Canberra."
    assert b_texts["capital-au"] == " The capital of Australia is Sydney."
    assert a_texts["larger"] == " 9.9"
    assert {c.text for c in load_run(tmp_path / "report" / "b").completions()
            if c.prompt_id == "larger"} == {" 9.9", " 9.11"}  # a list: one per request
    assert a_texts["unknown"] is not None and a_texts["unknown"].startswith(" The answer is ")
    assert a_texts["unknown"] == b_texts["unknown"]
    assert "factual flip" in result.output and "capital-au" in result.output


def test_an_id_answers_exactly_its_prompt_and_text_keys_any_prompt_holding_them(
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts(PROMPTS)
    answers = tmp_path / "answers.yaml"
    answers.write_text('capital-au: " Canberra."\n"Q:": " By text."\n')
    with lab_scripted(tmp_path, "a", "--answers", answers) as without_ids:
        invoke("collect", "--endpoint", without_ids, "--prompts", prompts, "--repeats", 1,
               "--context-tokens", 0, "--out", tmp_path / "plain")
    with lab_scripted(tmp_path, "b", "--answers", answers, "--prompts", prompts) as with_ids:
        invoke("collect", "--endpoint", with_ids, "--prompts", prompts, "--repeats", 1,
               "--context-tokens", 0, "--out", tmp_path / "ids")
    plain, ids = texts(tmp_path / "plain"), texts(tmp_path / "ids")
    assert plain["capital-au"] != " Canberra." and ids["capital-au"] == " Canberra."
    assert plain["larger"] == ids["larger"] == " By text."


@pytest.mark.parametrize(("content", "said"), [
    ("- just\n- a list\n", "one mapping of prompt"),
    ("capital: 42\n", ":1: key 'capital': the answer 42 is not text; quote it"),
    ("ok: fine\ncapital: {nested: map}\n", ":2: key 'capital': the answer must be text"),
    ("capital: one\ncapital: two\n", ":2: key 'capital': given twice"),
    ("capital: []\n", "key 'capital': an empty list"),
    ("capital: [fine, 3]\n", "key 'capital', item 2: the answer 3 is not text"),
    ("capital: [unclosed\n", "not valid YAML or JSON"),
    ("{}\n", "no answers"),
])
def test_a_malformed_answers_file_is_refused_naming_file_line_and_key(
        tmp_path: Path, content: str, said: str) -> None:
    answers = tmp_path / "answers.yaml"
    answers.write_text(content)
    result = invoke("lab", "scripted", "--answers", answers, "--port", 0)
    assert result.exit_code == 2, result.output
    assert f"error: {answers}" in result.output and said in result.output
    assert "Traceback" not in result.output


def test_prompts_without_answers_is_refused(write_prompts: WritePrompts) -> None:
    result = invoke("lab", "scripted", "--prompts", write_prompts(PROMPTS), "--port", 0)
    assert result.exit_code == 2 and "give --answers FILE too" in result.output


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_answers_file_reads_to_answers_or_to_a_clear_error(data: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "answers.yaml"
        path.write_bytes(data)
        try:
            answers = load_answers(path)
        except ConfigFileError as exc:
            assert str(exc).startswith(str(path))
            return
        assert answers and all(isinstance(v, str) or (isinstance(v, list) and v and all(
            isinstance(t, str) for t in v)) for v in answers.values())


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "too-large"])
def test_an_answers_file_that_is_no_regular_file_or_too_large_is_refused_naming_it(
        tmp_path: Path, kind: str) -> None:
    """Read as every user's YAML is: /dev/zero or a FIFO (which once blocked, or read
    without end) are refused before a byte is read; a file past the size cap too."""
    answers = tmp_path / "answers.yaml"
    if kind == "dev-zero":
        answers.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(answers)
    else:
        with answers.open("wb") as handle:
            handle.truncate(MAX_YAML_BYTES + 1)  # sparse: nothing is written
    result = cli_in_child("lab", "scripted", "--answers", "answers.yaml", "--port", 0,
                          cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    said = ("not a regular file" if kind != "too-large" else
            f"larger than the {MAX_YAML_BYTES >> 20} MiB quantcheck reads for it")
    assert "answers.yaml: the answers file is" in result.stderr and said in result.stderr
    assert "Traceback" not in result.stderr


def test_an_answers_file_nested_too_deeply_is_one_clear_error(tmp_path: Path) -> None:
    answers = tmp_path / "answers.yaml"
    answers.write_text("key: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(ConfigFileError, match="nests values too deeply"):
        load_answers(answers)
