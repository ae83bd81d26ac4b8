"""A report as a model card's accuracy block: a row per task in the shape Red Hat's
cards give (scores in percent, recovery B over A), the Average row, and the paired
figures behind it; from a collected report as from an imported one."""

from __future__ import annotations

from pathlib import Path

import msgspec

from quantcheck.present.model_card import model_card
from quantcheck.store.folders.report_dir import read_summary
from quantcheck.triage.stats import pass_rate_of


def test_a_collected_report_gives_a_row_per_category(planted_report: Path) -> None:
    summary = read_summary(planted_report)
    card = model_card(summary)
    rows = card.splitlines()
    assert rows[0] == "| Category | Metric | a | b | Recovery (%) |"
    assert rows[1] == "|---|---|---:|---:|---:|"
    factual, numeric = summary.stats.categories["factual"], summary.stats.categories["numeric"]
    assert rows[2] == (f"| quantcheck expect checks | factual (expect pass rate) | "
                       f"{100 * factual.a_pass_rate:.2f} | {100 * factual.b_pass_rate:.2f} | "
                       f"{100 * factual.b_pass_rate / factual.a_pass_rate:.2f} |")
    assert rows[3].startswith("|  | numeric (expect pass rate) |")
    a = (factual.a_pass_rate + numeric.a_pass_rate) / 2
    b = (factual.b_pass_rate + numeric.b_pass_rate) / 2
    assert rows[4] == (f"|  | **Average** | **{100 * a:.2f}** | **{100 * b:.2f}** | "
                       f"**{100 * b / a:.2f}** |")
    assert f"| factual | {factual.checked} | {factual.regressions} | " in card


def test_a_task_name_with_a_bar_stays_in_its_cell_and_no_check_says_so(
        planted_report: Path) -> None:
    summary = read_summary(planted_report)
    rate = pass_rate_of(1, 0, 0, 1)
    assert rate is not None
    odd = msgspec.structs.replace(summary, stats=msgspec.structs.replace(
        summary.stats, categories={"a|b": rate}))
    assert "| a\\|b (expect pass rate) | 50.00 | 50.00 | 100.00 |" in model_card(odd)
    empty = msgspec.structs.replace(summary, stats=msgspec.structs.replace(
        summary.stats, categories={}))
    assert model_card(empty) == ("No task of this report has a pass/fail check on both a "
                                 "and b: there is no accuracy to give.\n")
