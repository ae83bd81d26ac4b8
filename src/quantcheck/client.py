"""One request to one endpoint -> a normalized Generation, through the real openai package.

Responses are read raw and parsed with orjson instead of being turned into pydantic
objects: with top-20 logprobs that parse is the main cost of a collection.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai
import orjson

from .dialects import Generation, StreamAccumulator, StreamError, parse_response
from .errors import EndpointError, ParameterRejected

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_BACKOFF_S = 30.0


@dataclass
class Timing:
    ttft_s: float | None
    e2e_s: float


class RetryableError(Exception):
    """A failure worth another attempt: connection trouble, 429, 5xx, a cut-off stream."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def api_base(endpoint: str) -> str:
    """`http://host:8000`, `.../v1` and `.../v1/` all mean the same OpenAI base URL."""
    endpoint = endpoint.rstrip("/")
    if not re.match(r"^https?://", endpoint):
        raise EndpointError(f"endpoint must be an http:// or https:// URL, not {endpoint!r}")
    return endpoint if endpoint.endswith("/v1") else endpoint + "/v1"


def server_root(endpoint: str) -> str:
    return api_base(endpoint)[: -len("/v1")]


def public_url(endpoint: str) -> str:
    """The endpoint without credentials or query string, safe to write to a manifest."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class EndpointClient:
    """An OpenAI-compatible endpoint, spoken to with the openai SDK over aiohttp."""

    def __init__(self, endpoint: str, api_key: str | None = None, timeout: float = 600.0,
                 max_connections: int = 256) -> None:
        self.endpoint = endpoint
        self.base_url = api_base(endpoint)
        self.timeout = timeout
        self._sdk = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key or "EMPTY",
            timeout=timeout,
            max_retries=0,  # retries are ours: they must also cover streams cut off midway
            http_client=openai.DefaultAioHttpClient(timeout=timeout),
        )

    async def close(self) -> None:
        await self._sdk.close()

    async def __aenter__(self) -> EndpointClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def get_json(self, path: str) -> Any:
        """GET a path under the server root (e.g. `/version`); None when it is not there."""
        url = server_root(self.endpoint) + path
        try:
            data = await self._sdk.get(url, cast_to=object)
        except (openai.APIStatusError, openai.APIConnectionError):
            return None
        return data if isinstance(data, dict | list) else None

    async def list_models(self) -> list[dict[str, Any]]:
        """GET /v1/models; an unreachable server raises EndpointError with one clear line."""
        try:
            response = await self._sdk.models.with_raw_response.list()
            body = orjson.loads(response.content)
        except openai.APIConnectionError as exc:
            raise EndpointError(f"cannot reach {public_url(self.endpoint)}: "
                                f"{_root_cause(exc)}") from None
        except openai.APIStatusError as exc:
            raise EndpointError(f"{public_url(self.endpoint)} answered GET /v1/models with "
                                f"HTTP {exc.status_code}: {_error_message(exc)}") from None
        except orjson.JSONDecodeError:
            raise EndpointError(f"{public_url(self.endpoint)}/v1/models did not return JSON; "
                                "is this an OpenAI-compatible server?") from None
        return list(body.get("data") or []) if isinstance(body, dict) else []

    async def generate(self, api: str, body: dict[str, Any], stream: bool, top_k: int
                       ) -> tuple[Generation, Timing]:
        """One attempt. Raises RetryableError, ParameterRejected or EndpointError."""
        resource = self._sdk.chat.completions if api == "chat" else self._sdk.completions
        leading = "messages" if api == "chat" else "prompt"
        extra = {k: v for k, v in body.items() if k not in ("model", leading)}
        if stream:
            extra["stream_options"] = {"include_usage": True}
        started = time.perf_counter()
        try:
            async with resource.with_streaming_response.create(
                model=body["model"], extra_body=extra, stream=stream,
                **{leading: body[leading]},
            ) as response:
                if stream:
                    generation, ttft = await _read_stream(response, top_k, started)
                else:
                    generation = parse_response(orjson.loads(await response.read()), top_k)
                    ttft = None
        except openai.APIStatusError as exc:
            raise _classify_status(exc) from None
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise RetryableError(f"connection failed: {_root_cause(exc)}") from None
        except StreamError as exc:
            raise RetryableError(f"server reported an error: {exc}") from None
        except orjson.JSONDecodeError as exc:
            raise RetryableError(f"malformed JSON from server: {exc}") from None
        except Exception as exc:  # transport errors while reading a stream body
            if _is_transport_error(exc):
                raise RetryableError(f"response cut off: {_root_cause(exc)}") from None
            raise
        return generation, Timing(ttft_s=ttft, e2e_s=time.perf_counter() - started)


async def _read_stream(response: Any, top_k: int, started: float
                       ) -> tuple[Generation, float | None]:
    accumulator = StreamAccumulator(top_k)
    ttft: float | None = None
    done = False
    async for line in _sse_lines(response):
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            done = True
            break
        chunk = orjson.loads(payload)
        if ttft is None and _has_output(chunk):
            ttft = time.perf_counter() - started
        accumulator.feed(chunk)
    generation = accumulator.generation
    if not done and generation.finish_reason is None:
        raise RetryableError("stream ended before [DONE] and without a finish_reason")
    return generation, ttft


async def _sse_lines(response: Any) -> AsyncIterator[bytes]:
    """The stream's lines as bytes: split here rather than decoded to text line by
    line by the SDK, and parsed by orjson straight from bytes."""
    pending = b""
    async for piece in response.iter_bytes():
        pending += piece
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line
    if pending:
        yield pending


def _has_output(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") \
                or choice.get("text") or choice.get("logprobs"):
            return True
    return False


def _classify_status(exc: openai.APIStatusError) -> Exception:
    status = exc.status_code
    message = _error_message(exc)
    if status == 500 and "validation error" in message:
        # llama-cpp-python answers a rejected request field with HTTP 500
        return ParameterRejected(message)
    if status in RETRYABLE_STATUS:
        return RetryableError(f"HTTP {status}: {message}", _retry_after(exc))
    if status in (400, 422):
        return ParameterRejected(message)
    return EndpointError(f"HTTP {status}: {message}")


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    text = exc.response.text if exc.response is not None else ""
    return (text or str(exc)).strip()[:500]


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _root_cause(exc: BaseException) -> str:
    while True:
        inner = exc.__cause__ or exc.__context__
        if inner is None:
            break
        exc = inner
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:300]


def _is_transport_error(exc: Exception) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    markers = {"ClientError", "ClientPayloadError", "TransportError", "RemoteProtocolError",
               "ReadError", "ConnectionError", "ServerDisconnectedError", "IncompleteRead"}
    return bool(names & markers)


def backoff_seconds(attempt: int, retry_after: float | None) -> float:
    """Exponential backoff with jitter, honoring Retry-After, capped at MAX_BACKOFF_S."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), MAX_BACKOFF_S)
    return min(0.25 * float(2**attempt), MAX_BACKOFF_S) * (0.5 + random.random() / 2)


async def sleep_backoff(attempt: int, retry_after: float | None) -> None:
    await asyncio.sleep(backoff_seconds(attempt, retry_after))


def api_key_from_env(variable: str | None) -> str | None:
    if not variable:
        return None
    key = os.environ.get(variable)
    if key is None:
        raise EndpointError(f"--api-key-env {variable}: that environment variable is not set")
    return key
