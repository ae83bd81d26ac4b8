"""Teacher-forced figures by position in the context: where along a long prompt or a
long answer B departs from A.

A scored position's place in the context is the prompt's length in tokens as B scored
it (forced.jsonl's `prompt_tokens`) plus its index in A's answer. The positions fall in
spans that grow fourfold, 0-1K, 1K-4K, 4K-16K, 16K-64K, 64K-256K, 256K-1M, 1M+ (K =
1,024 tokens), and each span gets the figures of triage/forced_figures.py (top-1
agreement, KL spread, delta p, same top p) over its positions.

Memory: a scored position is held as a few numbers (top-1, same top, KL, delta p, B's
logprob of A's token), whatever the vocabulary; only while a position is scored are
both sides' top-k alternatives in memory (k strings and logprobs each). llama-perplexity's
own KL divergence keeps every position's whole distribution instead (a logits file of
about 2 bytes per vocabulary entry per position).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from ..store.records.report_records import ForcedLine, ForcedStats, PositionBucket
from .forced_figures import Positions

K = 1024
# Where each span starts: 0, 1K, 4K, 16K, 64K, 256K, 1M (the last has no end)
SPAN_STARTS = (0, K, 4 * K, 16 * K, 64 * K, 256 * K, 1024 * K)
# A rise is named from the first span on which every span (of MIN_POSITIONS scored
# positions or more: fewer are one prompt's luck) has a KL mean above RISE_RATIO times
# the mean before it, by at least RISE_NATS, and above the noise floor's mean
RISE_RATIO = 2.0
RISE_NATS = 0.01
MIN_POSITIONS = 16


class PositionPoint(NamedTuple):
    """One scored position of a line, with its place in the context."""

    at: int
    top1: bool
    kl: float
    delta_p: float
    same_top: bool | None


def span_label(start: int) -> str:
    """"0-1K", "1K-4K", ..., "1M+": the span that starts at `start` (one of SPAN_STARTS)."""
    index = SPAN_STARTS.index(start)
    if index == len(SPAN_STARTS) - 1:
        return f"{_short(start)}+"
    return f"{_short(start)}-{_short(SPAN_STARTS[index + 1])}"


def _short(tokens: int) -> str:
    if tokens >= 1024 * K:
        return f"{tokens // (1024 * K)}M"
    return f"{tokens // K}K" if tokens else "0"


def span_of(at: int) -> int:
    """The start of the span holding context position `at`."""
    return SPAN_STARTS[max(bisect_right(SPAN_STARTS, at) - 1, 0)]


def points(line: ForcedLine) -> Iterator[PositionPoint]:
    """Each scored position of one line, in answer order, with its place in the context
    (a line without `prompt_tokens` counts from the answer's first token)."""
    scored = line.per_position
    if scored is None:
        return
    offset = line.prompt_tokens or 0
    same: list[bool | None] = [None] * len(scored.kl)
    if scored.same_top is not None:
        same = list(scored.same_top)
    for n, (top1, kl, delta_p, same_top) in enumerate(
            zip(scored.top1, scored.kl, scored.delta_p, same, strict=False)):
        yield PositionPoint(offset + n, top1, kl, delta_p, same_top)


def line_positions(line: ForcedLine, start: int = 0, end: int | None = None) -> Positions:
    """A line's positions whose place in the context lies from `start` up to `end` (a
    needle's span, a rung of a ladder): `.stats()` gives their figures."""
    found = Positions()
    for point in points(line):
        if point.at >= start and (end is None or point.at < end):
            _add(found, point)
    return found


def _add(positions: Positions, point: PositionPoint) -> None:
    positions.top1.append(point.top1)
    positions.kl.append(point.kl)
    positions.delta_p.append(point.delta_p)
    if point.same_top is not None:
        positions.same_top.append(point.same_top)


def by_position(lines: Iterable[ForcedLine]) -> list[PositionBucket]:
    """The figures of each span that holds a scored position, in order."""
    spans: dict[int, Positions] = {}
    for line in lines:
        for point in points(line):
            _add(spans.setdefault(span_of(point.at), Positions()), point)
    return [_bucket(start, spans[start]) for start in sorted(spans)]


def _bucket(start: int, positions: Positions) -> PositionBucket:
    stats = positions.stats()
    index = SPAN_STARTS.index(start)
    end = SPAN_STARTS[index + 1] if index + 1 < len(SPAN_STARTS) else None
    return PositionBucket(label=span_label(start), start=start, end=end,
                          **{name: getattr(stats, name) for name in ForcedStats.__struct_fields__})


def position_sentence(buckets: list[PositionBucket], floor: ForcedStats | None = None) -> str:
    """The spans in words, and whether KL rises along the context ("" with fewer than
    two spans scored: the overall figures say it all)."""
    scored = [b for b in buckets if b.positions and b.kl is not None]
    if len(scored) < 2:
        return ""
    spans = "; ".join(
        f"{b.label} KL mean {b.kl.mean:.3g}, top-1 {100 * (b.top1_agreement or 0):.1f}% "
        f"({b.positions:,} positions)" for b in scored if b.kl is not None)
    rise = rise_after(scored, floor)
    if rise is None:
        return f"By position in the context: {spans}; KL does not rise along the context"
    label, before, after = rise
    return (f"By position in the context: {spans}; KL rises after {label} (mean {after:.3g} "
            f"from {label} on, {before:.3g} before)")


def rise_after(buckets: list[PositionBucket], floor: ForcedStats | None = None
               ) -> tuple[str, float, float] | None:
    """The first span start from which KL has risen (see RISE_RATIO) in every span with
    MIN_POSITIONS, with the KL mean before and from it on; None when it does not rise."""
    floor_mean = floor.kl.mean if floor is not None and floor.positions and floor.kl else 0.0
    for split in range(1, len(buckets)):
        before = _pooled(buckets[:split])
        counted = [b for b in buckets[split:] if b.positions >= MIN_POSITIONS]
        if before is None or not counted:
            continue
        risen = max(RISE_RATIO * before, before + RISE_NATS, floor_mean)
        if all(b.kl is not None and b.kl.mean > risen for b in counted):
            after = _pooled(buckets[split:])
            assert after is not None  # a counted bucket alone has MIN_POSITIONS
            return _short(buckets[split].start), before, after
    return None


def _pooled(buckets: list[PositionBucket]) -> float | None:
    """The KL mean over the buckets' positions together (None: too few of them)."""
    positions = sum(b.positions for b in buckets)
    if positions < MIN_POSITIONS:
        return None
    return sum(b.kl.mean * b.positions for b in buckets if b.kl is not None) / positions
