"""Paired statistics over prompts: an exact McNemar test and an interval for the change
in expect pass rate, and bootstrap intervals for the mean drift."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

Z95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 2000


@dataclass
class PassRateChange:
    """B's expect pass rate minus A's, over prompts checked on both sides."""

    checked: int
    both_pass: int
    regressions: int  # A pass, B fail
    improvements: int  # A fail, B pass
    both_fail: int
    a_pass_rate: float
    b_pass_rate: float
    difference: float  # B - A, a share (not points)
    low: float
    high: float
    mcnemar_p: float

    def sentence(self) -> str:
        change = self.improvements - self.regressions
        if change == 0:
            head = f"B passes as many of {self.checked} checks as A"
        else:
            word = "more" if change > 0 else "fewer"
            head = f"B passes {abs(change)} {word} of {self.checked} checks than A"
        verdict = "significant" if self.mcnemar_p < 0.05 else "not significant"
        return (f"{head}; {verdict} (exact McNemar p = {self.mcnemar_p:.2g}), 95% CI "
                f"{100 * self.low:+.0f} to {100 * self.high:+.0f} points")


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


def pass_rate_change(pairs: pd.DataFrame) -> PassRateChange | None:
    """From pairs.csv's a_expect / b_expect over compared prompts; None without checks."""
    checked = pairs[(pairs["status"] == "compared") & pairs["a_expect"].isin(["pass", "fail"])
                    & pairs["b_expect"].isin(["pass", "fail"])]
    if checked.empty:
        return None
    a_pass, b_pass = checked["a_expect"] == "pass", checked["b_expect"] == "pass"
    counts = [int((a_pass & b_pass).sum()), int((a_pass & ~b_pass).sum()),
              int((~a_pass & b_pass).sum()), int((~a_pass & ~b_pass).sum())]
    both_pass, regressions, improvements, both_fail = counts
    low, high = paired_difference_interval(*counts)
    n = len(checked)
    return PassRateChange(n, both_pass, regressions, improvements, both_fail,
                          (both_pass + regressions) / n, (both_pass + improvements) / n,
                          (improvements - regressions) / n, low, high,
                          mcnemar_exact(regressions, improvements))


def bootstrap_mean(values: np.ndarray, seed: int = 0) -> dict[str, float] | None:
    """The mean and a 95% percentile bootstrap interval over prompts."""
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    rng = np.random.default_rng(seed)
    means = rng.choice(values, size=(BOOTSTRAP_RESAMPLES, values.size)).mean(axis=1)
    return {"mean": float(values.mean()), "low": float(np.percentile(means, 2.5)),
            "high": float(np.percentile(means, 97.5)), "prompts": int(values.size)}


def paired_statistics(pairs: pd.DataFrame) -> dict[str, Any]:
    """summary.json's `stats`: the pass-rate change and bootstrap intervals of drift."""
    compared = pairs[pairs["status"] == "compared"]
    change = pass_rate_change(pairs)
    drift = {column: bootstrap_mean(pd.to_numeric(compared[column], errors="coerce")
                                    .to_numpy(dtype=float))
             for column in ("kl_topk_mean", "logprob_mean_abs_diff", "top1_agreement")}
    return {"pass_rate": {**asdict(change), "sentence": change.sentence()} if change else None,
            "drift": {k: v for k, v in drift.items() if v is not None}}
