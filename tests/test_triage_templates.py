"""triage/templates.py and what uses it: a chat template the model does not know, seen
in the answers (echoed questions, leaked markers), counted, shown once at the top of
the sheet, and a gate rule (off by default: reported only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from quantcheck import CollectSettings, collect, compare_to_dir
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.triage.templates import known_fallback, markers_in, template_signs

from .conftest import Serve, WritePrompts, card, gate_rules, invoke, open_sheet

CHAT = """
prompts:
  - {id: capital, messages: [{role: user, content: "What is the capital of France?"}]}
  - {id: legs, messages: [{role: user, content: "How many legs does a dog have?"}]}
  - {id: plain, messages: [{role: user, content: "Name a colour."}]}
"""
A_ANSWERS: dict[str, str | list[str]] = {
    "capital of France": " Paris.", "legs does a dog": " Four.", "a colour": " Red."}
B_ANSWERS: dict[str, str | list[str]] = {
    **A_ANSWERS,
    # a model reading ChatML markers as text: it repeats the question, then a new turn
    "capital of France": " What is the capital of France?<|im_end|>\n<|im_start|>user\n",
    "legs does a dog": " Four.<|im_end|>",
}


@pytest.fixture
def template_report(serve: Serve, write_prompts: WritePrompts,
                    tmp_path: Path) -> Path:
    prompts = write_prompts(CHAT)
    a = serve(ScriptedModel(A_ANSWERS), faults=Faults(chat_template="gemma"))
    b = serve(ScriptedModel(B_ANSWERS), faults=Faults(chat_template="chatml"))
    for side, server in (("a", a), ("b", b)):
        collect([prompts], tmp_path / side, CollectSettings(
            endpoint=server.url, label=side, context_tokens=0))
    compare_to_dir(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    return tmp_path / "report"


def test_answers_that_echo_or_leak_markers_are_counted(template_report: Path) -> None:
    summary = json.loads((template_report / "summary.json").read_text())
    assert summary["counts"]["template"] == {"a_echo": 0, "a_markers": 0, "b_echo": 1,
                                             "b_markers": 2}
    assert summary["preflight"]["template"]["status"] == "warn"
    assert "render the same conversation differently" in \
        summary["preflight"]["template"]["message"]
    header = (template_report / "pairs.csv").read_text().splitlines()[0].split(",")
    assert {"a_template_signs", "b_template_signs"} <= set(header)


def test_the_sheet_says_it_once_at_the_top_and_marks_the_pairs(
        template_report: Path, page: Any) -> None:
    open_sheet(page, (template_report / "index.html").as_uri())
    warning = page.locator("#template-warning")
    assert warning.count() == 1
    text = warning.inner_text()
    assert "B's server" in text and "<|im_start|> (6 tokens)" in text
    assert "answers that echo the question: A 0, B 1" in text
    assert "own chat template" in text
    badges = card(page, "capital").inner_text()
    assert "B chat template: echoes the question, template markers in the answer" in badges
    assert "chat template" not in card(page, "plain").inner_text()


def test_the_gate_reports_template_problems_and_fails_only_when_asked(
        template_report: Path) -> None:
    reported = invoke("gate", template_report, "--max-factual-flips", "9", "--max-new-degenerate",
                      "9")
    assert reported.exit_code == 0, reported.output
    rules = gate_rules(template_report)
    assert rules["template_problems"]["passed"] and rules["template_problems"]["limit"] is None
    assert rules["template_problems"]["prompts"] == [
        "B: preflight template check", "A and B render the conversation differently",
        "capital", "legs"]
    assert rules["template_problems"]["description"] == \
        "4 signs of a chat template the model does not know"
    failed = invoke("gate", template_report, "--max-factual-flips", "9", "--max-new-degenerate",
                    "9", "--max-template-problems", "0")
    assert failed.exit_code == 1


def test_echoes_behind_a_template_the_model_knows_point_at_the_model(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """Both servers render the model's own template (preflight passes), yet answers
    echo the question: what a base model does; the advice says so."""
    prompts = write_prompts(CHAT)
    echoing = {**A_ANSWERS, "capital of France": " What is the capital of France? Paris."}
    for side, answers in (("a", A_ANSWERS), ("b", echoing)):
        server = serve(ScriptedModel(answers), faults=Faults(chat_template="gemma"))
        collect([prompts], tmp_path / side, CollectSettings(
            endpoint=server.url, label=side, context_tokens=0))
    result = invoke("compare", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "report")
    assert "answers that echo the question: A 0, B 1" in result.output, result.output
    assert "may not be trained for chat" in result.output
    assert "serve the model with its own chat template" not in result.output


@pytest.mark.parametrize(("question", "answer", "signs"), [
    ("What is the capital of France?", " Paris.", ""),
    ("What is the capital of France?", "what is the capital of  France? Paris", "echo"),
    ("Hi?", "Hi? Hello", ""),  # too short to call an echo
    (None, "What is the capital of France?", ""),  # not a chat prompt
    ("Q", "A<end_of_turn>\n<start_of_turn>user", "markers"),
    ("Tell me about [INST] tags please", "Tell me about [INST] tags please", "echo,markers"),
])
def test_template_signs(question: str | None, answer: str, signs: str) -> None:
    assert template_signs(question, answer) == signs


def test_markers_and_the_llama_cpp_fallback() -> None:
    assert markers_in("<|im_start|>user\nx<|im_end|>\n<|im_start|>") == [
        "<|im_start|>", "<|im_end|>"]
    fallback = ("{%- for message in messages -%}\n  {{- '<|im_start|>' + message.role + '\n'"
                " + message.content + '<|im_end|>\n' -}}\n{%- endfor -%}\n{%- if "
                "add_generation_prompt -%}\n  {{- '<|im_start|>assistant\n' -}}\n{%- endif -%}")
    assert known_fallback(fallback) and "llama.cpp" in str(known_fallback(fallback))
    assert known_fallback("{{ messages }}") is None
