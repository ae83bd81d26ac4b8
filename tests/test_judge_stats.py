"""judge/stats.py, paired statistics: exact McNemar, the paired-difference interval,
bootstrap means; sentences that do not contradict the interval they quote."""

from __future__ import annotations

import random
import re

import numpy as np
import pandas as pd
import pytest

from quantcheck.judge.stats import (
    BOOTSTRAPPED,
    bootstrap_mean,
    interval_points,
    mcnemar_exact,
    paired_difference_interval,
    paired_statistics,
    pass_counts,
    pass_rate_of,
)
from quantcheck.store.report_records import PassRate


@pytest.mark.parametrize(
    ("regressions", "improvements", "p"),
    [(0, 0, 1.0), (1, 0, 1.0), (5, 0, 2 / 32), (0, 5, 2 / 32), (10, 0, 2 / 1024),
     (3, 3, 1.0), (6, 1, 2 * 8 / 128)],
)
def test_mcnemar_exact(regressions: int, improvements: int, p: float) -> None:
    assert mcnemar_exact(regressions, improvements) == pytest.approx(p)


def test_interval_holds_the_estimate_and_mirrors() -> None:
    low, high = paired_difference_interval(12, 5, 1, 2)
    assert -1 <= low < (1 - 5) / 20 < high <= 1
    mirrored = paired_difference_interval(12, 1, 5, 2)
    assert mirrored == pytest.approx((-high, -low))
    wide = paired_difference_interval(6, 3, 1, 0)
    narrow = paired_difference_interval(60, 30, 10, 0)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def test_interval_covers_the_truth_about_95_percent_of_the_time() -> None:
    # Paired outcomes with a known difference: P(A pass) = 0.8, P(B pass) = 0.7.
    rng = random.Random(7)
    truth, covered, trials = 0.7 - 0.8, 0, 2000
    cells = [(0.65, "both_pass"), (0.15, "regression"), (0.05, "improvement"),
             (0.15, "both_fail")]
    for _ in range(trials):
        counts = dict.fromkeys(("both_pass", "regression", "improvement", "both_fail"), 0)
        for _ in range(60):
            draw, total = rng.random(), 0.0
            for share, name in cells:
                total += share
                if draw < total:
                    counts[name] += 1
                    break
        low, high = paired_difference_interval(counts["both_pass"], counts["regression"],
                                               counts["improvement"], counts["both_fail"])
        covered += low <= truth <= high
    assert 0.925 <= covered / trials <= 0.975


def pass_rate_change(pairs: pd.DataFrame) -> PassRate | None:
    return pass_rate_of(*pass_counts(zip(pairs["status"], pairs["a_expect"], pairs["b_expect"],
                                         strict=True)).tolist())


def test_pass_rate_change_from_pairs_and_the_sentence() -> None:
    pairs = pd.DataFrame({
        "status": ["compared"] * 6 + ["only_a"],
        "a_expect": ["pass", "pass", "pass", "fail", "pass", "", "pass"],
        "b_expect": ["pass", "fail", "fail", "fail", "pass", "", "fail"],
    })
    change = pass_rate_change(pairs)
    assert change is not None
    assert (change.checked, change.regressions, change.improvements) == (5, 2, 0)
    assert change.difference == pytest.approx(-0.4)
    assert change.sentence.startswith(
        "Expect pass rate A 4/5, B 2/5: B passes 2 fewer; 95% CI of B minus A -")
    assert change.sentence.endswith("(not significant: the interval includes no change)")
    assert pass_rate_change(pairs.assign(a_expect="")) is None


def test_bootstrap_mean_is_seeded_and_brackets_the_mean() -> None:
    values = np.array([0.1, 0.2, 0.3, 0.4, float("nan")])
    first, second = bootstrap_mean(values), bootstrap_mean(values)
    assert first == second and first is not None
    assert first["mean"] == pytest.approx(0.25)
    assert first["low"] <= first["mean"] <= first["high"]
    assert first["prompts"] == 4
    assert bootstrap_mean(np.array([float("nan")])) is None


def test_paired_statistics_shape() -> None:
    pairs = pd.DataFrame({"status": ["compared"] * 3, "a_expect": ["pass"] * 3,
                          "b_expect": ["pass", "fail", "pass"],
                          "kl_topk_mean": [0.0, 0.5, None],
                          "logprob_mean_abs_diff": [0.1, 0.2, 0.3],
                          "top1_agreement": [1.0, 0.5, 1.0]})
    stats = paired_statistics(pass_counts(zip(pairs["status"], pairs["a_expect"],
                                              pairs["b_expect"], strict=True)).tolist(), {
        column: pd.to_numeric(pairs[column]).dropna().to_numpy() for column in BOOTSTRAPPED})
    assert stats.pass_rate is not None and stats.pass_rate.regressions == 1
    assert set(stats.drift) == {"kl_topk_mean", "logprob_mean_abs_diff", "top1_agreement"}
    assert stats.drift["kl_topk_mean"].prompts == 2


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
