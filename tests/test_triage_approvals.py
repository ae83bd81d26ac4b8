"""triage/approvals.py and `quantcheck approve`: reviewed pairs approved once need no
second review when exactly the same pair recurs; never a regression."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantcheck import CompareOptions, compare_runs
from quantcheck.store.folders.report_dir import read_pairs

from .conftest import gate_rules, invoke, write_review


def test_approved_differences_need_no_second_review(
        planted_report: Path, ab_runs: tuple[Path, Path], tmp_path: Path) -> None:
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
    compare_runs(*ab_runs, again, CompareOptions(approvals=approvals))
    approved = read_pairs(again).set_index("prompt_id")["approved_label"]
    assert approved["wording"] == "wording" and approved["near-tie"] == "ambiguous"
    assert approved["numbers"] == ""
    result = invoke("gate", again, "--require-review", "--max-factual-flips", "9",
                    "--max-new-degenerate", "9")
    unreviewed = gate_rules(again)["unreviewed"]["prompts"]
    assert "wording" not in unreviewed and "numbers" in unreviewed
    assert "2 pairs approved earlier" in result.output
    gate_json = json.loads((again / "gate.json").read_text())
    assert {a["prompt_id"] for a in gate_json["approved"]} == {"wording", "near-tie"}


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
    compare_runs(*ab_runs, planted_report)  # the same report, compared again
    approved = read_pairs(planted_report).set_index("prompt_id")["approved_label"]
    assert approved["wording"] == "wording" and approved["numbers"] == ""
