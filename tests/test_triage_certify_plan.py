"""The certificate's plan: counted by arithmetic as it is built, what fits a context,
and the time it takes as the warm-up measured the server."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.store.records.certificate_records import Probe, Round
from quantcheck.triage.certify_plan import (
    SHORT_FILLER,
    Pace,
    estimate_seconds,
    fits,
    long_filler_words,
    make_plan,
    plan_requests,
    probe_words,
    tokens_per_word,
)


@settings(deadline=None, max_examples=30)
@given(st.integers(1, 4), st.integers(2, 4), st.integers(2, 40), st.integers(0, 9),
       st.none() | st.integers(300, 20000), st.integers(1, 512))
def test_the_plan_is_counted_as_it_is_built(prompts: int, trials: int, max_batch: int,
                                            seed: int, context: int | None,
                                            max_tokens: int) -> None:
    plan = make_plan([f"p{n}" for n in range(prompts)], trials, max_batch, seed, context,
                     max_tokens)
    assert plan.requests == plan_requests(prompts, trials, max_batch)
    # every filler fits the context it was made for, at two tokens a word (where one
    # of the shortest fillers does)
    fillers = [len(p.filler.split()) for r in plan.rounds for p in r.probes if p.filler
               and p.factor == "batch"]
    if fits(SHORT_FILLER[1] + 4, context, max_tokens):
        assert all(fits(words, context, max_tokens) for words in fillers)
    assert max(fillers) <= long_filler_words(context, max_tokens) + 4


def test_a_huge_plan_is_counted_without_being_built() -> None:
    assert plan_requests(20, 1_000_000, 256) == 20 * 1_000_000 * (3 + 510 + 2) + \
        4 * 20 * 9 + 9 * 20 + 1_000_000 * 21


def test_what_fits_a_context() -> None:
    # two tokens a word where the server counted none: 511 words do not fit 1,024
    assert not fits(511, 1024, 16)
    # one token a word, measured, and a tenth more: they do
    assert fits(511, 1024, 16, tokens_per_word(1.0))
    assert not fits(2048, 1024, 16, tokens_per_word(1.0))
    assert tokens_per_word(None) == 2.0 and tokens_per_word(0.3) == pytest.approx(1.1)
    assert tokens_per_word(5.0) == pytest.approx(2.2)  # never beyond two and a tenth
    assert fits(511, None, 64) and not fits(2048, None, 64)  # an unsaid context: 2,048


def rounds(*sizes: int, words: int = 0) -> list[Round]:
    return [Round(probes=[Probe(factor="batch", level=f"batch={size}",
                                filler=" ".join(["w"] * words))] * size) for size in sizes]


def test_a_batch_takes_as_long_as_the_server_computes_it() -> None:
    """One slot: a batch of 8 takes 8 answers; four slots computing two at once: a
    batch of 8 takes 4; a prompt word adds its prefill."""
    one_slot = Pace(answer=1.0, slots=1)
    assert estimate_seconds(rounds(2, 4, 8), one_slot) == pytest.approx(14.0)
    shared = Pace(answer=1.0, at_once=2.0, tried=4, slots=4)
    assert shared.parallel(8) == 2.0 and shared.parallel(2) == 1.0
    assert estimate_seconds(rounds(8), shared) == pytest.approx(4.0)
    unlimited = Pace(answer=1.0, at_once=4.0, tried=4)  # vLLM: as many as are sent
    assert estimate_seconds(rounds(32), unlimited) == pytest.approx(1.0)
    prefill = Pace(answer=1.0, per_word=0.01, slots=1)
    assert estimate_seconds(rounds(1, words=100), prefill) == pytest.approx(2.0)
    assert probe_words(Probe(factor="prefix", level="prefix=3", prefix="a b c")) == 3
    # a prompt whose prefix a sibling put in the cache is not computed again
    sibling = Probe(factor="cache", level="prefix=100", cache=True,
                    filler=" ".join(["w"] * 100))
    cached = Probe(factor="cache", level="prefix=100", cache=True, prompt_id="p",
                   prefix=" ".join(["w"] * 100))
    assert estimate_seconds([Round(probes=[sibling]), Round(probes=[cached])], prefill) == \
        pytest.approx(3.0)


def test_the_cache_factors_rounds_empty_the_cache_where_they_start_cold() -> None:
    """warm: each cold request after a flush, its warm one right after with the cache
    on; block: the sibling after a flush, the prompt reading it, then the prompt cold;
    co-batch: the prompt and its sibling at once after a flush, each first once; order:
    the prompts and a sibling one at a time, the first of each order cold."""
    plan = make_plan(["p", "q"], 3, 2, 0, 8192, 16, block_tokens=32)
    rounds = [r for r in plan.rounds if r.probes[0].factor == "warm"]
    assert [(r.action, r.probes[0].level, r.probes[0].cache) for r in rounds[:2]] == [
        ("flush", "cold", False), ("", "warm", True)]
    assert len(rounds) == 2 * 3 * 2 and plan.levels("warm") == ["cold", "warm"]
    assert plan.block_lengths == [31, 32, 33] and plan.levels("block") == [
        "block=31", "block=32", "block=33"]
    block = [r for r in plan.rounds if r.probes[0].factor == "block"][:3]
    assert [(r.action, p.sibling, p.cache, p.baseline, p.shared_tokens)
            for r in block for p in r.probes] == [
        ("flush", True, True, False, 31), ("", False, True, False, 31),
        ("flush", False, False, True, 31)]
    pairs = [r for r in plan.rounds if r.probes[0].factor == "cobatch"][:2]
    assert [[p.sibling for p in r.probes] for r in pairs] == [[False, True], [True, False]]
    assert {r.action for r in pairs} == {"flush"}
    order = [(r.action, r.probes[0].prompt_id, r.probes[0].sibling, r.probes[0].cache)
             for r in plan.rounds if r.probes[0].factor == "order"]
    assert order[:6] == [("flush", "p", False, False), ("", "q", False, True),
                         ("", "p", True, True), ("flush", "p", True, False),
                         ("", "q", False, True), ("", "p", False, True)]
    assert len(order) == 3 * 3
    # a cache kept token by token is tested at vLLM's default block
    assert make_plan(["p"], 2, 2, 0, block_tokens=1).block_lengths == [15, 16, 17]
