"""Teacher-forced figures by position in the context: each position placed after its
prompt, spans of 0-1K, 1K-4K, 4K-16K, ..., the figures of each span as the overall
figures are computed, and a sentence that names where KL rises (or says it does not)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck.store.records.report_records import ForcedLine, ForcedStats, KLSpread, PerPosition
from quantcheck.triage.forced_figures import Positions
from quantcheck.triage.forced_positions import (
    SPAN_STARTS,
    by_position,
    line_positions,
    points,
    position_sentence,
    rise_after,
    span_label,
    span_of,
)


def line(prompt_id: str, kl: list[float], prompt_tokens: int | None = 0,
         top1: list[bool] | None = None) -> ForcedLine:
    top1 = top1 if top1 is not None else [value < 0.5 for value in kl]
    return ForcedLine(prompt_id=prompt_id, mode="token-ids", positions=len(kl),
                      prompt_tokens=prompt_tokens,
                      per_position=PerPosition(top1, kl, [-v / 10 for v in kl],
                                               [None] * len(kl), list(top1)))


def test_spans_grow_fourfold_and_are_named_in_tokens() -> None:
    assert [span_label(start) for start in SPAN_STARTS] == [
        "0-1K", "1K-4K", "4K-16K", "16K-64K", "64K-256K", "256K-1M", "1M+"]
    assert [span_of(at) for at in (0, 1023, 1024, 4095, 4096, 70_000, 5_000_000)] == [
        0, 0, 1024, 1024, 4096, 65536, 1024 * 1024]


def test_a_position_is_placed_after_its_prompt() -> None:
    """Answer position n of a 3,000-token prompt is token 3,000 + n of the context; a
    line written before prompt_tokens was recorded counts from its answer's start."""
    scored = line("p", [0.0, 0.1, 0.2], prompt_tokens=3000)
    assert [point.at for point in points(scored)] == [3000, 3001, 3002]
    assert [point.at for point in points(line("old", [0.0, 0.1], None))] == [0, 1]
    window = line_positions(scored, 3001, 3002)
    assert window.kl == [0.1] and window.stats().positions == 1
    assert line_positions(scored, 5000).stats().positions == 0
    assert list(points(ForcedLine(prompt_id="skipped", mode="echo", positions=0))) == []


def test_each_span_has_the_figures_of_its_positions() -> None:
    """A short prompt's answer fills 0-1K; a 4,000-token prompt's answer reaches into
    4K-16K; each span's figures are those Positions.stats gives its positions."""
    short = line("short", [0.01] * 600)
    long = line("long", [0.02] * 50 + [0.9] * 150, prompt_tokens=4046)
    spans = by_position([short, long])
    assert [(s.label, s.start, s.end, s.positions) for s in spans] == [
        ("0-1K", 0, 1024, 600), ("1K-4K", 1024, 4096, 50), ("4K-16K", 4096, 16384, 150)]
    expected = Positions(top1=[False] * 150, kl=[0.9] * 150, delta_p=[-0.09] * 150,
                         same_top=[False] * 150).stats()
    assert spans[2].kl == expected.kl and spans[2].top1_agreement == 0.0
    assert spans[2].delta_p == expected.delta_p and spans[2].same_top_p == 0.0
    assert spans[0].top1_agreement == 1.0


def test_the_sentence_names_where_kl_rises() -> None:
    spans = by_position([line("short", [0.01] * 600),
                         line("long", [0.02] * 50 + [0.9] * 150, prompt_tokens=4046)])
    sentence = position_sentence(spans)
    assert sentence.startswith("By position in the context: 0-1K KL mean 0.01, top-1 100.0% "
                               "(600 positions); 1K-4K")
    assert sentence.endswith("KL rises after 4K (mean 0.9 from 4K on, 0.0108 before)")
    assert rise_after(spans) == ("4K", pytest.approx((600 * 0.01 + 50 * 0.02) / 650),
                                 pytest.approx(0.9))


def test_no_rise_is_said_so_and_one_span_says_nothing() -> None:
    level = by_position([line("a", [0.05] * 900), line("b", [0.06] * 900, prompt_tokens=1000)])
    assert position_sentence(level).endswith("; KL does not rise along the context")
    assert position_sentence(by_position([line("a", [0.3] * 900)])) == ""
    assert position_sentence([]) == ""


def test_a_rise_inside_the_noise_floor_or_on_few_positions_is_no_rise() -> None:
    spans = by_position([line("a", [0.001] * 900), line("b", [0.004] * 900, prompt_tokens=1000)])
    assert rise_after(spans) is None  # four times, but by less than 0.01 nats
    risen = by_position([line("a", [0.01] * 900), line("b", [0.05] * 900, prompt_tokens=1000)])
    assert rise_after(risen) is not None
    floor = ForcedStats(positions=100, kl=KLSpread(mean=0.08, median=0.08, p99=0.1, max=0.1))
    assert rise_after(risen, floor) is None  # A against itself moves as much
    lonely = by_position([line("a", [0.01] * 900), line("b", [2.0] * 5, prompt_tokens=1020)])
    assert rise_after(lonely) is None  # 5 positions past 1K: one prompt's luck


lines_strategy = st.lists(st.builds(
    line, st.text(max_size=4),
    st.lists(st.floats(0, 50, allow_nan=False), max_size=40),
    st.one_of(st.none(), st.integers(0, 3_000_000))), max_size=8)


@given(lines_strategy)
def test_any_lines_give_spans_that_hold_every_position(lines: list[ForcedLine]) -> None:
    spans = by_position(lines)
    assert sum(span.positions for span in spans) == sum(len(list(points(x))) for x in lines)
    assert [span.start for span in spans] == sorted({span.start for span in spans})
    position_sentence(spans)  # any spans read as a sentence
