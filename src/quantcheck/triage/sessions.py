"""Tool sessions in the report: for each multi-turn tool-calling conversation a prompt
set replays turn by turn (store/inputs/sessions.py), the first turn whose calls break on each
side, and in words.

A turn breaks when its `tool_call` check fails: a call missing, another tool, an
argument of another value. Only compared turns count; a turn not compared (a request
without an answer) is neither held nor broken, and the sentence says how many.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ..store.records.report_records import ToolSession
from ..store.records.run_records import SessionTurn
from .expects import FAIL


class TurnResult(NamedTuple):
    """One compared turn: where it sits, its prompt, each side's tool_call status and
    B's reason when it failed."""

    turn: SessionTurn
    prompt_id: str
    a_status: str
    b_status: str
    b_reason: str


def tool_sessions(results: Iterable[TurnResult]) -> list[ToolSession]:
    """Each session seen, in the order of its first turn."""
    by_session: dict[str, list[TurnResult]] = {}
    for result in results:
        by_session.setdefault(result.turn.session, []).append(result)
    return [_session(name, sorted(turns, key=lambda r: r.turn.turn))
            for name, turns in by_session.items()]


def _session(name: str, turns: list[TurnResult]) -> ToolSession:
    total = max(result.turn.turns for result in turns)
    a_break = next((r for r in turns if r.a_status == FAIL), None)
    b_break = next((r for r in turns if r.b_status == FAIL), None)
    found = ToolSession(session=name, turns=total, compared=len(turns),
                        a_first_break=a_break.turn.turn if a_break else None,
                        b_first_break=b_break.turn.turn if b_break else None,
                        b_break_prompt=b_break.prompt_id if b_break else None,
                        b_break_reason=b_break.b_reason if b_break else "", sentence="")
    found.sentence = session_sentence(found)
    return found


def session_sentence(session: ToolSession) -> str:
    """"tool session trip (6 turns): B's calls break first at turn 4 (trip/turn-4:
    ...); A's hold through turn 6"."""
    head = f"tool session {session.session} ({session.turns} turns"
    missing = session.turns - session.compared
    head += f", {missing} not compared)" if missing else ")"
    a_break, b_break = session.a_first_break, session.b_first_break
    a_part = (f"A's break first at turn {a_break}" if a_break is not None
              else f"A's hold through turn {session.turns}")
    if b_break is None:
        both = "both sides' calls hold" if a_break is None else "B's calls hold"
        return f"{head}: {both} through turn {session.turns}" + (
            f"; {a_part}" if a_break is not None else "")
    why = f": {session.b_break_reason}" if session.b_break_reason else ""
    return (f"{head}: B's calls break first at turn {b_break} ({session.b_break_prompt}{why}); "
            f"{a_part}")
