"""The CI gate: every rule, every exit code, stale reviews, JUnit XML, the step summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import Result
from junitparser import JUnitXml

from quantcheck.store.report_dir import read_pairs

from .conftest import gate_rules, gate_writing_a_step_summary, invoke, report_identity, write_review


def gate(report: Path, *args: str) -> Result:
    return invoke("gate", report, *args)


def test_default_policy_fails_on_flip_and_new_degenerate(planted_report: Path) -> None:
    result = gate(planted_report)
    assert result.exit_code == 1
    found = gate_rules(planted_report)
    assert found["factual_flips"]["prompts"] == ["flip"]
    assert found["factual_flips"]["count"] == 1 and found["factual_flips"]["limit"] == 0
    assert found["new_degenerate_on_b"]["prompts"] == ["loop", "empty"]  # not "capped"
    assert "FAIL: 1 factual flip (flip), 2 degenerate outputs new on B (loop, empty)" in \
        result.output
    assert json.loads((planted_report / "gate.json").read_text())["verdict"] == "fail"


def test_limits_on_the_command_line_pass_the_gate(planted_report: Path) -> None:
    result = gate(planted_report, "--max-factual-flips", "1", "--max-new-degenerate", "2",
                  "--max-not-compared", "3")
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    assert json.loads((planted_report / "gate.json").read_text())["verdict"] == "pass"


@pytest.mark.parametrize(
    ("args", "rule", "count"),
    [
        (["--max-nondeterministic", "0"], "nondeterministic_b", 11),
        (["--max-nondeterministic", "0"], "nondeterministic_a", 1),
        (["--require-review"], "unreviewed", 9),
        (["--min-identical-share", "0.5"], "identical_share", 0.1),
        (["--max-not-compared", "0"], "not_compared", 3),
    ],
    ids=["nondeterministic-b", "nondeterministic-a", "require-review", "identical-share",
         "not-compared"],
)
def test_optional_rules(planted_report: Path, args: list[str], rule: str,
                        count: float) -> None:
    result = gate(planted_report, "--max-factual-flips", "9", "--max-new-degenerate", "9",
                  *args)
    assert result.exit_code == 1
    assert gate_rules(planted_report)[rule]["count"] == pytest.approx(count)
    assert not gate_rules(planted_report)[rule]["passed"]


def test_policy_file_and_command_line_override(planted_report: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_factual_flips: 5\nmax_new_degenerate: 5\nrequire_review: false\n"
                      "max_not_compared: 3\n")
    assert gate(planted_report, "--policy", str(policy)).exit_code == 0
    assert gate(planted_report, "--policy", str(policy), "--max-factual-flips", "0"
                ).exit_code == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [("max_flips: 1\n", "field 'max_flips': unknown"),
     ("max_factual_flips: -1\n", "field 'max_factual_flips': a whole number >= 0"),
     ("min_identical_share: 2\n", "field 'min_identical_share': a share from 0 to 1"),
     ("require_review: maybe\n", "field 'require_review': must be true or false"),
     ("- a list\n", "a policy is a mapping")],
)
def test_malformed_policy_is_exit_2(planted_report: Path, tmp_path: Path, text: str,
                                    message: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(text)
    result = gate(planted_report, "--policy", str(policy))
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_missing_report_files_are_exit_2(tmp_path: Path) -> None:
    result = gate(tmp_path)
    assert result.exit_code == 2 and "summary.json: missing" in result.output


def test_reviewer_blocking_labels_count_as_flips(planted_report: Path) -> None:
    write_review(planted_report, "dana", {
        "numbers": {"label": "factual_flip", "right_side": "a"},
        "better": {"label": "factual_flip", "right_side": "b"},  # B right: an improvement
        "wording": {"label": "wording"}})
    result = gate(planted_report, "--max-new-degenerate", "9")
    assert result.exit_code == 1
    assert gate_rules(planted_report)["factual_flips"]["prompts"] == ["flip", "numbers"]
    assert json.loads((planted_report / "gate.json").read_text())["reviewers"] == ["dana"]


def test_require_review_passes_once_everything_is_reviewed(planted_report: Path) -> None:
    pending = ["wording", "near-tie", "flip", "better", "numbers", "loop", "empty", "capped",
               "noisy"]
    write_review(planted_report, "dana", {p: {"label": "minor"} for p in pending[:5]})
    write_review(planted_report, "li", {p: {"label": "minor"} for p in pending[5:]})
    result = gate(planted_report, "--require-review", "--max-factual-flips", "1",
                  "--max-new-degenerate", "2", "--max-not-compared", "3")
    assert result.exit_code == 0, result.output


def test_a_review_for_another_run_is_exit_2(planted_report: Path, tmp_path: Path) -> None:
    write_review(planted_report, "dana", {"wording": {"label": "wording"}}, run="other-run")
    result = gate(planted_report)
    assert result.exit_code == 2
    assert "made for another run" in result.output


def test_an_exported_review_file_can_be_given(planted_report: Path, tmp_path: Path) -> None:
    exported = tmp_path / "review.json"
    exported.write_text(json.dumps({"format": "quantcheck-review/1",
                                    "identity": report_identity(planted_report), "reviewer": "kim",
                                    "verdicts": {"numbers": {"label": "factual_flip"}}}))
    gate(planted_report, "--review", str(exported))
    assert "numbers" in gate_rules(planted_report)["factual_flips"]["prompts"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "quantcheck-review/1",
                               "identity": report_identity(planted_report),
                               "verdicts": {"numbers": {"label": "great"}}}))
    result = gate(planted_report, "--review", str(bad))
    assert result.exit_code == 2 and "label 'great' is not in rubric" in result.output


def test_junit_xml_is_accepted_by_a_junit_parser(planted_report: Path) -> None:
    gate(planted_report, "--max-not-compared", "0")
    suite = next(iter(JUnitXml.fromfile(str(planted_report / "junit.xml"))))
    cases = {case.name: case for case in suite}
    assert len(cases) == 13
    assert cases["same"].is_passed
    flip_results = cases["flip"].result
    assert [r.type for r in flip_results] == ["factual_flips"]
    assert "flip: breaks rule factual_flips" in flip_results[0].text
    assert {r.type for r in cases["only-a"].result} == {"not_compared"}
    assert suite.failures == 6  # flip, loop, empty; changed, only-a, only-b not compared


def test_step_summary_is_appended(planted_report: Path, tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    result = gate_writing_a_step_summary(planted_report, summary)
    text = summary.read_text()
    assert text.startswith("earlier step\n## quantcheck: FAIL")
    assert "| factual_flips | 1 | 0 | **fail** | `flip` |" in text
    assert "## quantcheck: FAIL" in result.output


def test_approved_differences_need_no_second_review(
        planted_report: Path, ab_runs: tuple[Path, Path], tmp_path: Path) -> None:
    from quantcheck import compare_to_dir

    write_review(planted_report, "dana", {"wording": {"label": "wording", "notes": "fine"},
                                          "near-tie": {"label": "ambiguous"},
                                          "flip": {"label": "factual_flip"},
                                          "numbers": {"label": "minor"}})
    write_review(planted_report, "li", {"numbers": {"label": "factual_flip"}})
    approvals = tmp_path / "approvals.json"
    result = invoke("approve", planted_report, "--approvals", approvals)
    assert result.exit_code == 0, result.output
    assert "approved 2 reviewed pairs" in result.output  # not flip, not the disputed one
    stored = json.loads(approvals.read_text())["approvals"]
    assert sorted(e["prompt_id"] for e in stored.values()) == ["near-tie", "wording"]

    again = tmp_path / "again"
    compare_to_dir(*ab_runs, again, approvals=approvals)
    approved = read_pairs(again).set_index("prompt_id")["approved_label"]
    assert approved["wording"] == "wording" and approved["near-tie"] == "ambiguous"
    assert approved["numbers"] == ""
    result = gate(again, "--require-review", "--max-factual-flips", "9",
                  "--max-new-degenerate", "9")
    unreviewed = gate_rules(again)["unreviewed"]["prompts"]
    assert "wording" not in unreviewed and "numbers" in unreviewed
    assert "2 pairs approved earlier" in result.output
    gate_json = json.loads((again / "gate.json").read_text())
    assert {a["prompt_id"] for a in gate_json["approved"]} == {"wording", "near-tie"}


def test_pass_rate_drop_rule(planted_report: Path) -> None:
    base = ["--max-factual-flips", "9", "--max-new-degenerate", "9", "--max-not-compared", "3"]
    assert gate(planted_report, *base).exit_code == 0
    result = gate(planted_report, *base, "--max-pass-rate-drop", "5")
    assert result.exit_code == 1
    rule = gate_rules(planted_report)["pass_rate_drop"]
    assert rule["limit"] == 5 and rule["count"] > 5 and not rule["passed"]
    assert gate(planted_report, *base, "--max-pass-rate-drop", "100").exit_code == 0
    summary = json.loads((planted_report / "summary.json").read_text())
    assert summary["stats"]["pass_rate"]["sentence"].startswith(
        "Expect pass rate A 3/4, B 3/4: no change")
