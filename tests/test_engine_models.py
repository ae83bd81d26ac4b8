"""Wire conformance with the engines' own response models: answers built with vLLM's
and SGLang's pydantic classes (the versions pyproject's `engines` extra pins),
serialized the way their servers serialize them, served over loopback and collected:
every field quantcheck reads comes back. When a new engine version renames a field,
this is where we learn it.

How each server serializes (read in the installed packages):
- vLLM: a whole answer is FastAPI's `JSONResponse(content=response.model_dump())`; a
  chat stream chunk `data: {chunk.model_dump_json(exclude_unset=True, exclude_none=not
  chunk.choices)}`, a completions chunk `model_dump_json(exclude_unset=True)`, then
  `data: [DONE]`.
- SGLang: a whole answer is `ORJSONResponse(content=response.model_dump())`; a stream's
  content chunks come from its own `build_sse_content` (msgspec), the routing and usage
  chunks are `ChatCompletionStreamResponse(choices=[], ...).model_dump_json()`.
"""

from __future__ import annotations

import base64
import importlib
import importlib.util
import io
import sys
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quantcheck import CollectSettings, collect, load_run
from quantcheck.store.records.run_records import Completion
from quantcheck.wire.dialects import EventStream, StreamAccumulator

from .conftest import Serve, WritePrompts, skip_module_without_extra

try:
    from starlette.responses import JSONResponse

    with warnings.catch_warnings():  # vLLM imports torch, whose jit warns of deprecations
        warnings.simplefilter("ignore", DeprecationWarning)
        import vllm.entrypoints.openai.chat_completion.protocol as vllm_chat
        import vllm.entrypoints.openai.completion.protocol as vllm_completion
        from vllm.entrypoints.generate.base.protocol import DeltaFunctionCall, DeltaToolCall
except ImportError:
    skip_module_without_extra("vLLM's protocol modules are not installed (the engines "
                              "extra, then pip install --no-deps vllm==0.33.0)")


def sglang_module(name: str) -> types.ModuleType:
    """An SGLang module without running `sglang/__init__.py`, which imports torch and
    Triton for its GPU kernels; the OpenAI protocol and SSE modules need neither."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError("sglang")
    if "sglang" not in sys.modules:
        package = types.ModuleType("sglang")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["sglang"] = package
    return importlib.import_module(name)


try:
    sglang = sglang_module("sglang.srt.entrypoints.openai.protocol")
    sglang_sse = sglang_module("sglang.srt.entrypoints.openai.sse_utils")
    with warnings.catch_warnings():  # FastAPI deprecates the class SGLang still uses
        warnings.simplefilter("ignore", DeprecationWarning)
        from fastapi.responses import ORJSONResponse
except ImportError:
    skip_module_without_extra("SGLang's protocol module is not installed (pip install "
                              "--no-deps sglang==0.5.23)")

ENGINES = Path(__file__).parent / "engines.txt"  # the pins .ci/run installs
ENGINE_VERSIONS = dict(line.split("==") for line in ENGINES.read_text().splitlines()
                       if line and not line.startswith("#"))
TOKENS = [("Can", -0.0123, 4031), ("berra", -1.2e-05, 25470), (".", -0.3, 13)]
TOP = {"Can": [("Can", -0.0123), ("Syd", -4.51)], "berra": [("berra", -1.2e-05),
                                                           ("bera", -11.5)],
       ".": [(".", -0.3), (",", -1.4)]}
PROMPT_TOKENS, LAYERS, K = 4, 2, 2
ROUTING = np.arange((PROMPT_TOKENS + len(TOKENS) - 1) * LAYERS * K, dtype=np.int32).reshape(
    -1, LAYERS, K) % 64  # rows: the prompt's forward passes, then all but the last token's
CALL = ("get_weather", '{"city": "Paris"}')


def test_the_pinned_engine_versions_are_installed() -> None:
    from importlib.metadata import version
    assert {name: version(name) for name in ENGINE_VERSIONS} == ENGINE_VERSIONS


def npy(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array.astype(np.uint8))
    return base64.b64encode(buffer.getvalue()).decode()


# --- vLLM -------------------------------------------------------------------------------

def vllm_usage() -> Any:
    return vllm_chat.UsageInfo(prompt_tokens=PROMPT_TOKENS, completion_tokens=len(TOKENS),
                               total_tokens=PROMPT_TOKENS + len(TOKENS))


def vllm_entry(token: str, logprob: float) -> Any:
    return vllm_chat.ChatCompletionLogProbsContent(
        token=token, logprob=logprob, bytes=list(token.encode()),
        top_logprobs=[vllm_chat.ChatCompletionLogProb(token=t, logprob=v,
                                                      bytes=list(t.encode()))
                      for t, v in TOP[token]])


def vllm_chat_whole(routing: np.ndarray = ROUTING) -> bytes:
    message = vllm_chat.ChatMessage(role="assistant", content="Canberra.",
                                    reasoning="The capital is not Sydney.")
    response = vllm_chat.ChatCompletionResponse(
        model="m", usage=vllm_usage(), choices=[vllm_chat.ChatCompletionResponseChoice(
            index=0, message=message, finish_reason="stop",
            logprobs=vllm_chat.ChatCompletionLogProbs(content=[vllm_entry(t, v)
                                                               for t, v, _ in TOKENS]),
            token_ids=[i for _, _, i in TOKENS], routed_experts=npy(routing))])
    return bytes(JSONResponse(content=response.model_dump()).body)


def vllm_chat_stream() -> bytes:
    def chunk(choices: list[Any], usage: Any = None) -> str:
        built = vllm_chat.ChatCompletionStreamResponse(id="c", model="m", choices=choices,
                                                       **({"usage": usage} if usage else {}))
        data = built.model_dump_json(exclude_unset=True, exclude_none=not built.choices)
        return f"data: {data}\n\n"

    choice = vllm_chat.ChatCompletionResponseStreamChoice
    events = [chunk([choice(index=0, delta=vllm_chat.DeltaMessage(role="assistant",
                                                                  content=""))])]
    events.append(chunk([choice(index=0, delta=vllm_chat.DeltaMessage(
        reasoning="The capital is not Sydney."))]))
    for n, (token, logprob, token_id) in enumerate(TOKENS):
        events.append(chunk([choice(
            index=0, delta=vllm_chat.DeltaMessage(content=token), token_ids=[token_id],
            logprobs=vllm_chat.ChatCompletionLogProbs(content=[vllm_entry(token, logprob)]),
            **({"finish_reason": "stop"} if n == len(TOKENS) - 1 else {}))]))
    events.append(chunk([], vllm_usage()))
    return ("".join(events) + "data: [DONE]\n\n").encode()


def vllm_tool_stream() -> bytes:
    name, arguments = CALL
    pieces = [DeltaToolCall(index=0, id="call_1", type="function",
                            function=DeltaFunctionCall(name=name, arguments=""))]
    pieces += [DeltaToolCall(index=0, function=DeltaFunctionCall(arguments=part))
               for part in (arguments[:9], arguments[9:])]
    events = []
    for n, piece in enumerate(pieces):
        built = vllm_chat.ChatCompletionStreamResponse(
            id="c", model="m", choices=[vllm_chat.ChatCompletionResponseStreamChoice(
                index=0, delta=vllm_chat.DeltaMessage(tool_calls=[piece]),
                **({"finish_reason": "tool_calls"} if n == len(pieces) - 1 else {}))])
        events.append(f"data: {built.model_dump_json(exclude_unset=True)}\n\n")
    usage = vllm_chat.ChatCompletionStreamResponse(id="c", model="m", choices=[],
                                                   usage=vllm_usage())
    events.append(f"data: {usage.model_dump_json(exclude_unset=True, exclude_none=True)}\n\n")
    return ("".join(events) + "data: [DONE]\n\n").encode()


def vllm_completions_whole() -> bytes:
    logprobs = vllm_completion.CompletionLogProbs(
        text_offset=[0, 3, 8], token_logprobs=[v for _, v, _ in TOKENS],
        tokens=[t for t, _, _ in TOKENS], top_logprobs=[dict(TOP[t]) for t, _, _ in TOKENS])
    response = vllm_completion.CompletionResponse(
        model="m", usage=vllm_usage(), choices=[vllm_completion.CompletionResponseChoice(
            index=0, text="Canberra.", logprobs=logprobs, finish_reason="length",
            token_ids=[i for _, _, i in TOKENS], routed_experts=npy(ROUTING))])
    return bytes(JSONResponse(content=response.model_dump()).body)


def vllm_completions_stream() -> bytes:
    events = []
    for n, (token, logprob, _) in enumerate(TOKENS):
        built = vllm_completion.CompletionStreamResponse(
            id="c", model="m", choices=[vllm_completion.CompletionResponseStreamChoice(
                index=0, text=token, logprobs=vllm_completion.CompletionLogProbs(
                    text_offset=[0], token_logprobs=[logprob], tokens=[token],
                    top_logprobs=[dict(TOP[token])]),
                **({"finish_reason": "length"} if n == len(TOKENS) - 1 else {}))])
        events.append(f"data: {built.model_dump_json(exclude_unset=True)}\n\n")
    usage = vllm_completion.CompletionStreamResponse(id="c", model="m", choices=[],
                                                     usage=vllm_usage())
    events.append(f"data: {usage.model_dump_json(exclude_unset=False, exclude_none=True)}\n\n")
    return ("".join(events) + "data: [DONE]\n\n").encode()


# --- SGLang -----------------------------------------------------------------------------

def orjson_response(response: Any) -> bytes:
    with warnings.catch_warnings():  # FastAPI deprecates ORJSONResponse; SGLang uses it
        warnings.simplefilter("ignore")
        return bytes(ORJSONResponse(content=response.model_dump()).body)


def sglang_usage() -> Any:
    return sglang.UsageInfo(prompt_tokens=PROMPT_TOKENS, completion_tokens=len(TOKENS),
                            total_tokens=PROMPT_TOKENS + len(TOKENS))


def sglang_logprobs(tokens: list[tuple[str, float, int]]) -> Any:
    return sglang.ChoiceLogprobs(content=[sglang.ChatCompletionTokenLogprob(
        token=token, logprob=logprob, bytes=list(token.encode()),
        top_logprobs=[sglang.TopLogprob(token=t, logprob=v, bytes=list(t.encode()))
                      for t, v in TOP[token]]) for token, logprob, _ in tokens])


def sglang_routing(routing: np.ndarray = ROUTING) -> Any:
    return sglang.SglExt(routed_experts=base64.b64encode(routing.astype("<i4").tobytes())
                         .decode())


def sglang_chat_whole() -> bytes:
    message = sglang.ChatMessage(role="assistant", content="Canberra.",
                                 reasoning_content="The capital is not Sydney.")
    response = sglang.ChatCompletionResponse(
        id="c", model="m", usage=sglang_usage(), sglext=sglang_routing(),
        choices=[sglang.ChatCompletionResponseChoice(
            index=0, message=message, logprobs=sglang_logprobs(TOKENS),
            finish_reason="stop")])
    return orjson_response(response)


def sglang_chat_stream(routing: np.ndarray = ROUTING) -> bytes:
    events = [sglang_sse.build_sse_content(chunk_id="c", created=1, model="m", index=0,
                                           role="assistant", content="")]
    events.append(sglang_sse.build_sse_content(
        chunk_id="c", created=1, model="m", index=0,
        reasoning_content="The capital is not Sydney."))
    for n, token in enumerate(TOKENS):
        events.append(sglang_sse.build_sse_content(
            chunk_id="c", created=1, model="m", index=0, content=token[0],
            logprobs=sglang_logprobs([token]).model_dump(),
            finish_reason="stop" if n == len(TOKENS) - 1 else None))
    for extra in ({"sglext": sglang_routing(routing)}, {"usage": sglang_usage()}):
        chunk = sglang.ChatCompletionStreamResponse(id="c", created=1, model="m", choices=[],
                                                    **extra)
        events.append(f"data: {chunk.model_dump_json()}\n\n")
    return ("".join(events) + "data: [DONE]\n\n").encode()


def sglang_tool_whole() -> bytes:
    name, arguments = CALL
    message = sglang.ChatMessage(role="assistant", content=None, tool_calls=[
        sglang.ToolCall(id="call_1", index=0, function=sglang.FunctionResponse(
            name=name, arguments=arguments))])
    response = sglang.ChatCompletionResponse(
        id="c", model="m", usage=sglang_usage(), choices=[
            sglang.ChatCompletionResponseChoice(index=0, message=message,
                                                finish_reason="tool_calls")])
    return orjson_response(response)


def sglang_completions_whole() -> bytes:
    logprobs = sglang.LogProbs(text_offset=[0, 3, 8], token_logprobs=[v for _, v, _ in TOKENS],
                               tokens=[t for t, _, _ in TOKENS],
                               top_logprobs=[dict(TOP[t]) for t, _, _ in TOKENS])
    response = sglang.CompletionResponse(
        id="c", model="m", usage=sglang_usage(), sglext=sglang_routing(),
        choices=[sglang.CompletionResponseChoice(index=0, text="Canberra.", logprobs=logprobs,
                                                 finish_reason="length")])
    return orjson_response(response)


# --- the cases ----------------------------------------------------------------------------

Case = tuple[str, str, bool, Callable[[], bytes], dict[str, Any]]
CASES: list[Case] = [
    # dialect, api, stream, answer, what the record must hold
    ("vllm", "chat", False, vllm_chat_whole,
     {"reasoning": True, "ids": True, "routing": True, "finish": "stop"}),
    ("vllm", "chat", True, vllm_chat_stream, {"reasoning": True, "ids": True, "finish": "stop"}),
    ("vllm", "chat", True, vllm_tool_stream, {"call": True, "finish": "tool_calls"}),
    ("vllm", "completions", False, vllm_completions_whole,
     {"ids": True, "routing": True, "finish": "length"}),
    ("vllm", "completions", True, vllm_completions_stream, {"finish": "length"}),
    ("sglang", "chat", False, sglang_chat_whole,
     {"reasoning": True, "routing": True, "finish": "stop"}),
    # a stream carries SGLang's routing in a last chunk without choices (vLLM's none)
    ("sglang", "chat", True, sglang_chat_stream,
     {"reasoning": True, "routing": True, "finish": "stop"}),
    ("sglang", "chat", False, sglang_tool_whole, {"call": True, "finish": "tool_calls"}),
    ("sglang", "completions", False, sglang_completions_whole,
     {"routing": True, "finish": "length"}),
]


@pytest.mark.parametrize(("dialect", "api", "stream", "answer", "holds"), CASES,
                         ids=[f"{c[0]}-{c[3].__name__}" for c in CASES])
def test_an_engine_answer_built_by_the_engine_is_read_field_by_field(
        serve: Serve, write_prompts: WritePrompts,
        tmp_path: Path, dialect: str, api: str, stream: bool, answer: Callable[[], bytes],
        holds: dict[str, Any]) -> None:
    kind = api + ("-stream" if stream else "")
    server = serve(dialect=dialect, replay={kind: answer()})
    field = "messages: [{role: user, content: hi}]" if api == "chat" else "prompt: hi"
    collect([write_prompts(f"prompts:\n  - id: p\n    {field}\n")], tmp_path / "run",
            CollectSettings(endpoint=server.url, label=dialect, stream=stream, top_logprobs=2,
                            preflight=False, routed_experts=bool(holds.get("routing")),
                            routed_experts_shape=[LAYERS, K] if dialect == "sglang" else None))
    (record,) = list(load_run(tmp_path / "run").completions())
    assert record.error is None
    assert record.finish_reason == holds["finish"]
    assert record.usage and record.usage["prompt_tokens"] == PROMPT_TOKENS
    if holds.get("call"):
        assert_call(record)
        return
    assert record.text == "Canberra."
    assert record.reasoning == ("The capital is not Sydney." if holds.get("reasoning")
                                else None)
    tokens = record.tokens
    assert tokens is not None
    assert tokens.text == [t for t, _, _ in TOKENS]
    assert tokens.logprob == [v for _, v, _ in TOKENS]
    assert [tokens.top(n) for n in range(len(TOKENS))] == [TOP[t] for t, _, _ in TOKENS]
    assert tokens.ids == ([i for _, _, i in TOKENS] if holds.get("ids") else None)
    if holds.get("routing"):  # the rows that chose each generated token
        assert tokens.routing is not None
        assert np.array_equal(tokens.routing, ROUTING[PROMPT_TOKENS - 1:])
    else:
        assert tokens.routing is None


def assert_call(record: Completion) -> None:
    (call,) = record.tool_calls or []
    assert (call.name, call.arguments) == CALL
    assert call.parsed_arguments == {"city": "Paris"}


def test_sglang_streams_its_routing_in_a_last_chunk() -> None:
    stream, accumulator = EventStream(), StreamAccumulator(top_k=2)
    payloads = stream.feed(sglang_chat_stream()) + stream.close()
    accumulator.add([payload for payload in payloads if payload != b"[DONE]"])
    generation = accumulator.finish()
    assert generation.routing is not None
    assert np.array_equal(generation.routing, ROUTING.ravel())


UNUSABLE_ROUTING: dict[str, tuple[str, bool, Callable[[], bytes], str]] = {
    # dialect, stream, the engine's answer, why its routing is not kept
    "vllm-generated-rows-only": ("vllm", False,
                                 lambda: vllm_chat_whole(ROUTING[PROMPT_TOKENS - 1:]),
                                 "prompt + generated - 1"),
    "vllm-no-layers": ("vllm", False, lambda: vllm_chat_whole(ROUTING[:, :0]),
                       "holds no experts"),
    "sglang-stream-a-row-short": ("sglang", True, lambda: sglang_chat_stream(ROUTING[1:]),
                                  "prompt + generated - 1"),
}


@pytest.mark.parametrize("case", list(UNUSABLE_ROUTING), ids=list(UNUSABLE_ROUTING))
def test_engine_routing_without_a_row_per_forward_pass_is_unusable(
        serve: Serve, write_prompts: WritePrompts,
        tmp_path: Path, case: str) -> None:
    dialect, stream, answer, reason = UNUSABLE_ROUTING[case]
    server = serve(dialect=dialect, replay={"chat-stream" if stream else "chat": answer()})
    collect([write_prompts("prompts:\n  - {id: p, messages: [{role: user, content: hi}]}\n")],
            tmp_path / "run", CollectSettings(
                endpoint=server.url, label=dialect, stream=stream, top_logprobs=2,
                preflight=False, routed_experts=True, routed_experts_shape=[LAYERS, K]))
    (record,) = list(load_run(tmp_path / "run").completions())
    assert record.error is None and record.text == "Canberra."  # the answer is kept
    assert record.tokens is not None and record.tokens.routing is None
    assert reason in (record.routing_unusable or "")


def vllm_fingerprinted_stream() -> bytes:
    """vLLM stamps its fingerprint on the last chunk, the usage one when usage is asked."""
    stream = vllm_chat_stream().decode()
    usage = vllm_chat.ChatCompletionStreamResponse(
        id="c", model="m", choices=[], usage=vllm_usage(),
        system_fingerprint="vllm-0.33.0-1a2b3c4d")
    last = f"data: {usage.model_dump_json(exclude_unset=True, exclude_none=True)}\n\n"
    events = stream.split("\n\n")
    return ("\n\n".join(events[:-3]) + "\n\n" + last + "data: [DONE]\n\n").encode()


def vllm_fingerprinted_whole() -> bytes:
    response = vllm_chat.ChatCompletionResponse(
        model="m", usage=vllm_usage(), system_fingerprint="vllm-0.33.0-1a2b3c4d",
        choices=[vllm_chat.ChatCompletionResponseChoice(
            index=0, message=vllm_chat.ChatMessage(role="assistant", content="Canberra."),
            finish_reason="stop")])
    return bytes(JSONResponse(content=response.model_dump()).body)


def sglang_weighted_whole() -> bytes:
    """SGLang names the weights that answered in `metadata` (its weight_version)."""
    response = sglang.ChatCompletionResponse(
        id="c", model="m", usage=sglang_usage(), metadata={"weight_version": "v7"},
        choices=[sglang.ChatCompletionResponseChoice(
            index=0, message=sglang.ChatMessage(role="assistant", content="Canberra."),
            finish_reason="stop")])
    return orjson_response(response)


BACKENDS = [("vllm", True, vllm_fingerprinted_stream, ("m", "vllm-0.33.0-1a2b3c4d", None)),
            ("vllm", False, vllm_fingerprinted_whole, ("m", "vllm-0.33.0-1a2b3c4d", None)),
            ("sglang", False, sglang_weighted_whole, ("m", None, "v7"))]


@pytest.mark.parametrize(("dialect", "stream", "answer", "named"), BACKENDS,
                         ids=[c[2].__name__ for c in BACKENDS])
def test_the_backend_an_engine_answer_names_is_recorded(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, dialect: str,
        stream: bool, answer: Callable[[], bytes], named: tuple[str | None, ...]) -> None:
    """What tells two builds or weights behind one URL apart, as each engine sends it:
    vLLM's `system_fingerprint` (vllm-VERSION-HASH of its configuration, on a stream's
    last chunk), SGLang's `metadata.weight_version` (whole answers)."""
    server = serve(dialect=dialect, replay={"chat" + ("-stream" if stream else ""): answer()})
    collect([write_prompts("prompts:\n  - id: p\n    messages: [{role: user, content: hi}]\n")],
            tmp_path / "run", CollectSettings(endpoint=server.url, label=dialect,
                                              stream=stream, top_logprobs=2, preflight=False))
    (record,) = list(load_run(tmp_path / "run").completions())
    assert record.error is None
    assert (record.model, record.system_fingerprint, record.weight_version) == named
