"""Teacher-forced drift figures, offline: per position, per prompt, the noise floor of
A's own repeats, and the columns pairs.csv takes from forced.jsonl (no network here; the HTTP
scoring is fetch/forced_scoring.py).

Per position: `top1` (B's top-1 is A's token), `delta_p` (B's probability of A's token
minus A's) and `kl` (a KL(A || B) lower bound over the shared top-k).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..store.pair_records import PairRow
from ..store.report_records import DeltaP, ForcedLine, ForcedStats, Spread
from ..store.run_records import Completion, Tokens
from .signals import kl_lower_bound


@dataclass
class Positions:
    """Per-position figures of one prompt (forced, or A against its own repeats)."""

    top1: list[bool] = field(default_factory=list)
    kl: list[float] = field(default_factory=list)
    delta_p: list[float] = field(default_factory=list)

    def extend(self, other: Positions) -> None:
        self.top1 += other.top1
        self.kl += other.kl
        self.delta_p += other.delta_p

    def stats(self) -> ForcedStats:
        if not self.kl:
            return ForcedStats(positions=0)
        kl, delta = np.array(self.kl), np.array(self.delta_p)
        size = np.abs(delta)
        return ForcedStats(
            positions=len(kl), top1_agreement=float(np.mean(self.top1)),
            kl=Spread(mean=float(kl.mean()), median=float(np.median(kl)),
                      p99=float(np.percentile(kl, 99)), max=float(kl.max())),
            delta_p=DeltaP(mean=float(delta.mean()), abs_mean=float(size.mean()),
                           abs_median=float(np.median(size)),
                           abs_p99=float(np.percentile(size, 99)), abs_max=float(size.max())))


def compare_position(a_token: str, a_logprob: float | None, a_top: tuple[list[str], list[float]],
                     b_logprob: float | None, b_top: tuple[list[str], list[float]]
                     ) -> tuple[bool, float, float]:
    """(B's top-1 is A's token, delta p, KL lower bound) at one position."""
    top1 = bool(b_top[0]) and b_top[0][0] == a_token
    p_a = math.exp(a_logprob) if a_logprob is not None else 0.0
    p_b = math.exp(b_logprob) if b_logprob is not None else 0.0
    return top1, p_b - p_a, kl_lower_bound(a_top[0], a_top[1], b_top[0], b_top[1])


def noise_floor(completions: list[Completion]) -> ForcedStats:
    """The forced figures for A against A's own repeats (successful records with
    tokens): over each repeat's common prefix with repeat 0, and where they part."""
    floor = Positions()
    groups: dict[str, list[Completion]] = {}
    for record in completions:
        groups.setdefault(record.prompt_id, []).append(record)
    repeats = 0
    for records in groups.values():
        records.sort(key=lambda r: r.repeat)
        reference = records[0].tokens
        for other in records[1:]:
            repeats += 1
            assert reference is not None and other.tokens is not None  # see the docstring
            floor.extend(_repeat_positions(reference, other.tokens))
    if not repeats:
        return ForcedStats(positions=0, note="A has one repeat per prompt; collect A with "
                           "--repeats 2 or more for a noise floor")
    stats = floor.stats()
    stats.repeats_compared = repeats
    return stats


def _repeat_positions(reference: Tokens, other: Tokens) -> Positions:
    found = Positions()
    for n in range(min(len(reference), len(other))):
        top1, delta, kl = compare_position(
            reference.text[n], reference.logprob[n],
            (reference.top_text[n], reference.top_logprob[n]), other.logprob[n],
            (other.top_text[n], other.top_logprob[n]))
        if reference.text[n] != other.text[n]:
            top1 = False
        found.top1.append(top1)
        found.kl.append(kl)
        found.delta_p.append(delta)
        if reference.text[n] != other.text[n]:
            break
    return found


@dataclass(frozen=True, slots=True)
class ForcedColumns:
    """A prompt's forced figures as pairs.csv's forced_* columns (None: not scored)."""

    positions: int | None = None
    top1: float | None = None
    kl_mean: float | None = None
    kl_p99: float | None = None
    kl_max: float | None = None
    delta_p_mean: float | None = None

    def fill(self, row: PairRow) -> None:
        row.forced_positions, row.forced_top1 = self.positions, self.top1
        row.forced_kl_mean, row.forced_kl_p99 = self.kl_mean, self.kl_p99
        row.forced_kl_max, row.forced_delta_p_mean = self.kl_max, self.delta_p_mean


NOT_SCORED = ForcedColumns()


def pair_columns(line: ForcedLine | None) -> ForcedColumns:
    """A prompt's forced figures as pairs.csv columns (all empty when none scored)."""
    if not line or not line.positions or line.kl is None or line.delta_p is None:
        return NOT_SCORED
    return ForcedColumns(line.positions, line.top1_agreement, line.kl.mean, line.kl.p99,
                         line.kl.max, line.delta_p.mean)


def all_kl(lines: dict[str, ForcedLine]) -> Iterator[float]:
    for line in lines.values():
        if line.per_position is not None:
            yield from line.per_position.kl
