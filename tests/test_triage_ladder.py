"""triage/ladder.py: a probe's verdicts and departure against A's floor, the KL on the
answer and on the needle's span, a rung's figures, the onset (the shortest rung that
departs beyond A's floor), how far the ladder was tested, and the cost estimate."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck.store.records.ladder_records import ABSENT, NEEDLE, LadderProbe, ProbeResult
from quantcheck.store.records.pair_records import PairRow
from quantcheck.store.records.report_records import ForcedLine, PerPosition
from quantcheck.store.records.run_records import Completion, Expect, Tokens
from quantcheck.triage.ladder import (
    estimate_seconds,
    floor_sentence,
    measured_reach,
    needle_positions,
    onset,
    onset_sentence,
    probe_result,
    rung_figures,
)
from quantcheck.triage.ladder_plan import ABSENT_PATTERN

NEEDLE_PROBE = LadderProbe(id="needle-d0", kind=NEEDLE, depth=0.0, code="48213",
                           prompt_tokens=1020)
ABSENT_PROBE = LadderProbe(id="absent", kind=ABSENT, prompt_tokens=1010)
CODE = Expect(contains=["48213"])


def answer(text: str, repeat: int = 0, pieces: list[str] | None = None,
           shift: float = 0.0) -> Completion:
    """An answer whose tokens are `pieces` (its words by default), each with top-2
    alternatives (`shift` moves their logprobs: a repeat that differs in numbers)."""
    pieces = pieces or [" " + word for word in text.split()]
    tokens = Tokens()
    for piece in pieces:
        tokens.append(piece, -0.1 - shift, [piece, "x"], [-0.1 - shift, -2.5 + shift])
    return Completion(prompt_id="p", prompt_hash="h", repeat=repeat, text="".join(pieces),
                      tokens=tokens)


def failed(repeat: int = 0) -> Completion:
    return Completion(prompt_id="p", prompt_hash="h", repeat=repeat, error="HTTP 400")


def forced_line(kl: list[float]) -> ForcedLine:
    return ForcedLine(prompt_id="p", mode="token-ids", positions=len(kl),
                      per_position=PerPosition([True] * len(kl), kl, [0.0] * len(kl),
                                               [None] * len(kl)))


def test_a_probe_departs_when_as_repeats_agree_and_b_gets_the_other_verdict() -> None:
    code = answer("The code is 48213.", pieces=[" The", " code", " is", " 482", "13", "."])
    a = [code, answer("The code is 48213.", 1, pieces=[" The", " code", " is", " 482", "13",
                                                        "."])]
    result = probe_result(NEEDLE_PROBE, "rungs/1024/needle-d0", CODE, a,
                          [answer("1234567")], PairRow(prompt_id="p", flip="regression"),
                          forced_line([0.1, 0.2, 0.3, 1.5, 2.5, 0.4]))
    assert (result.a_passed, result.b_passed, result.a_stable) == (True, False, True)
    assert result.departs and result.flip == "regression"
    assert (result.a_repeats_passed, result.a_repeats) == (2, 2)
    assert result.kl_mean == pytest.approx(5.0 / 6)
    assert result.kl_needle == pytest.approx(2.0)  # " 482" and "13" spell the code
    assert result.a_floor_kl == 0.0  # the repeats are the same tokens and numbers
    assert result.a_answer == " The code is 48213." and result.b_answer == " 1234567"


def test_a_probe_on_which_as_own_repeats_disagree_does_not_depart() -> None:
    a = [answer("48213"), answer("18213", 1, shift=0.5)]
    result = probe_result(NEEDLE_PROBE, "r", CODE, a, [answer("18213")], None, None)
    assert result.a_stable is False and not result.departs
    assert result.note == "not scored" and result.kl_mean is None


def test_one_repeat_of_a_measures_no_floor_and_any_difference_departs() -> None:
    result = probe_result(NEEDLE_PROBE, "r", CODE, [answer("48213")], [answer("none")],
                          None, None)
    assert result.a_stable is None and result.departs and result.a_floor_kl is None


def test_an_answer_that_failed_is_no_verdict_and_no_departure() -> None:
    result = probe_result(NEEDLE_PROBE, "r", CODE, [answer("48213"), answer("48213", 1)],
                          [failed()], None, None)
    assert result.b_passed is None and not result.departs
    assert result.b_answer == "(failed: HTTP 400)"


@pytest.mark.parametrize(
    ("text", "passes"),
    [("none", True), (' "none"', True), ("There is no secret code in the record.", True),
     ("I do not know.", True), ("The code is not given.", True), ("48213", False),
     ("The secret code is 55555, not given elsewhere.", False), ("1. 2. 3. 4.", False),
     ("", False)],
)
def test_an_absent_needle_passes_only_when_the_answer_says_there_is_none(
        text: str, passes: bool) -> None:
    result = probe_result(ABSENT_PROBE, "r", Expect(regex=ABSENT_PATTERN),
                          [answer(text, pieces=[text])], [answer(text, pieces=[text])],
                          None, None)
    assert result.a_passed is passes and not result.departs


@given(st.lists(st.text(min_size=0, max_size=4), max_size=12), st.text(min_size=1,
                                                                         max_size=6))
def test_needle_positions_cover_exactly_the_codes_characters(pieces: list[str],
                                                             code: str) -> None:
    positions = needle_positions(pieces, code)
    joined = "".join(pieces)
    if code not in joined:
        assert positions == []
        return
    start = joined.index(code)
    covered = {n for n, piece in enumerate(pieces) for offset in [
        len("".join(pieces[:n]))] if offset < start + len(code) and offset + len(piece) > start}
    assert set(positions) == covered
    assert code in "".join(pieces[positions[0]:positions[-1] + 1])


def result_with(departs: bool = False, stable: bool | None = True,
                a: bool | None = True, b: bool | None = True, flip: str = "",
                kl: float | None = None) -> ProbeResult:
    return ProbeResult(probe=NEEDLE_PROBE, report="r", a_passed=a, b_passed=b,
                       a_stable=stable, departs=departs, flip=flip, kl_mean=kl)


def test_a_rung_departs_only_beyond_as_floor() -> None:
    one = rung_figures(1024, [result_with(departs=True, b=False, flip="regression"),
                              result_with(kl=0.5)])
    assert one.departs and (one.departures, one.a_floor, one.flips) == (1, 0, 1)
    assert (one.a_recall, one.b_recall, one.kl_mean) == (1.0, 0.5, 0.5)
    noisy = rung_figures(2048, [result_with(departs=True, b=False),
                                result_with(stable=False)])
    assert not noisy.departs and (noisy.departures, noisy.a_floor) == (1, 1)
    beyond = rung_figures(4096, [result_with(departs=True, b=False),
                                 result_with(departs=True, b=False),
                                 result_with(stable=False)])
    assert beyond.departs


def test_the_onset_is_the_shortest_rung_that_departs_and_is_said() -> None:
    rungs = [rung_figures(1024, [result_with()]),
             rung_figures(4096, [result_with(departs=True, b=False)]),
             rung_figures(2048, [result_with()]),
             rung_figures(8192, [result_with(departs=True, b=False)])]
    assert onset(rungs) == 4096 and measured_reach(rungs) == 8192
    sentence = onset_sentence(rungs, [1024, 2048, 4096, 8192])
    assert sentence.startswith("B departs from A from 4,096 tokens: at 1 of its 1 probe "
                               "B's verdict is not that of A's agreeing repeats")
    assert "the needle at depth 0 lost" in sentence


def test_no_onset_says_how_far_it_was_tested_and_what_was_not() -> None:
    rungs = [rung_figures(1024, [result_with()]), rung_figures(2048, [result_with()]),
             rung_figures(4096, [result_with(b=None)])]
    assert onset(rungs) is None and measured_reach(rungs) == 2048
    assert onset_sentence(rungs, [1024, 2048, 4096, 8192]) == (
        "no departure up to 2,048 tokens; not tested beyond it: 4,096, 8,192")
    assert onset_sentence([], [1024]).endswith("the onset is not known")


def test_the_floor_sentence_names_where_as_repeats_disagree() -> None:
    rungs = [rung_figures(1024, [result_with()]),
             rung_figures(2048, [result_with(stable=False)])]
    assert "disagree on probes (1 at 2,048)" in floor_sentence(rungs, 2)
    assert "agree on every probe" in floor_sentence(rungs[:1], 3)
    assert "not measured (one repeat of A)" in floor_sentence(rungs, 1)


def test_the_cost_estimate_grows_with_the_power_the_rungs_show() -> None:
    assert estimate_seconds([], 1024) is None
    assert estimate_seconds([(1000, 2.0)], 4000) == pytest.approx(8.0)  # in proportion
    # 1K in 2 s, 2K in 6 s: a power of log2(3) = 1.58, so 4K in 18 s
    assert estimate_seconds([(1024, 2.0), (2048, 6.0)], 4096) == pytest.approx(18.0)
    # never below proportion, never beyond the square
    assert estimate_seconds([(1024, 2.0), (2048, 3.0)], 4096) == pytest.approx(6.0)
    assert estimate_seconds([(1024, 1.0), (2048, 9.0)], 4096) == pytest.approx(36.0)
    assert math.isfinite(estimate_seconds([(1, 1e-9), (2, 1e9)], 10**6) or 0.0)
