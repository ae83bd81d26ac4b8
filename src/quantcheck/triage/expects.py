"""A prompt's expect, checked against one answer, key by key.

Each key of an expect is one check, named after the key (`number` with its
`tolerance`, `tool_call` with `ordered`; `case_sensitive` modifies the text checks).
A check passes, fails with a reason, or is skipped (`code` when code execution was
not allowed): a skipped check never counts as passed. The answer's overall result is
`fail` when any check fails, else `skipped` when any was skipped, else `pass`.

The rules a reviewer needs to predict a result:
- `json`, `json_schema`: the answer text, stripped of surrounding whitespace and of one
  code fence around all of it (```json ... ``` or ``` ... ```), must be one JSON value
  (NaN and Infinity are not JSON). Text before or after the fence fails the check.
- `tool_call`: the answer's calls, matched one to one to the expected calls (order
  free unless `ordered: true`); extra or missing calls fail. Argument values compare
  exactly by JSON value (1 equals 1.0; true does not equal 1; strings are
  case-sensitive).
- `code`: see `code_of` for which part of the answer is run, sandbox.py for how.
- `choice`: see `choice_of`.
- `verdict` (a run imported from an eval log): the harness's own score of the answer
  for the metric named, read from the record (`scores`): 1 passes, 0 fails; partial
  credit, or no score, is skipped (it decides neither way).
- `regex`, and a schema's `pattern` and `patternProperties`: Python's regular
  expression syntax, searched within the comparison's bounds (searches.py): a search
  that is stopped skips its check with the reason, never stalls the comparison, and a
  pattern stopped once is not searched again. A schema that cannot be searched within
  them (store/inputs/expect_entries.py `schema_search_problem`, for a run file nothing
  checked) skips its check too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, NoReturn

import regex

from ..store.inputs.expect_entries import schema_search_problem
from ..store.records.run_records import (
    CHOICE_LETTERS,
    CodeExpect,
    Expect,
    JsonValue,
    ToolCall,
    ToolCallExpect,
    VerdictExpect,
    first_number,
)
from .searches import SearchSkipped, current

if TYPE_CHECKING:  # jsonschema is imported where a schema is checked: start-up skips it
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

PASS, FAIL, SKIPPED = "pass", "fail", "skipped"
_REASON_CHARS = 240


@dataclass(frozen=True)
class CheckResult:
    check: str
    status: str  # PASS, FAIL or SKIPPED
    reason: str = ""


# Runs an answer's code with a code expect's tests: (passed, why not).
CodeRunner = Callable[[str, CodeExpect], tuple[bool, str]]


@dataclass(frozen=True)
class Graded:
    """What an eval harness said of an answer (a record imported from its log): every
    score by metric, and the part of the answer it scored."""

    scores: Mapping[str, float] | None = None
    answer: str | None = None


def check_answer(expect: Expect, text: str, calls: list[ToolCall] | None = None,
                 run_code: CodeRunner | None = None, graded: Graded | None = None
                 ) -> list[CheckResult]:
    """One result per check the expect names, in CHECKS order."""
    results = _text_checks(expect, text)
    if expect.json or expect.json_schema is not None:
        results += _json_checks(expect, text)
    if expect.tool_call is not None:
        try:
            reason = tool_call_failure(expect.tool_call, calls or [], expect.ordered)
            results.append(CheckResult("tool_call", FAIL if reason else PASS, reason))
        except SearchSkipped as skipped:
            results.append(CheckResult("tool_call", SKIPPED, _short(str(skipped))))
    if expect.code is not None:
        results.append(_code_check(expect.code, text, run_code))
    if expect.choice is not None:
        found = choice_of(text)
        ok = found == expect.choice
        results.append(CheckResult("choice", PASS if ok else FAIL, "" if ok else (
            f"chose {found}, expected {expect.choice}" if found else "no choice found")))
    if expect.verdict is not None:
        results.append(verdict_check(expect.verdict, graded or Graded()))
    return results


def verdict_check(expect: VerdictExpect, graded: Graded) -> CheckResult:
    """The harness's own verdict: its score for the metric, with the answer it scored
    and the target (shown on either outcome: the reviewer reads what was compared)."""
    score = (graded.scores or {}).get(expect.metric)
    scored = f"scored answer {_brief(graded.answer)}" if graded.answer is not None \
        else "no scored answer"
    # no "; " inside: a side's failures are joined with it (pairs.csv's a_expect_failures)
    said = f"{expect.metric} = {score:g} ({scored}, target {_brief(expect.target)})" \
        if score is not None else ""
    if score == 1:
        return CheckResult("verdict", PASS, said)
    if score == 0:
        return CheckResult("verdict", FAIL, said)
    if score is None:
        return CheckResult("verdict", SKIPPED, f"no {expect.metric} score for this answer")
    return CheckResult("verdict", SKIPPED, f"partial credit, neither pass nor fail: {said}")


def overall(results: list[CheckResult]) -> str:
    statuses = {result.status for result in results}
    return FAIL if FAIL in statuses else SKIPPED if SKIPPED in statuses else PASS


def _result(check: str, problems: list[str]) -> CheckResult:
    return CheckResult(check, FAIL if problems else PASS, "; ".join(problems))


def _text_checks(expect: Expect, text: str) -> list[CheckResult]:
    fold = (lambda s: s) if expect.case_sensitive else str.casefold
    haystack = fold(text)
    results = []
    if expect.contains:
        results.append(_result("contains", [f"missing {quoted(s)}" for s in expect.contains
                                            if fold(s) not in haystack]))
    if expect.any_of:
        found = any(fold(s) in haystack for s in expect.any_of)
        results.append(_result("any_of", [] if found else [
            f"none of {', '.join(map(quoted, expect.any_of))}"]))
    if expect.not_contains:
        results.append(_result("not_contains", [f"contains {quoted(s)}"
                                                for s in expect.not_contains
                                                if fold(s) in haystack]))
    if expect.regex is not None:
        try:
            failure = regex_failure(expect.regex, text, expect.case_sensitive)
            results.append(_result("regex", [failure] if failure else []))
        except SearchSkipped as skipped:
            results.append(CheckResult("regex", SKIPPED, _short(str(skipped))))
    if expect.number is not None:
        number = first_number(text)
        near = number is not None and abs(number - expect.number) <= expect.tolerance
        results.append(_result("number", [] if near else [
            f"no number, expected {expect.number:g}" if number is None else
            f"first number is {number:g}, expected {expect.number:g}"]))
    return results


def regex_failure(pattern: str, text: str, case_sensitive: bool = False) -> str:
    """Why `pattern` is not found in `text` ("" when it is), searched within the
    comparison's bounds (searches.py); SearchSkipped when it was not searched."""
    flags = 0 if case_sensitive else regex.IGNORECASE
    found = current().found(pattern, text, flags, " on an answer")
    return "" if found else f"no match for /{pattern}/"


# --- JSON ---------------------------------------------------------------------------

_FENCE = re.compile(r"\A```[^\n`]*\n(.*?)\n?```\Z", re.DOTALL)


def unfenced(text: str) -> str:
    """The text without surrounding whitespace and one code fence around all of it."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    return fenced.group(1).strip() if fenced else stripped


def _no_constants(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str) -> tuple[JsonValue, str]:
    """(value, "") or (None, why it is not JSON)."""
    try:
        return json.loads(text, parse_constant=_no_constants), ""
    except ValueError as exc:
        return None, f"not JSON: {_short(str(exc))}"
    except RecursionError:
        return None, "not JSON: nested too deeply to read"


def schema_failure(schema: Mapping[str, JsonValue], value: JsonValue) -> str:
    """Where and why `value` breaks `schema` ("" when it does not): the JSON path, the
    message and the violated keyword. The schema's patterns (`pattern`,
    `patternProperties`, `additionalProperties` beside them) are searched as an
    expect.regex is; SearchSkipped when one was not searched, or the schema holds what
    cannot be searched within a bound."""
    if problem := schema_search_problem(schema):
        raise SearchSkipped(f"the schema cannot be checked: {problem}")
    from jsonschema import FormatChecker
    from jsonschema.exceptions import best_match
    from jsonschema.validators import validator_for

    validator = _bounded(validator_for(schema))(schema, format_checker=FormatChecker())
    try:
        error = best_match(validator.iter_errors(value))
    except RecursionError:
        return "nested too deeply to validate"
    except SearchSkipped as skipped:
        raise SearchSkipped(f"the schema's pattern {skipped}") from None
    if error is None:
        return ""
    return f"{error.json_path}: {_short(error.message)} ({error.validator})"


def _found(pattern: str, text: str) -> bool:
    """jsonschema's `re.search(pattern, text)`, within the comparison's bounds."""
    return current().found(pattern, text, where=" on an answer")


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any
             ) -> Iterator[ValidationError]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not _found(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any,
                        schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _found(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any
                           ) -> Iterator[ValidationError]:
    """jsonschema's keyword (the same messages), its patterns searched by `_found`."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    properties, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = {key for key in instance if key not in properties
              and not any(_found(pattern, key) for pattern in patterns)}
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            shown = ", ".join(repr(each) for each in sorted(patterns))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {shown}")
        else:
            names = sorted(extras, key=str)
            yield ValidationError("Additional properties are not allowed ("
                                  f"{', '.join(map(repr, names))} "
                                  f"{'was' if len(names) == 1 else 'were'} unexpected)")


_BOUNDED_KEYWORDS = {"pattern": _pattern, "patternProperties": _pattern_properties,
                     "additionalProperties": _additional_properties}


@cache
def _bounded(validator: type[Validator]) -> type[Validator]:
    """The schema's draft with its pattern keywords searched within REGEX_SECONDS."""
    from jsonschema.validators import extend

    known = validator.VALIDATORS
    extended: type[Validator] = extend(  # type: ignore[no-untyped-call]
        validator, {k: v for k, v in _BOUNDED_KEYWORDS.items() if k in known})
    return extended


def _json_checks(expect: Expect, text: str) -> list[CheckResult]:
    value, problem = parse_json(unfenced(text))
    results = []
    if expect.json:
        results.append(_result("json", [problem] if problem else []))
    if expect.json_schema is not None:
        try:
            reason = problem or schema_failure(expect.json_schema, value)
            results.append(_result("json_schema", [reason] if reason else []))
        except SearchSkipped as skipped:
            results.append(CheckResult("json_schema", SKIPPED, _short(str(skipped))))
    return results


def quoted(value: object) -> str:
    """A value as a reason shows it: JSON ("Paris", 1.5, true, ["a"])."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _brief(value: str) -> str:
    """A value quoted, cut to 100 characters (an answer can be a whole generation)."""
    text = quoted(value)
    return text if len(text) <= 100 else text[:100] + "..."


def _short(message: str) -> str:
    return message if len(message) <= _REASON_CHARS else message[:_REASON_CHARS] + "..."


# --- tool calls ---------------------------------------------------------------------

def parse_calls(calls: str | None) -> list[ToolCall]:
    """Tool calls from pairs.csv's JSON list of {name, arguments}."""
    return [ToolCall(name=str(call.get("name")), arguments=str(call.get("arguments") or ""))
            for call in json.loads(calls)] if calls else []


def tool_call_failure(expected: list[ToolCallExpect], calls: list[ToolCall],
                      ordered: bool = False) -> str:
    """Why `calls` do not match `expected` ("" when they do)."""
    if len(expected) == 1 and expected[0].name is None:
        return f"called {_names(calls)}, expected no call" if calls else ""
    if not calls:
        return f"no tool call, expected {_names(expected)}"
    if len(calls) != len(expected):
        return (f"{len(calls)} call{'s' * (len(calls) != 1)} ({_names(calls)}), expected "
                f"{len(expected)} ({_names(expected)})")
    problems = [[call_problem(want, call) for call in calls] for want in expected]
    if ordered:
        return "; ".join(row[n] for n, row in enumerate(problems) if row[n])
    matched = _matching(problems)
    unmatched = [n for n in range(len(expected)) if n not in matched]
    return "; ".join(_closest(problems[n]) for n in unmatched)


def call_problem(expected: ToolCallExpect, call: ToolCall) -> str:
    if call.name != expected.name:
        return f"called {call.name}, expected {expected.name}"
    arguments, problem = parse_json(call.arguments)
    if problem:
        return f"{call.name} arguments are {problem}"
    if expected.arguments_schema is not None:
        reason = schema_failure(expected.arguments_schema, arguments)
        if reason:
            return f"{call.name} arguments {reason}"
    for key, value in (expected.arguments or {}).items():
        if not isinstance(arguments, dict) or key not in arguments:
            return f"{call.name} has no argument {key}"
        if not json_equal(arguments[key], value):
            return f"{call.name} argument {key} is {_short(quoted(arguments[key]))}, " \
                   f"expected {quoted(value)}"
    return ""


def json_equal(a: object, b: object) -> bool:
    """Equal as JSON values: numbers by value, but booleans are not numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _matching(problems: list[list[str]]) -> dict[int, int]:
    """A largest one-to-one matching of expected calls to calls without a problem
    (augmenting paths; a handful of calls)."""
    owner: dict[int, int] = {}  # call -> expected

    def assign(want: int, seen: set[int]) -> bool:
        for call, problem in enumerate(problems[want]):
            if problem or call in seen:
                continue
            seen.add(call)
            if call not in owner or assign(owner[call], seen):
                owner[call] = want
                return True
        return False

    for want in range(len(problems)):
        assign(want, set())
    return {want: call for call, want in owner.items()}


def _closest(row: list[str]) -> str:
    """The problem with the call that came nearest (same tool over another tool)."""
    return min(row, key=lambda problem: problem.startswith("called "))


def _names(calls: list[ToolCall] | list[ToolCallExpect]) -> str:
    return ", ".join(str(call.name) for call in calls)


# --- code ---------------------------------------------------------------------------

_BLOCK = re.compile(r"```([^\n`]*)\n(.*?)(?:```|\Z)", re.DOTALL)


def code_of(text: str, entry_point: str) -> str:
    """The code to run: of the answer's fenced blocks (an unclosed last fence runs to
    the end), the first that defines `entry_point`, else the first; with no fence,
    the whole answer."""
    blocks: list[str] = [body for _, body in _BLOCK.findall(text)]
    if not blocks:
        return text
    defines = re.compile(rf"^\s*(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", re.MULTILINE)
    return next((block for block in blocks if defines.search(block)), blocks[0])


def _code_check(expect: CodeExpect, text: str, run_code: CodeRunner | None) -> CheckResult:
    if run_code is None:
        return CheckResult("code", SKIPPED, "code execution not allowed (--allow-code-exec)")
    passed, reason = run_code(code_of(text, expect.entry_point), expect)
    return CheckResult("code", PASS if passed else FAIL, "" if passed else reason)


# --- multiple choice ----------------------------------------------------------------

_LETTER = rf"[\(\[*]*([{CHOICE_LETTERS}])(?![\w'])"
_STATED = re.compile(rf"(?i:\banswer\b)(?:\s+(?i:is))?\s*[:\-]?\s*(?i:option\s+)?{_LETTER}")
_OPENING = re.compile(rf"\A\s*{_LETTER}(?:[\)\].:*]+(?=\s|\Z)|[ \t]*(?:\n|\Z))")
_PARENTHESIZED = re.compile(rf"\(([{CHOICE_LETTERS}])\)")


def choice_of(text: str) -> str | None:
    """The letter (A to J) the answer chose, by the first rule that finds one:
    1. the last "answer is X" / "Answer: X" / "answer: (X)" / "answer is option X";
    2. the answer opens with the letter alone on its line, or marked: "B", "B.", "B)",
       "(B)", "**B**" (not "A shark ...": there "A" is a word);
    3. exactly one distinct letter appears in parentheses, "(B)".
    Otherwise none (the check fails: "no choice found")."""
    stated = _STATED.findall(text)
    if stated:
        return str(stated[-1])
    opening = _OPENING.match(text)
    if opening:
        return opening.group(1)
    distinct = set(_PARENTHESIZED.findall(text))
    return distinct.pop() if len(distinct) == 1 else None
