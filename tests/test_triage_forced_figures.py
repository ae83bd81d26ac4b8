"""The teacher-forced figures as llama-perplexity --kl-divergence defines them, checked
against values computed here from whole distributions; the top-k estimate is a lower
bound that tightens with k; how much of A-vs-B lies inside the larger noise floor."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck.store.records.report_records import ForcedStats, KLSpread
from quantcheck.triage.forced_figures import (
    Positions,
    Scored,
    llama_cpp_sentence,
    order_floor,
    quarter_of,
    score_position,
    within_floor,
    within_order,
)


def top_list(probabilities: dict[str, float], k: int) -> tuple[list[str], list[float]]:
    ranked = sorted(probabilities.items(), key=lambda item: -item[1])[:k]
    return [t for t, _ in ranked], [math.log(p) for _, p in ranked]


def full_kl(p: dict[str, float], q: dict[str, float]) -> float:
    return sum(pa * math.log(pa / q[t]) for t, pa in p.items())


A = {"x": 0.6, "y": 0.3, "z": 0.1}
B = {"x": 0.4, "y": 0.5, "z": 0.1}


def test_a_whole_vocabulary_gives_llama_cpps_figures_exactly() -> None:
    """Three tokens, all listed: KL is the full-vocabulary sum llama.cpp computes;
    same top is argmax(A) == argmax(B); delta p is B's minus A's probability of A's
    token; PPL(B)/PPL(A) is exp of the mean gap in negative log-likelihood."""
    figures = score_position("x", math.log(0.6), top_list(A, 3), math.log(0.4),
                             top_list(B, 3), quarter=1)
    assert figures.kl == pytest.approx(full_kl(A, B), abs=1e-12)
    assert not figures.same_top and not figures.top1  # B's argmax is y
    assert figures.delta_p == pytest.approx(0.4 - 0.6)
    assert figures.a_nll == pytest.approx(-math.log(0.6))
    assert figures.b_nll == pytest.approx(-math.log(0.4)) and figures.b_nll_exact
    # top-1 only: A's x and B's y share nothing, all is one bucket: the estimate is 0
    assert figures.kl_quarter == 0.0
    shared = score_position("x", math.log(0.6), top_list(A, 3), math.log(0.4),
                            top_list({"x": 0.5, "y": 0.2, "z": 0.3}, 3), quarter=1)
    assert shared.same_top and shared.top1  # {x} and the rest {y, z}
    assert shared.kl_quarter == pytest.approx(0.6 * math.log(0.6 / 0.5)
                                              + 0.4 * math.log(0.4 / 0.5))

    same = score_position("y", math.log(0.3), top_list(A, 3), math.log(0.5), top_list(B, 3))
    assert same.top1 and not same.same_top  # B picks y, A's token, but A's own top-1 is x


def test_statistics_over_positions_match_llama_perplexity() -> None:
    positions = Positions()
    kls = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 5.0]
    deltas = [0.1, -0.2, 0.0, 0.3, -0.1, 0.0, 0.0, 0.2, -0.3, 0.1, -0.45]
    for n, (kl, delta) in enumerate(zip(kls, deltas, strict=True)):
        positions.add(score_position("x", math.log(0.5), (["x"], [math.log(0.5)]),
                                     math.log(0.5 + delta), (["x" if n % 2 else "y"],
                                                             [math.log(0.9)])
                                     )._replace(kl=kl, kl_quarter=kl / 2))
    stats = positions.stats()
    assert stats.kl is not None and stats.kl.mean == pytest.approx(sum(kls) / 11)
    assert stats.kl.median == pytest.approx(0.5)
    # llama.cpp's percentile: (1 - f) v[i] + f v[i+1] at p = fraction * (n - 1)
    assert stats.kl.p90 == pytest.approx(0.9)  # 0.9 * 10 = 9 exactly
    assert stats.kl.p99 == pytest.approx(0.9 + 0.9 * (5.0 - 0.9))  # 9.9: between v[9], v[10]
    assert stats.kl.max == 5.0
    assert stats.same_top_p == pytest.approx(5 / 11)
    assert stats.rms_delta_p == pytest.approx(math.sqrt(sum(d * d for d in deltas) / 11))
    gaps = [-math.log(0.5 + d) + math.log(0.5) for d in deltas]
    assert stats.ppl_ratio == pytest.approx(math.exp(sum(gaps) / 11))
    assert stats.ppl_ratio_bound == "exact"
    assert stats.kl_quarter_k is not None
    assert stats.kl_quarter_k.mean == pytest.approx(sum(kls) / 22)


def test_a_token_beyond_bs_top_k_makes_the_ppl_ratio_a_lower_bound() -> None:
    positions = Positions()
    positions.add(score_position("x", math.log(0.6), top_list(A, 2), None, (["y"], [-0.7])))
    positions.add(score_position("x", math.log(0.6), top_list(A, 2), math.log(0.4),
                                 top_list(B, 2)))
    stats = positions.stats()
    assert stats.ppl_ratio == pytest.approx(math.exp((0.7 - math.log(0.4)) / 2
                                                     + math.log(0.6)))
    assert stats.ppl_ratio_bound is not None
    assert stats.ppl_ratio_bound.startswith("lower bound: B's logprob of A's token is beyond "
                                            "its top-k at 1 of 2 positions")


distributions = st.lists(st.floats(0.01, 1.0), min_size=8, max_size=8).map(
    lambda weights: {f"t{n}": w / sum(weights) for n, w in enumerate(weights)})


@given(distributions, distributions, st.integers(1, 8))
def test_the_top_k_estimate_is_a_lower_bound_that_tightens_with_k(
        p: dict[str, float], q: dict[str, float], k: int) -> None:
    """Merging outcomes never raises KL: top-k/4 <= top-k <= the full vocabulary, and
    with the whole vocabulary listed the estimate is the full KL."""
    token = max(p, key=lambda t: p[t])
    figures = score_position(token, math.log(p[token]), top_list(p, k), math.log(q[token]),
                             top_list(q, k), quarter_of(k))
    exact = full_kl(p, q)
    assert figures.kl_quarter <= figures.kl + 1e-9
    assert figures.kl <= exact + 1e-9
    whole = score_position(token, math.log(p[token]), top_list(p, 8), math.log(q[token]),
                           top_list(q, 8))
    assert whole.kl == pytest.approx(exact, abs=1e-9)


def test_within_floor_names_the_larger_floor_and_its_share() -> None:
    def floor(mean: float, p99: float) -> ForcedStats:
        return ForcedStats(positions=10, kl=KLSpread(mean=mean, median=mean, p99=p99,
                                                      max=p99))

    kl = [0.0, 0.001, 0.002, 0.5, 1.0]  # mean 0.3006
    found = within_floor(kl, {"a_repeats": floor(1e-6, 1e-5), "b_self": floor(0.03, 0.0015)})
    assert found is not None and found.floor == "b_self" and found.kl_mean == 0.03
    assert found.share == pytest.approx(0.03 / 0.3006)
    assert found.positions_within == pytest.approx(2 / 5)  # 0.0 and 0.001 <= 0.0015
    assert found.sentence == ("10% of the A-vs-B KL mean (0.301) lies within the larger "
                              "noise floor (B scoring its own tokens: KL mean 0.03); 40% of "
                              "A-vs-B positions are at most that floor's 99th percentile")
    assert within_floor(kl, {"a_repeats": ForcedStats(positions=0, note="one repeat")}) is None
    swamped = within_floor([0.01], {"b_repeats": floor(0.5, 0.9)})
    assert swamped is not None and swamped.share == 1.0 and swamped.positions_within == 1.0


def test_the_sentence_reads_like_llama_perplexitys_summary() -> None:
    stats = ForcedStats(positions=100, kl=KLSpread(mean=0.12, median=0.03, p99=1.5, max=4.0,
                                                    p90=0.3),
                        same_top_p=0.852, rms_delta_p=0.0912, ppl_ratio=1.0412,
                        ppl_ratio_bound="exact",
                        kl_quarter_k=KLSpread(mean=0.1, median=0.02, p99=1.0, max=3.0))
    assert llama_cpp_sentence(stats, 20, 5) == (
        "As llama-perplexity reports it: KL mean 0.12, median 0.03, p90 0.3, p99 1.5, max 4; "
        "same top p 85.2%; RMS delta p 9.12%; PPL(B)/PPL(A) 1.0412. KL from the top-k is a "
        "lower bound: mean 0.12 at top-20, 0.1 at top-5")
    assert llama_cpp_sentence(ForcedStats(positions=0), 20, 5) == ""


def test_a_gap_beyond_the_float_range_leaves_the_ppl_ratio_out_with_the_reason() -> None:
    """vLLM clamps a logprob of minus infinity to -9999: one in a short answer puts
    exp(mean gap) beyond the float range."""
    positions = Positions()
    positions.add(score_position("x", -0.01, (["x"], [-0.01]), -9999.0, (["y"], [-0.1])))
    stats = positions.stats()
    assert stats.ppl_ratio is None
    assert stats.ppl_ratio_bound is not None
    assert stats.ppl_ratio_bound.startswith("beyond the float range: B's mean negative "
                                            "log-likelihood of A's tokens exceeds A's by 9999")
    assert "PPL" not in llama_cpp_sentence(stats, 1, 1)


extreme_logprobs = st.one_of(st.floats(-1e308, 0.0), st.sampled_from([-9999.0, -1e308, 0.0]))
top_entries = st.lists(st.tuples(st.sampled_from("xyz"), extreme_logprobs), max_size=3,
                       unique_by=lambda entry: entry[0])


@given(st.lists(st.tuples(st.one_of(st.none(), extreme_logprobs), top_entries,
                          st.one_of(st.none(), extreme_logprobs), top_entries),
                min_size=1, max_size=6))
def test_extreme_logprobs_give_figures_never_an_error(
        rows: list[tuple[float | None, list[tuple[str, float]],
                         float | None, list[tuple[str, float]]]]) -> None:
    positions = Positions()
    for a_logprob, a_top, b_logprob, b_top in rows:
        positions.add(score_position(
            "x", a_logprob, ([t for t, _ in a_top], [lp for _, lp in a_top]),
            b_logprob, ([t for t, _ in b_top], [lp for _, lp in b_top]), quarter=1))
    stats = positions.stats()
    assert stats.positions == len(rows)
    assert stats.ppl_ratio is None or math.isfinite(stats.ppl_ratio)
    llama_cpp_sentence(stats, 4, 1)


SCORED = st.lists(st.tuples(
    st.one_of(st.none(), st.floats(-30, 0)),
    st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.floats(-30, 0)),
             max_size=4).map(lambda top: ([t for t, _ in top], sorted(
                 (v for _, v in top), reverse=True)))), max_size=6)


@given(SCORED, SCORED)
def test_two_scorings_of_the_same_tokens_make_a_floor_whatever_they_hold(
        first: list[Scored], second: list[Scored]) -> None:
    tokens = {"p": ["a"] * max(len(first), len(second))}
    floor = order_floor({"p": first}, {"p": second}, tokens)
    assert floor.positions == min(len(first), len(second))
    same = order_floor({"p": first}, {"p": first}, tokens)
    assert same.positions == len(first)
    if same.kl is not None:
        assert same.kl.max == 0.0


def test_a_kl_within_the_order_floor_is_not_called_drift() -> None:
    def stats(mean: float) -> ForcedStats:
        return ForcedStats(positions=3, kl=KLSpread(mean=mean, median=mean, p99=mean,
                                                    max=mean))

    assert within_order(stats(0.001), stats(0.002)) is True
    assert within_order(stats(0.1), stats(0.002)) is False
    assert within_order(stats(0.1), None) is None
    assert within_order(stats(0.1), ForcedStats(positions=0)) is None
    assert order_floor({"p": []}, {}, {"p": []}).note == "no prompt was scored in both orders"
