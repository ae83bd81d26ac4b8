"""What a certificate tested and what it did not: levels in words, a level held to an
untested baseline, and the verdict that follows."""

from __future__ import annotations

import pytest

from quantcheck.store.records.certificate_records import (
    FACTORS,
    FactorResult,
    LevelResult,
    Untested,
)
from quantcheck.triage.certificate_coverage import (
    HELD_TO,
    PHRASES,
    levels_phrase,
    not_tested_phrase,
    scope,
    untested_levels,
    verdict,
    why_untested,
)


def level(name: str, not_tested: str = "") -> LevelResult:
    return LevelResult(level=name, prompts=0 if not_tested else 2, prompts_varying=0,
                       comparisons=0 if not_tested else 4, mismatches=0,
                       most_unique_outputs=1, mean_unique_outputs=1.0, not_tested=not_tested)


def factor(name: str, *levels: LevelResult) -> FactorResult:
    return FactorResult(factor=name, comparisons=0, mismatches=0, prompts=2,  # type: ignore[arg-type]
                        prompts_varying=0, share_varying=0.0, levels=list(levels),
                        explanation="no variation")


def test_every_factor_has_its_baseline_and_its_words() -> None:
    assert set(HELD_TO) == set(PHRASES) == set(FACTORS)


@pytest.mark.parametrize(("factor_name", "levels", "said"), [
    ("batch", ["batch=2", "batch=4"], "batch sizes 2, 4"),
    ("prefix", ["prefix=1"], "shared prefixes of 1 word with the prefix cache off"),
    ("prefix", ["prefix=1", "prefix=511"],
     "shared prefixes of 1, 511 words with the prefix cache off"),
    ("cache", ["prefix=2048"], "cached shared prefixes of 2048 words"),
    ("repeat", ["alone"], "repeats alone"),
    ("seed", ["seeded"], "seeded sampling"),
    ("warm", ["cold", "warm"], "cold against warm requests (its own prompt cached)"),
    ("block", ["block=15", "block=16", "block=17"],
     "cached prefixes of 15, 16, 17 tokens (a cache block and a token either side)"),
    ("cobatch", ["prefix=511"], "shared prefixes of 511 words sent at once with a sibling "
                                "writing them"),
    ("order", ["reordered"], "requests in other orders after a cached shared prefix"),
], ids=["batch", "one word", "words", "cache", "repeat", "seed", "warm", "block", "cobatch",
        "order"])
def test_levels_read_as_words(factor_name: str, levels: list[str], said: str) -> None:
    assert levels_phrase(factor_name, levels) == said  # type: ignore[arg-type]


def test_a_level_held_to_an_untested_baseline_is_untested_with_that_reason() -> None:
    untested = {("prefix", "prefix=2048"): "a slot holds 1,024 tokens"}
    assert why_untested("prefix", "prefix=2048", untested) == "a slot holds 1,024 tokens"
    assert why_untested("cache", "prefix=2048", untested) == (
        "its baseline (prefix at the same level) was not tested: a slot holds 1,024 tokens")
    assert why_untested("cache", "prefix=511", untested) is None
    assert why_untested("batch", "batch=2", untested) is None
    # every factor held to the alone-repeats falls with them
    alone = {("repeat", "alone"): "the prompt does not fit"}
    assert why_untested("batch", "batch=8", alone) == (
        "its baseline (repeat) was not tested: the prompt does not fit")
    assert why_untested("seed", "seeded", alone) is None
    # a co-batch is held to the cold answer after the same prefix; a block and a warm
    # request to their own cold answers
    assert why_untested("cobatch", "prefix=2048", untested) == (
        "its baseline (prefix at the same level) was not tested: a slot holds 1,024 tokens")
    assert why_untested("block", "block=16", untested) is None
    assert why_untested("warm", "warm", alone) is None


def test_untested_levels_are_grouped_by_reason_and_said_together() -> None:
    slot = "a slot holds 1,024 tokens"
    factors = [factor("batch", level("batch=2"), level("batch=4")),
               factor("prefix", level("prefix=1"), level("prefix=511", slot),
                      level("prefix=2048", slot)),
               factor("cache", level("prefix=1"), level("prefix=511", slot),
                      level("prefix=2048", slot)),
               factor("seed", level("seeded", "the server refused a seeded request"))]
    untested = untested_levels(factors)
    assert untested == [
        Untested(factor="prefix", levels=["prefix=511", "prefix=2048"], reason=slot),
        Untested(factor="cache", levels=["prefix=511", "prefix=2048"], reason=slot),
        Untested(factor="seed", levels=["seeded"], reason="the server refused a seeded request")]
    assert not_tested_phrase(untested) == (
        "shared prefixes of 511, 2048 words with the prefix cache off and cached shared "
        "prefixes of 511, 2048 words (a slot holds 1,024 tokens); seeded sampling (the server "
        "refused a seeded request)")
    assert scope(factors) == ("batch sizes 2, 4, shared prefixes of 1 word with the prefix "
                              "cache off, cached shared prefixes of 1 word")
    assert scope([factor("seed", level("seeded", "refused"))]) == "nothing"


def test_the_verdict_certifies_only_what_was_tested() -> None:
    untested = [Untested(factor="cache", levels=["prefix=1"], reason="off")]
    assert verdict(True, []) == "certified"
    assert verdict(True, untested) == "certified in part"
    assert verdict(False, untested) == verdict(False, []) == "not certified"
