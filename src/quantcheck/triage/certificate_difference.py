"""What differed between an answer and its baseline, in words and with its place:
the first token that differs; where the tokens agree, the first chosen logprob that
moved (both values as sent, in full), then the first alternatives that differ, then
the length; where either answer carries no logprobs, the first character of the text
that differs. A certificate's examples show it (an example of two equal texts once
showed nothing at all)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..store.records.certificate_records import Answer


@dataclass(frozen=True)
class Difference:
    """What differed between an answer and its baseline, and where."""

    said: str
    position: int | None = None
    baseline_token: str | None = None
    other_token: str | None = None
    baseline_logprob: float | None = None
    other_logprob: float | None = None


def difference(baseline: Answer, other: Answer) -> Difference:
    """The first thing that differs: a token, a chosen logprob where the tokens agree,
    the alternatives, the length; the text where either carries no logprobs."""
    if not baseline.tokens or not other.tokens:
        return _text_difference(baseline.text, other.text)
    for n, (a, b) in enumerate(zip(baseline.tokens, other.tokens, strict=False)):
        if a != b:
            return Difference(f"token {n}: {a!r} against {b!r}", n, a, b)
    shorter = min(len(baseline.tokens), len(other.tokens))
    if len(baseline.tokens) != len(other.tokens):
        longer, which = (other, "the other answer") if len(other.tokens) > shorter \
            else (baseline, "the baseline")
        return Difference(f"{which} goes on at token {shorter} with "
                          f"{longer.tokens[shorter]!r}", shorter)
    for n in range(shorter):
        held, moved = _logprob(baseline, n), _logprob(other, n)
        if held != moved:
            return Difference(f"logprob of token {n} {baseline.tokens[n]!r}: {held!r} against "
                              f"{moved!r}", n, baseline.tokens[n], other.tokens[n], held, moved)
    for n in range(shorter):
        if _at(baseline.top, n) != _at(other.top, n):
            return Difference(f"the alternatives at token {n} {baseline.tokens[n]!r}: "
                              f"{_alternatives(baseline.top, n)} against "
                              f"{_alternatives(other.top, n)}", n, baseline.tokens[n],
                              other.tokens[n])
    return Difference("nothing differs")


def _at(values: Sequence[object], n: int) -> object:
    return values[n] if n < len(values) else None


def _logprob(answer: Answer, n: int) -> float | None:
    return answer.logprobs[n] if n < len(answer.logprobs) else None


def _alternatives(top: Sequence[Sequence[tuple[str, float]]], n: int) -> str:
    listed = top[n] if n < len(top) else []
    return ", ".join(f"{token!r} {logprob!r}" for token, logprob in listed[:5]) or "none"


def _text_difference(baseline: str, other: str) -> Difference:
    n = next((i for i, (a, b) in enumerate(zip(baseline, other, strict=False)) if a != b),
             min(len(baseline), len(other)))
    if baseline == other:
        return Difference("nothing differs (texts compared: no logprobs)")
    return Difference(f"text at character {n}: {baseline[n:n + 12]!r} against "
                      f"{other[n:n + 12]!r} (texts compared: no logprobs)", n)
