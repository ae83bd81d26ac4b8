"""Paired statistics over prompts: an interval for the change in expect pass rate, and
bootstrap intervals for the mean drift.

The pass-rate verdict ("significant" or not) is read off one interval, Newcombe's score
interval for paired proportions, the same one the gate's pass_rate_drop rule uses. The
exact McNemar p-value is kept in summary.json for reference only: being exact it is
conservative, and with few discordant pairs it can exceed 0.05 while the interval
already excludes 0, so the two are never quoted side by side."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import msgspec
import numpy as np

from ..store.pair_records import PairRow
from ..store.report_records import Bootstrap, PassRate, Stats

Z95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_BATCH_VALUES = 2_000_000  # resampled values held at once
BOOTSTRAPPED = ("kl_topk_mean", "logprob_mean_abs_diff", "top1_agreement")


def pass_rate_sentence(change: PassRate) -> str:
    """One coherent statement: the rates, the change, its interval, and whether the
    interval excludes 0 (the same interval the gate's pass_rate_drop reads)."""
    difference = change.improvements - change.regressions
    if difference == 0:
        head = f"Expect pass rate {change.rates()}: no change"
    else:
        word = "more" if difference > 0 else "fewer"
        head = f"Expect pass rate {change.rates()}: B passes {abs(difference)} {word}"
    low, high = interval_points(change.low, change.high)
    verdict = ("significant: the interval excludes no change" if change.significant
               else "not significant: the interval includes no change")
    return f"{head}; 95% CI of B minus A {low} to {high} points ({verdict})"


def interval_points(low: float, high: float) -> tuple[str, str]:
    """An interval in points with as many decimals as tell its ends apart from 0 and
    from each other (never '-0'): '-65 to -7', '-0.4 to +0.2'."""
    points = [100 * low, 100 * high]
    decimals = 0
    def unclear(d: int) -> bool:
        return any(v != 0 and round(abs(v), d) == 0 for v in points) or (
            points[0] != points[1] and round(points[0], d) == round(points[1], d))

    while decimals < 3 and unclear(decimals):
        decimals += 1
    texts = []
    for value in points:
        value = round(value, decimals)
        texts.append("0" if value == 0 else f"{value:+.{decimals}f}")
    return texts[0], texts[1]


def mcnemar_exact(regressions: int, improvements: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test on the discordant pairs."""
    discordant = regressions + improvements
    if discordant == 0:
        return 1.0
    tail = sum(math.comb(discordant, k) for k in range(min(regressions, improvements) + 1))
    return min(1.0, 2 * tail / float(2**discordant))


def _wilson(successes: int, n: int) -> tuple[float, float]:
    share = successes / n
    denominator = 1 + Z95**2 / n
    centre = (share + Z95**2 / (2 * n)) / denominator
    half = Z95 * math.sqrt(share * (1 - share) / n + Z95**2 / (4 * n**2)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def paired_difference_interval(both_pass: int, regressions: int, improvements: int,
                               both_fail: int) -> tuple[float, float]:
    """95% interval for p_B - p_A of paired proportions (Newcombe's method 10)."""
    n = both_pass + regressions + improvements + both_fail
    a_rate = (both_pass + regressions) / n
    b_rate = (both_pass + improvements) / n
    a_low, a_high = _wilson(both_pass + regressions, n)
    b_low, b_high = _wilson(both_pass + improvements, n)
    spread = ((both_pass + regressions) * (improvements + both_fail)
              * (both_pass + improvements) * (regressions + both_fail))
    phi = ((both_pass * both_fail - regressions * improvements) / math.sqrt(spread)
           if spread else 0.0)
    difference = b_rate - a_rate
    low = difference - math.sqrt(max(0.0, (b_rate - b_low) ** 2
                                     - 2 * phi * (b_rate - b_low) * (a_high - a_rate)
                                     + (a_high - a_rate) ** 2))
    high = difference + math.sqrt(max(0.0, (b_high - b_rate) ** 2
                                      - 2 * phi * (b_high - b_rate) * (a_rate - a_low)
                                      + (a_rate - a_low) ** 2))
    return max(-1.0, low), min(1.0, high)


def row_pass_counts(rows: Iterable[PairRow]) -> np.ndarray:
    """pass_counts of pairs."""
    return pass_counts((row.status, row.a_expect, row.b_expect) for row in rows)


def pass_counts(results: Iterable[tuple[str, str | None, str | None]]) -> np.ndarray:
    """Compared prompts with an expect result on both sides, from (status, a_expect,
    b_expect) as pairs.csv has them, as [both pass, regressions (A pass, B fail),
    improvements, both fail]."""
    counts = np.zeros(4, np.int64)
    for status, a_expect, b_expect in results:
        if status == "compared" and a_expect in _DECIDED and b_expect in _DECIDED:
            counts[2 * (a_expect != "pass") + (b_expect != "pass")] += 1
    return counts


_DECIDED = ("pass", "fail")  # a skipped check decides neither way


def pass_rate_of(both_pass: int, regressions: int, improvements: int, both_fail: int
                 ) -> PassRate | None:
    """The change in expect pass rate, from pass_counts; None without checks."""
    n = both_pass + regressions + improvements + both_fail
    if n == 0:
        return None
    low, high = paired_difference_interval(both_pass, regressions, improvements, both_fail)
    change = PassRate(checked=n, both_pass=both_pass, regressions=regressions,
                      improvements=improvements, both_fail=both_fail,
                      a_pass_rate=(both_pass + regressions) / n,
                      b_pass_rate=(both_pass + improvements) / n,
                      difference=(improvements - regressions) / n, low=low, high=high,
                      mcnemar_p=mcnemar_exact(regressions, improvements))
    change.sentence = pass_rate_sentence(change)
    return change


def bootstrap_mean(values: np.ndarray, seed: int = 0) -> dict[str, float] | None:
    """The mean and a 95% percentile bootstrap interval over prompts."""
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    rng = np.random.default_rng(seed)
    # a few resamples at a time: all at once held resamples x prompts floats (1.6 GB
    # at 100,000 prompts); this holds at most about 16 MB
    batch = max(1, min(BOOTSTRAP_RESAMPLES, BOOTSTRAP_BATCH_VALUES // values.size))
    means = np.concatenate([
        rng.choice(values, size=(min(batch, BOOTSTRAP_RESAMPLES - done), values.size))
        .mean(axis=1) for done in range(0, BOOTSTRAP_RESAMPLES, batch)])
    return {"mean": float(values.mean()), "low": float(np.percentile(means, 2.5)),
            "high": float(np.percentile(means, 97.5)), "prompts": int(values.size)}


def paired_statistics(pass_counts: Sequence[int], drift: Mapping[str, np.ndarray]) -> Stats:
    """summary.json's `stats`: the pass-rate change (from pass_counts) and bootstrap
    intervals of the mean drift (from each column's values over compared prompts)."""
    intervals = {column: bootstrap_mean(drift[column]) for column in BOOTSTRAPPED}
    return Stats(pass_rate=pass_rate_of(*pass_counts),
                 drift={k: msgspec.convert(v, Bootstrap) for k, v in intervals.items()
                        if v is not None})
