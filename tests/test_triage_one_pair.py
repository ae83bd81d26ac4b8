"""triage/one_pair.py: flips against their noise. Every factual flip of a planted A/B says
what can explain it, in pairs.csv, summary.json, the terminal, the sheet and the gate: the
reference's own doubt (A's repeats disagree on the check, a near tie on A's side), listed
for review; or a regression (B's repeats disagree, an unverified fork, a sure A)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck import CollectSettings, collect, compare_runs
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.store.records.pair_records import FLIP_CAUSE_TEXT
from quantcheck.triage.signals import flip_cause

from .conftest import (
    RUNNER_UPS,
    Serve,
    WritePrompts,
    card,
    gate_rules,
    gate_writing_a_step_summary,
    invoke,
    open_sheet,
    read_csv,
)

PROMPTS = """
prompts:
  - {id: unstable-a, prompt: "Q: unstable-a", expect: {contains: Canberra}}
  - {id: unstable-b, prompt: "Q: unstable-b", expect: {contains: Canberra}}
  - {id: near-tie, prompt: "Q: near-tie", expect: {contains: Canberra}}
  - {id: confident, prompt: "Q: confident", expect: {contains: Canberra}}
  - {id: better, prompt: "Q: better", expect: {contains: Canberra}}
  - {id: same, prompt: "Q: same", expect: {contains: Paris}}
"""
# A list is cycled, one item per request: repeat 0 gets the first, repeat 1 the second.
A_ANSWERS: dict[str, str | list[str]] = {
    "Q: unstable-a": [" Canberra.", " Sydney."],
    "Q: unstable-b": " Canberra.",
    "Q: near-tie": " The capital is Canberra.",
    "Q: confident": " The capital of Australia is Canberra.",
    "Q: better": " The capital of Australia is Sydney.",
    "Q: same": " Paris.",
}
B_ANSWERS: dict[str, str | list[str]] = {
    **A_ANSWERS,
    "Q: unstable-a": " Sydney.",
    "Q: unstable-b": [" Sydney.", " Canberra."],
    "Q: near-tie": " Yes, it is Sydney.",  # " The" and " Yes," are 0.05 nats apart
    "Q: confident": " The capital of Australia is Sydney.",
    "Q: better": " The capital of Australia is Canberra.",
}
CAUSES = {"unstable-a": "unstable_a", "unstable-b": "unstable_b", "near-tie": "near_tie",
          "confident": "confident", "better": "confident", "same": ""}


def collect_side(serve: Serve, prompts: Path, out: Path,
                 answers: dict[str, str | list[str]]) -> Path:
    server = serve(ScriptedModel(answers, RUNNER_UPS))
    collect([prompts], out, CollectSettings(endpoint=server.url, label=out.name,
                                            preflight=False, concurrency=1, repeats=2,
                                            top_logprobs=5, repeat_mode="sequential"))
    return out


@pytest.fixture
def flip_report(serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> Path:
    prompts = write_prompts(PROMPTS)
    a = collect_side(serve, prompts, tmp_path / "a", A_ANSWERS)
    b = collect_side(serve, prompts, tmp_path / "b", B_ANSWERS)
    result = invoke("compare", a, b, "--out", tmp_path / "report")
    assert result.exit_code == 1, result.output  # the flips fail it
    (tmp_path / "printed.txt").write_text(result.output)
    return tmp_path / "report"


def test_each_flip_says_what_can_explain_it(flip_report: Path) -> None:
    rows = {row["prompt_id"]: row for row in read_csv(flip_report / "pairs.csv")}
    assert {pid: row["flip_cause"] for pid, row in rows.items()} == CAUSES
    assert rows["near-tie"]["divergence_kind"] == "near_tie"
    assert rows["better"]["flip"] == "improvement"
    counts = json.loads((flip_report / "summary.json").read_text())["counts"]
    assert rows["near-tie"]["unsure_side"] == "both"  # " The" / " Yes," 0.05 nats apart
    assert rows["confident"]["unsure_side"] == "neither"
    assert counts["flip_causes"] == {"unstable_a": 1, "near_tie": 1, "unstable_b": 1,
                                     "unverified": 0, "confident": 1}
    assert counts["improvement_causes"] == {"unstable_a": 0, "near_tie": 0, "unstable_b": 0,
                                            "unverified": 0, "confident": 1}


def test_the_terminal_and_the_sheet_say_the_causes(flip_report: Path, page: Any) -> None:
    printed = (flip_report.parent / "printed.txt").read_text()
    assert ("4 factual flips by expect (A pass, B fail), of the flips, 1 B's repeats "
            "disagree, 1 confident (counted); 1 A's repeats disagree, 1 near tie on A (to "
            "review: the reference itself unsure),") in printed
    open_sheet(page, (flip_report / "index.html").as_uri())
    for prompt_id, words in (("unstable-a", "A's repeats disagree: to review"),
                             ("unstable-b", "B's repeats disagree"),
                             ("near-tie", "near tie on A: to review"),
                             ("confident", "confident")):
        badges = card(page, prompt_id).locator("header .badge").all_inner_texts()
        flip = badges.index("expect regression: contains")
        assert badges[flip + 1] == words, badges  # beside the flip
        cause = prompt_id.replace("-", "_")  # its sentence over it, from pair_records.py
        badge = card(page, prompt_id).locator("header .badge").nth(flip + 1)
        assert badge.get_attribute("title") == FLIP_CAUSE_TEXT[cause][1]
    assert "repeats" not in " ".join(card(page, "same").locator(".badge").all_inner_texts())
    assert "of the flips, 1 B's repeats disagree" in page.inner_text("#headline")
    # every badge's words mean one thing: the fork says sure/unsure, the cause its class
    for prompt_id in ("near-tie", "confident"):
        badges = card(page, prompt_id).locator("header .badge").all_inner_texts()
        assert len([b for b in badges if "confident" in b or "near tie" in b]) <= 1, badges
    fork = card(page, "near-tie").locator("header .badge").all_inner_texts()
    assert "fork: both sides unsure" in fork
    # the flips to review come first, before the pairs that fail
    first = page.locator("article.pair").first.get_attribute("data-prompt")
    assert first in ("unstable-a", "near-tie")
    resolution = page.text_content("#resolution") or ""  # under "More", beside the checks
    assert resolution.startswith("Exact McNemar test on the 5 of 6 prompts whose checks "
                                 "disagree: p = 0.375")
    assert "recovery 40.0% (B's pass rate over A's)" in resolution
    assert not page.errors


def test_the_gate_counts_confident_flips_by_default_and_every_flip_when_asked(
        flip_report: Path, tmp_path: Path) -> None:
    """By default the flips the reference's own doubt explains are listed for review,
    not counted; B's wavering repeats are B's regression and count."""
    result = invoke("gate", flip_report)
    assert result.exit_code == 1
    rule = gate_rules(flip_report)["factual_flips"]
    assert rule["prompts"] == ["unstable-b", "confident"]
    assert rule["description"] == "2 confident flips (of them 1 B's repeats disagree)"
    listed = json.loads((flip_report / "gate.json").read_text())["flips_to_review"]
    assert listed == [{"prompt_id": "unstable-a", "flip_cause": "unstable_a"},
                      {"prompt_id": "near-tie", "flip_cause": "near_tie"}]
    assert ("FAIL: 2 confident flips (of them 1 B's repeats disagree) (unstable-b, confident); "
            "2 flips to review (1 near tie on A, 1 A's repeats disagree: unstable-a, near-tie); "
            "reference: 2 repeats a prompt, 1 of 6 prompts varied on A (1 in their text)"
            ) in result.output
    result = invoke("gate", flip_report, "--all-flips")
    assert result.exit_code == 1, result.output
    assert gate_rules(flip_report)["factual_flips"]["prompts"] == [
        "unstable-a", "unstable-b", "near-tie", "confident"]
    assert json.loads((flip_report / "gate.json").read_text())["flips_to_review"] == []
    policy = tmp_path / "policy.yaml"
    policy.write_text("confident_flips_only: true\nmax_factual_flips: 2\n")
    assert invoke("gate", flip_report, "--policy", policy).exit_code == 0
    assert invoke("gate", flip_report, "--policy", policy, "--all-flips").exit_code == 1
    policy.write_text("confident_flips_only: false\nmax_factual_flips: 3\n")
    assert invoke("gate", flip_report, "--policy", policy).exit_code == 1
    assert invoke("gate", flip_report, "--policy", policy, "--confident-flips-only"
                  ).exit_code == 0
    policy.write_text("confident_flips_only: 1\n")
    result = invoke("gate", flip_report, "--policy", policy)
    assert result.exit_code == 2 and "confident_flips_only" in result.output


def test_the_step_summary_and_junit_list_the_flips_to_review_first(
        flip_report: Path, tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    result = gate_writing_a_step_summary(flip_report, summary)
    assert result.exit_code == 1
    text = summary.read_text()
    assert ("2 confident flips (of them 1 B's repeats disagree); 2 flips to review (1 near tie "
            "on A, 1 A's repeats disagree); reference: 2 repeats a prompt, 1 of 6 prompts "
            "varied on A (1 in their text).") in text
    review = text.index("### Flips to review (not counted: the reference itself was unsure)")
    assert review < text.index("| rule | count |") < text.index("### Why")
    table = text[review:text.index("| rule | count |")]
    assert "`near-tie`" in table and "`unstable-a`" in table and "`confident`" not in table
    assert "flip cause: near tie on A; fork at token 0 (A ' The', B ' Yes,'): 0.050" in table
    junit = (flip_report / "junit.xml").read_text()
    assert junit.index('name="unstable-a"') < junit.index('name="near-tie"') \
        < junit.index('name="unstable-b"')
    assert junit.count("<skipped ") == 2 and 'skipped="2"' in junit
    assert 'type="flips_to_review" message="flips to review: check contains' in junit


def test_b_wavering_on_a_fact_a_holds_is_a_regression(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """B's own repeats disagreeing is B's instability: it fails the default gate."""
    prompts = write_prompts(PROMPTS)
    answers = {**A_ANSWERS, "Q: unstable-b": B_ANSWERS["Q: unstable-b"]}
    a = collect_side(serve, prompts, tmp_path / "a", A_ANSWERS)
    b = collect_side(serve, prompts, tmp_path / "b", answers)
    compare_runs(a, b, tmp_path / "report")
    result = invoke("gate", tmp_path / "report")
    assert result.exit_code == 1, result.output
    assert gate_rules(tmp_path / "report")["factual_flips"]["prompts"] == ["unstable-b"]


def test_the_default_policy_passes_flips_the_references_doubt_explains(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """Without the counted flips, the same A/B passes by default, the flips to review
    said in its line; --all-flips fails it."""
    prompts = write_prompts(PROMPTS)
    answers = {**B_ANSWERS, "Q: confident": A_ANSWERS["Q: confident"],
               "Q: unstable-b": A_ANSWERS["Q: unstable-b"]}
    a = collect_side(serve, prompts, tmp_path / "a", A_ANSWERS)
    b = collect_side(serve, prompts, tmp_path / "b", answers)
    compare_runs(a, b, tmp_path / "report")
    result = invoke("gate", tmp_path / "report")
    assert result.exit_code == 0, result.output
    assert ("PASS: no rule broken; 2 flips to review (1 near tie on A, 1 A's repeats "
            "disagree: unstable-a, near-tie)") in result.output
    assert invoke("gate", tmp_path / "report", "--all-flips").exit_code == 1


@given(st.booleans(), st.booleans(), st.sampled_from(
    [None, "", "none", "near_tie", "confident", "unverified", "ended"]))
def test_a_flips_cause_is_the_first_that_holds(unstable_a: bool, unstable_b: bool,
                                                kind: Any) -> None:
    cause = flip_cause(unstable_a, unstable_b, kind)
    expected = ("unstable_a" if unstable_a else "near_tie" if kind == "near_tie"
                else "unstable_b" if unstable_b else "confident" if kind == "confident"
                else "unverified")
    assert cause == expected
