"""triage/stats.py, paired statistics: exact McNemar, the paired-difference interval,
bootstrap means; sentences that do not contradict the interval they quote."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck.store.records.report_records import PassRate
from quantcheck.triage.stats import (
    BOOTSTRAPPED,
    Z95,
    bootstrap_mean,
    detectable_change,
    interval_points,
    mcnemar_exact,
    paired_difference_interval,
    paired_prompts_needed,
    paired_statistics,
    pass_counts,
    pass_rate_of,
)


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


# --- McNemar beside the interval, the detectable change, the recovery ----------------

@pytest.mark.parametrize(("regressions", "improvements", "p"), [
    # references: 2 x the smaller binomial(n, 1/2) tail, summed at 40 digits (mpmath)
    (600, 500, 0.002819544991436427695), (520, 480, 0.2174482932041409428),
    (700, 800, 0.01055925546671154395)])
def test_mcnemar_exact_past_a_thousand_discordant_pairs(regressions: int, improvements: int,
                                                        p: float) -> None:
    assert mcnemar_exact(regressions, improvements) == pytest.approx(p, rel=1e-9)


def test_mcnemar_exact_agrees_with_enumerating_every_outcome() -> None:
    """Both the integer path and the log-space path against exact fractions."""
    from fractions import Fraction

    for regressions, improvements in ((3, 9), (400, 560), (990, 1011)):
        n, smaller = regressions + improvements, min(regressions, improvements)
        outcomes = [Fraction(math.comb(n, k), 2**n) for k in range(n + 1)]
        observed = outcomes[smaller]
        # the two-sided exact p: every outcome no more likely than the one observed
        reference = float(min(Fraction(1), sum(o for o in outcomes if o <= observed)))
        assert mcnemar_exact(regressions, improvements) == pytest.approx(reference, rel=1e-9)


@pytest.mark.parametrize(("change", "discordant", "prompts"), [
    # references: Connor's formula evaluated at 40 digits (mpmath)
    (0.02, 0.10, 1959.860407125372), (0.05, 0.2, 625.5473178337216),
    (0.01, 0.03, 2352.304669778921), (0.1, 0.1, 76.08748449318017)])
def test_prompts_needed_is_connors_paired_formula(change: float, discordant: float,
                                                  prompts: float) -> None:
    assert paired_prompts_needed(change, discordant) == pytest.approx(prompts, rel=1e-12)


def test_two_points_at_ten_percent_disagreement_need_about_1960_prompts() -> None:
    assert math.ceil(paired_prompts_needed(0.02, 0.10)) == 1960


@pytest.mark.parametrize(("prompts", "discordant", "change"), [
    # references: Connor's formula solved for the change at 40 digits (mpmath findroot)
    (1960, 0.10, 0.01999928863575956), (500, 0.06, 0.03061752271626544),
    (64, 0.25, 0.1718929240841546), (10000, 0.02, 0.003961572730621582)])
def test_detectable_change_solves_the_formula(prompts: int, discordant: float,
                                              change: float) -> None:
    assert detectable_change(prompts, discordant) == pytest.approx(change, rel=1e-9)


def test_the_detectable_change_has_about_80_percent_power() -> None:
    """Simulated A/Bs (a different method): at the change the formula gives for 1,960
    prompts at 10% disagreement, McNemar's test at 5% finds it about 80% of the time."""
    rng = np.random.default_rng(3)
    prompts, discordant = 1960, 0.10
    change = detectable_change(prompts, discordant)
    assert change is not None
    shares = [(discordant + change) / 2, (discordant - change) / 2, 1 - discordant]
    cells = rng.multinomial(prompts, shares, size=20_000)
    worse, better = cells[:, 0], cells[:, 1]
    z = (worse - better) / np.sqrt(np.maximum(worse + better, 1))
    assert 0.78 <= float(np.mean(np.abs(z) > Z95)) <= 0.82


def test_no_disagreement_or_too_few_prompts_detect_nothing() -> None:
    assert detectable_change(100, 0.0) is None
    assert detectable_change(30, 0.10) is None  # even 10 points needs 77 prompts
    with pytest.raises(ValueError):
        paired_prompts_needed(0.2, 0.1)


@pytest.mark.parametrize("change", [1e-200, 1e-162, 5e-324])
def test_a_change_too_small_to_size_is_a_clear_error(change: float) -> None:
    with pytest.raises(ValueError, match=f"a change of {change:.3g} is too small to size"):
        paired_prompts_needed(change, 0.1)
    # solving for the change steps through changes this small: never an error
    assert detectable_change(10**308, 1e-300) == pytest.approx(2.8016e-304, rel=1e-4)


@given(st.integers(10, 100_000), st.floats(0.001, 1.0))
def test_detectable_change_round_trips_and_shrinks_with_more_prompts(
        prompts: int, discordant: float) -> None:
    change = detectable_change(prompts, discordant)
    if change is None:
        assert paired_prompts_needed(discordant, discordant) > prompts
        return
    assert 0 < change <= discordant
    assert paired_prompts_needed(change, discordant) == pytest.approx(prompts, rel=1e-6)
    more = detectable_change(prompts * 2, discordant)
    assert more is not None and more < change


def test_the_summary_says_mcnemar_the_detectable_change_and_the_recovery() -> None:
    """Synthetic pass/fail: 620 prompts, 25 regressions, 15 improvements."""
    change = pass_rate_of(500, 25, 15, 80)
    assert change is not None
    assert change.discordant_share == pytest.approx(40 / 620)
    # Connor's formula solved at n 620, psi 40/620, at 40 digits (mpmath findroot)
    assert change.detectable_change == pytest.approx(0.02852437044190675, rel=1e-9)
    assert change.recovery_percent == pytest.approx(100 * 515 / 525)
    assert change.mcnemar_p == pytest.approx(mcnemar_exact(25, 15))
    assert change.resolution_sentence == (
        "Exact McNemar test on the 40 of 620 prompts whose checks disagree: p = 0.154 "
        "(exact, so more cautious than the interval); at this disagreement (6.45% of "
        "prompts) the smallest change this A/B can detect is 2.9 points (80% power, 5% "
        "two-sided); recovery 98.1% (B's pass rate over A's)")
    assert "McNemar" not in change.sentence  # the interval's sentence stays its own


def test_a_suite_too_small_says_what_it_would_take() -> None:
    change = pass_rate_of(50, 5, 1, 8)
    assert change is not None and change.detectable_change is None
    assert "too few prompts to detect any change at 80% power" in change.resolution_sentence
    assert "needs 82 prompts" in change.resolution_sentence
    agreeing = pass_rate_of(10, 0, 0, 0)
    assert agreeing is not None and agreeing.recovery_percent == 100
    assert agreeing.resolution_sentence.startswith("A and B agree on every check of 10")
    none_pass = pass_rate_of(0, 0, 2, 8)
    assert none_pass is not None and none_pass.recovery_percent is None
