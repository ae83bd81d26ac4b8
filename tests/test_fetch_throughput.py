"""fetch/throughput.py: a request of the throughput phase that fails in any way is
RequestsFailed, a QuantcheckError (the phase costs only its figures), never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from quantcheck.errors import RequestsFailed
from quantcheck.fetch.throughput import measure
from quantcheck.pipeline.event_loop import run_blocking

from .conftest import TWO_PROMPTS, WritePrompts
from .hostile import HostileServer, Request, good, stream_head


@pytest.fixture
def oversized() -> Iterator[HostileServer]:
    """Answers every generation request with a stream beyond 1 MB."""
    def respond(request: Request, out: BinaryIO) -> None:
        out.write(stream_head() + b"data: " + b"x" * (2 << 20))

    with HostileServer(respond) as server:
        yield server


@pytest.mark.parametrize("warmup", [1, 0], ids=["in-the-warm-up", "in-the-window"])
def test_an_answer_beyond_the_size_cap_fails_the_phase_with_its_reason(
        oversized: HostileServer, write_prompts: WritePrompts, warmup: int) -> None:
    prompts = write_prompts(TWO_PROMPTS)
    with pytest.raises(RequestsFailed, match="larger than --max-response-mb 1"):
        run_blocking(measure(oversized.url, [Path(prompts)], min_seconds=0.1, warmup=warmup,
                             concurrency=1, retries=3, max_response_mb=1))
    assert len(oversized.requests) == 1  # another attempt would get the same: not retried


def test_a_server_that_answers_well_is_measured(write_prompts: WritePrompts) -> None:
    with HostileServer(good) as server:
        measured = run_blocking(measure(server.url, [Path(write_prompts(TWO_PROMPTS))],
                                        min_seconds=0.1, warmup=1, concurrency=1,
                                        max_response_mb=1))
    assert measured.requests >= 2 and measured.error is None
