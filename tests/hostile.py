"""A misbehaving OpenAI-compatible server: the Python standard library on 127.0.0.1,
answering generation requests with whatever bytes a test scripts, at any speed.

`/v1/models` answers like vLLM unless the test scripts it too; every other GET is 404.
A script is `respond(request, out)`: `request` has `method`, `path`, `body` (parsed
JSON or None) and `number` (generation requests counted from 0); `out` is the
connection's writable file, which the script writes raw HTTP to and may trickle.
"""

from __future__ import annotations

import json
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

MODELS = {"object": "list", "data": [{"id": "hostile-model", "object": "model",
                                      "owned_by": "vllm", "max_model_len": 4096}]}


@dataclass
class Request:
    method: str
    path: str
    body: Any
    number: int


Respond = Callable[[Request, BinaryIO], None]


def http(status: int, body: bytes, content_type: str = "application/json",
         headers: dict[str, str] | None = None) -> bytes:
    """A whole HTTP/1.1 response with a Content-Length."""
    lines = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}",
             f"Content-Length: {len(body)}", "Connection: close",
             *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def stream_head(content_type: str = "text/event-stream") -> bytes:
    """The head of a response whose body runs until the connection closes."""
    return (f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n"
            "Connection: close\r\n\r\n").encode()


def sse(*payloads: Any) -> bytes:
    return b"".join(b"data: " + (p if isinstance(p, bytes) else json.dumps(p).encode())
                    + b"\n\n" for p in payloads)


def chat_body(text: str = " Canberra.", finish: str = "stop", **extra: Any) -> dict[str, Any]:
    """A well-formed non-streamed chat answer without logprobs."""
    return {"id": "x", "object": "chat.completion", "model": "hostile-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
            **extra}


def chat_chunk(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion.chunk", "model": "hostile-model",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


def answer(body: bytes | dict[str, Any], content_type: str = "application/json") -> Respond:
    """Every generation request gets this non-streamed 200 body."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()

    def respond(request: Request, out: BinaryIO) -> None:
        out.write(http(200, raw, content_type))

    return respond


def good(request: Request, out: BinaryIO) -> None:
    """A correct answer, streamed or not, as the request asked."""
    if request.body and request.body.get("stream"):
        out.write(stream_head() + sse(chat_chunk(" Canberra."), chat_chunk("", "stop"),
                                      b"[DONE]"))
    else:
        out.write(http(200, json.dumps(chat_body()).encode()))


class HostileServer:
    """Serve `respond` for generation requests; `models` scripts GET /v1/models (and
    `info` any other GET path) with raw bodies."""

    def __init__(self, respond: Respond = good, models: bytes | None = None,
                 info: dict[str, bytes] | None = None, port: int = 0) -> None:
        self.respond = respond
        self.models = models if models is not None else json.dumps(MODELS).encode()
        self.info = info or {}
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        server = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                try:
                    server._handle(self.rfile, self.wfile)  # type: ignore[arg-type]
                except (BrokenPipeError, ConnectionResetError):
                    pass

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> HostileServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handle(self, rfile: BinaryIO, wfile: BinaryIO) -> None:
        request_line = rfile.readline().decode("latin-1")
        if not request_line.strip():
            return  # a connection opened and closed without a request
        method, path, _ = request_line.split(" ", 2)
        length = 0
        while (line := rfile.readline().strip()):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
        raw = rfile.read(length) if length else b""
        if method == "GET":
            if path == "/v1/models":
                wfile.write(http(200, self.models))
            elif path in self.info:
                wfile.write(http(200, self.info[path]))
            else:
                wfile.write(http(404, b'{"detail": "Not Found"}'))
            return
        with self._lock:
            request = Request(method, path, json.loads(raw) if raw else None,
                              len(self.requests))
            self.requests.append(request)
        self.respond(request, wfile)
        wfile.flush()


def trickle(head: bytes, piece: bytes, every_s: float, for_s: float) -> Respond:
    """Send `head`, then `piece` every `every_s` seconds for `for_s` seconds."""

    def respond(request: Request, out: BinaryIO) -> None:
        out.write(head)
        out.flush()
        ends = time.monotonic() + for_s
        while time.monotonic() < ends:
            out.write(piece)
            out.flush()
            time.sleep(every_s)

    return respond
