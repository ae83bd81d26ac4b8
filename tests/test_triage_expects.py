"""Checks beyond text: JSON, tool calls, code and multiple choice, end to end. Loopback
servers plant each kind of flip; each must be counted as a factual flip in pairs.csv,
summary.json, the sheet and the gate."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from quantcheck import CollectSettings, Expect, collect, load_run
from quantcheck.lab.scripted import DIALECTS, ScriptedModel
from quantcheck.store.engines import ENGINES
from quantcheck.store.records.run_records import ToolCall, ToolCallExpect, VerdictExpect
from quantcheck.triage.expects import (
    Graded,
    check_answer,
    choice_of,
    code_of,
    overall,
    tool_call_failure,
    unfenced,
)
from quantcheck.triage.searches import PATTERN_SECONDS, begin
from quantcheck.triage.signals import tool_call_change

from .conftest import Serve, WritePrompts, gate_rules, invoke

TOOLS = """[{type: function, function: {name: get_weather, parameters: {type: object,
           properties: {city: {type: string}}, required: [city]}}},
           {type: function, function: {name: get_time, parameters: {type: object,
           properties: {city: {type: string}}}}}]"""
SCHEMA = "{type: object, required: [city, population], properties: {population: {type: integer}}}"
SQUARE = '{code: {entry_point: square, tests: "assert square(3) == 9\\nassert square(-2) == 4"}}'
PROMPTS = f"""
prompts:
  - {{id: json-schema, prompt: "Q: json-schema", expect: {{json_schema: {SCHEMA}}}}}
  - {{id: json-any, prompt: "Q: json-any", expect: {{json: true}}}}
  - {{id: tool-right, messages: [{{role: user, content: "Q: weather in Paris"}}], tools: {TOOLS},
      expect: {{tool_call: {{name: get_weather, arguments: {{city: Paris}}}}}}}}
  - {{id: tool-argument, messages: [{{role: user, content: "Q: weather at home"}}],
      tools: {TOOLS}, expect: {{tool_call: {{name: get_weather, arguments: {{city: Paris}}}}}}}}
  - {{id: tool-none, messages: [{{role: user, content: "Q: say hi"}}], tools: {TOOLS},
      expect: {{tool_call: {{name: null}}}}}}
  - {{id: code-fails, prompt: "Q: code-fails", expect: {SQUARE}}}
  - {{id: code-hangs, prompt: "Q: code-hangs", expect: {SQUARE}}}
  - {{id: code-memory, prompt: "Q: code-memory", expect: {SQUARE}}}
  - {{id: choice, prompt: "Q: choice", expect: {{choice: B}}}}
  - {{id: steady, prompt: "Q: steady", expect: {{json_schema: {SCHEMA}}}}}
"""
GOOD_CODE = "```python\ndef square(x):\n    return x * x\n```"
A_TEXT = {
    "Q: json-schema": '{"city": "Paris", "population": 2100000}',
    "Q: json-any": '```json\n{"a": 1}\n```',
    "Q: say hi": " Hi there!",
    "Q: code-fails": GOOD_CODE,
    "Q: code-hangs": GOOD_CODE,
    "Q: code-memory": GOOD_CODE,
    "Q: choice": " The answer is B.",
    "Q: steady": '{"city": "Oslo", "population": 700000}',
}
B_TEXT = {
    **A_TEXT,
    "Q: json-schema": '{"city": "Paris", "population": "about two million"}',
    "Q: json-any": '{"a": 1,}',
    "Q: code-fails": "```python\ndef square(x):\n    return x + x\n```",
    "Q: code-hangs": "```python\ndef square(x):\n    while True:\n        pass\n```",
    "Q: code-memory": "```python\ndef square(x):\n    hoard = []\n    while True:\n"
                      "        hoard.append(' ' * 10**6)\n```",
    "Q: choice": " The answer is C.",
}
A_CALLS = {"weather in Paris": [("get_weather", '{"city": "Paris"}')],
           "weather at home": [("get_weather", '{"city": "Paris"}')]}
B_CALLS = {"weather in Paris": [("get_time", '{"city": "Paris"}')],
           "weather at home": [("get_weather", '{"city":  "Lyon"}')],
           "say hi": [("get_time", "{}")]}
FLIPS = {"json-schema": "json_schema", "json-any": "json", "tool-right": "tool_call",
         "tool-argument": "tool_call", "tool-none": "tool_call", "code-fails": "code",
         "code-hangs": "code", "code-memory": "code", "choice": "choice"}


@pytest.fixture
def planted(serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> Path:
    """`quantcheck run` on a reference and a candidate that flips every kind of check,
    code run with tight limits; the report directory."""
    a = serve(ScriptedModel(A_TEXT, calls=A_CALLS))
    b = serve(ScriptedModel(B_TEXT, calls=B_CALLS), "sglang")
    result = invoke("run", "--a", f"{a.url}/v1", "--b", f"{b.url}/v1",
                    "--prompts", write_prompts(PROMPTS), "--out", tmp_path / "report",
                    "--allow-code-exec", "--code-timeout", 2, "--code-memory-mb", 128,
                    "--no-preflight", "--top-logprobs", 2)
    assert result.exit_code == 1, result.output  # every planted flip fails the gate
    return tmp_path / "report"


def test_every_planted_flip_is_a_factual_flip_in_pairs_summary_and_gate(planted: Path) -> None:
    pairs = pd.read_csv(planted / "pairs.csv", keep_default_na=False).set_index("prompt_id")
    for prompt_id, check in FLIPS.items():
        row = pairs.loc[prompt_id]
        assert (row["a_expect"], row["b_expect"], row["flip"]) == ("pass", "fail", "regression")
        assert row["flipped_checks"] == check
        assert f"{check}=pass" in row["a_checks"] and f"{check}=fail" in row["b_checks"]
    assert pairs.loc["steady", "flip"] == "" and pairs.loc["steady", "identical"]
    # a call is content: an answer that only calls a tool is not "empty"
    assert (pairs.loc["tool-right", "b_text"], pairs.loc["tool-right", "b_degenerate"]) == ("", "")
    assert pairs.loc["tool-right", "tool_call_change"] == "different_tool"
    assert pairs.loc["tool-argument", "tool_call_change"] == "arguments_changed"
    assert pairs.loc["tool-none", "tool_call_change"] == "call_vs_no_call"
    assert json.loads(pairs.loc["tool-argument", "b_tool_calls"]) == [
        {"name": "get_weather", "arguments": '{"city":  "Lyon"}'}]
    reasons = pairs["b_expect_failures"]
    assert "$.population: 'about two million' is not of type 'integer' (type)" in \
        reasons["json-schema"]
    assert "called get_time, expected get_weather" in reasons["tool-right"]
    assert 'get_weather argument city is "Lyon", expected "Paris"' in reasons["tool-argument"]
    assert "called get_time, expected no call" in reasons["tool-none"]
    assert "AssertionError at `assert square(3) == 9`" in reasons["code-fails"]
    assert "limit (2 s) exceeded" in reasons["code-hangs"] or "timed out" in \
        reasons["code-hangs"]
    assert "memory limit (128 MB) exceeded" in reasons["code-memory"]
    assert "chose C, expected B" in reasons["choice"]

    summary = json.loads((planted / "summary.json").read_text())
    counts = summary["counts"]
    assert counts["flips"]["regression"] == len(FLIPS)
    by_check = {name: c["regressions"] for name, c in counts["checks"].items()}
    assert by_check == {"json": 1, "json_schema": 1, "tool_call": 3, "code": 3, "choice": 1}
    assert counts["tool_calls"] == {"different_tool": 1, "arguments_changed": 1,
                                    "call_vs_no_call": 1}
    assert summary["code_execution"]["allowed"] is True

    gate = invoke("gate", planted)
    assert gate.exit_code == 1
    rules = gate_rules(planted)
    assert rules["factual_flips"]["count"] == len(FLIPS)
    assert sorted(rules["factual_flips"]["prompts"]) == sorted(FLIPS)
    assert rules["skipped_checks"]["count"] == 0


def test_the_sheet_shows_checks_and_calls_side_by_side(planted: Path, browser: Any) -> None:
    page = browser.new_page()
    page.goto((planted / "index.html").as_uri())
    page.wait_for_selector("body[data-ready=true]")
    card = page.locator('article.pair[data-prompt="tool-argument"]')
    assert "expect regression: tool_call" in card.locator("header").inner_text()
    assert "tool call: arguments changed" in card.locator("header").inner_text()
    row = card.locator('table.call tr[data-argument="city"]')
    assert row.get_attribute("class") == "changed"
    assert row.locator("td").all_inner_texts() == ['"Paris"', '"Lyon"']
    flipped = card.locator('table.checks tr[data-check="tool_call"]')
    assert flipped.get_attribute("class") == "flipped"
    assert "pass" in flipped.locator("td").nth(0).inner_text()
    assert 'expected "Paris"' in flipped.locator("td").nth(1).inner_text()
    page.click("#summary > summary")  # the checks table is folded under "More"
    summary_row = page.locator('#checks-summary tr[data-check="code"]')
    assert summary_row.locator("td").all_inner_texts() == ["3", "3", "0", "3", "0", "0"]
    page.close()


def test_code_checks_without_permission_are_skipped_and_stop_the_gate(
        planted: Path, tmp_path: Path) -> None:
    report = tmp_path / "no-exec"
    result = invoke("compare", planted / "a", planted / "b", "--out", report)
    assert "3 checks skipped" in result.output and "--allow-code-exec" in result.output
    pairs = pd.read_csv(report / "pairs.csv", keep_default_na=False).set_index("prompt_id")
    assert pairs.loc["code-fails", "a_expect"] == "skipped"
    assert pairs.loc["code-fails", "flip"] == ""
    assert "code: code execution not allowed" in pairs.loc["code-fails", "a_expect_failures"]
    invoke("gate", report)
    rules = gate_rules(report)
    assert not rules["skipped_checks"]["passed"] and rules["skipped_checks"]["count"] == 3
    invoke("gate", report, "--max-skipped-checks", 3)
    rules = gate_rules(report)
    assert rules["skipped_checks"]["passed"]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("stream", [False, True])
def test_the_lab_speaks_tool_calls_in_every_dialect(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, dialect: str,
        stream: bool) -> None:
    calls = {"two cities": [("get_weather", '{"city": "Paris"}'),
                            ("get_weather", '{"city": "Rome"}')]}
    server = serve(ScriptedModel({"say hi": " Hi."}, calls=calls), dialect)
    prompts = write_prompts(f"""
        prompts:
          - {{id: two, messages: [{{role: user, content: two cities}}], tools: {TOOLS}}}
          - {{id: none, messages: [{{role: user, content: say hi}}], tools: {TOOLS}}}
        """)
    collect([prompts], tmp_path / "run", CollectSettings(
        endpoint=server.url, label=dialect, stream=stream, top_logprobs=2, preflight=False))
    records = {r.prompt_id: r for r in load_run(tmp_path / "run").completions()}
    two = records["two"]
    assert two.error is None and two.finish_reason == "tool_calls" and two.text == ""
    assert [(c.name, c.arguments, c.parsed_arguments) for c in two.tool_calls or []] == [
        ("get_weather", '{"city": "Paris"}', {"city": "Paris"}),
        ("get_weather", '{"city": "Rome"}', {"city": "Rome"})]
    if ENGINES[dialect].sends_logprobs("chat", stream):  # the calls' tokens are scored
        assert two.tokens is not None and len(two.tokens) == 6
    else:
        assert two.tokens is None  # MLX's streams carry no logprobs
    assert records["none"].tool_calls is None and records["none"].text == " Hi."
    assert server.requests[0]["tools"][0]["function"]["name"] == "get_weather"


# --- the rules, one by one ----------------------------------------------------------

def test_a_call_without_a_function_name_is_a_failed_record(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    body = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "x", "type": "function", "function": {"arguments": "{}"}}]}}]}
    server = serve(replay={"chat": json.dumps(body).encode()})
    prompts = write_prompts("prompts:\n  - {id: p, messages: [{role: user, content: hi}]}\n")
    collect([prompts], tmp_path / "run", CollectSettings(
        endpoint=server.url, label="x", stream=False, top_logprobs=0, preflight=False,
        retries=0))
    (record,) = list(load_run(tmp_path / "run").completions())
    assert record.error is not None and "tool call 0 names no function" in record.error


@pytest.mark.parametrize(("text", "letter"), [
    ("B", "B"), ("B) dolphin", "B"), ("(C) Einstein", "C"), ("**D**", "D"),
    ("The answer is A.", "A"), ("Answer: (B)", "B"), ("I think A, but the answer is C", "C"),
    ("Dolphins (B) are mammals.", "B"), ("A shark is a fish.", None),
    ("It could be (A) or (B).", None), ("answer: option D", "D"), ("no idea", None),
])
def test_the_choice_extraction_rule(text: str, letter: str | None) -> None:
    assert choice_of(text) == letter


def test_code_comes_from_the_block_that_defines_the_entry_point() -> None:
    text = "Example:\n```\nprint(1)\n```\nSolution:\n```python\ndef f(x):\n    return x\n```"
    assert code_of(text, "f") == "def f(x):\n    return x\n"
    assert code_of("def f(x):\n    return x", "f") == "def f(x):\n    return x"
    assert code_of("```python\ndef f(x):\n    return x", "f") == "def f(x):\n    return x"


def test_one_surrounding_fence_is_stripped_and_no_more() -> None:
    assert unfenced('```json\n{"a": 1}\n```') == '{"a": 1}'
    assert unfenced('  {"a": 1}  ') == '{"a": 1}'
    assert unfenced('Here:\n```json\n{"a": 1}\n```') == 'Here:\n```json\n{"a": 1}\n```'


def test_several_calls_match_in_any_order_unless_ordered() -> None:
    paris, rome = ToolCall("w", '{"city": "Paris"}'), ToolCall("w", '{"city": "Rome"}')
    want = [ToolCallExpect("w", arguments={"city": "Paris"}),
            ToolCallExpect("w", arguments={"city": "Rome"})]
    assert tool_call_failure(want, [rome, paris]) == ""
    assert 'is "Rome", expected "Paris"' in tool_call_failure(want, [rome, paris], ordered=True)
    assert "1 call (w), expected 2" in tool_call_failure(want, [paris])
    assert tool_call_failure([ToolCallExpect("w", arguments={"n": 1})],
                             [ToolCall("w", '{"n": 1.0}')]) == ""
    assert "is true, expected 1" in tool_call_failure([ToolCallExpect("w", arguments={"n": 1})],
                                                      [ToolCall("w", '{"n": true}')])
    assert "arguments are not JSON" in tool_call_failure([ToolCallExpect("w")],
                                                         [ToolCall("w", '{"city": ')])


def test_calls_are_compared_as_values_not_bytes() -> None:
    a = json.dumps([{"name": "w", "arguments": '{"a": 1, "b": 2}'}])
    assert tool_call_change(a, json.dumps([{"name": "w", "arguments": '{"b":2,"a":1}'}])) == \
        "identical"
    assert tool_call_change(a, json.dumps([{"name": "w", "arguments": '{"a": 1, "b": 3}'}])) \
        == "arguments_changed"
    assert tool_call_change(a, None) == "call_vs_no_call"
    assert tool_call_change(None, None) == ""


@pytest.mark.parametrize(
    ("expect", "text", "passes"),
    [
        (Expect(contains=["Canberra"], not_contains=["Sydney"]), "It is canberra.", True),
        (Expect(contains=["Canberra"], not_contains=["Sydney"]), "Sydney, not Canberra", False),
        (Expect(contains=["Canberra"], case_sensitive=True), "canberra", False),
        (Expect(any_of=["zwei Tassen", "zwei Kaffee"]), "Ich hätte gern zwei Kaffee.", True),
        (Expect(any_of=["a1", "b2"]), "c3", False),
        (Expect(regex=r"\bAu\b", case_sensitive=True), "The symbol is Au.", True),
        (Expect(regex=r"\bAu\b", case_sensitive=True), "The symbol is AU.", False),
        (Expect(number=9.9), "9.9 is larger than 9.11", True),
        (Expect(number=9.9), "9.11 is larger", False),
        (Expect(number=1200), "It costs 1,200 dollars", True),
        (Expect(number=80, tolerance=0.5), "About 80.3 km/h", True),
        (Expect(number=0), "The answer is 0.", True),
        (Expect(number=4), "no digits here", False),
    ],
)
def test_expect_checks(expect: Expect, text: str, passes: bool) -> None:
    assert (overall(check_answer(expect, text)) == "pass") is passes


# --- answers that once stopped compare ----------------------------------------------

UUID = "123e4567-e89b-12d3-a456-426614174000"
STALLING = r"^(a|aa)+$"  # backtracks without end on a run of a's that ends otherwise
HOSTILE_PROMPTS = f"""
prompts:
  - {{id: uuid, prompt: "Q: uuid", expect: {{number: 12}}}}
  - {{id: nested, prompt: "Q: nested", expect: {{regex: '^(a+)+$'}}}}
  - {{id: stalling, prompt: "Q: stalling", expect: {{regex: '{STALLING}'}}}}
  - {{id: schema, prompt: "Q: schema", expect: {{json_schema: {{type: object, properties:
      {{name: {{type: string, pattern: '{STALLING}'}}}}}}}}}}
"""


def test_a_uuid_and_a_pattern_that_backtracks_cost_one_check_never_the_comparison(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    a = serve(ScriptedModel({"Q: uuid": " 12, id 0", "Q: nested": " aaaa", "Q: stalling": "aaa",
                             "Q: schema": '{"name": "aaa"}'}))
    b = serve(ScriptedModel({"Q: uuid": f" id {UUID} -e5 +e3 1e999",
                             "Q: nested": "a" * 40 + "b",
                             "Q: stalling": "a" * 60 + "b",
                             "Q: schema": '{"name": "' + "a" * 60 + 'b"}'}))
    prompts = write_prompts(HOSTILE_PROMPTS)
    for side, server in (("a", a), ("b", b)):
        collect([prompts], tmp_path / side, CollectSettings(
            endpoint=server.url, label=side, top_logprobs=0, preflight=False))
    # a subprocess with a deadline: a search that never ends must fail this test, not hang it
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "quantcheck", "compare", tmp_path / "a",
                             tmp_path / "b", "--out", tmp_path / "report", "--jobs", "1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr  # the flip fails the gate; no crash (3)
    assert time.monotonic() - started < 30
    pairs = pd.read_csv(tmp_path / "report" / "pairs.csv",
                        keep_default_na=False).set_index("prompt_id")
    assert pairs.loc["uuid", "b_expect_failures"] == "number: first number is 89, expected 12"
    assert pairs.loc["uuid", "numbers_changed"]
    assert pairs.loc["nested", "b_expect_failures"] == "regex: no match for /^(a+)+$/"
    # a stopped search learnt nothing of the answer: its check is skipped, never failed
    assert (pairs.loc["stalling", "a_expect"], pairs.loc["stalling", "b_expect"]) == (
        "pass", "skipped")
    assert pairs.loc["stalling", "b_expect_failures"] == (
        f"regex: /{STALLING}/ was stopped after 1 s on an answer (it backtracks without "
        "end: rewrite it, e.g. (a+)+ as a+)")
    assert (pairs.loc["schema", "a_expect"], pairs.loc["schema", "b_expect"]) == (
        "pass", "skipped")
    assert pairs.loc["schema", "b_expect_failures"] == (
        f"json_schema: the schema's pattern /{STALLING}/ was stopped after 1 s on an answer "
        "(it backtracks without end: rewrite it, e.g. (a+)+ as a+)")
    assert {"skipped_checks", "factual_flips"} <= failed_rules(tmp_path / "report")


def failed_rules(report: Path) -> set[str]:
    assert invoke("gate", report).exit_code == 1
    return {name for name, rule in gate_rules(report).items() if not rule["passed"]}


def test_a_regex_search_is_bounded_in_time() -> None:
    begin()
    started = time.monotonic()
    results = check_answer(Expect(regex=STALLING), "a" * 60 + "b")
    assert time.monotonic() - started < PATTERN_SECONDS + 4  # the bound is checked now and then
    assert [(r.status, r.reason.split(" (")[0]) for r in results] == [
        ("skipped", f"/{STALLING}/ was stopped after 1 s on an answer")]
    assert overall(check_answer(Expect(regex=STALLING, case_sensitive=True), "aaaa")) == "pass"


def test_a_pattern_stopped_once_is_never_searched_again(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """24 prompts sharing a pattern that backtracks (as a file's default expect gives
    them): one search is stopped, every later one is skipped at once, naming why (A's
    quick answers too: the pattern is not searched again); the checks are reported
    skipped (the gate's skipped_checks rule fails), none failed."""
    entries = "".join(f"  - {{id: p{n}, prompt: 'Q{n}: a'}}\n" for n in range(24))
    prompts = write_prompts(f"defaults: {{expect: {{regex: '{STALLING}'}}}}\nprompts:\n"
                            f"{entries}")
    a = serve(ScriptedModel({"Q": "aaaa"}))
    b = serve(ScriptedModel({"Q": "a" * 60 + "b"}))
    for side, server in (("a", a), ("b", b)):
        collect([prompts], tmp_path / side, CollectSettings(
            endpoint=server.url, label=side, top_logprobs=0, preflight=False))
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "quantcheck", "compare", tmp_path / "a",
                             tmp_path / "b", "--out", tmp_path / "report", "--jobs", "1"],
                            capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert elapsed < 20, elapsed  # one stopped search, not 24 (each 1 s or more)
    pairs = pd.read_csv(tmp_path / "report" / "pairs.csv", keep_default_na=False)
    assert list(pairs["a_expect"]) == ["pass"] + ["skipped"] * 23  # A's first came first
    assert set(pairs["b_expect"]) == {"skipped"}
    reasons = [*pairs["a_expect_failures"], *pairs["b_expect_failures"]]
    stopped = f"regex: /{STALLING}/ was stopped after 1 s on an answer (it backtracks"
    assert pairs["b_expect_failures"][0].startswith(stopped)
    assert sum(reason.endswith("; not searched again") for reason in reasons) == 46
    assert failed_rules(tmp_path / "report") == {"skipped_checks"}
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["counts"]["checks"]["regex"]["skipped"] == 24  # pairs with one skipped


UNEVALUATED = {"type": "object", "patternProperties": {STALLING: {"type": "integer"}},
               "unevaluatedProperties": False}


def test_a_schema_jsonschema_would_search_with_re_is_skipped_never_a_hang() -> None:
    """unevaluatedProperties beside patternProperties: jsonschema searches those patterns
    with Python's re, which cannot be stopped. A run file nothing checked may hold one:
    its check is skipped at once with the reason (a subprocess: a hang fails the test)."""
    code = ("import json, sys\n"
            "from quantcheck import Expect\n"
            "from quantcheck.triage.expects import check_answer\n"
            f"schema = {UNEVALUATED!r}\n"
            "answer = json.dumps({'a' * 60 + 'b': 1})\n"
            "result, = check_answer(Expect(json_schema=schema), answer)\n"
            "print(json.dumps([result.status, result.reason]))\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=30)
    assert time.monotonic() - started < 20
    status, reason = json.loads(result.stdout)
    assert status == "skipped" and reason.startswith(
        "the schema cannot be checked: unevaluatedProperties beside patternProperties"), reason


# --- verdict: an eval harness's own score of an imported answer -------------------------


def verdict_of(scores: dict[str, float] | None, answer: str | None = "9") -> tuple[str, str]:
    expect = Expect(verdict=VerdictExpect("exact_match,strict-match", "8"))
    (result,) = check_answer(expect, " It is 9.", graded=Graded(scores, answer))
    return result.status, result.reason


def test_a_verdict_is_the_harness_s_score_with_what_it_scored() -> None:
    """1 passes, 0 fails (the answer and target said either way, with no "; " that
    would split a side's failures apart); partial credit and no score decide nothing."""
    assert verdict_of({"exact_match,strict-match": 1.0}, "8") == (
        "pass", 'exact_match,strict-match = 1 (scored answer "8", target "8")')
    assert verdict_of({"exact_match,strict-match": 0.0}) == (
        "fail", 'exact_match,strict-match = 0 (scored answer "9", target "8")')
    assert verdict_of({"exact_match,strict-match": 0.5})[0] == "skipped"
    assert verdict_of({"acc,none": 1.0}) == (
        "skipped", "no exact_match,strict-match score for this answer")
    assert verdict_of(None) == ("skipped", "no exact_match,strict-match score for this answer")
    assert verdict_of({"exact_match,strict-match": 0.0}, "x" * 300)[1].endswith('..., target "8")')
