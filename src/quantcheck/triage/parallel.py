"""Independent work on every core: a fork-started process pool over ordered chunks.

The work function, and the state it closes over (a side's index, its open prompt
set), reach the workers by fork: copy-on-write, nothing large is pickled; only each
chunk and its results travel. Results come back in the items' order. With one job, or
fewer than MIN_ITEMS items, everything runs in this process: starting a pool costs
about 20 ms per worker here, more than triaging a few dozen pairs.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar, cast

Item = TypeVar("Item")
Result = TypeVar("Result")
MIN_ITEMS = 64
CHUNKS_PER_JOB = 4  # smaller chunks even out uneven work (long answers, code checks)

_work: Callable[[Sequence[object]], list[object]] | None = None


def available_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def ordered_map(work: Callable[[Sequence[Item]], list[Result]], items: Sequence[Item],
                jobs: int) -> list[Result]:
    """`work` over chunks of `items` in `jobs` processes; the results in item order.
    `work` takes a chunk and returns one result per item."""
    size = math.ceil(len(items) / (jobs * CHUNKS_PER_JOB)) if jobs > 1 else len(items)
    return [result for part in ordered_chunks(work, items, jobs, size) for result in part]


def ordered_chunks(work: Callable[[Sequence[Item]], list[Result]], items: Sequence[Item],
                   jobs: int, size: int) -> Iterator[list[Result]]:
    """`work` over chunks of `size` items in `jobs` processes, each chunk's results as it
    comes, in order: the caller writes and forgets them (memory stays flat)."""
    chunks = [items[start:start + size] for start in range(0, len(items), max(size, 1))]
    if jobs <= 1 or len(items) < MIN_ITEMS or "fork" not in multiprocessing.get_all_start_methods():
        for chunk in chunks:
            yield work(chunk)
        return
    global _work
    _work = cast("Callable[[Sequence[object]], list[object]]", work)
    try:
        pool = multiprocessing.get_context("fork").Pool(min(jobs, len(chunks)))
    finally:
        _work = None  # the workers have their copy
    with pool:
        yield from pool.imap(_run_chunk, chunks)


def _run_chunk(chunk: Sequence[object]) -> list[object]:
    assert _work is not None  # set before the pool forked its workers
    return _work(chunk)
