"""The context ladder's gate: it fails when B departs from A at a length that is
served (`--served-tokens`; every rung of the ladder when it is not given), and never
rests on what was not checked. An onset lies somewhere between the last rung without a
departure and the rung that departs, so the gate passes only when that whole interval
lies beyond the lengths served; and a ladder that did not measure every rung up to the
lengths served does not pass."""

from __future__ import annotations

from ..store.records.ladder_records import LadderGate, Rung
from ..triage.ladder import measured_reach, onset


def decide_ladder(rungs: list[Rung], served_tokens: int | None) -> LadderGate:
    """Pass or fail, with the reason in a sentence."""
    found, reach = onset(rungs), measured_reach(rungs)
    served = ("every length on the ladder" if served_tokens is None
              else f"the {served_tokens:,} tokens served")
    if found is not None:
        below = max((r.tokens for r in rungs if r.tokens < found), default=0)
        if served_tokens is None or found <= served_tokens:
            return _fail(served_tokens, f"B departs from A at {found:,} tokens, within "
                                        f"{served}")
        if below < served_tokens:
            return _fail(served_tokens, f"B departs from A somewhere between {below:,} and "
                                        f"{found:,} tokens, which reaches into {served}: a "
                                        f"rung at {served_tokens:,} tokens would tell")
        return LadderGate(passed=True, served_tokens=served_tokens,
                          reason=f"B departs from A from {found:,} tokens, beyond {served}")
    top = max((r.tokens for r in rungs), default=0)
    needed = served_tokens if served_tokens is not None else top
    if reach is None:
        return _fail(served_tokens, "no rung was measured on both sides: nothing to pass on")
    if reach < needed:
        beyond = ("the rungs beyond it" if served_tokens is None
                  else f"the lengths up to the {served_tokens:,} tokens served")
        return _fail(served_tokens, f"no departure up to {reach:,} tokens, but {beyond} "
                                    "were not all measured on both sides")
    return LadderGate(passed=True, served_tokens=served_tokens,
                      reason=f"no departure up to {reach:,} tokens")


def _fail(served_tokens: int | None, reason: str) -> LadderGate:
    return LadderGate(passed=False, served_tokens=served_tokens, reason=reason)
