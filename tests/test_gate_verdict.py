"""A verdict that cannot be fooled: the gate never passes what it did not check, every
malformed input is one line and exit 2, and every count is the same everywhere."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pandas as pd
import pytest

from quantcheck import CollectSettings, collect, compare_to_dir
from quantcheck.errors import RunFormatError, RunMismatch
from quantcheck.judge.stats import interval_points, pass_rate_change
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.store.report_dir import read_pairs

from .conftest import (
    A_ANSWERS,
    PROMPTS,
    RUNNER_UPS,
    Serve,
    WritePrompts,
    gate_rules,
    invoke,
    write_review,
)


def one_error_line(result: Any) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None or \
        isinstance(result.exception, SystemExit), result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]


def run_side(serve: Serve, prompts: Path, out: Path, answers: dict[str, Any] | None = None,
             **settings: Any) -> Path:
    server = serve(ScriptedModel(answers or A_ANSWERS, RUNNER_UPS), faults=settings.pop(
        "faults", None))
    collect([prompts], out, CollectSettings(endpoint=server.url, label=out.name,
                                            preflight=False, concurrency=1, top_logprobs=3,
                                            **settings))
    return out


# --- the gate passes only what it checked ------------------------------------------

def test_disjoint_prompt_sets_compare_nothing_and_the_gate_refuses(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    a = run_side(serve, write_prompts(PROMPTS), tmp_path / "a")
    other = "prompts:\n" + "".join(f'  - {{id: x{n}, prompt: "Q: same"}}\n' for n in range(3))
    b = run_side(serve, write_prompts(other), tmp_path / "b")
    compared = invoke("compare", a, b, "--out", tmp_path / "report")
    assert compared.exit_code == 2  # as the gate would: nothing to pass
    assert "nothing was compared: 12 prompts only in A, 3 prompts only in B (the two runs " \
           "share no prompt id)" in compared.output
    assert "0 of 0 identical" not in compared.output
    gated = invoke("gate", tmp_path / "report")
    assert "no pair was compared, so there is nothing to pass" in one_error_line(gated)


def test_other_max_tokens_on_b_is_named_and_the_gate_refuses(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts(PROMPTS)
    a = run_side(serve, prompts, tmp_path / "a")
    b = run_side(serve, prompts, tmp_path / "b")
    from quantcheck import RequestOptions
    b64 = tmp_path / "b64"
    server = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    collect([prompts], b64, CollectSettings(endpoint=server.url, label="b64", preflight=False,
                                            request=RequestOptions(max_tokens=32)))
    compared = invoke("compare", a, b64, "--out", tmp_path / "report")
    assert "B was collected with max_tokens 32, A with 256" in compared.output
    assert "nothing was compared" in compared.output
    assert "no pair was compared" in one_error_line(invoke("gate", tmp_path / "report"))
    assert invoke("compare", a, b, "--out", tmp_path / "same").exit_code == 0


def test_failed_requests_fail_the_gate_unless_the_policy_allows_them(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts(PROMPTS)
    a = run_side(serve, prompts, tmp_path / "a")
    every = {n: 500 for n in range(100)}
    b = run_side(serve, prompts, tmp_path / "b", faults=Faults(status=every), retries=0)
    compared = invoke("compare", a, b, "--out", tmp_path / "all-failed")
    assert "12 prompts without an answer on B (b): HTTP 500" in compared.output
    assert "no pair was compared" in one_error_line(invoke("gate", tmp_path / "all-failed"))

    # two of B's twelve requests fail: the rest is compared, and the gate fails by default
    some = run_side(serve, prompts, tmp_path / "b-some",
                    faults=Faults(status={0: 500, 5: 500}), retries=0)
    report = tmp_path / "some-failed"
    compare_to_dir(a, some, report)
    lenient = ["--max-factual-flips", "9", "--max-new-degenerate", "9"]
    result = invoke("gate", report, *lenient)
    assert result.exit_code == 1
    gate = json.loads((report / "gate.json").read_text())
    failed = next(r for r in gate["rules"] if r["name"] == "failed_requests")
    assert failed["count"] == 2 and not failed["passed"]
    assert "2 requests without an answer (A 0, B 2" in result.output
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_failed_requests: 2\nmax_not_compared: 2\n")
    assert invoke("gate", report, *lenient, "--policy", policy).exit_code == 0
    assert invoke("gate", report, *lenient, "--max-failed-requests", "2",
                  "--max-not-compared", "2").exit_code == 0


def test_prompts_not_compared_fail_the_default_gate(planted_report: Path) -> None:
    result = invoke("gate", planted_report, "--max-factual-flips", "9",
                    "--max-new-degenerate", "9")
    assert result.exit_code == 1
    assert "3 prompts not compared (changed, only-a, only-b)" in result.output


# --- malformed inputs: exit 2 and one line ------------------------------------------

def test_a_summary_without_a_side_is_one_line(planted_report: Path) -> None:
    path = planted_report / "summary.json"
    summary = json.loads(path.read_text())
    del summary["b"]
    path.write_text(json.dumps(summary))
    for command in (["gate"], ["report"], ["approve"]):
        line = one_error_line(invoke(*command, planted_report))
        assert "summary.json" in line and "`b`" in line


def test_a_binary_pairs_table_is_one_line(planted_report: Path) -> None:
    (planted_report / "pairs.csv").write_bytes(bytes(range(256)) * 40)
    line = one_error_line(invoke("gate", planted_report))
    assert "pairs.csv" in line


def test_a_pairs_table_without_a_column_is_refused_by_every_reader(planted_report: Path
                                                                   ) -> None:
    """The sheet and the review server read a few columns of pairs.csv; every column
    is still checked, before anything is written or served."""
    from quantcheck.present.review_server import review_app

    path = planted_report / "pairs.csv"
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, [c for c in rows[0] if c != "noise"],
                                extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    sheet = (planted_report / "index.html").read_bytes()
    for command in (["gate"], ["report"]):
        assert "missing columns noise" in one_error_line(invoke(*command, planted_report))
    assert (planted_report / "index.html").read_bytes() == sheet
    with pytest.raises(RunFormatError, match="missing columns noise"):
        review_app(planted_report, "dana", None)


def test_a_review_path_that_is_a_folder_is_one_line(planted_report: Path) -> None:
    (planted_report / "reviews" / "dana.json").mkdir(parents=True)
    assert "dana.json: cannot read" in one_error_line(invoke("gate", planted_report))


@pytest.mark.parametrize(("verdict", "message"), [
    ({"label": ["wording"]}, "label must be a label id"),
    ({"label": "wording", "right_side": 5}, "right_side must be"),
    ({"label": "wording", "notes": {"a": 1}}, "notes must be text"),
], ids=["label-a-list", "side-a-number", "notes-a-mapping"])
def test_a_review_of_the_wrong_type_is_one_line(planted_report: Path, verdict: dict[str, Any],
                                                message: str) -> None:
    write_review(planted_report, "dana", {"wording": verdict})
    assert message in one_error_line(invoke("gate", planted_report))


@pytest.mark.parametrize("option", ["--policy", "--rubric"])
def test_a_policy_or_rubric_that_is_not_utf8_is_one_line(planted_report: Path,
                                                         tmp_path: Path, option: str) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert "not UTF-8 text" in one_error_line(invoke("gate", planted_report, option, path))


def test_signatures_that_are_not_utf8_are_one_line(ab_runs: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    path = tmp_path / "signatures.yaml"
    path.write_bytes(b"signatures:\n  - id: caf\xe9\n")
    result = invoke("compare", *ab_runs, "--out", tmp_path / "r", "--signatures", path)
    assert "not UTF-8 text" in one_error_line(result)


def test_gate_on_a_run_directory_says_what_to_do(ab_runs: tuple[Path, Path]) -> None:
    line = one_error_line(invoke("gate", ab_runs[0]))
    assert "is a run directory" in line and "quantcheck compare" in line


def test_junit_stays_well_formed_with_control_characters(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts('prompts:\n  - {id: "bell\\x07id", category: "esc\\x1bcat", '
                            'prompt: "Q: flip", expect: {contains: Canberra}}\n')
    a = run_side(serve, prompts, tmp_path / "a")
    b = run_side(serve, prompts, tmp_path / "b", answers={"Q: flip": " Sydney."})
    compare_to_dir(a, b, tmp_path / "report")
    assert invoke("gate", tmp_path / "report").exit_code == 1
    suite = ElementTree.parse(tmp_path / "report" / "junit.xml").getroot()  # expat: strict
    case = suite.find("testcase")
    assert case is not None and case.get("name") == "bell\\x07id"
    assert case.get("classname") == "quantcheck.esc\\x1bcat"


# --- one number for one thing --------------------------------------------------------

def test_every_count_is_the_same_in_terminal_summary_sheet_and_gate(
        ab_runs: tuple[Path, Path], tmp_path: Path, browser: Any) -> None:
    report = tmp_path / "report"
    terminal = invoke("compare", *ab_runs, "--out", report).output
    summary = json.loads((report / "summary.json").read_text())
    gate_output = invoke("gate", report).output
    rules = gate_rules(report)
    page = browser.new_page()
    page.goto((report / "index.html").as_uri())
    page.wait_for_selector("body[data-ready=true]")
    tiles = {t.locator("span").inner_text(): t.locator("b").inner_text()
             for t in page.locator(".count").all()}
    sheet_headline = page.locator("#headline").inner_text()
    page.close()

    counts = summary["counts"]
    degenerate = counts["degenerate_new_on_b"]
    assert degenerate == 2 and counts["degenerate_new_on_b_kinds"] == {"repetition": 1,
                                                                        "empty": 1}
    assert counts["length_capped_new_on_b"] == 1
    phrase = "2 degenerate outputs new on B (1 loop, 1 empty)"
    assert phrase in terminal and phrase in sheet_headline
    assert rules["new_degenerate_on_b"]["count"] == degenerate
    assert "2 degenerate outputs new on B (loop, empty)" in gate_output
    assert tiles["degenerate new on B"] == str(degenerate)
    flips = counts["flips"]["regression"]
    assert rules["factual_flips"]["count"] == flips == int(tiles["expect regressions"])
    assert f"{flips} factual flip by expect" in terminal
    not_compared = counts["prompts"] - counts["pairs"]
    assert rules["not_compared"]["count"] == not_compared == int(tiles["not compared"])
    assert tiles["pairs compared"] == str(counts["pairs"])
    assert rules["failed_requests"]["count"] == sum(counts["unanswered"].values())


# --- statistics that do not contradict themselves ---------------------------------

def frame(a: list[str], b: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"status": ["compared"] * len(a), "a_expect": a, "b_expect": b})


def test_equal_pass_rates_are_said_as_rates() -> None:
    change = pass_rate_change(frame(["pass"] + ["fail"] * 16, ["pass"] + ["fail"] * 16))
    assert change is not None
    sentence = change.sentence
    assert sentence.startswith("Expect pass rate A 1/17, B 1/17: no change")
    assert "as many" not in sentence


@pytest.mark.parametrize(("a", "b"), [
    (["pass"] * 6 + ["fail"] * 4, ["fail"] * 6 + ["fail"] * 4),  # 6 regressions of 10
    (["pass"] * 5 + ["pass"] * 12, ["fail"] * 5 + ["pass"] * 12),  # 5 of 17: p 0.06
    (["pass"] * 3 + ["pass"] * 30, ["fail"] * 3 + ["pass"] * 30),
    (["pass"] * 20, ["pass"] * 20),
], ids=["clear", "borderline", "small", "none"])
def test_the_verdict_is_read_off_the_interval_it_quotes(a: list[str], b: list[str]) -> None:
    change = pass_rate_change(frame(a, b))
    assert change is not None
    excludes_zero = change.low > 0 or change.high < 0
    sentence = change.sentence
    assert ("(significant" in sentence) == excludes_zero
    assert ("not significant" in sentence) == (not excludes_zero)
    assert "McNemar" not in sentence


def test_intervals_are_formatted_to_tell_their_ends_apart() -> None:
    assert interval_points(-0.65, -0.07) == ("-65", "-7")
    assert interval_points(-0.004, 0.002) == ("-0.4", "+0.2")
    assert interval_points(-0.0001, 0.00012) == ("-0.01", "+0.01")
    assert interval_points(0.0, 0.0) == ("0", "0")
    assert interval_points(-0.1234, -0.1211) == ("-12.3", "-12.1")
    assert not any(re.fullmatch(r"[-+]0", text) for text in interval_points(-0.001, 0.001))


def test_rules_that_do_not_apply_show_na(planted_report: Path) -> None:
    result = invoke("gate", planted_report, "--max-factual-flips", "9",
                    "--max-new-degenerate", "9", "--max-not-compared", "9")
    assert "| pass_rate_drop | n/a | off |" in result.output
    assert "| forced_kl | n/a | off |" in result.output
    rules = gate_rules(planted_report)
    assert rules["pass_rate_drop"]["count"] is None and rules["forced_kl"]["count"] is None


# --- repeats, approvals ------------------------------------------------------------------

def test_fewer_repeats_on_resume_are_refused(serve: Serve, write_prompts: WritePrompts,
                                             tmp_path: Path) -> None:
    prompts, server = write_prompts(PROMPTS), serve(ScriptedModel(A_ANSWERS))

    def run(repeats: int) -> None:
        collect([prompts], tmp_path / "run", CollectSettings(
            endpoint=server.url, label="a", preflight=False, repeats=repeats))

    run(3)
    with pytest.raises(RunMismatch, match="holds 3 repeats per prompt; --repeats 2"):
        run(2)
    run(4)  # more repeats extend the run
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["parameters"]["repeats"] == 4
    assert manifest["counts"] == {"requests": 48, "ok": 48, "failed": 0}


def test_approve_keeps_approvals_with_the_report_and_never_a_regression(
        planted_report: Path, ab_runs: tuple[Path, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_review(planted_report, "dana", {"wording": {"label": "wording"},
                                          "numbers": {"label": "minor"},
                                          "near-tie": {"label": "ambiguous"}})
    result = invoke("approve", planted_report)
    assert result.exit_code == 0, result.output
    stored = json.loads((planted_report / "approvals.json").read_text())["approvals"]
    assert sorted(e["prompt_id"] for e in stored.values()) == ["near-tie", "wording"]
    assert not (tmp_path / "approvals.json").exists()  # not beside the prompt files
    compare_to_dir(*ab_runs, planted_report)  # the same report, compared again
    approved = read_pairs(planted_report).set_index("prompt_id")["approved_label"]
    assert approved["wording"] == "wording" and approved["numbers"] == ""


def test_the_shipped_example_policy_is_a_valid_policy(planted_report: Path) -> None:
    shipped = Path(__file__).parents[1] / "prompts" / "policy.yaml"
    result = invoke("gate", planted_report, "--policy", shipped)
    assert result.exit_code == 1, result.output  # the planted flip fails it: not exit 2
    assert "factual flip" in result.output
