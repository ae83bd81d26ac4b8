"""triage/one_pair.py: flips against their noise. Every factual flip of a planted A/B says
what can explain it (A's repeats disagree on the check, B's do, a near tie at the fork, or
nothing: confident), in pairs.csv, summary.json, the terminal, the sheet and the gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck import CollectSettings, collect, compare_runs
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.store.pair_records import FLIP_CAUSE_TEXT
from quantcheck.triage.signals import flip_cause

from .conftest import (
    RUNNER_UPS,
    Serve,
    WritePrompts,
    card,
    gate_rules,
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
    assert counts["flip_causes"] == {"unstable_a": 1, "unstable_b": 1, "near_tie": 1,
                                     "confident": 1}
    assert counts["improvement_causes"] == {"unstable_a": 0, "unstable_b": 0,
                                            "near_tie": 0, "confident": 1}


def test_the_terminal_and_the_sheet_say_the_causes(flip_report: Path, page: Any) -> None:
    printed = (flip_report.parent / "printed.txt").read_text()
    assert ("4 factual flips by expect (A pass, B fail), what can explain the flips: "
            "1 unstable on A, 1 unstable on B, 1 near tie, 1 confident,") in printed
    open_sheet(page, (flip_report / "index.html").as_uri())
    for prompt_id, words in (("unstable-a", "unstable on A"), ("unstable-b", "unstable on B"),
                             ("near-tie", "near tie"), ("confident", "confident")):
        badges = card(page, prompt_id).locator("header .badge").all_inner_texts()
        flip = badges.index("expect regression: contains")
        assert badges[flip + 1] == words, badges  # beside the flip
        cause = prompt_id.replace("-", "_")  # its sentence over it, from pair_records.py
        badge = card(page, prompt_id).locator("header .badge").nth(flip + 1)
        assert badge.get_attribute("title") == FLIP_CAUSE_TEXT[cause][1]
    assert "unstable" not in " ".join(card(page, "same").locator(".badge").all_inner_texts())
    assert "what can explain the flips: 1 unstable on A" in page.inner_text("#headline")
    resolution = page.text_content("#resolution") or ""  # under "More", beside the checks
    assert resolution.startswith("Exact McNemar test on the 5 of 6 prompts whose checks "
                                 "disagree: p = 0.375")
    assert "recovery 40.0% (B's pass rate over A's)" in resolution
    assert not page.errors


def test_the_gate_counts_every_flip_by_default_and_confident_ones_when_asked(
        flip_report: Path, tmp_path: Path) -> None:
    result = invoke("gate", flip_report)
    assert result.exit_code == 1
    assert gate_rules(flip_report)["factual_flips"]["prompts"] == [
        "unstable-a", "unstable-b", "near-tie", "confident"]
    result = invoke("gate", flip_report, "--confident-flips-only")
    assert result.exit_code == 1, result.output
    rule = gate_rules(flip_report)["factual_flips"]
    assert rule["prompts"] == ["confident"]
    assert rule["description"] == ("1 factual flip (confident only; not counted: 1 near tie, "
                                   "1 unstable on A, 1 unstable on B)")
    policy = tmp_path / "policy.yaml"
    policy.write_text("confident_flips_only: true\nmax_factual_flips: 1\n")
    assert invoke("gate", flip_report, "--policy", policy).exit_code == 0
    assert invoke("gate", flip_report, "--policy", policy, "--all-flips").exit_code == 1
    policy.write_text("confident_flips_only: 1\n")
    result = invoke("gate", flip_report, "--policy", policy)
    assert result.exit_code == 2 and "confident_flips_only" in result.output


def test_the_confident_only_policy_passes_flips_noise_explains(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """Without the confident flip, the same A/B passes when only confident flips count."""
    prompts = write_prompts(PROMPTS)
    answers = {**B_ANSWERS, "Q: confident": A_ANSWERS["Q: confident"]}
    a = collect_side(serve, prompts, tmp_path / "a", A_ANSWERS)
    b = collect_side(serve, prompts, tmp_path / "b", answers)
    compare_runs(a, b, tmp_path / "report")
    assert invoke("gate", tmp_path / "report").exit_code == 1
    assert invoke("gate", tmp_path / "report", "--confident-flips-only").exit_code == 0


@given(st.booleans(), st.booleans(), st.sampled_from(
    [None, "", "none", "near_tie", "confident", "ended"]))
def test_a_flips_cause_is_the_first_that_holds(unstable_a: bool, unstable_b: bool,
                                                kind: Any) -> None:
    cause = flip_cause(unstable_a, unstable_b, kind)
    expected = ("unstable_a" if unstable_a else "unstable_b" if unstable_b
                else "near_tie" if kind == "near_tie" else "confident")
    assert cause == expected
