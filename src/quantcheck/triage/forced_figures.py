"""Teacher-forced drift figures, offline: per position, per prompt, the noise floors
(A's and B's own repeats, B on its own tokens) and how much of A-vs-B lies inside them,
and the columns pairs.csv takes from forced.jsonl (no network here; the HTTP scoring is
fetch/forced_scoring.py).

Per position, as llama.cpp's `llama-perplexity --kl-divergence` defines each one (A is
its base model, B the quantized one): `top1` (B's top-1 is A's token), `same_top` (B's
top-1 is A's top-1: "Same top p"), `delta_p` (B's probability of A's token minus A's:
"Δp"), `kl` (KL(A || B), sum over tokens of p_A (log p_A - log p_B); here over A's
top-k alternatives that B's top-k holds plus one bucket for the rest, a lower bound on
llama.cpp's full-vocabulary figure), `kl_quarter` (the same on each side's top K/4),
and the negative log-likelihoods of A's token under each side (PPL(B)/PPL(A) is exp of
the mean difference; where B's logprob of A's token is unknown, beyond B's top-k, B's
lowest listed logprob stands in: the ratio is then a lower bound).
Over positions: mean, median, p90, p99 and max KL with linear-interpolated percentiles
(llama.cpp's), the share with the same top-1, RMS delta p = sqrt(mean(delta_p^2)).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..store.records.pair_records import PairRow
from ..store.records.report_records import (
    DeltaP,
    ForcedLine,
    ForcedStats,
    KLSpread,
    Spread,
    WithinFloor,
)
from ..store.records.run_records import Completion, Tokens
from .signals import kl_lower_bound

TopList = tuple[list[str], list[float]]


class PositionFigures(NamedTuple):
    """One position's figures (see the module docstring)."""

    top1: bool
    same_top: bool
    delta_p: float
    kl: float
    kl_quarter: float
    a_nll: float | None
    b_nll: float | None  # at least this when not b_nll_exact
    b_nll_exact: bool


@dataclass
class Positions:
    """Per-position figures of one prompt (forced, or a side against its own repeats)."""

    top1: list[bool] = field(default_factory=list)
    kl: list[float] = field(default_factory=list)
    delta_p: list[float] = field(default_factory=list)
    same_top: list[bool] = field(default_factory=list)
    kl_quarter: list[float] = field(default_factory=list)
    a_nll: list[float | None] = field(default_factory=list)
    b_nll: list[float | None] = field(default_factory=list)
    b_nll_exact: list[bool] = field(default_factory=list)

    def add(self, figures: PositionFigures) -> None:
        self.top1.append(figures.top1)
        self.same_top.append(figures.same_top)
        self.delta_p.append(figures.delta_p)
        self.kl.append(figures.kl)
        self.kl_quarter.append(figures.kl_quarter)
        self.a_nll.append(figures.a_nll)
        self.b_nll.append(figures.b_nll)
        self.b_nll_exact.append(figures.b_nll_exact)

    def extend(self, other: Positions) -> None:
        self.top1 += other.top1
        self.kl += other.kl
        self.delta_p += other.delta_p
        self.same_top += other.same_top
        self.kl_quarter += other.kl_quarter
        self.a_nll += other.a_nll
        self.b_nll += other.b_nll
        self.b_nll_exact += other.b_nll_exact

    def stats(self) -> ForcedStats:
        if not self.kl:
            return ForcedStats(positions=0)
        kl, delta = np.array(self.kl), np.array(self.delta_p)
        size = np.abs(delta)
        ratio, bound = self._ppl_ratio()
        return ForcedStats(
            positions=len(kl), top1_agreement=float(np.mean(self.top1)),
            kl=KLSpread(mean=float(kl.mean()), median=float(np.median(kl)),
                        p99=float(np.percentile(kl, 99)), max=float(kl.max()),
                        p90=float(np.percentile(kl, 90))),
            delta_p=DeltaP(mean=float(delta.mean()), abs_mean=float(size.mean()),
                           abs_median=float(np.median(size)),
                           abs_p99=float(np.percentile(size, 99)), abs_max=float(size.max())),
            same_top_p=float(np.mean(self.same_top)) if self.same_top else None,
            rms_delta_p=float(np.sqrt(np.mean(delta * delta))),
            ppl_ratio=ratio, ppl_ratio_bound=bound,
            kl_quarter_k=_spread(self.kl_quarter) if self.kl_quarter else None)

    def _ppl_ratio(self) -> tuple[float | None, str | None]:
        """PPL(B)/PPL(A) over A's tokens, and whether it is exact (None: a side's
        logprob of A's token is missing at some position, or the ratio is beyond the
        float range, which the second value then says)."""
        pairs = [(a, b) for a, b in zip(self.a_nll, self.b_nll, strict=True)]
        if not pairs or any(a is None or b is None for a, b in pairs):
            return None, None
        shares = [(b - a) / len(pairs) for a, b in pairs if a is not None and b is not None]
        # the mean as a sum of shares: it overflows only where a share does
        gap = math.fsum(shares) if all(map(math.isfinite, shares)) else math.inf
        if gap > _LARGEST_EXP:
            return None, (f"beyond the float range: B's mean negative log-likelihood of A's "
                          f"tokens exceeds A's by {gap:.4g} nats (a logprob of an engine's "
                          "stand-in for minus infinity, such as -9999, in a short answer)")
        unknown = self.b_nll_exact.count(False)
        bound = "exact" if not unknown else (
            f"lower bound: B's logprob of A's token is beyond its top-k at {unknown} of "
            f"{len(pairs)} positions (its lowest listed logprob stands in)")
        return math.exp(gap), bound


# The largest x whose exp(x) is a finite float
_LARGEST_EXP = math.log(sys.float_info.max)


def _spread(values: list[float]) -> Spread:
    array = np.array(values)
    return Spread(mean=float(array.mean()), median=float(np.median(array)),
                  p99=float(np.percentile(array, 99)), max=float(array.max()))


def quarter_of(top_k: int) -> int:
    """The smaller top-k the convergence check uses: K/4, at least 1."""
    return max(1, top_k // 4)


def score_position(a_token: str, a_logprob: float | None, a_top: TopList,
                   b_logprob: float | None, b_top: TopList, quarter: int = 0
                   ) -> PositionFigures:
    """All of one position's figures; `quarter`: the top-k of `kl_quarter` (0: none)."""
    top1 = bool(b_top[0]) and b_top[0][0] == a_token
    same_top = bool(a_top[0]) and bool(b_top[0]) and a_top[0][0] == b_top[0][0]
    p_a = math.exp(min(a_logprob, 0.0)) if a_logprob is not None else 0.0
    p_b = math.exp(min(b_logprob, 0.0)) if b_logprob is not None else 0.0
    kl = kl_lower_bound(a_top[0], a_top[1], b_top[0], b_top[1])
    kl_quarter = kl_lower_bound(a_top[0][:quarter], a_top[1][:quarter], b_top[0][:quarter],
                                b_top[1][:quarter]) if quarter else kl
    b_nll = -b_logprob if b_logprob is not None else (-min(b_top[1]) if b_top[1] else None)
    return PositionFigures(top1, same_top, p_b - p_a, kl, kl_quarter,
                           -a_logprob if a_logprob is not None else None, b_nll,
                           b_logprob is not None)


def noise_floor(completions: list[Completion], side: str = "A", quarter: int = 0
                ) -> ForcedStats:
    """The forced figures for a side against its own repeats (successful records with
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
            floor.extend(_repeat_positions(reference, other.tokens, quarter))
    if not repeats:
        return ForcedStats(positions=0, note=f"{side} has one repeat per prompt; collect "
                           f"{side} with --repeats 2 or more for a noise floor")
    stats = floor.stats()
    stats.repeats_compared = repeats
    return stats


def _repeat_positions(reference: Tokens, other: Tokens, quarter: int) -> Positions:
    found = Positions()
    for n in range(min(len(reference), len(other))):
        figures = score_position(
            reference.text[n], reference.logprob[n],
            (reference.top_text[n], reference.top_logprob[n]), other.logprob[n],
            (other.top_text[n], other.top_logprob[n]), quarter)
        parted = reference.text[n] != other.text[n]
        if parted:  # the other repeat's logprob is of its own token, not of this one
            figures = figures._replace(top1=False, b_nll=None, b_nll_exact=False)
        found.add(figures)
        if parted:
            break
    return found


def top_k_of(completions: list[Completion]) -> int:
    """The most alternatives a record holds at one position (0: none)."""
    return max((len(top) for record in completions if record.tokens
                for top in record.tokens.top_text), default=0)


FLOOR_NAMES = {"a_repeats": "A against its own repeats",
               "b_repeats": "B against its own repeats",
               "b_self": "B scoring its own tokens",
               "b_order": "B scoring A's tokens in another order"}
# One position as B scored it: its logprob of A's token (None: beyond its top-k) and its
# top-k alternatives
Scored = tuple[float | None, TopList]


def order_floor(first: Mapping[str, Sequence[Scored]], second: Mapping[str, Sequence[Scored]],
                tokens: Mapping[str, Sequence[str]], quarter: int = 0) -> ForcedStats:
    """B's scoring of A's tokens in one order against its scoring of them in another,
    position by position (the first as the reference): how far a prefix cache that
    cannot be turned off moves the figures by itself. Prompts scored in both only."""
    floor = Positions()
    for prompt_id, one in first.items():
        other = second.get(prompt_id)
        for token, (first_logprob, first_top), (logprob, top) in zip(
                tokens.get(prompt_id, ()), one, other or (), strict=False):
            floor.add(score_position(token, first_logprob, first_top, logprob, top, quarter))
    if not floor.kl:
        return ForcedStats(positions=0, note="no prompt was scored in both orders")
    return floor.stats()


def within_order(overall: ForcedStats, floor: ForcedStats | None) -> bool | None:
    """Whether the A-vs-B KL mean is at most the scoring-order floor's: what scoring the
    same tokens twice moves is not called drift (None: no such floor)."""
    if floor is None or not floor.positions or floor.kl is None or overall.kl is None:
        return None
    return overall.kl.mean <= floor.kl.mean


def within_floor(kl: list[float], floors: dict[str, ForcedStats]) -> WithinFloor | None:
    """How much of the A-vs-B KL (its per-position values) lies inside the largest of the
    floors measured (FLOOR_NAMES; None: nothing scored, or no floor measured)."""
    measured = [(stats.kl.mean, stats.kl.p99, name) for name, stats in floors.items()
                if stats.positions and stats.kl is not None]
    if not kl or not measured:
        return None
    # ties go to the floor named first (FLOOR_NAMES' order)
    floor_mean, floor_p99, name = max(measured, key=lambda found: found[:2])
    mean = float(np.mean(kl))
    share = min(1.0, floor_mean / mean) if mean > 0 else 1.0
    within = float(np.mean(np.array(kl) <= floor_p99))
    return WithinFloor(floor=name, kl_mean=floor_mean, share=share, positions_within=within,
                       sentence=(
                           f"{_percent(share)} of the A-vs-B KL mean ({mean:.3g}) lies within "
                           f"the larger noise floor ({FLOOR_NAMES[name]}: KL mean "
                           f"{floor_mean:.3g}); {_percent(within)} of A-vs-B positions are at "
                           "most that floor's 99th percentile"))


def _percent(share: float) -> str:
    """A share as a percentage that does not round a small nonzero share to 0%."""
    if 0 < share < 0.01:
        return "<1%"
    return f"{100 * share:.0f}%"


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


def llama_cpp_sentence(stats: ForcedStats, top_k: int | None, quarter_k: int | None) -> str:
    """The figures as llama-perplexity --kl-divergence prints them, in one sentence
    ("" when nothing was scored)."""
    kl = stats.kl
    if not stats.positions or kl is None:
        return ""
    p90 = f", p90 {kl.p90:.3g}" if kl.p90 is not None else ""
    parts = [f"KL mean {kl.mean:.3g}, median {kl.median:.3g}{p90}, p99 {kl.p99:.3g}, "
             f"max {kl.max:.3g}"]
    if stats.same_top_p is not None:
        parts.append(f"same top p {100 * stats.same_top_p:.1f}%")
    if stats.rms_delta_p is not None:
        parts.append(f"RMS delta p {100 * stats.rms_delta_p:.2f}%")
    if stats.ppl_ratio is not None:
        exact = "" if stats.ppl_ratio_bound == "exact" else ", a lower bound"
        parts.append(f"PPL(B)/PPL(A) {stats.ppl_ratio:.4f}{exact}")
    sentence = "As llama-perplexity reports it: " + "; ".join(parts)
    if stats.kl_quarter_k is not None and top_k and quarter_k and quarter_k < top_k:
        sentence += (f". KL from the top-k is a lower bound: mean {kl.mean:.3g} at top-{top_k}, "
                     f"{stats.kl_quarter_k.mean:.3g} at top-{quarter_k}")
    return sentence
