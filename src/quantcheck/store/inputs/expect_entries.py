"""A prompt entry's `expect`, validated into an Expect (docs/prompts.md, "Expected
answers"): each key one check, each refused naming the file, line, prompt and field.

An `expect.regex` is compiled here by the engine its check searches with (the `regex`
module, triage/expects.py) and by Python's `re`, whose syntax the docs promise: a
pattern either refuses (`[[` is an unterminated set to `regex`; `\\p{L}` or a
variable-width look-behind is beyond `re`) is refused naming where, never accepted to
fail every check later. `re`'s FutureWarnings about sets are never shown or raised.

A schema an answer is validated against (`json_schema`, a tool call's
`arguments_schema`) is searched within a time bound (triage/expects.py), so it may hold
only what can be bounded: each `pattern` and `patternProperties` key is read by both
engines as an `expect.regex` is, and `unevaluatedProperties` beside `patternProperties`
is refused (`schema_search_problem`): jsonschema finds the properties such patterns
evaluate with Python's `re`, which cannot be stopped, so one backtracking pattern would
hang the comparison.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterator, Mapping
from typing import cast

import regex as regex_engine

from ..records.run_records import (
    CHOICE_LETTERS,
    IMPORTED_CHECKS,
    CodeExpect,
    Expect,
    ToolCallExpect,
)
from .entry_fields import (
    Fields,
    Where,
    flag,
    mapping,
    plain_mapping,
    reject_unknown,
    string_list,
)

# An imported check (`verdict`: an eval harness's own score) is never a prompt file's.
EXPECT_KEYS = set(Expect.__dataclass_fields__) - set(IMPORTED_CHECKS)
TOOL_CALL_KEYS = {"name", "arguments_schema", "arguments"}
# A schema's keywords whose values map names to schemas, and those whose values are data.
_NAMED_SCHEMAS = ("properties", "patternProperties", "$defs", "definitions",
                  "dependentSchemas")
_DATA_KEYWORDS = ("enum", "const", "default", "examples")


def expect_of(where: Where, spec: object, base: Mapping[str, object] | None = None
              ) -> Expect:
    """The Expect of an `expect` mapping (`where` names the prompt, the mapping's own
    lines name its keys), merged over the checks of `base` (a file's default expect,
    read already): a check of its own wins."""
    fields = mapping(spec)
    if fields is None or not fields:
        raise where.error("expect", "must be a mapping, e.g. {contains: Canberra}")
    at = where.inside(spec, f"{where.prefix}expect.")
    if base:
        fields = {**base, **fields}
    for key in fields:
        if key in IMPORTED_CHECKS:
            raise at.error(key, "set by `quantcheck import` from an eval harness's log (its "
                           "own score of each answer), never in a prompt file "
                           "(docs/evals.md)")
        if key not in EXPECT_KEYS:
            raise at.error(str(key),
                           f"unknown check; allowed: {', '.join(sorted(EXPECT_KEYS))}")
    number = fields.get("number")
    if number is not None and (isinstance(number, bool) or not isinstance(number, int | float)):
        raise at.error("number", "must be a number")
    if number is not None and not _finite(number):
        raise at.error("number", f"must be a finite number, not {number} (nothing can "
                       "be checked against it: fill the answer in or drop the prompt)")
    tolerance = fields.get("tolerance", 0.0)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or tolerance < 0 \
            or not _finite(tolerance):
        raise at.error("tolerance", "must be a finite number >= 0")
    regex = fields.get("regex")
    if regex is not None and (problem := regex_problem(str(regex))):
        raise at.error("regex", problem)
    json_schema = fields.get("json_schema")
    if json_schema is not None and (problem := expect_schema_problem(json_schema)):
        raise at.error("json_schema", problem)
    return Expect(
        contains=string_list(at, fields, "contains"),
        any_of=string_list(at, fields, "any_of"),
        not_contains=string_list(at, fields, "not_contains"),
        regex=str(regex) if regex is not None else None,
        number=float(number) if number is not None else None,
        tolerance=float(tolerance),
        case_sensitive=flag(at, fields, "case_sensitive"),
        json=flag(at, fields, "json"),
        json_schema=plain_mapping(json_schema),
        tool_call=tool_call_expect(at, fields.get("tool_call")),
        ordered=flag(at, fields, "ordered"),
        code=_code_expect(at, fields.get("code")),
        choice=_choice(at, fields.get("choice")),
    )


def regex_problem(pattern: str) -> str:
    """Why `pattern` cannot be an expect.regex ("" when it can): see the module
    docstring."""
    try:
        regex_engine.compile(pattern)
    except (regex_engine.error, ValueError, OverflowError, RecursionError) as exc:
        return f"invalid regular expression: {exc}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a FutureWarning on sets `regex` reads as written
        try:
            re.compile(pattern)
        except (re.error, ValueError, OverflowError, RecursionError) as exc:
            return (f"invalid regular expression in Python's re syntax: {exc} (only the "
                    "regex module's extensions read it; write it in re's syntax)")
    return ""


def check_schema(schema: object) -> str:
    """Why `schema` is not a JSON Schema ("" when it is), for the prompt loader."""
    fields = mapping(schema)
    if fields is None:
        return "must be a mapping (a JSON Schema object)"
    from jsonschema.validators import validator_for  # here: a set without one never loads it

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # re's FutureWarnings on a pattern's sets
            validator_for(fields).check_schema(fields)
    except Exception as exc:  # noqa: BLE001 - jsonschema raises SchemaError and others
        message = str(getattr(exc, "message", exc))
        if len(message) > 240:
            message = message[:240] + "..."
        return f"not a valid JSON Schema: {message}"
    return ""


def expect_schema_problem(schema: object) -> str:
    """Why `schema` cannot check an answer ("" when it can): not a JSON Schema, or
    holding what cannot be searched within a bound (see the module docstring)."""
    return check_schema(schema) or schema_search_problem(cast(Mapping[str, object], schema))


def schema_search_problem(schema: Mapping[str, object]) -> str:
    """Why the patterns of a schema cannot be searched within a bound ("" when they
    can): a pattern either engine refuses, or `unevaluatedProperties` beside
    `patternProperties` (also read from a run file, which nothing checked)."""
    uses_unevaluated = has_patterns = False
    for node in _schema_nodes(schema):
        patterns = [node["pattern"]] if "pattern" in node else []
        named = mapping(node.get("patternProperties"))
        if named is not None:
            has_patterns = True
            patterns += list(named)
        uses_unevaluated = uses_unevaluated or "unevaluatedProperties" in node
        for pattern in patterns:
            if problem := regex_problem(str(pattern)):
                return f"the pattern {str(pattern)!r}: {problem}"
    if uses_unevaluated and has_patterns:
        return ("unevaluatedProperties beside patternProperties cannot be checked within "
                "a time bound (jsonschema searches those patterns with Python's re, which "
                "cannot be stopped): use additionalProperties, or properties without "
                "patterns")
    return ""


def _schema_nodes(schema: Mapping[str, object]) -> Iterator[Fields]:
    """Every schema object inside `schema`, itself first; data (enum, const, default,
    examples) and the names of properties are not schemas."""
    stack: list[object] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        fields = mapping(node)
        if fields is None:
            continue
        yield fields
        for key, value in fields.items():
            named = mapping(value) if key in _NAMED_SCHEMAS else None
            if named is not None:
                stack.extend(named.values())
            elif key not in _DATA_KEYWORDS:
                stack.append(value)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond a float's range
        return False


def tool_call_expect(at: Where, value: object, field: str = "tool_call"
                     ) -> list[ToolCallExpect] | None:
    """Expected tool calls as written (`field`: what the errors name them: an expect's
    `tool_call`, a tool session step's `calls`)."""
    if value is None:
        return None
    calls = value if isinstance(value, list) else [value]
    if not calls or not all(mapping(call) is not None for call in calls):
        raise at.error(field, "must be a mapping {name, arguments_schema, "
                       "arguments}, or a list of them")
    expected = []
    for call in calls:
        fields = cast(Fields, call)
        reject_unknown(at.inside(call, f"{at.prefix}{field}."), fields, TOOL_CALL_KEYS)
        if "name" not in fields:
            raise at.error(field, "each call needs 'name' (null: no call at all)")
        name = fields["name"]
        if name is not None and (not isinstance(name, str) or not name):
            raise at.error(field, f"name must be a tool's name or null, not {name!r}")
        schema = fields.get("arguments_schema")
        if schema is not None and (problem := expect_schema_problem(schema)):
            raise at.error(field, f"arguments_schema: {problem}")
        arguments = fields.get("arguments")
        if arguments is not None and mapping(arguments) is None:
            raise at.error(field, "arguments must be a mapping of argument values")
        if name is None and (schema is not None or arguments is not None or len(calls) > 1):
            raise at.error(field, "name: null (no call) stands alone")
        expected.append(ToolCallExpect(name, plain_mapping(schema), plain_mapping(arguments)))
    return expected


def _code_expect(at: Where, value: object) -> CodeExpect | None:
    if value is None:
        return None
    fields = mapping(value)
    if fields is None or set(fields) != {"entry_point", "tests"}:
        raise at.error("code", "must be {entry_point: NAME, tests: 'assert NAME(...)...'}")
    entry_point, tests = fields["entry_point"], fields["tests"]
    if not isinstance(entry_point, str) or not entry_point.isidentifier():
        raise at.error("code", f"entry_point must be a Python name, not {entry_point!r}")
    if not isinstance(tests, str) or not tests.strip():
        raise at.error("code", "tests must be Python code (asserts)")
    try:
        compile(tests, "tests", "exec")
    except SyntaxError as exc:
        raise at.error("code", f"tests are not valid Python: {exc.msg} (line "
                       f"{exc.lineno})") from None
    return CodeExpect(entry_point, tests)


def _choice(at: Where, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != 1 or value not in CHOICE_LETTERS:
        raise at.error("choice", f"must be one letter {CHOICE_LETTERS[0]} to "
                       f"{CHOICE_LETTERS[-1]}, not {value!r}")
    return value
