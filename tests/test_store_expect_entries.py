"""store/inputs/expect_entries.py: a schema an answer is checked against holds only what can
be searched within a bound: each pattern read by both engines, and no
unevaluatedProperties beside patternProperties (jsonschema searches those patterns with
Python's re, which cannot be stopped); anything else is one error naming the file,
line, prompt and field when the prompt set is read."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.errors import PromptFileError
from quantcheck.store.inputs.expect_entries import schema_search_problem
from quantcheck.store.inputs.prompt_sets import load_prompts

from .conftest import WritePrompts

UNEVALUATED = {"type": "object", "patternProperties": {"^(a|aa)+$": {"type": "integer"}},
               "unevaluatedProperties": False}


@pytest.mark.parametrize("where", ["json_schema", "arguments_schema", "nested"])
def test_unevaluated_properties_beside_pattern_properties_is_refused_at_load(
        write_prompts: WritePrompts, where: str) -> None:
    schema = UNEVALUATED if where != "nested" else {
        "$defs": {"inner": UNEVALUATED}, "allOf": [{"$ref": "#/$defs/inner"}]}
    expect = ({"tool_call": {"name": "f", "arguments_schema": schema}}
              if where == "arguments_schema" else {"json_schema": schema})
    path = write_prompts(f"prompts:\n  - id: p\n    prompt: q\n    expect: {json.dumps(expect)}\n")
    with pytest.raises(PromptFileError) as caught:
        load_prompts([path])
    message = str(caught.value)
    assert f"{path}:4: prompt p: field 'expect." in message
    assert "unevaluatedProperties beside patternProperties cannot be checked within a time " \
           "bound" in message and "use additionalProperties" in message


@pytest.mark.parametrize("schema", [
    {"type": "string", "pattern": r"\p{L}+"},  # regex reads it, re does not
    {"type": "object", "patternProperties": {"[a--b]": {}}},  # re reads it, regex does not
])
def test_a_schema_pattern_either_engine_refuses_is_refused_at_load(
        write_prompts: WritePrompts, schema: dict[str, object]) -> None:
    path = write_prompts("prompts:\n  - id: p\n    prompt: q\n"
                         f"    expect: {{json_schema: {json.dumps(schema)}}}\n")
    with pytest.raises(PromptFileError, match=r":4: prompt p: field 'expect.json_schema': "):
        load_prompts([path])


def test_what_can_be_bounded_is_kept() -> None:
    for schema in ({"type": "object", "patternProperties": {"^x": {}},
                    "additionalProperties": False},
                   {"type": "object", "unevaluatedProperties": False,
                    "properties": {"pattern": {"type": "string"}}},  # a property's name
                   {"enum": [{"patternProperties": 1, "unevaluatedProperties": 2}]}):  # data
        assert schema_search_problem(schema) == ""


KEYWORDS = st.sampled_from(["type", "properties", "patternProperties", "pattern", "items",
                            "allOf", "unevaluatedProperties", "enum", "$defs", "not"])
SCHEMAS = st.recursive(
    st.sampled_from([True, False, "string", "^a+$", "[[", 1]),
    lambda inner: st.dictionaries(KEYWORDS | st.sampled_from(["^a", "x"]), inner, max_size=4)
    | st.lists(inner, max_size=3), max_leaves=12)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(SCHEMAS.filter(lambda s: isinstance(s, dict)))
def test_any_schema_is_walked_to_an_answer(schema: dict[str, object]) -> None:
    problem = schema_search_problem(schema)
    text = json.dumps(schema)
    assert problem == "" or problem.startswith("the pattern ") or (
        "unevaluatedProperties" in text and "patternProperties" in text)


@pytest.mark.parametrize("where", ["prompt", "defaults"])
def test_a_prompt_file_cannot_claim_a_verdict(write_prompts: WritePrompts, where: str) -> None:
    """`verdict` is an eval harness's own score, set only by `quantcheck import`: a prompt
    file claiming one, in a prompt's expect or in its defaults, is refused naming it."""
    expect = "expect: {verdict: {metric: exact_match}}"
    path = write_prompts(f"defaults: {{{expect}}}\nprompts: [{{id: x, prompt: q}}]\n"
                         if where == "defaults" else
                         f"prompts:\n  - id: x\n    prompt: q\n    {expect}\n")
    with pytest.raises(PromptFileError) as caught:
        load_prompts([path])
    field = "defaults.expect.verdict" if where == "defaults" else "expect.verdict"
    assert f"field '{field}': set by `quantcheck import` from an eval harness's log" \
        in str(caught.value), str(caught.value)
