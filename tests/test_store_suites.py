"""The built-in suites: each loads, is big enough, and means what it says (a reference
answer passes every expect, a non-answer fails it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from quantcheck.store.haystack import TOKENS_PER_WORD
from quantcheck.store.prompt_sets import load_prompts
from quantcheck.store.run_records import ToolCall
from quantcheck.store.suites import describe, suite_files, suite_names
from quantcheck.triage.expects import check_answer, overall
from quantcheck.triage.sandbox import Limits, code_runner

from .conftest import FIXTURES, invoke

SUITES = ["code", "facts", "json", "long-context", "math", "multilingual", "tools"]
ANSWERS: dict[str, dict[str, Any]] = yaml.safe_load(
    (FIXTURES / "suite_answers.yaml").read_text(encoding="utf-8"))


def test_every_promised_suite_ships_with_thirty_prompts_each_checked() -> None:
    assert suite_names() == SUITES
    prompts = load_prompts(suite_files(SUITES))  # ids unique across all suites
    for name in SUITES:
        suite = describe(name)
        assert suite.prompts >= 30, name
        assert suite.description
    assert all(p.expect is not None for p in prompts)


def _answer(reference: Any) -> tuple[str, list[ToolCall]]:
    if isinstance(reference, dict):
        return "", [ToolCall(name=c["name"], arguments=c["arguments"]) for c in reference["calls"]]
    return str(reference), []


@pytest.mark.parametrize("name", SUITES)
def test_a_reference_answer_passes_and_a_non_answer_fails(name: str) -> None:
    run_code = code_runner(Limits(wall_s=20, cpu_s=20))
    references = ANSWERS[name]
    prompts = load_prompts(suite_files([name]))
    assert set(references) == {p.id for p in prompts}
    for prompt in prompts:
        assert prompt.expect is not None
        text, calls = _answer(references[prompt.id])
        results = check_answer(prompt.expect, text, calls, run_code)
        assert overall(results) == "pass", (prompt.id, results)
        if prompt.category != "none needed":
            refusal = check_answer(prompt.expect, "I do not know.", [], run_code)
            assert overall(refusal) == "fail", prompt.id


def test_long_context_prompts_are_about_as_long_as_they_say() -> None:
    for prompt in load_prompts(suite_files(["long-context"])):
        words = len(prompt.request["messages"][0]["content"].split())
        target = {"2.5k": 2500, "10k": 10000, "16k": 16000}[prompt.category]
        assert target <= words * TOKENS_PER_WORD <= target * 1.05, prompt.id


def test_suites_join_prompts_on_the_command_line(tmp_path: Path) -> None:
    listed = invoke("suites")
    assert listed.exit_code == 0
    assert "json" in listed.output and "31 prompts" in listed.output
    unknown = invoke("collect", "--endpoint", "http://127.0.0.1:9/v1", "--suite", "jsn", "--out",
                     tmp_path / "run")
    assert unknown.exit_code == 2
    assert "unknown suite 'jsn'" in unknown.output and "json" in unknown.output
    nothing = invoke("collect", "--endpoint", "http://127.0.0.1:9/v1", "--out", tmp_path / "run")
    assert nothing.exit_code == 2 and "--suite NAME" in nothing.output


def test_a_long_context_prompt_is_shown_by_its_start_and_end(
        serve: Any, write_prompts: Any, tmp_path: Path) -> None:
    from quantcheck import CollectSettings, collect, compare_to_dir

    server = serve()
    prompts = write_prompts("""
        prompts:
          - id: needle
            prompt: "Read this. {haystack} What is the codeword?"
            haystack: {tokens: 3000, depth: 0.5, needle: The codeword is heron-7.}
    """)
    for side in ("a", "b"):
        collect([prompts], tmp_path / side, CollectSettings(
            endpoint=server.url, label=side, top_logprobs=0, preflight=False))
    compare_to_dir(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    detail = json.loads((tmp_path / "report" / "details.jsonl").read_text().splitlines()[0])
    shown = detail["request"]["prompt"]
    assert len(shown) < 4200 and "characters not shown" in shown
    assert shown.startswith("Read this.") and shown.endswith("What is the codeword?")
