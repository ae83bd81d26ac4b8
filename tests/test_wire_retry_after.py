"""wire/retry_after.py: a server's retry hint (Retry-After as seconds or an HTTP date,
retry-after-ms) read as a finite wait within the backoff's cap, and collect waiting
as long as the server asks."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck import CollectSettings, collect, load_run
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.wire.client import MAX_BACKOFF_S, backoff_seconds
from quantcheck.wire.retry_after import retry_after_seconds

from .conftest import Serve, WritePrompts

NOW = 1_800_000_000.0


def http_date(seconds_from_now: float) -> str:
    return format_datetime(datetime.fromtimestamp(NOW + seconds_from_now, UTC),
                           usegmt=True)


@given(st.dictionaries(st.sampled_from(["Retry-After", "retry-after", "retry-after-ms",
                                        "RETRY-AFTER-MS", "x-other"]), st.text(max_size=40)))
def test_any_retry_header_reads_as_a_finite_wait_or_none(headers: dict[str, str]) -> None:
    wait = retry_after_seconds(headers, NOW)
    assert wait is None or (math.isfinite(wait) and wait >= 0)
    for attempt in range(6):
        assert 0 <= backoff_seconds(attempt, wait) <= MAX_BACKOFF_S


@given(st.integers(min_value=0, max_value=10**6))
def test_seconds_and_an_http_date_say_the_same_wait(seconds: int) -> None:
    assert retry_after_seconds({"Retry-After": str(seconds)}, NOW) == seconds
    assert retry_after_seconds({"Retry-After": http_date(seconds)}, NOW) == seconds
    assert backoff_seconds(0, float(seconds)) == min(seconds, MAX_BACKOFF_S)


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False),
       st.integers(min_value=0, max_value=3600))
def test_milliseconds_come_first(milliseconds: float, seconds: int) -> None:
    headers = {"retry-after-ms": repr(milliseconds), "Retry-After": str(seconds)}
    assert retry_after_seconds(headers, NOW) == pytest.approx(milliseconds / 1000)


@pytest.mark.parametrize(("headers", "wait"), [
    ({"Retry-After": "-5"}, None), ({"Retry-After": "nan"}, None),
    ({"Retry-After": "inf"}, None), ({"Retry-After": "soon"}, None),
    ({"Retry-After": http_date(-60)}, 0.0),  # a date gone by: at once
    ({"Retry-After": "Sun, 06 Nov 1994 08:49:37 -0000"}, 0.0),
    ({"retry-after-ms": "abc", "Retry-After": "2"}, 2.0), ({}, None),
], ids=["negative", "nan", "inf", "words", "past-date", "no-zone", "bad-ms", "none"])
def test_unreadable_hints_are_no_hint(headers: dict[str, str], wait: float | None) -> None:
    assert retry_after_seconds(headers, NOW) == wait


def in_two_seconds() -> dict[str, str]:
    moment = datetime.fromtimestamp(time.time() + 2, UTC)
    return {"Retry-After": format_datetime(moment, usegmt=True)}


@pytest.mark.parametrize("hint", [lambda: {"retry-after-ms": "600"}, in_two_seconds],
                         ids=["retry-after-ms", "http-date"])
def test_collect_waits_as_long_as_the_server_asks(serve: Serve,
                                                  write_prompts: WritePrompts,
                                                  tmp_path: Path,
                                                  hint: Callable[[], dict[str, str]]) -> None:
    """The first answer is a 429 with the hint; the retry comes after it, not at once."""
    headers = hint()
    server = serve(ScriptedModel(), faults=Faults(status={0: 429}, retry_headers=headers))
    started = time.monotonic()
    collect([write_prompts("prompts:\n  - {id: one, prompt: 'Q: one'}\n")], tmp_path / "r",
            CollectSettings(endpoint=server.url, label="a", preflight=False, retries=1))
    waited = time.monotonic() - started
    assert load_run(tmp_path / "r").status == "complete"
    assert waited >= (0.6 if "retry-after-ms" in headers else 1.0), waited
    assert waited < 10
