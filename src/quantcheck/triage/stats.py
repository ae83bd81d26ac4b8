"""Paired statistics over prompts: an interval for the change in expect pass rate, the
exact McNemar test beside it, the smallest change the A/B could detect, the recovery,
and bootstrap intervals for the mean drift.

The pass-rate verdict ("significant" or not) is read off one interval, Newcombe's score
interval for paired proportions, the same one the gate's pass_rate_drop rule uses. The
exact McNemar p-value is said on a line of its own (`resolution_sentence`), as what it
is: being exact it is conservative, and with few discordant pairs it can exceed 0.05
while the interval already excludes 0.

How many prompts a decision needs is Connor's (1987) sample size for McNemar's test,
from the discordant share psi (prompts whose check passes on one side only) and the
change delta in pass rate, at power 1 - beta and two-sided level alpha:

    n = (z_{alpha/2} sqrt(psi) + z_beta sqrt(psi - delta^2))^2 / delta^2

`quantcheck plan` rounds it up (2 points at 10% disagreement: 1,960 prompts); the
summary solves it for delta at its own n and psi (`detectable_change`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from statistics import NormalDist

import msgspec
import numpy as np

from ..store.records.pair_records import PairRow
from ..store.records.report_records import Bootstrap, PassRate, Stats

Z95 = 1.959963984540054
POWER = 0.8  # the detectable change's power and level
ALPHA = 0.05
EXACT_UP_TO = 1000  # discordant pairs summed in exact integers; beyond, in log space
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
    """Two-sided exact McNemar p-value: a binomial test (p = 1/2) on the discordant
    pairs, twice the smaller tail. Exact in integers up to EXACT_UP_TO discordant pairs;
    beyond, the tail is summed in log space (2**n no longer fits a float)."""
    discordant = regressions + improvements
    if discordant == 0:
        return 1.0
    smaller = min(regressions, improvements)
    if discordant <= EXACT_UP_TO:
        tail = sum(math.comb(discordant, k) for k in range(smaller + 1))
        return min(1.0, 2 * tail / float(2**discordant))
    logs = [_log_comb(discordant, k) for k in range(smaller + 1)]
    top = max(logs)
    log_tail = top + math.log(math.fsum(math.exp(v - top) for v in logs))
    return min(1.0, math.exp(math.log(2) + log_tail - discordant * math.log(2)))


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _z(alpha: float, power: float) -> tuple[float, float]:
    """z_{alpha/2} (two-sided) and z_beta for the power."""
    normal = NormalDist()
    return normal.inv_cdf(1 - alpha / 2), normal.inv_cdf(power)


def paired_prompts_needed(change: float, discordant: float, power: float = POWER,
                          alpha: float = ALPHA) -> float:
    """Connor's paired sample size (see the module docstring), unrounded: the prompts
    needed to detect a change of `change` in pass rate (a share, 0 < change <=
    discordant) when a share `discordant` of prompts pass on one side only."""
    if not 0 < change <= discordant <= 1:
        raise ValueError("the change must be above 0 and at most the discordant share "
                         "(a pass rate moves only on prompts whose result differs)")
    needed = _prompts_for(change, discordant, power, alpha)
    if math.isinf(needed):
        raise ValueError(f"a change of {change:.3g} is too small to size: the prompts it "
                         "needs are beyond the float range")
    return needed


def _prompts_for(change: float, discordant: float, power: float, alpha: float) -> float:
    """Connor's formula (0 < change <= discordant); infinity past the float range."""
    z_alpha, z_beta = _z(alpha, power)
    root = z_alpha * math.sqrt(discordant) + z_beta * math.sqrt(discordant - change**2)
    try:
        return (root / change) ** 2
    except OverflowError:
        return math.inf


def detectable_change(prompts: int, discordant: float, power: float = POWER,
                      alpha: float = ALPHA) -> float | None:
    """The smallest change in pass rate (a share) `prompts` paired prompts detect at
    this discordant share: Connor's formula solved for delta (by bisection: the prompts
    needed fall as the change grows). None when no prompt disagrees, or when even a
    change as large as the discordant share needs more prompts."""
    if prompts <= 0 or not 0 < discordant <= 1 or \
            _prompts_for(discordant, discordant, power, alpha) > prompts:
        return None
    low, high = 0.0, discordant
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if _prompts_for(middle, discordant, power, alpha) > prompts:
            low = middle
        else:
            high = middle
    return high


def resolution_sentence(change: PassRate) -> str:
    """McNemar's p, the smallest change this A/B could detect, and the recovery."""
    discordant = change.regressions + change.improvements
    test = (f"Exact McNemar test on the {discordant} of {change.checked} prompts whose "
            f"checks disagree: p = {change.mcnemar_p:.3g} (exact, so more cautious than "
            "the interval)")
    if discordant == 0:
        test = (f"A and B agree on every check of {change.checked} prompts (McNemar "
                "p = 1): no disagreement to size a change from")
    elif change.detectable_change is None:
        share = (change.discordant_share or 0)
        needed = math.ceil(paired_prompts_needed(share, share))
        test += (f"; too few prompts to detect any change at 80% power: at this "
                 f"disagreement ({100 * share:.3g}% of prompts) even a change of "
                 f"{100 * share:.2g} points (every disagreement one way) needs {needed:,} "
                 "prompts (`quantcheck plan` sizes a suite)")
    else:
        test += (f"; at this disagreement ({100 * (change.discordant_share or 0):.3g}% of "
                 f"prompts) the smallest change this A/B can detect is "
                 f"{100 * change.detectable_change:.2g} points (80% power, 5% two-sided)")
    if change.recovery_percent is not None:
        test += f"; recovery {change.recovery_percent:.1f}% (B's pass rate over A's)"
    return test


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
                      mcnemar_p=mcnemar_exact(regressions, improvements),
                      discordant_share=(regressions + improvements) / n)
    change.detectable_change = detectable_change(n, (regressions + improvements) / n)
    if change.a_pass_rate > 0:
        change.recovery_percent = 100 * change.b_pass_rate / change.a_pass_rate
    change.sentence = pass_rate_sentence(change)
    change.resolution_sentence = resolution_sentence(change)
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
