"""A tool session in the report: the first turn whose calls break on B (and on A),
named in summary.json, the terminal and the sheet; quiet on A against itself."""

from __future__ import annotations

import json
from pathlib import Path

from quantcheck import CollectSettings, collect, compare_runs
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.store.records.run_records import SessionTurn
from quantcheck.triage.sessions import TurnResult, tool_sessions

from .conftest import Serve, WritePrompts, invoke


def turn(n: int, a: str, b: str, reason: str = "", session: str = "trip",
         turns: int = 4) -> TurnResult:
    return TurnResult(SessionTurn(session, n, turns), f"{session}/turn-{n}", a, b, reason)


def test_the_first_turn_b_breaks_is_named_with_its_reason() -> None:
    found, = tool_sessions([turn(3, "pass", "fail", "wrong city"), turn(1, "pass", "pass"),
                            turn(2, "pass", "pass"), turn(4, "pass", "fail", "no call")])
    assert (found.turns, found.compared, found.b_first_break, found.a_first_break) == \
        (4, 4, 3, None)
    assert found.b_break_prompt == "trip/turn-3" and found.b_break_reason == "wrong city"
    assert found.sentence == ("tool session trip (4 turns): B's calls break first at turn 3 "
                              "(trip/turn-3: wrong city); A's hold through turn 4")


def test_both_sides_holding_a_side_breaking_first_and_turns_not_compared() -> None:
    held, broke_a, gaps = tool_sessions([
        turn(1, "pass", "pass", session="held", turns=2), turn(2, "pass", "pass", session="held",
                                                               turns=2),
        turn(1, "pass", "pass", session="a"), turn(2, "fail", "pass", session="a"),
        turn(2, "pass", "fail", "x", session="gaps", turns=5)])
    assert held.sentence == "tool session held (2 turns): both sides' calls hold through turn 2"
    assert broke_a.sentence == ("tool session a (4 turns, 2 not compared): B's calls hold "
                                "through turn 4; A's break first at turn 2")
    assert gaps.b_first_break == 2 and gaps.compared == 1
    assert tool_sessions([]) == []


SESSION = """
defaults:
  api: chat
  tools:
  - {type: function, function: {name: get_weather, parameters: {type: object,
     properties: {city: {type: string}}, required: [city]}}}
  - {type: function, function: {name: search_flights, parameters: {type: object,
     properties: {origin: {type: string}, destination: {type: string}}}}}
prompts:
  - id: trip
    category: session
    session:
      result_tokens: 300
      steps:
        - user: Find a flight from LHR to OSL.
        - calls: [{name: search_flights, arguments: {origin: LHR, destination: OSL}}]
          results: ["SK806 at 09:40."]
        - user: Weather in Oslo?
        - calls: [{name: get_weather, arguments: {city: Oslo}}]
          results: ["Oslo: 14 C."]
        - user: And in Paris?
        - calls: [{name: get_weather, arguments: {city: Paris}}]
  - {id: plain, prompt: "Q: capital of France"}
"""
# The latest user message picks the calls: the scripted model takes the first key found
CALLS = {"And in Paris": [("get_weather", '{"city": "Paris"}')],
         "Weather in Oslo": [("get_weather", '{"city": "Oslo"}')],
         "Find a flight": [("search_flights", '{"origin": "LHR", "destination": "OSL"}')]}
BROKEN = {**CALLS, "Weather in Oslo": [("get_weather", '{"city": "Bergen"}')]}


def test_b_breaking_at_turn_two_is_named_and_a_against_itself_holds(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """B calls the weather tool for Bergen at turn 2 (and then the right call at turn
    3): summary.json, the terminal and the sheet name turn 2; the gate fails on its
    flip; A against a second collection of itself holds through turn 3."""
    prompts = write_prompts(SESSION)
    runs = {}
    for name, calls in (("a", CALLS), ("again", CALLS), ("b", BROKEN)):
        runs[name] = tmp_path / name
        collect([prompts], runs[name], CollectSettings(
            endpoint=serve(ScriptedModel(calls=calls)).url, label=name, top_logprobs=0,
            preflight=False))
    out = tmp_path / "report"
    printed = invoke("compare", runs["a"], runs["b"], "--out", out)
    assert printed.exit_code == 1, printed.output  # a factual flip
    sentence = ("Tool session trip (3 turns): B's calls break first at turn 2 (trip/turn-2: "
                "get_weather argument city is \"Bergen\", expected \"Oslo\"); A's hold through "
                "turn 3.")
    assert sentence in printed.output
    session, = json.loads((out / "summary.json").read_text())["sessions"]
    assert session["b_first_break"] == 2 and session["a_first_break"] is None
    assert 'data-session="trip" class="differs"' in (out / "index.html").read_text()
    same = compare_runs(runs["a"], runs["again"], tmp_path / "self")
    assert [s.sentence for s in same.sessions] == [
        "tool session trip (3 turns): both sides' calls hold through turn 3"]
