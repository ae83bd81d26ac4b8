"""collect against servers that misbehave on purpose (tests/hostile.py): every bad answer
is a failed record with its reason, never a crash, a hang or a wrong success."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import pytest

from quantcheck import CollectSettings, collect, compare_runs, load_run
from quantcheck.errors import EndpointError
from quantcheck.store.folders.report_dir import read_summary
from quantcheck.store.folders.run_dir import RecordNotStorable, RunWriter
from quantcheck.store.folders.token_columns import pack
from quantcheck.store.records.run_records import Completion, Tokens

from .conftest import WritePrompts
from .hostile import (
    MODELS,
    HostileServer,
    Request,
    answer,
    chat_body,
    chat_chunk,
    good,
    http,
    sse,
    stream_head,
    trickle,
)

ONE_PROMPT = """
prompts:
  - {id: capital, messages: [{role: user, content: "Capital of Australia?"}]}
"""
MANY_PROMPTS = "prompts:\n" + "".join(
    f'  - {{id: p{n}, messages: [{{role: user, content: "Question {n}?"}}]}}\n'
    for n in range(200))


@pytest.fixture
def hostile() -> Iterator[Callable[..., HostileServer]]:
    servers: list[HostileServer] = []

    def start(*args: Any, **kwargs: Any) -> HostileServer:
        server = HostileServer(*args, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def settings(server: HostileServer, **overrides: Any) -> CollectSettings:
    options: dict[str, Any] = dict(endpoint=server.url, label="b", preflight=False,
                                   concurrency=1, retries=1, top_logprobs=0, timeout=10.0)
    return CollectSettings(**{**options, **overrides})


def lines(run_dir: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (run_dir / "completions.jsonl").read_bytes()
            .splitlines()]


def with_logprobs(entries: list[dict[str, Any]] | bytes) -> bytes:
    """A chat answer whose logprobs.content is `entries` (raw bytes allowed)."""
    raw = entries if isinstance(entries, bytes) else json.dumps(entries).encode()
    return (b'{"model": "m", "choices": [{"index": 0, "message": {"content": " x"}, '
            b'"finish_reason": "stop", "logprobs": {"content": ' + raw + b'}}]}')


ENTRY = {"token": " x", "logprob": -0.5, "top_logprobs": [{"token": " x", "logprob": -0.5}]}
BAD_ANSWERS = {
    "cut-json": (b"[1, 2", "malformed JSON"),
    "nan-logprob": (with_logprobs(b'[{"token": " x", "logprob": NaN}]'), "malformed JSON"),
    "typed-field-then-cut-line": (b'{"model": 5, "choices": [{"ind', "malformed JSON"),
    "usage-beyond-64-bits": (json.dumps(chat_body(usage={"prompt_tokens": 2**70})).encode(),
                             "usage"),
    "token-id-2^63": (with_logprobs([{**ENTRY, "id": 2**63}]), "token id"),
    "negative-token-id": (with_logprobs([{**ENTRY, "id": -7}]), "token id"),
    "bytes-beyond-255": (with_logprobs([{**ENTRY, "bytes": [300]}]), "bytes"),
    "no-choices": (b'{"model": "m"}', "no choices"),
    "empty-choices": (b'{"model": "m", "choices": []}', "no choices"),
    "two-choices-index-0": (json.dumps({"choices": [
        {"index": 0, "message": {"content": "a"}, "finish_reason": "stop"},
        {"index": 0, "message": {"content": "b"}, "finish_reason": "stop"}]}).encode(),
        "choice"),
    "two-choices-no-index": (json.dumps({"choices": [
        {"message": {"content": "a"}, "finish_reason": "stop"},
        {"message": {"content": "b"}, "finish_reason": "stop"}]}).encode(), "choice"),
    "html": (b"<html><body>502 Bad Gateway</body></html>", "text/html"),
    "a-list": (b"[]", "shape"),
    # non-finite logprobs, as strings (decoded leniently) or literals: never stored
    "NaN-string-logprob": (with_logprobs([{**ENTRY, "logprob": "NaN"}]), "finite number"),
    "-Infinity-string-alternative": (with_logprobs([{**ENTRY, "top_logprobs": [
        {"token": " x", "logprob": -0.5}, {"token": " y", "logprob": "-Infinity"}]}]),
        "finite number"),
    "inf-string-logprob": (with_logprobs([{**ENTRY, "logprob": "inf"}]), "finite number"),
    "positive-logprob": (with_logprobs([{**ENTRY, "logprob": 800.0}]), "at most 0"),
    "positive-alternative": (with_logprobs([{**ENTRY, "top_logprobs": [
        {"token": " x", "logprob": -0.5}, {"token": " y", "logprob": 3.0}]}]), "at most 0"),
    "Infinity-literal": (with_logprobs(b'[{"token": " x", "logprob": -Infinity}]'),
                         "malformed JSON"),
    "legacy-NaN-strings": (json.dumps({"model": "m", "choices": [{
        "index": 0, "text": " x", "finish_reason": "stop", "logprobs": {
            "tokens": [" x"], "token_logprobs": ["NaN"],
            "top_logprobs": [{" x": "-Infinity"}]}}]}).encode(), "finite number"),
}


@pytest.mark.parametrize("case", list(BAD_ANSWERS), ids=list(BAD_ANSWERS))
def test_a_bad_answer_is_a_failed_record_and_a_rerun_asks_again(
        hostile: Callable[..., HostileServer], write_prompts: WritePrompts,
        tmp_path: Path, case: str) -> None:
    body, reason = BAD_ANSWERS[case]
    bad = hostile(answer(body, "text/html" if case == "html" else "application/json"))
    prompts = write_prompts(ONE_PROMPT)
    result = collect([prompts], tmp_path / "run", settings(bad, stream=False, top_logprobs=2))
    assert (result.collected, result.failed) == (0, 1)
    (record,) = lines(tmp_path / "run")
    assert reason in record["error"] and record["text"] is None
    assert len(bad.requests) == 2  # retried once, as --retries 1 says

    # the same run, once the server answers properly: collected, never duplicated
    bad.respond = good
    result = collect([prompts], tmp_path / "run", settings(bad, stream=False, top_logprobs=2))
    assert (result.collected, result.failed) == (1, 0)
    assert [r["error"] for r in lines(tmp_path / "run")] == [None]


BAD_STREAMS = {
    "cut-json-chunk": (sse(chat_chunk(" a")) + b"data: {\"choices\": [{\"ind\n\n"
                       + sse(chat_chunk("", "stop"), b"[DONE]"), "malformed JSON"),
    "nan-in-a-chunk": (sse(chat_chunk(" a")) + b'data: {"choices": [{"index": 0, '
                       b'"delta": {"content": "b"}, "logprobs": {"content": [{"token": "b", '
                       b'"logprob": NaN}]}}]}\n\n' + sse(chat_chunk("", "stop"), b"[DONE]"),
                       "malformed JSON"),
    "usage-beyond-64-bits": (sse(chat_chunk(" a", "stop"), {
        "choices": [], "usage": {"completion_tokens": 2**64}}, b"[DONE]"), "usage"),
    "no-choices": (sse({"model": "m"}, {"model": "m"}, b"[DONE]"), "no choices"),
    "NaN-string-in-a-chunk": (sse(chat_chunk(" a"), {"choices": [{
        "index": 0, "delta": {"content": "b"}, "logprobs": {"content": [
            {"token": "b", "logprob": "NaN", "top_logprobs": []}]}}]},
        chat_chunk("", "stop"), b"[DONE]"), "finite number"),
    "two-choices-index-0": (sse({"choices": [
        {"index": 0, "delta": {"content": "a"}}, {"index": 0, "delta": {"content": "b"}}]},
        chat_chunk("", "stop"), b"[DONE]"), "choice"),
}


@pytest.mark.parametrize("case", list(BAD_STREAMS), ids=list(BAD_STREAMS))
def test_a_bad_stream_is_a_failed_record(hostile: Callable[..., HostileServer],
                                         write_prompts: WritePrompts,
                                         tmp_path: Path, case: str) -> None:
    body, reason = BAD_STREAMS[case]

    def respond(request: Request, out: BinaryIO) -> None:
        out.write(stream_head() + body)

    server = hostile(respond)
    result = collect([write_prompts(ONE_PROMPT)], tmp_path / "run",
                     settings(server, retries=0))
    assert (result.collected, result.failed) == (0, 1)
    assert reason in lines(tmp_path / "run")[0]["error"]


def test_html_on_a_stream_is_named_as_such(hostile: Callable[..., HostileServer],
                                           write_prompts: WritePrompts,
                                           tmp_path: Path) -> None:
    def respond(request: Request, out: BinaryIO) -> None:
        out.write(http(200, b"<html><body>Proxy login</body></html>", "text/html"))

    server = hostile(respond)
    collect([write_prompts(ONE_PROMPT)], tmp_path / "run", settings(server, retries=0))
    error = lines(tmp_path / "run")[0]["error"]
    assert "text/html" in error and "Proxy login" in error
    assert "llama-cpp-python" not in error


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("kind", ["bytes", "keep-alive", "tokens"])
def test_timeout_bounds_a_trickling_answer(hostile: Callable[..., HostileServer],
                                           write_prompts: WritePrompts,
                                           tmp_path: Path, kind: str, stream: bool) -> None:
    piece = {"bytes": b" ", "keep-alive": b": keep-alive\n\n",
             "tokens": sse(chat_chunk(" more"))}[kind]
    head = stream_head() if stream else (b"HTTP/1.1 200 OK\r\nContent-Type: application/json"
                                         b"\r\nConnection: close\r\n\r\n")
    server = hostile(trickle(head, piece, 0.3, 12.0))
    started = time.monotonic()
    result = collect([write_prompts(ONE_PROMPT)], tmp_path / "run",
                     settings(server, retries=0, timeout=2.0, stream=stream))
    assert time.monotonic() - started < 6
    assert result.failed == 1
    assert "--timeout 2" in lines(tmp_path / "run")[0]["error"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_an_oversized_answer_fails_without_retry(hostile: Callable[..., HostileServer],
                                                 write_prompts: WritePrompts,
                                                 tmp_path: Path, stream: bool) -> None:
    line = b"data: " + b"x" * (3 << 20) if stream else b'{"x": "' + b"x" * (3 << 20)

    def respond(request: Request, out: BinaryIO) -> None:
        head = stream_head() if stream else stream_head("application/json")
        out.write(head + line)

    server = hostile(respond)
    result = collect([write_prompts(ONE_PROMPT)], tmp_path / "run",
                     settings(server, retries=3, stream=stream, max_response_mb=1))
    assert result.failed == 1 and len(server.requests) == 1
    assert "larger than --max-response-mb 1" in lines(tmp_path / "run")[0]["error"]


def test_a_dead_endpoint_stops_the_run_early_and_a_rerun_finishes(
        hostile: Callable[..., HostileServer], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    server: HostileServer | None = None

    def dies_after_20(request: Request, out: BinaryIO) -> None:
        if request.number == 20:
            assert server is not None
            threading.Thread(target=server.stop).start()
            return
        good(request, out)

    server = hostile(dies_after_20)
    port = server.port
    prompts = write_prompts(MANY_PROMPTS)
    started = time.monotonic()
    with pytest.raises(EndpointError) as stopped:
        collect([prompts], tmp_path / "run", settings(server, concurrency=4, retries=4))
    assert time.monotonic() - started < 30
    message = str(stopped.value)
    assert "stopped answering" in message and "rerun" in message
    kept = [r for r in lines(tmp_path / "run") if r["error"] is None]
    assert 15 <= len(kept) <= len(server.requests)
    manifest = orjson.loads((tmp_path / "run" / "manifest.json").read_bytes())
    assert manifest["status"] == "interrupted" and "stopped answering" in manifest["stop_reason"]

    with HostileServer(good, port=port) as revived:
        result = collect([prompts], tmp_path / "run", settings(revived, concurrency=4))
    assert result.failed == 0 and result.skipped == len(kept)
    keys = [(r["prompt_id"], r["repeat"]) for r in lines(tmp_path / "run")]
    assert len(keys) == len(set(keys)) == 200


ODD_INFO = {
    "models-a-string": ({"models": b'"abc"'}, "lists no models"),
    "data-a-string": ({"models": b'{"data": "abc"}'}, "lists no models"),
    "data-of-ints": ({"models": b'{"data": [1, 2]}'}, "lists no models"),
    "data-a-dict": ({"models": b'{"data": {"id": "x"}}'}, "lists no models"),
    "bad-max-model-len": ({"models": json.dumps({"data": [
        {"id": "m", "owned_by": "vllm", "max_model_len": "lots"}]}).encode()}, None),
    "odd-info-endpoints": ({"info": {"/props": b"[1, 2]", "/version": b'{"version": [1]}',
                                     "/get_server_info": b'{"context_length": "x", '
                                                         b'"tp_size": {"a": 1}}'}}, None),
    "odd-info-shapes": ({"info": {"/props": b'{"default_generation_settings": "x", '
                                            b'"model_path": 7, "build_info": {}}',
                                  "/version": b'"0.1"', "/get_server_info": b"[]"}}, None),
}


@pytest.mark.parametrize("case", list(ODD_INFO), ids=list(ODD_INFO))
def test_odd_server_descriptions_are_not_revealed_never_a_crash(
        hostile: Callable[..., HostileServer], write_prompts: WritePrompts,
        tmp_path: Path, case: str) -> None:
    scripted, refusal = ODD_INFO[case]
    server = hostile(good, **scripted)
    run = [[write_prompts(ONE_PROMPT)], tmp_path / "run",
           settings(server, preflight=True, context_tokens=0)]
    if refusal:
        with pytest.raises(EndpointError, match=refusal):
            collect(*run)  # type: ignore[arg-type]
        return
    assert collect(*run).collected == 1  # type: ignore[arg-type]
    assert load_run(tmp_path / "run").manifest.status == "complete"


def test_a_404_on_models_names_the_right_url(hostile: Callable[..., HostileServer],
                                             write_prompts: WritePrompts,
                                             tmp_path: Path) -> None:
    server = hostile(good)
    server.models = b""
    with pytest.raises(EndpointError) as refused:
        collect([write_prompts(ONE_PROMPT)], tmp_path / "run",
                settings(server, endpoint=server.url + "/v1"))
    assert "/v1/v1" not in str(refused.value)
    assert f"{server.url}/v1/models" in str(refused.value)


def test_the_cli_prints_one_line_and_no_traceback(hostile: Callable[..., HostileServer],
                                                  write_prompts: WritePrompts,
                                                  tmp_path: Path) -> None:
    server = hostile(answer(BAD_ANSWERS["typed-field-then-cut-line"][0]),
                     models=json.dumps(MODELS).encode())
    done = subprocess.run(
        [sys.executable, "-m", "quantcheck", "collect", "--endpoint", server.url, "--label",
         "b", "--prompts", str(write_prompts(ONE_PROMPT)), "--out", str(tmp_path / "run"),
         "--no-preflight", "--retries", "0", "--no-stream"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "malformed JSON" in done.stderr


LOGPROB_ANSWER = with_logprobs([{"token": " x", "logprob": -0.5, "top_logprobs": [
    {"token": " x", "logprob": -0.5}, {"token": " y", "logprob": -1.5}]}])


@pytest.mark.parametrize("case", list(BAD_ANSWERS), ids=list(BAD_ANSWERS))
def test_every_summary_compare_writes_from_a_hostile_run_reads_back(
        hostile: Callable[..., HostileServer], write_prompts: WritePrompts,
        tmp_path: Path, case: str) -> None:
    prompts = write_prompts("prompts:\n" + "".join(
        f'  - {{id: p{n}, messages: [{{role: user, content: "Question {n}?"}}]}}\n'
        for n in range(3)))
    body = BAD_ANSWERS[case][0]

    def mostly_bad(request: Request, out: BinaryIO) -> None:  # the last prompt answers well
        good_one = b"Question 2?" in json.dumps(request.body).encode()
        out.write(http(200, LOGPROB_ANSWER if good_one else body,
                       "text/html" if case == "html" and not good_one else "application/json"))

    for side, respond in (("a", answer(LOGPROB_ANSWER)), ("b", mostly_bad)):
        collect([prompts], tmp_path / side, settings(hostile(respond), label=side,
                                                     stream=False, top_logprobs=2, retries=0))
    report = tmp_path / "report"
    compare_runs(tmp_path / "a", tmp_path / "b", report)
    summary = read_summary(report)
    assert summary.counts.unanswered.b == 2 and summary.counts.pairs == 1


def test_a_hand_made_run_with_infinite_logprobs_still_gives_a_readable_summary(
        hostile: Callable[..., HostileServer], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    prompts = write_prompts(ONE_PROMPT)
    for side in "ab":
        collect([prompts], tmp_path / side, settings(hostile(answer(LOGPROB_ANSWER)),
                                                     label=side, stream=False, top_logprobs=2))
    # B's tokens.bin rewritten by hand: its logprobs infinite (collect refuses such answers)
    (line,) = lines(tmp_path / "b")
    tokens = Tokens(text=[" x"], logprob=[-math.inf], top_text=[[" x", " y"]],
                    top_logprob=[[-math.inf, -math.inf]])
    blob = pack(tokens)
    (tmp_path / "b" / "tokens.bin").write_bytes(blob)
    line["tokens"] = {**line["tokens"], "offset": 0, "length": len(blob)}
    (tmp_path / "b" / "completions.jsonl").write_bytes(orjson.dumps(line) + b"\n")
    compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    summary = read_summary(tmp_path / "report")
    assert summary.counts.pairs == 1
    # the pair's infinite drift counts as no value; the rest is read as usual
    assert summary.drift.logprob_mean_abs_diff is None
    assert summary.drift.top1_agreement is not None


def tool_call_answer(arguments: str | dict[str, Any] | bytes) -> bytes:
    """A whole chat answer calling `pay` with these arguments (raw JSON bytes allowed)."""
    raw = arguments if isinstance(arguments, bytes) else json.dumps(arguments).encode()
    return (b'{"model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls", '
            b'"message": {"content": null, "tool_calls": [{"id": "c1", "type": "function", '
            b'"function": {"name": "pay", "arguments": ' + raw + b'}}]}}], "usage": '
            b'{"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}}')


DEEP = "[" * 300 + "]" * 300
# arguments as sent (a JSON string, or an object) -> parsed_arguments kept, or None
ODD_ARGUMENTS: dict[str, tuple[str | bytes, bool]] = {
    "integer-beyond-64-bits": ('{"account": 123456789012345678901234567890}', False),
    "negative-integer-beyond-64-bits": ('{"account": -9223372036854775809}', False),
    "nested-300-deep": (DEEP, False),
    "nested-1000-deep": ("[" * 1000 + "]" * 1000, False),
    "escaped-lone-surrogate": ('{"name": "\\ud800"}', False),
    "number-beyond-a-float": ('{"amount": 1e400}', False),
    "NaN": ('{"amount": NaN}', False),
    "uint64-max": ('{"account": 18446744073709551615}', True),
    "object-with-a-big-integer": (b'{"account": 123456789012345678901234567890}', False),
    "object-nested-300-deep": (b'{"a": ' + DEEP.encode() + b"}", False),
}


@pytest.mark.parametrize("case", list(ODD_ARGUMENTS), ids=list(ODD_ARGUMENTS))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_any_tool_call_arguments_are_stored_as_sent(
        hostile: Callable[..., HostileServer], write_prompts: WritePrompts,
        tmp_path: Path, case: str, stream: bool) -> None:
    arguments, parsed = ODD_ARGUMENTS[case]
    whole = tool_call_answer(arguments)

    def respond(request: Request, out: BinaryIO) -> None:
        if not stream:
            out.write(http(200, whole))
            return
        body = orjson.loads(whole) if isinstance(arguments, str) else {}
        if not body:  # an object can only come whole: sent as one piece
            out.write(stream_head() + sse(whole.replace(b'"message"', b'"delta"'),
                                          chat_chunk("", "tool_calls"), b"[DONE]"))
            return
        text = body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        pieces = [text[:len(text) // 2], text[len(text) // 2:]]
        out.write(stream_head() + sse(*[{"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, **({"id": "c1", "function": {"name": "pay", "arguments": piece}}
                            if n == 0 else {"function": {"arguments": piece}})}]}}]}
            for n, piece in enumerate(pieces)], chat_chunk("", "tool_calls"), b"[DONE]"))

    server = hostile(respond)
    prompts = write_prompts(ONE_PROMPT)
    for _ in range(2):  # a rerun finds the request done, never dies at it
        result = collect([prompts], tmp_path / "run", settings(server, stream=stream))
        assert result.failed == 0
    (record,) = lines(tmp_path / "run")
    (call,) = record["tool_calls"]
    sent = arguments if isinstance(arguments, str) else None
    assert record["error"] is None and (sent is None or call["arguments"] == sent)
    if sent is None:  # an object is written as JSON of the same value
        assert json.loads(call["arguments"]) == json.loads(arguments)
    assert (call["parsed_arguments"] is not None) == parsed
    (loaded,) = list(load_run(tmp_path / "run").completions())
    assert loaded.tool_calls and loaded.tool_calls[0].arguments == call["arguments"]


def test_tool_call_arguments_beyond_64_bits_compare_exactly(
        hostile: Callable[..., HostileServer], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    prompts = write_prompts(ONE_PROMPT)
    sides = {"a": '{"account": 123456789012345678901234567890, "deep": ' + DEEP + "}",
             "same": '{"deep": ' + DEEP + ', "account": 123456789012345678901234567890}',
             "other": '{"account": 123456789012345678901234567891, "deep": ' + DEEP + "}"}
    for side, arguments in sides.items():
        collect([prompts], tmp_path / side,
                settings(hostile(answer(tool_call_answer(arguments))), label=side,
                         stream=False))
    for side, change in (("same", "identical"), ("other", "arguments_changed")):
        compare_runs(tmp_path / "a", tmp_path / side, tmp_path / f"report-{side}")
        summary = read_summary(tmp_path / f"report-{side}")
        assert summary.counts.tool_calls == {change: 1}


def test_a_record_the_run_cannot_hold_is_refused_whole(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    writer.open()
    tokens = Tokens(text=[" x"], logprob=[-0.5], top_text=[[" x"]], top_logprob=[[-0.5]])
    try:
        for usage in ({"prompt_tokens": 2**70}, {"deep": json.loads(DEEP)}):
            with pytest.raises(RecordNotStorable):
                writer.append(Completion("p", "h", 0, text="x", tokens=tokens, usage=usage))
    finally:
        writer.close()
    assert (tmp_path / "completions.jsonl").read_bytes() == b""
    assert (tmp_path / "tokens.bin").read_bytes() == b""  # no blob without its line
