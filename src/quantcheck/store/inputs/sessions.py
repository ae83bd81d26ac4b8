"""Tool sessions: one multi-turn tool-calling conversation in a prompt set, replayed to
a growing context, each call of it checked.

    - id: trip
      category: session
      session:
        result_tokens: 1500     # optional: each tool result padded to about this many tokens
        steps:
          - system: You are a travel assistant. Use the tools.
          - user: Find a flight from London Heathrow to Oslo on 3 June 2025.
          - calls: [{name: search_flights, arguments: {origin: LHR, destination: OSL,
                                                       date: "2025-06-03"}}]
            results: ["3 flights: SK806 at 09:40, BA762 at 12:15, DY1303 at 17:05."]
          - user: What will the weather be there?
          - calls: [{name: get_weather, arguments: {city: Oslo}}]

A step is one of `system`, `user` or `assistant` (a text reply, replayed as it is) or
`calls`: the tool calls the model makes at that point, each a tool's `name` and its
`arguments` (every value is checked, and replayed in later turns), with an optional
`arguments_schema`; and `results`, each call's answer in order (needed wherever a step
follows). Each `calls` step becomes one prompt, `trip/turn-1`, `trip/turn-2`, ...: the
conversation before it (a `calls` step as the assistant's `tool_calls`, each result as
the `tool` message answering its call, ids `call_TURN_N`), and an expect that its calls
are made (`tool_call`, in any order). With `result_tokens`, each result is followed by
about that many tokens of generated records (haystack.py), so the context grows by that
much a call: the last turns are asked at the longest context. The session's other keys
(`category`, `tags`, `tools`, `tool_choice`, `max_tokens`, `stop`, `extra`, ...) apply to
every turn, and so do the file's `defaults` (a default `expect` is merged into each
turn's, a default `haystack` is not applied: a session has no `{haystack}`).
triage/sessions.py names the first turn whose calls break.
"""

from __future__ import annotations

import json

from ..records.run_records import SessionTurn
from .entry_fields import Fields, Where, mapping, plain, reject_unknown
from .expect_entries import tool_call_expect
from .haystack import haystack
from .prompt_entries import PROMPT_KEYS

SESSION_KEYS = {"steps", "result_tokens"}
STEP_TEXTS = ("system", "user", "assistant")
STEP_KEYS = {*STEP_TEXTS, "calls", "results"}
# A session entry's own keys: a prompt's, less what its steps make
ENTRY_KEYS = (PROMPT_KEYS - {"messages", "prompt", "expect", "haystack"}) | {"session"}


def expand_session(where: Where, entry: Fields) -> list[tuple[Fields, SessionTurn]]:
    """The prompt entries a session entry makes, one per `calls` step, each with its
    place in the session."""
    session_id = entry.get("id")
    if not isinstance(session_id, str | int) or isinstance(session_id, bool) or not str(
            session_id):
        raise where.error("id", "required, a non-empty string")
    where.prompt = str(session_id)
    reject_unknown(where, entry, ENTRY_KEYS)
    spec = mapping(entry.get("session"))
    steps = spec.get("steps") if spec is not None else None
    if spec is None or not isinstance(steps, list) or not steps:
        raise where.error("session", "must be {steps: [...], result_tokens: N}: the "
                          "conversation's steps (system, user, assistant, calls)")
    reject_unknown(where.inside(spec, "session."), spec, SESSION_KEYS)
    padding = _result_tokens(where, spec.get("result_tokens"))
    turns = sum(1 for step in steps if "calls" in (mapping(step) or {}))
    if not turns:
        raise where.error("session", "has no `calls` step: a session asks for tool calls")
    shared = {key: value for key, value in entry.items() if key not in ("id", "session")}
    messages: list[Fields] = []
    made: list[tuple[Fields, SessionTurn]] = []
    for number, step in enumerate(steps, 1):
        fields = _step(where, step, number)
        if "calls" not in fields:
            kind = next(k for k in STEP_TEXTS if k in fields)
            messages.append({"role": kind, "content": fields[kind]})
            continue
        turn = len(made) + 1
        calls = tool_call_expect(where.inside(step, "session.steps."), fields["calls"],
                                 "calls")
        if calls is None or any(call.name is None or call.arguments is None for call in calls):
            raise where.error("session", f"step {number}: every call names its tool and its "
                              "arguments (they are replayed in the turns after it)")
        made.append(({**shared, "id": f"{session_id}/turn-{turn}", "messages": list(messages),
                      "expect": {"tool_call": plain(fields["calls"])}, "haystack": None},
                     SessionTurn(str(session_id), turn, turns)))
        messages += _replayed(where, fields, number, turn, padding, last=number == len(steps))
    return made


def _step(where: Where, step: object, number: int) -> Fields:
    fields = mapping(step)
    kinds = [key for key in (*STEP_TEXTS, "calls") if fields is not None and key in fields]
    if fields is None or len(kinds) != 1:
        raise where.error("session", f"step {number}: one of system, user, assistant or "
                          "calls (with its results)")
    reject_unknown(where.inside(step, "session.steps."), fields,
                   {"calls", "results"} if kinds == ["calls"] else {kinds[0]})
    if kinds[0] != "calls" and not isinstance(fields[kinds[0]], str):
        raise where.error("session", f"step {number}: {kinds[0]} must be text")
    return fields


def _replayed(where: Where, fields: Fields, number: int, turn: int, padding: int,
              last: bool) -> list[Fields]:
    """A `calls` step as the turns after it see it: the assistant's tool calls, then a
    `tool` message with each call's result."""
    calls = fields["calls"] if isinstance(fields["calls"], list) else [fields["calls"]]
    results = fields.get("results")
    if results is None and last:
        return []
    if not isinstance(results, list) or len(results) != len(calls) or not all(
            isinstance(result, str) for result in results):
        raise where.error("session", f"step {number}: `results` must give one text for each "
                          f"of its {len(calls)} calls (the tool's answers the next turns see)")
    ids = [f"call_{turn}_{n}" for n in range(1, len(calls) + 1)]
    assistant: Fields = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {
            "name": call["name"], "arguments": json.dumps(plain(call["arguments"]))}}
        for call_id, call in zip(ids, calls, strict=True)]}
    answers: list[Fields] = [
        {"role": "tool", "tool_call_id": call_id,
         "content": haystack(padding, 0.0, result, seed=turn) if padding else result}
        for call_id, result in zip(ids, results, strict=True)]
    return [assistant, *answers]


def _result_tokens(where: Where, value: object) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 1_000_000:
        raise where.error("session", f"result_tokens must be 0 to 1,000,000, not {value!r}")
    return value
