"""store/inputs/prompt_sets.py: YAML prompt sets (the shipped ones load), the request each prompt
sends (explicitly greedy, options over defaults), its hash, and errors naming the file,
line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantcheck import Expect, RequestOptions, load_prompts
from quantcheck.errors import PromptFileError
from quantcheck.store.inputs.prompt_sets import GREEDY_FIELDS

from .conftest import WritePrompts, invoke

REPO = Path(__file__).parent.parent


def test_shipped_prompt_sets_load() -> None:
    default = load_prompts([REPO / "prompts/default.yaml"])
    assert len(default) == 20
    assert sum(1 for p in default if p.expect) >= 12
    categories = {p.category for p in default}
    assert {"reasoning", "code", "summarization", "translation", "extraction",
            "classification", "math", "instruction-following"} <= categories
    spot = load_prompts([REPO / "prompts/spot-check.yaml"])
    assert spot and all(p.expect for p in spot)


def test_request_body_is_explicitly_greedy(write_prompts: WritePrompts) -> None:
    path = write_prompts("""
        defaults:
          max_tokens: 64
          stop: ["\\n\\n"]
        prompts:
          - id: capital-au
            category: factual
            messages:
              - {role: user, content: "Capital of Australia?"}
          - id: completion
            prompt: "Q: 2+2=\\nA:"
            max_tokens: 8
    """)
    chat, completion = load_prompts([path])
    assert chat.api == "chat" and completion.api == "completions"
    assert chat.request == {"messages": [{"role": "user", "content": "Capital of Australia?"}],
                            "max_tokens": 64, "stop": ["\n\n"], **GREEDY_FIELDS}
    assert completion.request["prompt"] == "Q: 2+2=\nA:"
    assert completion.request["max_tokens"] == 8
    assert completion.category == "general"


def test_options_override_and_null_drops_a_field(write_prompts: WritePrompts) -> None:
    path = write_prompts("""
        prompts:
          - {id: a, prompt: "hello", max_tokens: 100}
    """)
    options = RequestOptions(max_tokens=5, api="chat",
                             extra_body={"repeat_penalty": None, "min_p": 0})
    (prompt,) = load_prompts([path], options)
    assert prompt.api == "chat"
    assert prompt.request["messages"] == [{"role": "user", "content": "hello"}]
    assert prompt.request["max_tokens"] == 5
    assert "repeat_penalty" not in prompt.request and prompt.request["min_p"] == 0
    assert prompt.request["repetition_penalty"] == 1.0


@pytest.mark.parametrize("extra_body", ['{"seed": 1e999}', '{"seed": 18446744073709551616}'])
def test_an_unsendable_extra_body_is_refused_at_the_option(write_prompts: WritePrompts,
                                                             extra_body: str) -> None:
    path = write_prompts("prompts:\n  - {id: a, prompt: hello}\n")
    result = invoke("prompts", "check", path, "--extra-body", extra_body)
    assert result.exit_code == 2
    assert "Invalid value for '--extra-body'" in result.output
    assert "JSON can carry" in result.output or "does not fit in 64 bits" in result.output


def test_hash_is_stable_and_tracks_the_request(write_prompts: WritePrompts) -> None:
    text = """
        prompts:
          - {id: a, prompt: "hello"}
    """
    first = load_prompts([write_prompts(text)])[0].hash
    assert load_prompts([write_prompts(text)])[0].hash == first
    assert load_prompts([write_prompts(text.replace("hello", "hello!"))])[0].hash != first
    capped = load_prompts([write_prompts(text)], RequestOptions(max_tokens=3))[0].hash
    assert capped != first


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prompts:\n  - {id: a, prompt: x}\n  - {id: a, prompt: y}\n", "used twice"),
        ("prompts:\n  - id: a\n    prompt: x\n    expected: {contains: y}\n",
         ":4: prompt a: field 'expected': unknown field"),
        ("prompts:\n  - id: a\n    category: c\n", ":2: prompt a: needs exactly one of"),
        ("prompts:\n  - {prompt: x}\n", ":2: prompt #1: field 'id': required"),
        ("prompts:\n  - id: a\n    prompt: x\n    max_tokens: -3\n",
         ":4: prompt a: field 'max_tokens': must be a positive integer"),
        ("prompts:\n  - id: a\n    prompt: x\n    expect:\n      number: lots\n",
         "prompt a: field 'expect.number': must be a number"),
        ("prompts:\n  - id: a\n    prompt: x\n    expect: {regex: '(unclosed'}\n",
         "field 'expect.regex': invalid regular expression"),
        ("prompts:\n  - id: a\n    prompt: x\n    expect: {equals: 3}\n",
         "field 'expect.equals': unknown check"),
        ("prompts:\n  - id: a\n    messages: [{role: user}]\n",
         "field 'messages': message 1 needs a string 'role' and 'content'"),
        ("defaults: {api: rest}\nprompts:\n  - {id: a, prompt: x}\n",
         ":1: field 'defaults.api': must be one of chat, completions"),
        ("prompts: []\n", "field 'prompts': must be a non-empty list"),
        ("prompts:\n  - id: a\n   prompt: x\n", "not valid YAML"),
        ("- just a list\n", "expected a mapping with a 'prompts:' list"),
        ("prompts:\n  - id: a\n    prompt: x\n    expect:\n      json_schema: {type: objekt}\n",
         ":5: prompt a: field 'expect.json_schema': not a valid JSON Schema"),
        ("prompts:\n  - id: a\n    prompt: x\n    expect:\n      tool_call: {arguments: {}}\n",
         ":5: prompt a: field 'expect.tool_call': each call needs 'name'"),
        ("prompts:\n  - id: a\n    prompt: x\n    expect:\n"
         "      tool_call: [{name: null}, {name: f}]\n",
         "field 'expect.tool_call': name: null (no call) stands alone"),
        ("prompts:\n  - id: a\n    prompt: x\n    expect:\n"
         "      code: {entry_point: f, tests: 'assert f('}\n",
         "field 'expect.code': tests are not valid Python"),
        ("prompts:\n  - id: a\n    prompt: x\n    expect: {choice: b}\n",
         "field 'expect.choice': must be one letter A to J"),
        ("prompts:\n  - id: a\n    prompt: x\n    tools: [{type: function, function: {name: f}}]\n",
         ":4: prompt a: field 'tools': tools need the chat API"),
        ("prompts:\n  - id: a\n    messages: [{role: user, content: x}]\n    tools: [f]\n",
         "field 'tools': must be a list of {type: function"),
        ("prompts:\n  - id: a\n    messages: [{role: user, content: x}]\n"
         "    tool_choice: any\n",
         "field 'tool_choice': must be one of auto, none, required"),
        ("prompts:\n  - id: a\n    prompt: x\n    haystack: {tokens: 100, needle: N.}\n",
         "field 'haystack': the prompt's text has no {haystack} to fill"),
        ("prompts:\n  - id: a\n    prompt: '{haystack}'\n"
         "    haystack: {tokens: 9, needle: N., depth: 2}\n",
         "field 'haystack': depth must be from 0 (start) to 1 (end)"),
        ("prompts:\n  - id: a\n    prompt: '{haystack}'\n"
         "    haystack: {tokens: 9, sentences: 3, needle: N.}\n",
         "field 'haystack': must be {tokens: N, needle: SENTENCE, depth: 0..1, seed: N} "
         "(or sentences: N in place of tokens)"),
        ("prompts:\n  - id: a\n    prompt: '{haystack}'\n"
         "    haystack: {sentences: 3, language: fr}\n",
         "field 'haystack': language must be one of en, de, zh, not 'fr'"),
        ("prompts:\n  - id: a\n    prompt: x\n    max_tokens: 99999999999999999999999\n",
         ":4: prompt a: field 'max_tokens': the integer 99999999999999999999999 does not fit"),
        ("prompts:\n  - id: a\n    prompt: x\n    extra: {logit_bias: {'7': .inf}}\n",
         "field 'logit_bias': inf is not a number JSON can carry"),
    ],
    ids=["duplicate", "unknown-field", "no-text", "no-id", "bad-max-tokens", "bad-number",
         "bad-regex", "unknown-check", "bad-message", "bad-api", "empty", "yaml", "not-mapping",
         "bad-schema", "call-without-name", "no-call-with-others", "bad-tests", "bad-choice",
         "tools-on-completions", "bad-tools", "bad-tool-choice", "no-placeholder",
         "bad-depth", "tokens-and-sentences", "bad-language", "integer-beyond-64-bits",
         "infinity"],
)
def test_bad_prompt_files_name_file_line_and_field(
    write_prompts: WritePrompts, text: str, message: str
) -> None:
    path = write_prompts(text)
    with pytest.raises(PromptFileError) as caught:
        load_prompts([path])
    assert str(path) in str(caught.value)
    assert message in str(caught.value)


def test_duplicate_ids_across_files(write_prompts: WritePrompts) -> None:
    first = write_prompts("prompts:\n  - {id: a, prompt: x}\n")
    second = write_prompts("prompts:\n  - {id: a, prompt: y}\n")
    with pytest.raises(PromptFileError, match="used twice"):
        load_prompts([first, second])


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PromptFileError, match="cannot read prompt file"):
        load_prompts([tmp_path / "nope.yaml"])


def test_expect_round_trips_through_json() -> None:
    expect = Expect(contains=["x"], number=0.0, tolerance=0.1)
    assert Expect.from_json(expect.to_json()) == expect


def test_tools_and_haystack_shape_the_request(write_prompts: WritePrompts) -> None:
    path = write_prompts("""
        prompts:
          - id: t
            messages: [{role: user, content: "weather?"}]
            tools: [{type: function, function: {name: get_weather, parameters: {type: object}}}]
            tool_choice: required
          - id: n
            prompt: "Before. {haystack} After."
            haystack: {tokens: 300, depth: 0.5, needle: The codeword is heron-7., seed: 3}
    """)
    tools, needle = load_prompts([path])
    assert tools.request["tools"][0]["function"]["name"] == "get_weather"
    assert tools.request["tool_choice"] == "required"
    text = needle.request["prompt"]
    assert text.startswith("Before. ") and text.endswith(" After.")
    assert 200 < text.index("heron-7") < len(text) - 200  # in the middle
    assert load_prompts([path])[1].hash == needle.hash  # the filler is the same every time


def test_a_haystack_of_sentences_in_another_language_or_without_a_needle(
        write_prompts: WritePrompts) -> None:
    """The context ladder's probes: N sentences exactly, German or Chinese filler, and
    an absent-needle probe with no sentence planted."""
    path = write_prompts("""
        prompts:
          - id: de
            prompt: "{haystack} Wo?"
            haystack: {sentences: 30, depth: 0, needle: The secret code is 48213., language: de}
          - id: absent
            prompt: "{haystack} Wo?"
            haystack: {sentences: 30, language: zh}
    """)
    german, absent = load_prompts([path])
    assert german.request["prompt"].startswith("The secret code is 48213. ")
    assert german.request["prompt"].count(".") == 30 + 1  # 30 sentences and the needle
    assert absent.request["prompt"].count("。") == 30 and "secret" not in absent.request[
        "prompt"]
