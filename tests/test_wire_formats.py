"""Recorded response bodies of each runtime, served over real HTTP, read by the real client;
and the loopback servers checked against the real openai SDK."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from quantcheck import CollectSettings, collect, load_run
from quantcheck.lab.scripted import DIALECTS, ScriptedModel
from quantcheck.store.engines import ENGINES

from .conftest import FIXTURES, Serve, WritePrompts

CANBERRA = {"text": ["Can", "berra", "."], "logprob": [-0.0123, -1.2e-05, -0.3]}
LEGACY_CANBERRA = {"text": [" Can", "berra", "."], "logprob": [-0.0123, -1.2e-05, -0.3]}

CASES = [
    # fixture, dialect, api, stream, text, finish, tokens, first position's top-k
    ("vllm-chat.json", "vllm", "chat", False, "Canberra.", "stop", CANBERRA,
     [("Can", -0.0123), ("Syd", -4.51)]),
    ("vllm-chat-stream.sse", "vllm", "chat", True, "Canberra.", "stop", CANBERRA,
     [("Can", -0.0123), ("Syd", -4.51)]),
    ("vllm-completions.json", "vllm", "completions", False, " Canberra.", "stop",
     LEGACY_CANBERRA, [(" Can", -0.0123), (" Syd", -4.51)]),
    ("vllm-completions-stream.sse", "vllm", "completions", True, " Canberra.", "length",
     LEGACY_CANBERRA, [(" Can", -0.0123), (" Syd", -4.51)]),
    ("sglang-chat-stream.sse", "sglang", "chat", True, "Canberra.", "stop", CANBERRA,
     [("Can", -0.0123), ("Syd", -4.51)]),
    ("llama-cpp-python-completions.json", "llama-cpp-python", "completions", False,
     " Canberra.", "stop", LEGACY_CANBERRA, [(" Can", -0.0123), (" Syd", -4.51)]),
    ("llama-cpp-python-chat.json", "llama-cpp-python", "chat", False, "Canberra.", "stop",
     CANBERRA, [("Can", -0.0123), ("Syd", -4.51)]),
    ("llamacpp-chat-stream.sse", "llama.cpp", "chat", True, " Café", "length",
     {"text": [" Caf", "\ufffd", "\ufffd"], "logprob": [-0.25, -0.04, -0.001]},
     [(" Caf", -0.25), (" Coffee", -1.6)]),
    ("llamacpp-completions.json", "llama.cpp", "completions", False, " Café", "length",
     {"text": [" Caf", "\ufffd", "\ufffd"], "logprob": [-0.25, -0.04, -0.001]},
     [(" Caf", -0.25), (" Coffee", -1.6)]),
    # Ollama v0.33.0-rc2 (openai/openai.go): a finish chunk of its own, usage when asked
    ("ollama-chat.json", "ollama", "chat", False, "Canberra.", "stop", CANBERRA,
     [("Can", -0.0123), ("Syd", -4.51)]),
    ("ollama-chat-stream.sse", "ollama", "chat", True, "Canberra.", "stop", CANBERRA,
     [("Can", -0.0123), ("Syd", -4.51)]),
    # mlx-lm 0.32.0 (mlx_lm/server.py): each entry a copy of the first of its unsorted
    # alternatives, read as the top one; token strings are vocabulary pieces
    ("mlx-chat.json", "mlx", "chat", False, "Canberra.", "length", CANBERRA,
     [("Can", -0.0123), ("Syd", -4.51)]),
    ("mlx-completions.json", "mlx", "completions", False, " Canberra.", "length",
     {"text": ["\u0120Can", "berra", "."], "logprob": [-0.0123, -1.2e-05, -0.3]},
     [("\u0120Can", -0.0123), ("\u0120Syd", -4.51)]),
    # TGI 3.3.6-dev0 (router/src/lib.rs, chat.rs): entries without bytes, streamed too
    ("tgi-chat.json", "tgi", "chat", False, "Canberra.", "length", CANBERRA,
     [("Can", -0.0123), ("Syd", -4.51)]),
    ("tgi-chat-stream.sse", "tgi", "chat", True, "Canberra.", "length", CANBERRA,
     [("Can", -0.0123), ("Syd", -4.51)]),
    # TensorRT-LLM at 0076e93 (serve/openai_protocol.py, postprocess_handlers.py): every
    # model field written, null or not; alternatives with `top_logprobs: null`; streams
    # open with a role chunk and end with a usage chunk without choices
    ("tensorrt-llm-chat.json", "tensorrt-llm", "chat", False, "Canberra.", "stop", CANBERRA,
     [("Can", -0.0123), ("Syd", -4.51)]),
    ("tensorrt-llm-chat-stream.sse", "tensorrt-llm", "chat", True, "Canberra.", "stop",
     CANBERRA, [("Can", -0.0123), ("Syd", -4.51)]),
    ("tensorrt-llm-completions.json", "tensorrt-llm", "completions", False, " Canberra.",
     "stop", LEGACY_CANBERRA, [(" Can", -0.0123), (" Syd", -4.51)]),
    ("tensorrt-llm-completions-stream.sse", "tensorrt-llm", "completions", True,
     " Canberra.", "length", LEGACY_CANBERRA, [(" Can", -0.0123), (" Syd", -4.51)]),
]
# Answers that carry no logprobs however they are asked: the text, finish and usage kept
TEXT_ONLY = [
    # Ollama's /v1/completions drops the logprobs its engine made (ToCompletion)
    ("ollama-completions.json", "ollama", "completions", False, " Canberra.", "stop"),
    ("ollama-completions-stream.sse", "ollama", "completions", True, " Canberra.", "stop"),
    # mlx_lm.server streams no logprobs
    ("mlx-chat-stream.sse", "mlx", "chat", True, "Canberra.", "length"),
    ("mlx-completions-stream.sse", "mlx", "completions", True, " Canberra.", "length"),
    # TGI's completions carry none; its finish reasons read as the others name them
    ("tgi-completions.json", "tgi", "completions", False, " Canberra.", "stop"),
    ("tgi-completions-stream.sse", "tgi", "completions", True, " Canberra.", "stop"),
]


@pytest.mark.parametrize(("fixture", "dialect", "api", "stream", "text", "finish", "tokens",
                          "first_top"), CASES, ids=[c[0] for c in CASES])
def test_each_dialect_normalizes_to_one_record(
    serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
    fixture: str, dialect: str, api: str, stream: bool, text: str, finish: str,
    tokens: dict[str, list[object]], first_top: list[tuple[str, float]],
) -> None:
    kind = api + ("-stream" if stream else "")
    server = serve(dialect=dialect, replay={kind: (FIXTURES / "wire" / fixture).read_bytes()})
    field = "messages: [{role: user, content: hi}]" if api == "chat" else "prompt: hi"
    prompts = write_prompts(f"prompts:\n  - id: p\n    {field}\n")
    settings = CollectSettings(endpoint=server.url, label=dialect, stream=stream, top_logprobs=2,
                               preflight=False)  # a replayed body answers every probe alike
    collect([prompts], tmp_path / "run", settings)

    (record,) = list(load_run(tmp_path / "run").completions())
    assert record.error is None
    assert record.text == text
    assert record.finish_reason == finish
    assert record.tokens is not None
    assert record.tokens.text == tokens["text"]
    assert record.tokens.logprob == tokens["logprob"]
    assert record.tokens.top(0) == first_top  # sorted, cut to k (llama-cpp-python sends k+1)
    assert record.usage and record.usage["completion_tokens"] == 3
    if dialect == "llama.cpp":
        assert record.tokens.ids == [72163, 237, 243]
        assert record.tokens.raw_bytes == [None, [195], [169]]
        assert record.system_fingerprint == "b6123-2bd1b30f"
    else:
        assert record.tokens.ids is None and record.tokens.raw_bytes is None
    if stream:
        assert record.ttft_s is not None and record.ttft_s <= record.e2e_s  # type: ignore


@pytest.mark.parametrize(("fixture", "dialect", "api", "stream", "text", "finish"), TEXT_ONLY,
                         ids=[c[0] for c in TEXT_ONLY])
def test_an_answer_without_logprobs_keeps_its_text(
    serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
    fixture: str, dialect: str, api: str, stream: bool, text: str, finish: str,
) -> None:
    kind = api + ("-stream" if stream else "")
    server = serve(dialect=dialect, replay={kind: (FIXTURES / "wire" / fixture).read_bytes()})
    field = "messages: [{role: user, content: hi}]" if api == "chat" else "prompt: hi"
    collect([write_prompts(f"prompts:\n  - id: p\n    {field}\n")], tmp_path / "run",
            CollectSettings(endpoint=server.url, label=dialect, stream=stream, top_logprobs=2,
                            preflight=False))
    (record,) = list(load_run(tmp_path / "run").completions())
    assert (record.error, record.text, record.finish_reason) == (None, text, finish)
    assert record.tokens is None
    assert record.usage is not None
    assert {key: record.usage[key] for key in ("prompt_tokens", "completion_tokens",
                                               "total_tokens")} == {
        "prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}


def test_reasoning_fields_are_kept_apart_from_content(
    serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
) -> None:
    body = (FIXTURES / "wire" / "vllm-chat-reasoning-stream.sse").read_bytes()
    server = serve(replay={"chat-stream": body})
    prompts = write_prompts("prompts:\n  - {id: p, messages: [{role: user, content: hi}]}\n")
    collect([prompts], tmp_path / "run", CollectSettings(endpoint=server.url, label="r",
                                                         preflight=False))
    (record,) = list(load_run(tmp_path / "run").completions())
    assert record.text == ""
    assert record.reasoning == "need analysis there need analysis there"
    assert record.finish_reason == "length"
    assert record.tokens is None  # this stream carried no logprobs


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_openai_sdk_reads_the_lab_servers_and_agrees(
    serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
    dialect: str, stream: bool,
) -> None:
    """The loopback servers the tests use speak the wire format the real openai SDK
    parses into its own types; quantcheck's records say what the SDK says."""
    server = serve(ScriptedModel(responses={"hi": " Canberra is the capital."}), dialect)
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    request = {"model": "scripted-model", "messages": [{"role": "user", "content": "hi"}],
               "temperature": 0, "max_tokens": 16, "logprobs": True, "top_logprobs": 2}
    if stream:
        chunks = list(sdk.chat.completions.create(**request, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        entries = [e for c in chunks if c.choices and c.choices[0].logprobs
                   for e in c.choices[0].logprobs.content or []]
    else:
        choice = sdk.chat.completions.create(**request).choices[0]
        text = choice.message.content or ""
        entries = choice.logprobs.content or [] if choice.logprobs else []
    sdk.close()

    prompts = write_prompts("prompts:\n  - {id: p, messages: [{role: user, content: hi}], "
                            "max_tokens: 16}\n")
    collect([prompts], tmp_path / "run", CollectSettings(
        endpoint=server.url, label=dialect, stream=stream, top_logprobs=2))
    (record,) = list(load_run(tmp_path / "run").completions())
    assert record.text == text == " Canberra is the capital."
    profile = ENGINES[dialect]
    if not profile.sends_logprobs("chat", stream):  # MLX streams none
        assert record.tokens is None and not entries
        return
    assert record.tokens is not None
    tops = [sorted(e.top_logprobs, key=lambda t: -t.logprob) for e in entries]
    if profile.entry_is_an_alternative:  # MLX: the entry copies an unsorted alternative
        assert [e.token for e in entries] != [top[0].token for top in tops]
        entries = [top[0] for top in tops]
    assert record.tokens.text == [e.token for e in entries]
    assert record.tokens.logprob == [e.logprob for e in entries]
    assert record.tokens.top_text == [[t.token for t in top][:2] for top in tops]


def test_a_stream_cut_short_at_done_is_retried_not_kept(
    serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
) -> None:
    """llama-cpp-python ends a stream it interrupts for a newer request with [DONE] and
    no finish_reason: that record must not pass for a complete answer."""
    body = (FIXTURES / "wire" / "vllm-chat-stream.sse").read_bytes()
    cut = b"".join(line + b"\n\n" for line in body.split(b"\n\n")[:2]) + b"data: [DONE]\n\n"
    server = serve(replay={"chat-stream": cut})
    prompts = write_prompts("prompts:\n  - {id: p, messages: [{role: user, content: hi}]}\n")
    result = collect([prompts], tmp_path / "run", CollectSettings(
        endpoint=server.url, label="r", retries=1, preflight=False))
    assert result.failed == 1
    (record,) = list(load_run(tmp_path / "run").completions())
    assert "without a finish_reason" in str(record.error) and len(server.requests) == 2


# --- tool calls ---------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
TOOL_PROMPT = ("prompts:\n  - id: p\n    messages: [{role: user, content: two cities}]\n"
               f"    tools: {TOOLS}\n")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_recorded_llama_cpp_python_tool_call_is_recorded_once(
    serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
    stream: bool,
) -> None:
    """Recorded from llama-cpp-python's server (chatml-function-calling, the real Gemma 3
    270M, tool_choice forcing get_weather): it sends each call twice, as `tool_calls`
    and as the older `function_call`, and streams the name again with every piece."""
    name = "llama-cpp-python-chat-tools" + ("-stream.sse" if stream else ".json")
    server = serve(dialect="llama-cpp-python", replay={
        "chat-stream" if stream else "chat": (FIXTURES / "wire" / name).read_bytes()})
    collect([write_prompts(TOOL_PROMPT)], tmp_path / "run", CollectSettings(
        endpoint=server.url, label="lcp", stream=stream, top_logprobs=0, preflight=False))
    (record,) = list(load_run(tmp_path / "run").completions())
    assert record.error is None and record.finish_reason == "tool_calls"
    assert record.text == ""
    (call,) = record.tool_calls or []
    assert (call.name, call.arguments, call.parsed_arguments) == (
        "get_weather", '{ "city": "Paris" } ', {"city": "Paris"})
    assert call.id is not None and call.id.startswith("call__0_get_weather_")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_openai_sdk_assembles_the_lab_tool_calls_as_quantcheck_does(
    serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
    dialect: str, stream: bool,
) -> None:
    calls = [("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Rome"}')]
    server = serve(ScriptedModel(calls={"two cities": calls}), dialect)
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    request: dict[str, Any] = {"model": "scripted-model", "max_tokens": 32, "tools": TOOLS,
                               "messages": [{"role": "user", "content": "two cities"}]}
    if stream:
        with sdk.chat.completions.stream(**request) as events:
            message = events.get_final_completion().choices[0].message
    else:
        message = sdk.chat.completions.create(**request).choices[0].message
    sdk.close()
    sdk_calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or []]

    collect([write_prompts(TOOL_PROMPT)], tmp_path / "run", CollectSettings(
        endpoint=server.url, label=dialect, stream=stream, top_logprobs=2, preflight=False))
    (record,) = list(load_run(tmp_path / "run").completions())
    assert [(c.name, c.arguments) for c in record.tool_calls or []] == sdk_calls == calls
