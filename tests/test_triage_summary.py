"""triage/summary.py: the summary's totals (PairTotals), gathered chunk by chunk."""

from __future__ import annotations

from pathlib import Path

import msgspec

from quantcheck.triage.pairs import compare


def test_the_summary_gathered_chunk_by_chunk_is_the_summary_of_all_pairs(
        ab_runs: tuple[Path, Path]) -> None:
    """compare forgets each chunk of pairs once written (summary.PairTotals keeps counts,
    the ids not compared and the drift values): totals gathered a few pairs at a time
    give the summary of the whole frame, every status, flip and percentile included."""
    from quantcheck.store.folders.report_dir import pair_rows
    from quantcheck.triage.sides import load_side
    from quantcheck.triage.summary import PairTotals

    whole = pair_rows(compare(*ab_runs))
    with load_side(ab_runs[0]) as a, load_side(ab_runs[1]) as b:
        at_once = msgspec.json.encode(PairTotals().add(whole).summary(a, b))
        for size in (1, 3, 5):
            totals = PairTotals()
            for start in range(0, len(whole), size):
                totals.add(whole[start:start + size])
            assert msgspec.json.encode(totals.summary(a, b)) == at_once
    summary = msgspec.json.decode(at_once)
    assert summary["counts"]["flips"]["regression"] and summary["counts"]["nondeterministic"]["b"]
    assert {"not_comparable", "only_a", "only_b"} <= set(summary["counts"]["status"])
    assert summary["drift"]["kl_topk_mean"] and summary["stats"]["drift"]
    assert summary["comparison"]["notes"]
