"""A tool session in a prompt set: one conversation, one prompt per turn that asks for
tool calls, each holding the turns before it (calls and results replayed) and checking
its own calls; every malformed session is one error naming file, line, prompt and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.errors import PromptFileError, RunFormatError
from quantcheck.store.folders.run_dir import PromptLines
from quantcheck.store.inputs.prompt_sets import load_prompts
from quantcheck.store.records.run_records import Prompt, SessionTurn

from .conftest import WritePrompts

TOOLS = """
defaults:
  api: chat
  tools:
  - {type: function, function: {name: get_weather, parameters: {type: object,
     properties: {city: {type: string}}, required: [city]}}}
  - {type: function, function: {name: search_flights, parameters: {type: object,
     properties: {origin: {type: string}, destination: {type: string}}}}}
"""
SESSION = TOOLS + """
prompts:
  - id: trip
    category: session
    tags: [travel]
    max_tokens: 64
    session:
      result_tokens: RESULT_TOKENS
      steps:
        - system: You are a travel assistant.
        - user: Find a flight from LHR to OSL.
        - calls: [{name: search_flights, arguments: {origin: LHR, destination: OSL}}]
          results: ["SK806 at 09:40."]
        - assistant: I found SK806 at 09:40.
        - user: Weather in Oslo and in Bergen?
        - calls:
          - {name: get_weather, arguments: {city: Oslo}}
          - {name: get_weather, arguments: {city: Bergen},
             arguments_schema: {type: object, required: [city]}}
          results: ["Oslo: 14 C.", "Bergen: 11 C."]
        - user: And in Paris?
        - calls: [{name: get_weather, arguments: {city: Paris}}]
"""


def test_each_call_turn_is_a_prompt_holding_the_turns_before_it(
        write_prompts: WritePrompts) -> None:
    path = write_prompts(SESSION.replace("RESULT_TOKENS", "0"))
    turns = load_prompts([path])
    assert [p.id for p in turns] == ["trip/turn-1", "trip/turn-2", "trip/turn-3"]
    assert [p.session for p in turns] == [SessionTurn("trip", n, 3) for n in (1, 2, 3)]
    assert all(p.category == "session" and p.tags == ["travel"] for p in turns)
    assert all(p.request["max_tokens"] == 64 and len(p.request["tools"]) == 2 for p in turns)
    line = path.read_text().splitlines().index("  - id: trip") + 1
    assert turns[0].source == turns[2].source == f"{path}:{line}"
    first, _, last = (p.request["messages"] for p in turns)
    assert [m["role"] for m in first] == ["system", "user"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant",
                                         "user", "assistant", "tool", "tool", "user"]
    calls = last[6]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_2_1", "call_2_2"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"city": "Bergen"}
    assert [m["content"] for m in last if m["role"] == "tool"] == [
        "SK806 at 09:40.", "Oslo: 14 C.", "Bergen: 11 C."]
    assert last[7]["tool_call_id"] == "call_2_1" and last[2]["content"] is None
    expected = [p.expect.to_json() for p in turns if p.expect]
    assert expected[1]["tool_call"][1] == {"name": "get_weather", "arguments": {
        "city": "Bergen"}, "arguments_schema": {"type": "object", "required": ["city"]}}
    assert expected[2] == {"tool_call": [{"name": "get_weather",
                                          "arguments": {"city": "Paris"}}]}


def test_results_padded_grow_the_context_turn_by_turn(write_prompts: WritePrompts) -> None:
    """With result_tokens 500, each result is followed by about 500 tokens of records:
    each turn's prompt is longer than the last by about 500 tokens a call."""
    turns = load_prompts([write_prompts(SESSION.replace("RESULT_TOKENS", "500"))])
    words = [sum(len(str(m["content"] or "").split()) for m in p.request["messages"])
             for p in turns]
    assert 300 < words[1] - words[0] < 500  # one call: 500 tokens is about 385 words
    assert 2 * 300 < words[2] - words[1] < 2 * 500  # two calls
    tool = [m for m in turns[1].request["messages"] if m["role"] == "tool"][0]
    assert tool["content"].startswith("SK806 at 09:40.")


def test_a_session_turn_reads_back_from_a_run(tmp_path: Path, write_prompts: WritePrompts
                                              ) -> None:
    turns = load_prompts([write_prompts(SESSION.replace("RESULT_TOKENS", "0"))])
    lines = tmp_path / "prompts.jsonl"
    lines.write_text("".join(json.dumps(p.to_json()) + "\n" for p in turns))
    read = PromptLines(lines)
    assert read["trip/turn-2"].session == SessionTurn("trip", 2, 3)
    plain = Prompt.from_json({**turns[0].to_json(), "id": "plain"} | {"session": None})
    assert plain.session is None and "session" not in plain.to_json()


@pytest.mark.parametrize("session", [{"session": "trip"}, {"session": "t", "turn": 4,
                                                           "turns": 3},
                                     {"session": "t", "turn": "1", "turns": 3}, [1]])
def test_a_malformed_session_in_a_run_is_refused_naming_the_line(tmp_path: Path,
                                                                  session: object) -> None:
    line = {"id": "x", "category": "", "api": "chat", "hash": "h", "request": {},
            "session": session}
    (tmp_path / "prompts.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(RunFormatError, match="prompts.jsonl:1: malformed prompt"):
        PromptLines(tmp_path / "prompts.jsonl")


BROKEN = {
    "no-steps": ("session: {result_tokens: 5}", "field 'session': must be {steps"),
    "no-calls": ("session: {steps: [{user: hi}]}", "has no `calls` step"),
    "two-kinds": ("session: {steps: [{user: hi, system: x}, {calls: [{name: f, arguments: "
                  "{}}]}]}", "step 1: one of system, user, assistant or calls"),
    "text-not-text": ("session: {steps: [{user: [1]}, {calls: [{name: f, arguments: {}}]}]}",
                      "step 1: user must be text"),
    "no-arguments": ("session: {steps: [{calls: [{name: f}]}]}",
                     "step 1: every call names its tool and its arguments"),
    "no-call": ("session: {steps: [{calls: [{name: null}]}]}",
                "step 1: every call names its tool and its arguments"),
    "no-results": ("session: {steps: [{calls: [{name: f, arguments: {}}]}, {user: hi}]}",
                   "step 1: `results` must give one text for each of its 1 calls"),
    "results-short": ("session: {steps: [{calls: [{name: f, arguments: {}}, {name: g, "
                      "arguments: {}}], results: [a]}, {user: hi}]}",
                      "one text for each of its 2 calls"),
    "unknown-step-key": ("session: {steps: [{calls: [{name: f, arguments: {}}], result: [a]}]}",
                         "field 'session.steps.result': unknown field"),
    "unknown-session-key": ("session: {steps: [{calls: [{name: f, arguments: {}}]}], turns: 3}",
                            "field 'session.turns': unknown field"),
    "with-messages": ("messages: [{role: user, content: hi}]\n    session: {steps: []}",
                      "field 'messages': unknown field"),
    "padding": ("session: {steps: [{calls: [{name: f, arguments: {}}]}], result_tokens: -1}",
                "result_tokens must be 0 to 1,000,000"),
    "call-shape": ("session: {steps: [{calls: 3}]}", "field 'session.steps.calls': must be a "
                   "mapping {name, arguments_schema, arguments}"),
    "call-key": ("session: {steps: [{calls: [{name: f, arguments: {}, args: {}}]}]}",
                 "field 'session.steps.calls.args': unknown field"),
}


@pytest.mark.parametrize("entry, message", BROKEN.values(), ids=BROKEN.keys())
def test_a_malformed_session_is_one_error_naming_where(write_prompts: WritePrompts,
                                                       entry: str, message: str) -> None:
    path = write_prompts(TOOLS + f"prompts:\n  - id: s\n    {entry}\n")
    with pytest.raises(PromptFileError) as error:
        load_prompts([path])
    assert str(error.value).startswith(f"{path}:") and "prompt s:" in str(error.value)
    assert message in str(error.value)


STEP = st.one_of(
    st.fixed_dictionaries({"user": st.text(max_size=5) | st.integers()}),
    st.fixed_dictionaries({"calls": st.lists(st.fixed_dictionaries(
        {"name": st.sampled_from(["get_weather", "", None]),
         "arguments": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)}),
        max_size=2) | st.none() | st.text(max_size=3)},
        optional={"results": st.lists(st.text(max_size=5), max_size=3) | st.integers()}),
    st.dictionaries(st.sampled_from(["user", "system", "assistant", "calls", "results", "x"]),
                    st.text(max_size=3), max_size=3))


@settings(deadline=None, max_examples=60)
@given(st.lists(STEP, max_size=6), st.none() | st.integers(-2, 50) | st.text(max_size=3))
def test_any_session_loads_or_is_one_prompt_file_error(steps: list[object],
                                                       padding: object) -> None:
    import tempfile

    session: dict[str, object] = {"steps": steps}
    if padding is not None:
        session["result_tokens"] = padding
    document = {"prompts": [{"id": "s", "session": session}]}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "set.yaml"
        path.write_text(json.dumps(document))
        try:
            turns = load_prompts([path])
        except PromptFileError:
            return
    assert turns and all(p.session is not None and p.expect is not None for p in turns)
