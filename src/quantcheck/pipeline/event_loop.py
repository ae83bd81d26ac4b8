"""The one event loop a flow runs for what it sends: `run_blocking` runs a coroutine to
its end from plain code, as every pipeline call does (fetch/ and wire/ stay async)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def run_blocking(coroutine: Coroutine[object, None, T]) -> T:
    """asyncio.run, also from code that already runs an event loop (Jupyter, Playwright):
    there the coroutine gets its own loop in a worker thread."""
    try:
        asyncio.get_running_loop()
        running = True
    except RuntimeError:
        running = False
    if not running:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
