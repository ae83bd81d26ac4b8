"""The context ladder's figures, offline: each probe's verdicts and KL, each rung's
recall, floor and departures, and the onset.

A probe's verdict is its expect on one answer (triage/expects.py: the code held, or
"none" said). A's floor at a rung is the number of its probes whose A repeats disagree
on the verdict; a probe departs when A's repeats all agree and B's first answer gets
the other verdict. A rung departs when more of its probes depart than A's floor holds;
the onset is the shortest rung that departs ("no departure up to N tokens" when none
does). KL is B's teacher-forced KL(A || B) over A's first answer (forced.jsonl's
per-position values), and over the positions where that answer spells the needle's
code; A's own floor is the same figure for A's repeats against A's first answer
(triage/forced_figures.py).
"""

from __future__ import annotations

import math

import numpy as np

from ..store.records.ladder_records import NEEDLE, LadderProbe, ProbeResult, Rung
from ..store.records.pair_records import PairRow
from ..store.records.report_records import ForcedLine
from ..store.records.run_records import Completion, Expect
from .expects import check_answer, overall
from .forced_figures import noise_floor

ANSWER_SHOWN = 200  # characters of an answer kept in ladder.json


def passes(expect: Expect, record: Completion) -> bool | None:
    """Whether an answer passes the probe's expect (None: no answer)."""
    if not record.ok:
        return None
    return overall(check_answer(expect, record.text or "")) == "pass"


def needle_positions(token_texts: list[str], code: str) -> list[int]:
    """The positions of the tokens that spell the first `code` in the joined text."""
    joined = "".join(token_texts)
    start = joined.find(code)
    if not code or start < 0:
        return []
    end, positions, offset = start + len(code), [], 0
    for position, text in enumerate(token_texts):
        if offset < end and offset + len(text) > start:
            positions.append(position)
        offset += len(text)
    return positions


def probe_result(probe: LadderProbe, report: str, expect: Expect, a: list[Completion],
                 b: list[Completion], pair: PairRow | None, forced: ForcedLine | None
                 ) -> ProbeResult:
    """One probe's verdicts, departure and KL from its runs, pair and forced line."""
    a = sorted(a, key=lambda r: r.repeat)
    b = sorted(b, key=lambda r: r.repeat)
    a_verdicts = [v for v in (passes(expect, r) for r in a) if v is not None]
    result = ProbeResult(probe=probe, report=report, a_repeats=len(a_verdicts),
                         a_repeats_passed=sum(a_verdicts))
    if a:
        result.a_passed, result.a_answer = passes(expect, a[0]), _shown(a[0])
    if b:
        result.b_passed, result.b_answer = passes(expect, b[0]), _shown(b[0])
    if len(a_verdicts) > 1:
        result.a_stable = len(set(a_verdicts)) == 1
    result.departs = (result.a_passed is not None and result.b_passed is not None
                      and result.a_stable is not False and result.a_passed != result.b_passed)
    result.flip = (pair.flip or "") if pair is not None else ""
    _with_kl(result, a, forced)
    return result


def _shown(record: Completion) -> str:
    text = record.text if record.ok else f"(failed: {record.error})"
    return (text or "")[:ANSWER_SHOWN]


def _with_kl(result: ProbeResult, a: list[Completion], forced: ForcedLine | None) -> None:
    """B's KL over A's first answer and over its needle's span; A's floor."""
    with_tokens = [r for r in a if r.ok and r.tokens]
    if len(with_tokens) > 1:
        floor = noise_floor(with_tokens)
        result.a_floor_kl = floor.kl.mean if floor.positions and floor.kl else None
    if forced is None or forced.per_position is None or not forced.per_position.kl:
        result.note = (forced.skipped or "") if forced is not None else "not scored"
        return
    kl = forced.per_position.kl
    result.kl_mean, result.positions = float(np.mean(kl)), len(kl)
    first = with_tokens[0] if with_tokens and with_tokens[0].repeat == 0 else None
    code = result.probe.code
    if code and first is not None and first.tokens is not None:
        span = [n for n in needle_positions(first.tokens.text, code) if n < len(kl)]
        if span:
            result.kl_needle = float(np.mean([kl[n] for n in span]))


def rung_figures(tokens: int, probes: list[ProbeResult], tokens_sent: int = 0,
                 seconds: float | None = None) -> Rung:
    """A rung's recall, floor, departures, flips and KL over its probes."""
    checked = [p for p in probes if p.a_passed is not None and p.b_passed is not None]
    measured = [p.probe.prompt_tokens for p in probes if p.probe.prompt_tokens]
    rung = Rung(tokens=tokens, prompt_tokens=max(measured) if measured else None,
                probes=probes, checked=len(checked), tokens_sent=tokens_sent,
                seconds=seconds)
    if checked:
        rung.a_recall = sum(bool(p.a_passed) for p in checked) / len(checked)
        rung.b_recall = sum(bool(p.b_passed) for p in checked) / len(checked)
    rung.a_floor = sum(1 for p in probes if p.a_stable is False)
    rung.departures = sum(1 for p in probes if p.departs)
    rung.departs = rung.departures > rung.a_floor
    rung.flips = sum(1 for p in probes if p.flip)
    rung.kl_mean = _mean([p.kl_mean for p in probes])
    rung.kl_needle = _mean([p.kl_needle for p in probes])
    rung.a_floor_kl = _mean([p.a_floor_kl for p in probes])
    return rung


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(known)) if known else None


def onset(rungs: list[Rung]) -> int | None:
    """The shortest rung that departs (None: none does)."""
    return next((rung.tokens for rung in sorted(rungs, key=lambda r: r.tokens)
                 if rung.departs), None)


def measured_reach(rungs: list[Rung]) -> int | None:
    """The longest rung below which (and at which) every probe was checked on both
    sides: the onset rule says nothing about the lengths beyond it."""
    longest = None
    for rung in sorted(rungs, key=lambda r: r.tokens):
        if not rung.probes or rung.checked < len(rung.probes):
            break
        longest = rung.tokens
    return longest


def onset_sentence(rungs: list[Rung], planned: list[int]) -> str:
    """The onset in words, or how far no departure was found and what was not tested."""
    found = onset(rungs)
    if found is not None:
        rung = next(r for r in rungs if r.tokens == found)
        lost = [p for p in rung.probes if p.departs]
        what = ", ".join(_departure(p) for p in lost[:3])
        probes = "probe" if len(rung.probes) == 1 else "probes"
        return (f"B departs from A from {found:,} tokens: at {rung.departures} of its "
                f"{len(rung.probes)} {probes} B's verdict is not that of A's agreeing "
                f"repeats ({what}), more than A's floor of {rung.a_floor}")
    reach = measured_reach(rungs)
    if reach is None:
        return "no rung was measured on both sides: the onset is not known"
    beyond = [n for n in planned if n > reach]
    untested = f"; not tested beyond it: {', '.join(f'{n:,}' for n in beyond)}" \
        if beyond else ""
    return f"no departure up to {reach:,} tokens{untested}"


def _departure(probe: ProbeResult) -> str:
    where = (f"the needle at depth {probe.probe.depth:g}" if probe.probe.kind == NEEDLE
             else "the absent needle")
    verb = "lost" if probe.a_passed else "gained"
    return f"{where} {verb}: B answered {probe.b_answer.strip()[:40]!r}"


def floor_sentence(rungs: list[Rung], repeats: int) -> str:
    """A's own floor over the ladder, in words."""
    if repeats < 2:
        return ("A's floor is not measured (one repeat of A): every probe where B's "
                "verdict differs from A's counts as a departure")
    unstable = [r for r in rungs if r.a_floor]
    kl = [r.a_floor_kl for r in rungs if r.a_floor_kl is not None]
    kl_part = (f"; A's KL against its own repeats is at most {max(kl):.3g}" if kl
               else "")
    if not unstable:
        return (f"A's floor: its {repeats} repeats agree on every probe's verdict at every "
                f"rung{kl_part}")
    where = ", ".join(f"{r.a_floor} at {r.tokens:,}" for r in unstable)
    return f"A's floor: its {repeats} repeats disagree on probes ({where}){kl_part}"


def estimate_seconds(points: list[tuple[int, float]], tokens: int) -> float | None:
    """Seconds to take in a prompt of `tokens`, from measured (tokens, seconds) points:
    in proportion to the longest one measured, or, from two lengths, as the power of
    the length the last two show (between 1 and 2: attention makes a long prompt cost
    more than its share); None without a point."""
    usable = sorted((t, s) for t, s in points if t > 0 and s > 0)
    if not usable:
        return None
    last_tokens, last_seconds = usable[-1]
    shorter = [(t, s) for t, s in usable if t < last_tokens]
    power = 1.0
    if shorter:
        before_tokens, before_seconds = shorter[-1]
        power = math.log(last_seconds / before_seconds) / math.log(last_tokens / before_tokens)
        power = min(max(power, 1.0), 2.0)
    return float(last_seconds * (tokens / last_tokens) ** power)
