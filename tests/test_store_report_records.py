"""store/records/report_records.py: what the gate reads of summary.json is never negative: a
count of requests without an answer of -3 on A beside 3 on B once summed to none."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import invoke


def test_a_negative_count_in_the_summary_is_refused_naming_it(planted_report: Path) -> None:
    path = planted_report / "summary.json"
    summary = json.loads(path.read_text())
    summary["counts"]["unanswered"] = {"a": -3, "b": 3}
    path.write_text(json.dumps(summary))
    result = invoke("gate", planted_report, "--max-factual-flips", "9",
                    "--max-not-compared", "9")
    assert result.exit_code == 2, result.output
    assert "Expected `int` >= 0 - at `$.counts.unanswered.a`" in result.output
