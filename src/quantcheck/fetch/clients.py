"""What the flows share to reach an endpoint, so that pipeline/ never imports wire/:
an endpoint's API key read from its variable (`--api-key-env VAR`), several requests
awaited together (`all_or_none`), and a generation request as the client posts it
(`posted_url`, `posted_body`: what a repro's replay.sh sends). Each flow's client is
opened beside the requests it sends (fetch/collect.py, fetch/certify.py, fetch/ladder.py,
fetch/judging.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Iterable, Mapping
from typing import TypeVar

from ..errors import EndpointError
from ..store.redaction import public_url
from ..wire.client import generation_url
from ..wire.requests import streamed

T = TypeVar("T")


async def all_or_none(coroutines: Iterable[Awaitable[T]]) -> list[T]:
    """asyncio.gather that cancels the others when one fails, and raises that error.
    gather leaves them running: inside `async with EndpointClient` one of them could
    start a request after the client closed, opening a session nothing closes."""
    tasks = [asyncio.ensure_future(coroutine) for coroutine in coroutines]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def api_key_from_env(variable: str | None) -> str | None:
    if not variable:
        return None
    key = os.environ.get(variable)
    if key is None:
        raise EndpointError(f"--api-key-env {variable}: that environment variable is not set")
    return key


def posted_url(endpoint: str, api: str) -> str:
    """Where a generation of this API (`chat`, `completions`) is posted, without
    credentials (public_url)."""
    return public_url(generation_url(endpoint, api))


def posted_body(body: Mapping[str, object], stream: bool) -> Mapping[str, object]:
    """A generation body as it is sent: streamed, the usage asked in the last chunk."""
    return streamed(body) if stream else body
