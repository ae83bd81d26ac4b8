"""triage/pairs.py: `compare` on the planted A/B, every planted difference triaged as it
should be, and the significant digits that decide what is the same signature."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from quantcheck.store.records.pair_records import PAIR_COLUMNS
from quantcheck.triage.pairs import compare


def test_every_planted_difference_is_triaged(ab_runs: tuple[Path, Path]) -> None:
    frame = compare(*ab_runs).set_index("prompt_id")
    assert list(frame.reset_index().columns) == PAIR_COLUMNS

    def row(prompt_id: str) -> pd.Series:
        return frame.loc[prompt_id]

    assert row("same")["identical"] and row("same")["suggested_label"] == "identical"
    assert row("same")["divergence_kind"] == "none"
    assert pd.isna(row("same")["first_divergence"])

    wording = row("wording")
    assert not wording["identical"] and wording["similarity"] > 0.9
    assert wording["suggested_label"] == "wording" and wording["a_expect"] == "pass"
    assert wording["divergence_kind"] == "confident" and wording["first_divergence"] == 5

    near = row("near-tie")
    assert (near["first_divergence"], near["divergence_kind"]) == (0, "near_tie")
    assert (near["divergence_a_token"], near["divergence_b_token"]) == (" The", " Yes,")
    assert near["divergence_gap"] == pytest.approx(0.05)

    flipped = row("flip")
    assert (flipped["a_expect"], flipped["b_expect"], flipped["flip"]) == (
        "pass", "fail", "regression")
    assert flipped["suggested_label"] == "factual_flip"
    assert 'missing "Canberra"' in flipped["b_expect_failures"]

    assert row("better")["flip"] == "improvement"
    assert row("better")["numbers_changed"] and row("numbers")["numbers_changed"]
    assert row("numbers")["suggested_label"] != "wording"

    assert row("loop")["b_degenerate"] == "repetition" and not row("loop")["a_degenerate"]
    assert row("empty")["b_degenerate"] == "empty"
    assert row("capped")["b_degenerate"] == "length"
    assert row("capped")["b_finish_reason"] == "length"

    noisy = row("noisy")
    assert not noisy["identical"] and noisy["noise"]
    assert (noisy["a_texts"], noisy["b_texts"]) == (2, 1)
    assert not row("near-tie")["noise"]

    assert row("changed")["status"] == "not_comparable"
    assert pd.isna(row("changed")["identical"])
    assert row("only-a")["status"] == "only_a" and row("only-b")["status"] == "only_b"

    compared = frame[frame["status"] == "compared"].drop(["noisy", "empty"])
    assert (compared["a_signatures"] == 1).all()  # the reference is deterministic
    assert (compared["b_signatures"] == 2).all()  # B's reduction order changes per request
    assert frame.loc["noisy", "a_signatures"] == 2
    assert (compared.loc["same", "kl_topk_mean"]) < 1e-6


def test_sig_digits_decide_what_counts_as_the_same_signature(ab_runs: tuple[Path, Path]) -> None:
    # The scripted logprobs have three decimals and B's jitter is 1e-7: at 5 significant
    # digits no value sits on a rounding boundary, so B's repeats agree.
    loose = compare(*ab_runs, sig_digits=5)
    compared = loose[loose["status"] == "compared"].set_index("prompt_id").drop(["noisy", "empty"])
    assert (compared["b_signatures"] == 1).all()
