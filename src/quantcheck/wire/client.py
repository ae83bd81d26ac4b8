"""One request to one endpoint -> a normalized Generation, over aiohttp.

Requests go out through one aiohttp session, the transport the openai SDK's own
`DefaultAioHttpClient` wraps; the SDK's request and response layers on top cost
about 15% of streamed throughput with top-20 logprobs (bench/collect_throughput.py),
and quantcheck needs none of them: it sends final JSON bodies and reads raw bytes.
Responses are decoded with msgspec (dialects.py).

Credentials: an API key (--api-key-env) is sent as `Authorization: Bearer KEY`; without
one, a user and password in the endpoint's URL (`http://alice:pw@host/v1`) are sent as
`Authorization: Basic` (percent-decoded, UTF-8), as curl sends them. With both, the key
is sent and the URL's user and password are not (a `CredentialsIgnored` warning says so
once). The URL a request goes to never holds them, and every message this module makes
has credentials cut out (store.redaction).
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from ..errors import EndpointError, ParameterRejected
from ..store.engines import EngineProfile
from ..store.records.run_records import DEFAULT_MAX_RESPONSE_MB
from ..store.redaction import (
    CredentialsIgnored,
    basic_token,
    password_forms,
    public_url,
    redact,
    url_secrets,
)
from .dialects import (
    EventStream,
    Generation,
    MalformedResponse,
    StreamAccumulator,
    StreamError,
    first_output,
    parse_response,
)
from .proxies import proxy_for
from .requests import streamed
from .retry_after import retry_after_seconds

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_BACKOFF_S = 30.0
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError)
# Nothing answers at all: refused, reset or dropped before any response came.
UNREACHABLE = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError,
               aiohttp.ClientOSError, aiohttp.ConnectionTimeoutError, ConnectionError)
ERROR_BODY_BYTES = 64 << 10  # enough of an error body to quote it
UNSENT_RETRIES = 3  # a request the connection could not send is sent again at once


@dataclass
class Timing:
    ttft_s: float | None
    e2e_s: float


class RetryableError(Exception):
    """A failure worth another attempt: connection trouble, 429, 5xx, a cut-off stream.
    `unreachable`: nothing answered at all (refused, reset, dropped)."""

    def __init__(self, message: str, retry_after: float | None = None,
                 unreachable: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.unreachable = unreachable


class _NotSent(Exception):
    """The request could not be written to the connection."""


class RequestFailed(Exception):
    """A failure another attempt would repeat (an answer beyond the size cap): the
    request is recorded as failed at once."""


def api_base(endpoint: str) -> str:
    """`http://host:8000`, `.../v1` and `.../v1/` all mean the same OpenAI base URL.
    A URL without a host, or whose port cannot be read, is refused here, in one line."""
    endpoint = endpoint.rstrip("/")
    shown = redact(endpoint, [split_credentials(endpoint)[1] or ""])
    if not re.match(r"^https?://", endpoint):
        raise EndpointError(f"endpoint must be an http:// or https:// URL, not {shown!r}")
    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 - reading it checks it: a port that is no number raises
    except ValueError as exc:
        raise EndpointError(f"endpoint {shown!r} is not a URL that can be used: "
                            f"{redact(str(exc))}") from None
    if not parts.hostname:
        raise EndpointError(f"endpoint {shown!r} names no host, e.g. "
                            "http://localhost:8000/v1")
    if "?" in endpoint or "#" in endpoint:
        raise EndpointError(
            f"endpoint {public_url(endpoint)!r} carries a query string or fragment "
            "(?... or #...): the API's paths (/models, /chat/completions) are added to "
            "the endpoint, so it takes none; give an API key with --api-key-env VAR")
    return endpoint if endpoint.endswith("/v1") else endpoint + "/v1"


def server_root(endpoint: str) -> str:
    return api_base(endpoint)[: -len("/v1")]


def generation_url(endpoint: str, api: str) -> str:
    """Where a generation of this API (`chat`, `completions`) is posted."""
    return api_base(endpoint) + ("/chat/completions" if api == "chat" else "/completions")




def split_credentials(endpoint: str) -> tuple[str, str | None]:
    """The endpoint without the user and password its URL holds, and them as written
    (`user:password`), or None. Split as urllib splits a URL: the authority ends at the
    first /, ? or #, and the credentials at its last @."""
    scheme = re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", endpoint)
    if not scheme:
        return endpoint, None
    rest = endpoint[scheme.end():]
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return endpoint, None
    return scheme.group(0) + host + rest[len(authority):], userinfo


def authorization(endpoint: str, api_key: str | None) -> str | None:
    """The Authorization header every request to `endpoint` carries: the API key as a
    Bearer token, else the URL's user and password as Basic credentials, else none."""
    if api_key:
        return f"Bearer {api_key}"
    userinfo = split_credentials(endpoint)[1]
    if userinfo is None:
        return None
    return "Basic " + basic_token(userinfo)


class HTTPStatusError(Exception):
    """A response with status >= 400: its status, message and Retry-After."""

    def __init__(self, status: int, message: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message, self.retry_after = status, message, retry_after


class EndpointClient:
    """An OpenAI-compatible endpoint: one aiohttp session, connections kept alive."""

    def __init__(self, endpoint: str, api_key: str | None = None, timeout: float = 600.0,
                 max_connections: int = 256,
                 max_response_mb: int = DEFAULT_MAX_RESPONSE_MB) -> None:
        api_base(endpoint)  # refused here, in one line, before its parts are read
        self.endpoint, userinfo = split_credentials(endpoint)
        self.base_url = api_base(self.endpoint)
        self.timeout = timeout
        self.max_response_mb = max_response_mb
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        sent = authorization(endpoint, api_key)
        if sent:
            self._headers["Authorization"] = sent
        if api_key and userinfo is not None:
            warnings.warn(CredentialsIgnored(
                f"{public_url(endpoint)}: the user and password in the endpoint's URL are "
                "not sent; the API key is, as a Bearer token"), stacklevel=2)
        # cut from every message made here: a server may quote what it was sent, in
        # any form it was sent in (the user's name is no secret: cut, it would blank
        # that word in every message)
        self._secrets = [secret for secret in (
            api_key, *password_forms(userinfo or ""), *url_secrets(endpoint)) if secret]
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        # one endpoint, one host: its proxy (HTTP(S)_PROXY, NO_PROXY; never loopback)
        self._proxy = proxy_for(self.base_url)
        # the engine, once a flow has read what it is (None: unknown or not yet read): how
        # it refuses a request field
        self.profile: EngineProfile | None = None

    def redact(self, text: str) -> str:
        """`text` without credentials: this client's key and password, and any other
        (store.redaction)."""
        return redact(text, self._secrets)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:  # created inside the running event loop
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections),
                # the whole request's deadline is asyncio.timeout in generate()
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> EndpointClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def get_json(self, path: str) -> Any:
        """GET a path under the server root (e.g. `/version`); None when it is not there."""
        try:
            data = await self.request_json("GET", server_root(self.endpoint) + path)
        except (HTTPStatusError, MalformedResponse, *TRANSPORT_ERRORS):
            return None
        return data if isinstance(data, dict | list) else None

    async def get_text(self, path: str, max_bytes: int = 4 << 20) -> str | None:
        """GET a text path under the server root (a Prometheus `/metrics` page), cut at
        `max_bytes`; None when it is not there or not text."""
        try:
            async with asyncio.timeout(self.timeout):
                async with self.session.get(server_root(self.endpoint) + path,
                                            headers=self._headers,
                                            proxy=self._proxy) as response:
                    if response.status >= 400:
                        return None
                    raw = bytearray()
                    async for chunk in response.content.iter_chunked(64 << 10):
                        raw += chunk[:max_bytes - len(raw)]
                        if len(raw) >= max_bytes:
                            break
        except TRANSPORT_ERRORS:
            return None
        return raw.decode("utf-8", "replace")

    async def post_json(self, url: str, body: Mapping[str, object]) -> Any:
        """POST a JSON body; the decoded JSON answer. Raises HTTPStatusError,
        MalformedResponse or a transport error."""
        return await self.request_json("POST", url, body)

    async def request_json(self, method: str, url: str, body: object = None) -> Any:
        """One JSON request within --timeout and the size cap. Raises HTTPStatusError,
        MalformedResponse or a transport error (a timeout is asyncio.TimeoutError)."""
        data = orjson.dumps(body) if body is not None else None
        async with asyncio.timeout(self.timeout):
            async with self.session.request(method, url, data=data, headers=self._headers,
                                            proxy=self._proxy) as response:
                if response.status >= 400:
                    raise _status_error(response.status, await _read_some(response),
                                        response.headers, self._secrets)
                try:
                    raw = await self._read_capped(response)
                except RequestFailed as exc:
                    raise MalformedResponse(str(exc)) from None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise MalformedResponse(f"{url} did not return JSON") from None

    async def list_models(self) -> list[dict[str, object]]:
        """GET /v1/models: the entries that have an id (anything else is not revealed).
        An unreachable server raises EndpointError with one clear line."""
        url = public_url(self.base_url) + "/models"
        try:
            body = await self.request_json("GET", self.base_url + "/models")
        except TRANSPORT_ERRORS as exc:
            raise EndpointError(f"cannot reach {url}: {_root_cause(exc)}") from None
        except HTTPStatusError as exc:
            raise EndpointError(f"GET {url} answered HTTP {exc.status}: {exc.message}; "
                                "is this an OpenAI-compatible server?") from None
        except MalformedResponse as exc:
            raise EndpointError(f"GET {url}: {exc}; is this an OpenAI-compatible "
                                "server?") from None
        data = body.get("data") if isinstance(body, dict) else None
        return [entry for entry in data if isinstance(entry, dict)
                and isinstance(entry.get("id"), str)] if isinstance(data, list) else []

    async def generate(self, api: str, body: Mapping[str, object], stream: bool, top_k: int
                       ) -> tuple[Generation, Timing]:
        """One attempt, bounded by --timeout as a whole. Raises RetryableError,
        RequestFailed, ParameterRejected or EndpointError."""
        url = generation_url(self.base_url, api)
        if stream:
            body = streamed(body)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                generation, ttft = await self._generate(url, body, stream, top_k, started)
        except TimeoutError:
            raise RetryableError(f"no complete answer within --timeout {self.timeout:g} s"
                                 ) from None
        return generation, Timing(ttft_s=ttft, e2e_s=time.perf_counter() - started)

    async def _generate(self, url: str, body: Mapping[str, object], stream: bool, top_k: int,
                        started: float) -> tuple[Generation, float | None]:
        """A request the connection could not even send (a kept-alive connection the
        server was closing: llama-server does it after many streamed answers) is sent
        again at once on another: the server never saw it, so no backoff is owed."""
        for attempt in range(UNSENT_RETRIES + 1):
            try:
                return await self._post(url, body, stream, top_k, started)
            except _NotSent as exc:
                if attempt == UNSENT_RETRIES:
                    raise RetryableError(f"connection failed: {exc}", unreachable=True) \
                        from None
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _post(self, url: str, body: Mapping[str, object], stream: bool, top_k: int,
                    started: float) -> tuple[Generation, float | None]:
        answered = False
        try:
            async with self.session.post(url, data=orjson.dumps(body), headers=self._headers,
                                         proxy=self._proxy) as response:
                answered = True
                if response.status >= 400:
                    raise _status_error(response.status, await _read_some(response),
                                        response.headers, self._secrets)
                if stream:
                    return await self._read_stream(response, top_k, started)
                raw = await self._read_capped(response)
                try:
                    return parse_response(raw, top_k), None
                except MalformedResponse as exc:
                    raise MalformedResponse(_not_json_note(response, raw) or str(exc)) \
                        from None
        except HTTPStatusError as exc:
            raise _classify_status(exc, self.profile) from None
        except StreamError as exc:
            raise RetryableError(f"server reported an error: {exc}") from None
        except MalformedResponse as exc:
            raise RetryableError(str(exc)) from None
        except aiohttp.ClientPayloadError as exc:
            raise RetryableError(f"response cut off: {_root_cause(exc)}") from None
        except UNREACHABLE as exc:
            if not answered and _not_written(exc):
                raise _NotSent(_root_cause(exc)) from None
            raise RetryableError(f"connection failed: {_root_cause(exc)}",
                                 unreachable=True) from None
        except aiohttp.ClientError as exc:
            raise RetryableError(f"connection failed: {_root_cause(exc)}") from None

    @property
    def max_response_bytes(self) -> int:
        return self.max_response_mb << 20

    def _too_large(self) -> RequestFailed:
        return RequestFailed(f"the answer is larger than --max-response-mb "
                             f"{self.max_response_mb}: not read further")

    async def _read_capped(self, response: aiohttp.ClientResponse) -> bytes:
        """The whole body, refusing one beyond the size cap before it is all in memory."""
        declared = response.content_length
        if declared is not None and declared > self.max_response_bytes:
            raise self._too_large()
        pieces, size = [], 0
        async for piece in response.content.iter_any():
            size += len(piece)
            if size > self.max_response_bytes:
                raise self._too_large()
            pieces.append(piece)
        return b"".join(pieces)

    async def _read_stream(self, response: aiohttp.ClientResponse, top_k: int, started: float
                           ) -> tuple[Generation, float | None]:
        """SSE `data:` payloads are cut out of the raw bytes as they arrive (dialects.
        EventStream); only those before the first output are parsed on arrival, to time
        the first token, and the rest together at the end."""
        accumulator = StreamAccumulator(top_k)
        events = EventStream()
        ttft: float | None = None
        done = False
        async for piece in response.content.iter_any():
            if events.size + len(piece) > self.max_response_bytes:
                raise self._too_large()
            payloads = events.feed(piece)
            done = _take(payloads, accumulator)
            if ttft is None and any(map(first_output, payloads)):
                ttft = time.perf_counter() - started
            if done:
                break
        if not done:
            done = _take(events.close(), accumulator)
        if not events.payloads:
            raise MalformedResponse(
                f"the server answered a streamed request with {_content_type(response)}, "
                f"not an event stream: {events.start[:160]!r}")
        generation = accumulator.finish()
        if generation.finish_reason is None:
            # Every runtime sends a finish_reason before [DONE]; without one the stream
            # was cut short, e.g. by llama-cpp-python interrupting it for a newer request.
            raise RetryableError(
                f"stream ended {'at [DONE] ' if done else 'before [DONE] '}without a "
                "finish_reason: cut short (llama-cpp-python interrupts a running request "
                "when another arrives: start it with --interrupt_requests false, or "
                "--concurrency 1)")
        return generation, ttft


def _not_written(exc: BaseException) -> bool:
    """Whether writing the request to an open connection failed (a reset, a closing
    transport): not a refused connection, not a server gone after it was sent."""
    return isinstance(exc, ConnectionResetError | aiohttp.ClientOSError) and not isinstance(
        exc, aiohttp.ClientConnectorError)


def _take(payloads: list[bytes], accumulator: StreamAccumulator) -> bool:
    """Add the payloads up to a `[DONE]`; True when it came."""
    if payloads and payloads[-1].startswith(b"[DONE]"):
        accumulator.add(payloads[:-1])
        return True
    done = [n for n, payload in enumerate(payloads) if payload.startswith(b"[DONE]")]
    accumulator.add(payloads[:done[0]] if done else payloads)
    return bool(done)


async def _read_some(response: aiohttp.ClientResponse) -> bytes:
    """At most ERROR_BODY_BYTES of a body (an error page is quoted, never hoarded)."""
    pieces, size = [], 0
    async for piece in response.content.iter_any():
        pieces.append(piece)
        size += len(piece)
        if size >= ERROR_BODY_BYTES:
            break
    return b"".join(pieces)[:ERROR_BODY_BYTES]


def _content_type(response: aiohttp.ClientResponse) -> str:
    return str(response.headers.get("Content-Type") or "no Content-Type").split(";")[0]


def _not_json_note(response: aiohttp.ClientResponse, raw: bytes) -> str | None:
    """What came back instead of JSON, when the server said it is something else."""
    kind = _content_type(response)
    if "json" in kind:
        return None
    return f"the server answered with {kind}, not JSON: {raw[:160]!r}"


def _status_error(status: int, raw: bytes, headers: Mapping[str, str],
                  secrets: list[str]) -> HTTPStatusError:
    """The error a status >= 400 is, its message with credentials cut out (a proxy's
    401 page may quote the header it refused)."""
    return HTTPStatusError(status, redact(_error_message(raw), secrets),
                           retry_after_seconds(headers))


def _classify_status(exc: HTTPStatusError, profile: EngineProfile | None) -> Exception:
    status, message = exc.status, exc.message
    if _refused_field(status, message, profile):
        return ParameterRejected(message)
    if status in RETRYABLE_STATUS:
        return RetryableError(f"HTTP {status}: {message}", exc.retry_after)
    if status in (400, 422):
        return ParameterRejected(message)
    return EndpointError(f"HTTP {status}: {message}")


def _refused_field(status: int, message: str, profile: EngineProfile | None) -> bool:
    """A refused request field answered with another status than 400 or 422: the
    engine's profile says which (`refuses_fields_with`). For an engine quantcheck does
    not know, the fallback: llama-cpp-python's (an HTTP 500 saying "validation error")."""
    said = profile.refuses_fields_with if profile is not None else (500, "validation error")
    return said is not None and status == said[0] and said[1] in message


def _error_message(raw: bytes) -> str:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
        if isinstance(inner, str):
            return inner
    return raw.decode("utf-8", "replace").strip()[:500]


def _root_cause(exc: BaseException) -> str:
    while True:
        inner = exc.__cause__ or exc.__context__
        if inner is None:
            break
        exc = inner
    text = redact(str(exc)) or type(exc).__name__
    return text.splitlines()[0][:300]


def backoff_seconds(attempt: int, retry_after: float | None) -> float:
    """Exponential backoff with jitter, honoring the server's retry hint (retry_after.py),
    capped at MAX_BACKOFF_S."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), MAX_BACKOFF_S)
    return min(0.25 * float(2**attempt), MAX_BACKOFF_S) * (0.5 + random.random() / 2)


async def sleep_backoff(attempt: int, retry_after: float | None) -> None:
    await asyncio.sleep(backoff_seconds(attempt, retry_after))


# What vLLM, SGLang, llama.cpp, llama-cpp-python and OpenAI say when a prompt (with
# max_tokens) does not fit the context: a rejection of that prompt, not of a parameter.
CONTEXT_OVERFLOW = re.compile(r"context (?:length|window|size)|maximum model length|"
                              r"max_model_len|(?:prompt|input) is too long", re.IGNORECASE)


def context_overflow(message: str) -> bool:
    """Whether a server's 400 says the prompt does not fit its context."""
    return CONTEXT_OVERFLOW.search(message) is not None
