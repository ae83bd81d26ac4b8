"""Property-based tests of everything that reads a server's answer: any bytes in, either
a record that stores and reads back exactly, or quantcheck's own error; nothing else.

Seeded and small enough for CI (a few seconds); `QUANTCHECK_FUZZ_EXAMPLES=5000` runs
longer (bench/README.md)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, event, given, seed, settings
from hypothesis import strategies as st

from quantcheck.errors import EndpointError, PromptFileError
from quantcheck.store.folders.run_dir import ServerInfo
from quantcheck.store.folders.token_columns import pack, unpack
from quantcheck.store.inputs.prompt_sets import load_prompts
from quantcheck.store.records.run_records import Completion, Expect, ToolCall, ToolCallExpect
from quantcheck.store.runtimes import (
    choose_model,
    context_length,
    identify_runtime,
    runtime_version,
)
from quantcheck.triage.cells import cell_from_server, cell_key
from quantcheck.triage.expects import check_answer, choice_of
from quantcheck.wire.dialects import (
    EventStream,
    Generation,
    MalformedResponse,
    StreamAccumulator,
    StreamError,
    metric_labels,
    parse_echo,
    parse_native_next,
    parse_prompt_logprobs,
    parse_response,
)

# The strategies below nest "anything" inside every field; hypothesis warns that
# their repr is long, which only matters when printing a failure.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
EXAMPLES = int(os.environ.get("QUANTCHECK_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.just(-0.0)
           | st.text(st.characters(codec="utf-8") | st.sampled_from(["\ud83d", "\0", "é"]),
                     max_size=6))
ANY_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                        max_leaves=12)


def shapes(wild: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Response bodies: well-typed ones with valid values (`wild=False`, most of what
    the fuzzer sends, so that the success path is exercised), or ones where any field
    may hold anything, NaN and infinities, out-of-range ids and bytes, lone surrogates."""

    def field(right: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(right, right, right, ANY_JSON) if wild else right

    token = st.text(max_size=4) | st.sampled_from(["\ufffd", "\0"] + (["\ud800"] if wild else []))
    logprob = st.floats(max_value=0.0, allow_nan=False, allow_infinity=False) | st.just(-0.0)
    if wild:
        logprob |= st.sampled_from([float("nan"), float("-inf"), float("inf"), 1e308,
                                    "NaN", "-Infinity", "Infinity", "inf", "-inf", "nan"])
    alternative = st.fixed_dictionaries({"token": field(token), "logprob": field(logprob)})
    entry = st.fixed_dictionaries(
        {"token": field(token), "logprob": field(logprob)},
        optional={"bytes": field(st.lists(st.integers(-5 if wild else 0, 300 if wild else 255),
                                          max_size=4)),
                  "id": field(st.integers(-3 if wild else 0, 2**64 if wild else 2**63 - 1)),
                  "top_logprobs": field(st.lists(alternative, max_size=4))})
    legacy = st.fixed_dictionaries({
        "tokens": field(st.lists(token, max_size=4)),
        "token_logprobs": field(st.lists(logprob, max_size=4)),
        "top_logprobs": field(st.lists(st.dictionaries(token, logprob, max_size=4),
                                       max_size=4))})
    function = st.fixed_dictionaries({}, optional={
        "name": field(st.sampled_from(["f", "get_weather", ""]) | st.none()),
        "arguments": field(st.text(max_size=6) | st.sampled_from([
            '{"a": 1}', "{", "null", '{"a": 123456789012345678901234567890}',
            "[" * 300 + "]" * 300, '{"a": "\\ud800"}', '{"a": 1e400}']))})
    tool_call = st.fixed_dictionaries({}, optional={
        "index": field(st.integers(0, 2) | st.none()), "id": field(st.text(max_size=3)),
        "type": field(st.just("function")), "function": field(function)})
    message = st.fixed_dictionaries({}, optional={"content": field(st.text(max_size=8)),
                                                  "reasoning_content": field(st.text(max_size=4)),
                                                  "tool_calls": field(st.lists(tool_call,
                                                                               max_size=2))})
    rest = {"finish_reason": field(st.sampled_from(["stop", "length", None])),
            "logprobs": field(st.fixed_dictionaries({}, optional={
                "content": field(st.lists(entry, max_size=4))}) | legacy)}
    if wild:
        choice = st.fixed_dictionaries({}, optional={
            "index": field(st.sampled_from([0, 0, 0, 1])), "message": field(message),
            "delta": field(message), "text": field(st.text(max_size=8)), **rest})
        choices = field(st.lists(choice, max_size=2))
    else:  # one choice carrying its answer, as every server sends
        choice = st.one_of(*(st.fixed_dictionaries({"index": st.just(0), key: value},
                                                   optional=rest)
                             for key, value in (("message", message), ("delta", message),
                                                ("text", st.text(max_size=8)))))
        choices = st.lists(choice, min_size=1, max_size=1)
    usage = st.dictionaries(st.sampled_from(["prompt_tokens", "completion_tokens"]),
                            field(st.integers(0, 2**66 if wild else 2**40)), max_size=2)
    metadata = st.fixed_dictionaries({}, optional={  # SGLang's
        "weight_version": field(st.text(max_size=4)), "weight_versions": ANY_JSON})
    return st.fixed_dictionaries({"choices": choices}, optional={
        "model": field(st.text(max_size=4)), "usage": field(usage),
        "error": (st.none() | ANY_JSON) if wild else st.none(),
        "system_fingerprint": field(st.text(max_size=4)), "metadata": field(metadata)})


BODY = st.one_of(shapes(wild=False), shapes(wild=False), shapes(wild=True))


def encoded(value: Any) -> bytes:
    """JSON as a careless server writes it: NaN and Infinity as bare words, lone
    surrogates escaped (json.dumps does both)."""
    return json.dumps(value).encode()


@st.composite
def damaged(draw: st.DrawFn, raw: bytes) -> bytes:
    """The bytes as sent, cut short, or with invalid UTF-8 spliced in."""
    how = draw(st.sampled_from(["whole"] * 6 + ["cut", "splice"]))
    if how == "cut" and raw:
        return raw[:draw(st.integers(0, len(raw) - 1))]
    if how == "splice":
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) + raw[at:]
    return raw


def assert_storable(generation: Generation) -> None:
    """What a parser lets through is written and read back exactly."""
    record = Completion("p", "h", 0, text=generation.text, reasoning=generation.reasoning,
                        usage=generation.usage, finish_reason=generation.finish_reason,
                        model=generation.model, tool_calls=generation.tool_calls or None,
                        system_fingerprint=generation.system_fingerprint,
                        weight_version=generation.weight_version, replica="http://r:1/v1")
    stored = orjson.loads(orjson.dumps(record.to_json(), option=orjson.OPT_APPEND_NEWLINE))
    back = Completion.from_json(stored)
    assert back.tool_calls == record.tool_calls
    # what names the backend comes back as sent; a weight version is text or absent
    assert (back.model, back.system_fingerprint, back.weight_version, back.replica) == (
        record.model, record.system_fingerprint, record.weight_version, record.replica)
    assert generation.weight_version is None or (isinstance(generation.weight_version, str)
                                                 and generation.weight_version)
    assert ("weight_version" in stored) == (generation.weight_version is not None)
    assert all(call.name for call in generation.tool_calls)
    tokens = generation.tokens
    assert all(math.isfinite(v) for v in tokens.logprob if v is not None)
    assert all(math.isfinite(v) for top in tokens.top_logprob for v in top)
    back = unpack(pack(tokens)).to_tokens()
    assert json.dumps(back.to_json()) == json.dumps(tokens.to_json())


@FUZZ
@seed(14)
@given(st.data(), BODY, st.integers(0, 3))
def test_a_whole_answer_parses_or_is_refused(data: st.DataObject, body: dict[str, Any],
                                             top_k: int) -> None:
    raw = data.draw(damaged(encoded(body)))
    try:
        generation = parse_response(raw, top_k)
    except (MalformedResponse, StreamError):
        event("refused")
        return
    event(f"parsed, {'with' if len(generation.tokens) else 'without'} tokens")
    assert_storable(generation)


@FUZZ
@seed(15)
@given(st.data(), st.lists(BODY, max_size=4), st.integers(0, 3))
def test_a_stream_split_anywhere_parses_or_is_refused(data: st.DataObject,
                                                      chunks: list[dict[str, Any]],
                                                      top_k: int) -> None:
    raw = b"".join(b"data: " + data.draw(damaged(encoded(c))) + b"\n\n" for c in chunks)
    raw += data.draw(st.sampled_from([b"data: [DONE]\n\n", b"", b"data: [DO"]))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
    events, payloads = EventStream(), []
    for start, end in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        payloads += events.feed(raw[start:end])
    payloads += events.close()
    whole = EventStream()
    assert payloads == whole.feed(raw) + whole.close()  # the split never matters
    accumulator = StreamAccumulator(top_k)
    accumulator.add([p for p in payloads if not p.startswith(b"[DONE]")])
    try:
        generation = accumulator.finish()
    except (MalformedResponse, StreamError):
        event("refused")
        return
    event(f"parsed, {'with' if len(generation.tokens) else 'without'} tokens")
    assert_storable(generation)


ALTERNATIVES = st.lists(st.tuples(st.text(max_size=3), st.none() | st.floats(-30, 0)),
                        max_size=6)
ENTRIES = st.lists(st.tuples(st.text(max_size=3), ALTERNATIVES,
                             st.none() | st.just("utf-8") | st.lists(st.integers(0, 255),
                                                                      max_size=3)),
                   min_size=1, max_size=12)


@FUZZ
@seed(16)
@given(ENTRIES, st.integers(0, 4))
def test_chat_alternatives_come_out_ranked_and_bytes_kept_where_they_differ(
        entries: list[tuple[str, list[tuple[str, float | None]], Any]], top_k: int) -> None:
    """Each position's alternatives: those with a logprob, highest first (a stable sort:
    ties keep the server's order), cut to k; a token's bytes kept where they are not its
    text in UTF-8. The same whether the server sent them ranked or not."""
    sent = [{"token": token, "logprob": -0.5,
             "bytes": list(token.encode()) if raw == "utf-8" else raw,
             "top_logprobs": [{"token": t, "logprob": v} for t, v in alternatives]}
            for token, alternatives, raw in entries]
    body = {"choices": [{"index": 0, "message": {"content": "x"},
                         "logprobs": {"content": sent}, "finish_reason": "stop"}]}
    tokens = parse_response(orjson.dumps(body), top_k).tokens
    ranked = []
    for _, alternatives, _ in entries:
        kept = sorted([(t, v) for t, v in alternatives if v is not None], key=lambda p: -p[1])
        ranked.append(kept[:top_k] if 0 < top_k < len(kept) else kept)
    assert tokens.top_text == [[t for t, _ in row] for row in ranked]
    assert tokens.top_logprob == [[v for _, v in row] for row in ranked]
    differing = [e["bytes"] if e["bytes"] is not None
                 and e["bytes"] != list(e["token"].encode()) else None for e in sent]
    assert tokens.raw_bytes == (differing if any(d is not None for d in differing) else None)


LOGPROBS = (st.floats(allow_nan=True, allow_infinity=True) | st.floats(-30, 0)
            | st.sampled_from([0.0, -0.0, 0.01, 0.02, -1e308]))


def as_sent(value: float | None) -> float | str | None:
    """A value as a server sends it: NaN and the infinities as the strings some send."""
    if value is None or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


@FUZZ
@seed(17)
@given(st.lists(st.tuples(LOGPROBS, st.lists(st.none() | LOGPROBS, max_size=5)),
                min_size=1, max_size=8))
def test_an_answer_is_refused_exactly_when_a_logprob_is_no_log_probability(
        positions: list[tuple[float, list[float | None]]]) -> None:
    """Refused when a chosen or an alternative's logprob (one that is sent: None is left
    out) is NaN, infinite or above 0.01, in any order the alternatives come; kept as
    sent otherwise."""
    sent = [{"token": "t", "logprob": as_sent(chosen), "top_logprobs": [
        {"token": f"a{n}", "logprob": as_sent(v)} for n, v in enumerate(top)]}
        for chosen, top in positions]
    body = {"choices": [{"index": 0, "message": {"content": "x"},
                         "logprobs": {"content": sent}, "finish_reason": "stop"}]}
    values = [v for chosen, top in positions for v in [chosen, *top] if v is not None]
    wrong = [v for v in values if not (math.isfinite(v) and v <= 0.01)]
    try:
        tokens = parse_response(orjson.dumps(body), 0).tokens
    except MalformedResponse as exc:
        assert wrong, exc
        return
    assert not wrong
    assert tokens.logprob == [chosen for chosen, _ in positions]
    assert [sorted(top) for top in tokens.top_logprob] == [
        sorted(v for v in top if v is not None) for _, top in positions]


INFO = st.fixed_dictionaries({}, optional={
    "models": (st.lists(st.fixed_dictionaries(
        {"id": st.sampled_from(["m", "x"]) | ANY_JSON},
        optional={"owned_by": st.sampled_from(["vllm", "me", "sglang"]) | ANY_JSON,
                  "max_model_len": ANY_JSON}) | ANY_JSON, max_size=3) | ANY_JSON),
    "version": ANY_JSON, "server_info": ANY_JSON, "props": ANY_JSON,
    "metrics": st.fixed_dictionaries({"vllm:cache_config_info": ANY_JSON}) | ANY_JSON})


def mostly(right: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`right` nine times in ten, anything else the tenth."""
    return st.integers(0, 9).flatmap(lambda n: right if n else ANY_JSON)


ALTERNATIVE = st.fixed_dictionaries(
    {"id": mostly(st.integers(0, 40)), "logprob": mostly(st.floats(max_value=0))},
    optional={"token": mostly(st.text(max_size=3)), "bytes": ANY_JSON})
NATIVE = mostly(st.fixed_dictionaries({"completion_probabilities": mostly(st.lists(
    mostly(st.fixed_dictionaries({}, optional={
        "top_logprobs": mostly(st.lists(mostly(ALTERNATIVE), max_size=5))})), max_size=2))},
    optional={"content": ANY_JSON}))


@FUZZ
@seed(19)
@given(NATIVE, st.integers(0, 40), st.integers(1, 5))
def test_a_native_completion_answer_scores_or_is_refused(answer: Any, token: int,
                                                         top_k: int) -> None:
    try:
        own, (texts, logprobs) = parse_native_next(answer, token, "<A's>", top_k)
    except MalformedResponse:
        event("refused")
        return
    event("scored")
    assert len(texts) == len(logprobs) <= top_k
    assert logprobs == sorted(logprobs, reverse=True)
    assert all(not math.isnan(v) and v != math.inf for v in logprobs)
    assert (own is None) == ("<A's>" not in texts)
    assert own is None or own in logprobs


@FUZZ
@seed(16)
@given(INFO)
def test_any_server_description_is_read_without_error(info: dict[str, Any]) -> None:
    def answer(value: Any) -> Any:
        """As the client reads an info endpoint: orjson, or nothing when not JSON."""
        try:
            return orjson.loads(json.dumps(value))
        except orjson.JSONDecodeError:
            return None

    listed = answer(info.get("models"))
    server = ServerInfo(  # what the client keeps of /v1/models, and the raw answers
        models=[m for m in listed if isinstance(m, dict) and isinstance(m.get("id"), str)]
        if isinstance(listed, list) else [],
        version=answer(info.get("version")), server_info=answer(info.get("server_info")),
        props=answer(info.get("props")),
        answers={"/metrics": answer(info.get("metrics"))} if "metrics" in info else {})
    server.runtime = identify_runtime(server)
    server.runtime_version = runtime_version(server)
    cell = cell_from_server(server, "m", 1)
    assert context_length(server, "m") is None or context_length(server, "m") > 0
    assert isinstance(cell_key(cell), str)
    orjson.dumps(cell)
    orjson.dumps(msgspec.to_builtins(server))  # the manifest can hold it
    try:
        choose_model(server.models, None, "http://x")
    except EndpointError:
        pass


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


METRIC = "vllm:cache_config_info"


@FUZZ
@seed(17)
@given(st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
                       st.text(max_size=12), max_size=5),
       st.text(max_size=120), st.integers(0, 400))
def test_a_metrics_page_gives_its_labels_back_or_nothing(labels: dict[str, str], noise: str,
                                                         cut: int) -> None:
    """Any label values (quotes, backslashes, line breaks escaped as Prometheus escapes
    them) come back as written; a page cut anywhere or full of noise gives labels or
    None, never an error."""
    line = METRIC + "{" + ",".join(f'{k}="{_escaped(v)}"' for k, v in labels.items()) + "} 1"
    page = "\n".join(n for n in noise.replace(METRIC, "").split("\n")) + "\n" + line + "\n"
    assert metric_labels(page, METRIC) == labels
    found = metric_labels(page[:cut] + noise, METRIC)
    assert found is None or all(isinstance(v, str) for v in found.values())


@pytest.mark.parametrize("k", [70_000], ids=["counts-beyond-uint16"])
def test_more_alternatives_than_uint16_come_back_exactly(k: int) -> None:
    from quantcheck.store.records.run_records import Tokens

    tokens = Tokens()
    tokens.append("a", -0.5, [f"t{n}" for n in range(k)], [-0.5 - n for n in range(k)])
    tokens.append("b", -1.0, ["b"], [-1.0])
    back = unpack(pack(tokens)).to_tokens()
    assert back.top_text == tokens.top_text and back.top_logprob == tokens.top_logprob


def test_token_ids_beyond_int32_come_back_exactly() -> None:
    from quantcheck.store.records.run_records import Tokens

    tokens = Tokens()
    for token_id in (0, 2**31, 2**63 - 1):
        tokens.append("a", -0.5, ["a"], [-0.5], token_id=token_id)
    assert unpack(pack(tokens)).to_tokens().ids == [0, 2**31, 2**63 - 1]


# --- tool calls and expectations ----------------------------------------------------

CALL = st.tuples(st.sampled_from(["get_weather", "f", "send_email"]),
                 st.text(max_size=12) | st.builds(json.dumps, ANY_JSON))


@FUZZ
@seed(17)
@given(st.data(), st.lists(CALL, min_size=1, max_size=3), st.sampled_from(
    ["vllm", "sglang", "llama.cpp"]))
def test_streamed_call_pieces_assemble_to_the_calls_however_split(
        data: st.DataObject, calls: list[tuple[str, str]], style: str) -> None:
    payloads = []
    for index, (name, arguments) in enumerate(calls):
        first: dict[str, Any] = {"index": index, "id": f"c{index}", "type": "function",
                                 "function": {"name": name}}
        if style != "vllm":
            first["function"]["arguments"] = ""
        pieces = [first]
        cuts = sorted(data.draw(st.lists(st.integers(0, len(arguments)), max_size=4)))
        for start, end in zip([0, *cuts], [*cuts, len(arguments)], strict=True):
            piece: dict[str, Any] = {"index": index,
                                     "function": {"arguments": arguments[start:end]}}
            if style == "sglang":
                piece.update(id=None, type="function")
                piece["function"]["name"] = None
            pieces.append(piece)
        payloads += [orjson.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [p]}}]})
                     for p in pieces]
    payloads.append(orjson.dumps({"choices": [{"index": 0, "delta": {},
                                               "finish_reason": "tool_calls"}]}))
    accumulator = StreamAccumulator(0)
    accumulator.add(payloads)
    generation = accumulator.finish()
    assert [(c.name, c.arguments) for c in generation.tool_calls] == calls
    for call in generation.tool_calls:
        try:  # JSON the run's lines hold exactly: no NaN, 64-bit integers
            expected = json.loads(call.arguments, parse_constant=_no_constant)
            orjson.dumps(expected)
        except (ValueError, orjson.JSONEncodeError):
            expected = None
        assert json.dumps(call.parsed_arguments) == json.dumps(expected)


def _no_constant(name: str) -> Any:
    raise ValueError(name)


EXPECT = Expect(contains=["x"], any_of=["y", "z"], not_contains=["q"], regex="a+b",
                number=3.0, tolerance=0.5, json=True, json_schema={"type": "object",
                "required": ["a"], "properties": {"a": {"type": "integer", "minimum": 0}}},
                tool_call=[ToolCallExpect("f", {"type": "object"}, {"a": 1}),
                           ToolCallExpect("get_weather")], choice="B")


@FUZZ
@seed(18)
@given(st.text(max_size=40) | st.builds(json.dumps, ANY_JSON),
       st.lists(st.builds(ToolCall, st.sampled_from(["f", "get_weather", "x"]),
                          st.text(max_size=12) | st.builds(json.dumps, ANY_JSON)), max_size=3))
def test_every_check_judges_any_answer(text: str, calls: list[ToolCall]) -> None:
    results = check_answer(EXPECT, text, calls)
    assert [r.check for r in results] == ["contains", "any_of", "not_contains", "regex",
                                          "number", "json", "json_schema", "tool_call",
                                          "choice"]
    assert all(r.status in ("pass", "fail") and (r.status == "pass") == (not r.reason)
               for r in results)
    assert choice_of(text) in (None, *"ABCDEFGHIJ")


EXPECT_SPECS = st.dictionaries(
    st.sampled_from(["contains", "json", "json_schema", "tool_call", "ordered", "code",
                     "choice", "number", "unknown"]),
    ANY_JSON | st.sampled_from([{"name": "f"}, {"type": "object"}, "B", True,
                                {"entry_point": "f", "tests": "assert f()"}]), max_size=3)


@FUZZ
@seed(19)
@given(EXPECT_SPECS)
def test_any_expect_in_a_prompt_file_loads_or_names_file_line_and_field(
        tmp_path_factory: pytest.TempPathFactory, spec: dict[str, Any]) -> None:
    path = tmp_path_factory.mktemp("prompts") / "p.yaml"
    path.write_text(json.dumps({"prompts": [{"id": "p", "prompt": "hi", "expect": spec}]}))
    try:
        load_prompts([path])
    except PromptFileError as exc:
        message = str(exc)  # YAML cannot read every JSON escape (surrogate pairs)
        assert message.startswith(f"{path}:") and ("field 'expect" in message
                                                   or "not valid YAML" in message)


NOT_FINITE = ["NaN", "-Infinity", "Infinity", "inf", 800.0]  # 800: no log-probability


@pytest.mark.parametrize("value", NOT_FINITE)
def test_the_scoring_parsers_refuse_a_logprob_that_is_not_finite(value: str | float) -> None:
    prompt_logprobs = {"choices": [{"prompt_logprobs": [None, {
        "7": {"logprob": value, "rank": 1, "decoded_token": "x"}}]}]}
    echo = {"choices": [{"logprobs": {"tokens": ["a", "b"], "token_logprobs": [None, -0.5],
                                      "top_logprobs": [None, {"b": -0.5, "c": value}]}}]}
    native = {"completion_probabilities": [{"top_logprobs": [
        {"id": 7, "token": "x", "logprob": value}]}]}
    for parse in (lambda: parse_prompt_logprobs(prompt_logprobs, [7], 1, 2),
                  lambda: parse_echo(echo, 1, 2), lambda: parse_native_next(native, 7, "x", 2)):
        with pytest.raises(MalformedResponse, match="not a finite number"):
            parse()


# --- data files: any line or row shape is a prompt or one error naming where ----------

MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "tool"]) | ANY_JSON},
    optional={"content": st.text(max_size=8) | st.none() | ANY_JSON,
              "tool_calls": ANY_JSON})
BODY_FIELDS = {
    "messages": st.lists(MESSAGE, max_size=3) | ANY_JSON,
    "prompt": st.text(max_size=8) | ANY_JSON,
    "max_tokens": st.integers(-2, 2**40) | ANY_JSON,
    "max_completion_tokens": st.integers(-2, 100) | ANY_JSON,
    "tools": st.just([{"type": "function", "function": {"name": "f"}}]) | ANY_JSON,
    "tool_choice": st.sampled_from(["auto", "none", {"function": {"name": "f"}}]) | ANY_JSON,
    "stop": st.text(max_size=3) | ANY_JSON,
    "id": st.text(max_size=4) | ANY_JSON, "expect": EXPECT_SPECS | ANY_JSON,
    "extra": ANY_JSON, "haystack": ANY_JSON, "tags": ANY_JSON, "category": ANY_JSON,
    "response_format": ANY_JSON, "temperature": ANY_JSON, "model": ANY_JSON,
}
BODIES = st.fixed_dictionaries({}, optional=BODY_FIELDS)
LINES = (BODIES
         | st.fixed_dictionaries({"custom_id": st.text(max_size=4) | ANY_JSON},
                                 optional={"url": st.sampled_from(["/v1/chat/completions",
                                                                   "/v1/completions"])
                                           | ANY_JSON,
                                           "method": st.just("POST") | ANY_JSON,
                                           "body": BODIES | ANY_JSON})
         | st.dictionaries(st.text(max_size=6), ANY_JSON, max_size=4)
         | ANY_JSON)


def _loads_or_names_where(path: Path, options: Any = None) -> None:
    try:
        prompts = load_prompts([path], options)
    except PromptFileError as exc:
        message = str(exc)
        assert message.startswith(str(path)) and "\n" not in message, message
        event("refused")
        return
    assert prompts and all(p.id and p.hash and p.api in ("chat", "completions")
                           for p in prompts)
    event("a prompt")


@FUZZ
@seed(23)
@given(st.lists(LINES, min_size=1, max_size=3))
def test_any_jsonl_line_is_a_prompt_or_names_file_line_and_field(
        tmp_path_factory: pytest.TempPathFactory, lines: list[Any]) -> None:
    path = tmp_path_factory.mktemp("data") / "lines.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line)
                              + b"\n" for line in _json_safe(lines)))
    _loads_or_names_where(path)


CELLS = (st.text(max_size=10) | st.sampled_from(
    ["#### 72", "a 1,200 b 3", "B", "b", "2", "-1", "11", '["x", "y"]', "['x' 'y']",
     "{\"contains\": \"x\"}", "[1, [2]]", "{prompt}", "", " "]))
MAPS = st.lists(st.sampled_from(
    ["id=a", "prompt=a", "prompt=b", "messages=b", "choices=b", "choices=a,b,c",
     "system=c", "category=c", "expect=c", "expect.number=b:after-hashes",
     "expect.number=c:last-number", "expect.number=a", "expect.choice=c",
     "expect.choice=c:index-from-1", "expect.choice=b:letter", "expect.contains=c",
     "expect.any_of=b", "expect.regex=c", "expect.not_contains=b:after-hashes"]),
    max_size=5)


@FUZZ
@seed(29)
@given(st.lists(st.fixed_dictionaries({"a": CELLS, "b": CELLS, "c": CELLS}), min_size=1,
                max_size=3), MAPS, st.sampled_from([None, "gsm8k", "mmlu"]))
def test_any_csv_row_and_mapping_is_a_prompt_or_names_file_row_and_field(
        tmp_path_factory: pytest.TempPathFactory, rows: list[dict[str, str]],
        column_map: list[str], preset: str | None) -> None:
    import csv

    from quantcheck.store.inputs.column_maps import ColumnMapError, parse_map
    from quantcheck.store.inputs.prompt_sets import RequestOptions, SourceOptions

    try:
        parse_map(column_map, preset)
    except ColumnMapError:
        event("mapping refused")  # the command line says so before reading a file
        return
    path = tmp_path_factory.mktemp("data") / "rows.csv"
    with path.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.DictWriter(stream, ["a", "b", "c"])
        writer.writeheader()
        writer.writerows({k: v.replace("\0", "") for k, v in row.items()} for row in rows)
    _loads_or_names_where(path, RequestOptions(source=SourceOptions(map=column_map,
                                                                    preset=preset)))


def _json_safe(value: Any) -> Any:
    """What a JSON file can hold: orjson writes no lone surrogates, NaN as null."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not -2**63 <= value < 2**64:
        return str(value)
    if isinstance(value, dict):
        return {_json_safe(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


# --- the proxy rules, the first-output test, a run's and a report's files -------------

def as_json(value: Any) -> bytes:
    """Any value as JSON text, big integers, NaN and lone surrogates kept as written."""
    return json.dumps(value).encode("utf-8", "surrogatepass")


URL_PIECES = st.sampled_from(["http://", "https://", "socks5://", "", "[", "]", "::1", ":",
                              "@", "/", "?", "#", "%", "localhost", "127.0.0.1", "gpu",
                              ".internal", "99999", "8000", "a:b", "\0", "é", " "])


@FUZZ
@given(st.lists(URL_PIECES, max_size=8).map("".join), st.text(max_size=12),
       st.sampled_from(["", "gpu", "*", ".internal,127.0.0.1", "[", ":"]))
def test_any_endpoint_and_proxy_setting_choose_a_proxy_or_none(
        url: str, proxy: str, no_proxy: str) -> None:
    """proxy_for reads the endpoint and the environment's HTTP_PROXY and NO_PROXY: a
    proxy's URL or None (direct), or the ValueError api_base turns into a clear error."""
    from quantcheck.wire.proxies import is_loopback, proxy_for

    saved = {key: os.environ.get(key) for key in ("HTTP_PROXY", "http_proxy", "NO_PROXY",
                                                  "no_proxy", "HTTPS_PROXY", "https_proxy")}
    try:
        for key in saved:
            os.environ.pop(key, None)
        if "\0" not in proxy:
            os.environ["HTTP_PROXY"] = proxy
        os.environ["NO_PROXY"] = no_proxy
        assert isinstance(is_loopback(url), bool)
        try:
            chosen = proxy_for(url)
        except ValueError:
            return  # urllib cannot split it: the endpoint was refused before this
        assert chosen is None or isinstance(chosen, str)
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value


@FUZZ
@given(st.binary(max_size=64) | ANY_JSON.map(as_json)
       | st.builds(lambda choices: as_json({"choices": choices}), ANY_JSON))
def test_any_stream_payload_is_output_or_not(payload: bytes) -> None:
    from quantcheck.wire.dialects import first_output

    assert isinstance(first_output(payload), bool)


RUN_FILE_BYTES = (st.binary(max_size=80) | ANY_JSON.map(lambda v: as_json(v) + b"\n")
                  | st.lists(ANY_JSON.map(lambda v: as_json(v) + b"\n"), max_size=3)
                  .map(b"".join))


@FUZZ
@given(st.sampled_from(["manifest.json", "prompts.jsonl", "completions.jsonl",
                        "tokens.bin"]), RUN_FILE_BYTES)
def test_any_bytes_in_a_run_file_are_read_or_one_run_format_error(name: str,
                                                                  data: bytes) -> None:
    """A run whose file holds anything: compare's side reads it or refuses it naming
    the file, never another exception."""
    import tempfile

    from quantcheck.errors import RunFormatError
    from quantcheck.triage.sides import load_side

    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        (run / "manifest.json").write_text('{"parameters": {"repeats": 1}}')
        (run / "prompts.jsonl").write_text('{"id": "p", "category": "c", "api": '
                                           '"completions", "hash": "h", "request": '
                                           '{"prompt": "p"}}\n')
        (run / "completions.jsonl").write_text(
            '{"prompt_id": "p", "repeat": 0, "text": "x", "tokens": {"file": '
            '"tokens.bin", "offset": 0, "length": 4, "n_tokens": 1}}\n')
        (run / name).write_bytes(data)
        try:
            with load_side(run) as side:
                for prompt_id in side.prompts:
                    for record in side.records(prompt_id) or ():
                        side.tokens_at(record.offset)
        except RunFormatError as exc:
            assert str(run) in str(exc)


@FUZZ
@given(st.sampled_from(["summary.json", "pairs.csv", "reviews/r.json", "approvals.json"]),
       RUN_FILE_BYTES | st.text(max_size=80).map(str.encode))
def test_any_bytes_in_a_report_file_are_read_or_one_clear_error(name: str,
                                                                data: bytes) -> None:
    import tempfile

    from quantcheck.errors import QuantcheckError
    from quantcheck.store.folders.report_dir import read_pair_rows, read_summary
    from quantcheck.store.folders.reviews import load_reviews
    from quantcheck.store.inputs.rubric import load_rubric
    from quantcheck.triage.approvals import load_approvals

    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder)
        (report / "reviews").mkdir()
        (report / name).write_bytes(data)
        try:
            if name == "summary.json":
                read_summary(report)
            elif name == "pairs.csv":
                read_pair_rows(report)
            elif name == "approvals.json":
                load_approvals(report / name)
            else:
                load_reviews(report, "identity", load_rubric(None), {"p"})
        except QuantcheckError as exc:
            assert name in str(exc)
