"""pipeline/event_loop.py: a flow's one event loop, run from plain code and from code
that already runs a loop (a notebook, Playwright's sync API), with the coroutine's
value or its error. Each case runs in a thread of its own: the thread running the
tests may hold a loop already (Playwright's)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest

from quantcheck.errors import QuantcheckError
from quantcheck.pipeline.event_loop import run_blocking

T = TypeVar("T")


def in_a_fresh_thread(call: Callable[[], T]) -> tuple[T, str]:
    """What `call` returned, in a thread that runs no event loop, and that thread's name."""
    def named() -> tuple[T, str]:
        return call(), threading.current_thread().name

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="caller") as pool:
        return pool.submit(named).result()


async def where_it_ran() -> tuple[str, int]:
    await asyncio.sleep(0)
    return threading.current_thread().name, id(asyncio.get_running_loop())


async def failing() -> None:
    await asyncio.sleep(0)
    raise QuantcheckError("the endpoint refused")


def test_plain_code_runs_the_coroutine_in_its_own_thread() -> None:
    (thread, _), caller = in_a_fresh_thread(lambda: run_blocking(where_it_ran()))
    assert thread == caller


def test_inside_a_running_loop_the_coroutine_gets_its_own_loop_in_a_worker() -> None:
    async def notebook_cell() -> tuple[tuple[str, int], int]:
        return run_blocking(where_it_ran()), id(asyncio.get_running_loop())

    ((thread, loop), outer), caller = in_a_fresh_thread(lambda: asyncio.run(notebook_cell()))
    assert thread != caller and loop != outer


def test_the_coroutines_error_reaches_the_caller_either_way() -> None:
    async def notebook_cell() -> None:
        run_blocking(failing())

    with pytest.raises(QuantcheckError, match="the endpoint refused"):
        in_a_fresh_thread(lambda: run_blocking(failing()))
    with pytest.raises(QuantcheckError, match="the endpoint refused"):
        in_a_fresh_thread(lambda: asyncio.run(notebook_cell()))
    with pytest.raises(QuantcheckError, match="the endpoint refused"):
        run_blocking(failing())  # here, whether or not this thread runs a loop
