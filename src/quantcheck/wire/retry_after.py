"""How long a server asks a client to wait before trying again, read as the ecosystem
reads it: `retry-after-ms` (milliseconds; OpenAI's API and its SDKs send and honour
it) first, else `Retry-After` as seconds or as an HTTP date (RFC 9110). Anything
unreadable, negative or not finite is no hint; the backoff caps what is honoured."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None
                        ) -> float | None:
    """The wait a response asks for, in seconds (>= 0), or None. `now`: the clock an
    HTTP date is read against (time.time())."""
    milliseconds = _number(_header(headers, "retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = _header(headers, "retry-after")
    if value is None:
        return None
    seconds = _number(value)
    return seconds if seconds is not None else _until(value, now)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """A header by its name in any case (aiohttp's headers are case-insensitive; a
    plain mapping may not be)."""
    found = headers.get(name)
    if found is None:
        found = next((value for key, value in headers.items() if key.lower() == name), None)
    return found


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _until(value: str, now: float | None) -> float | None:
    """Seconds from `now` to an HTTP date (0 when it has passed)."""
    try:
        moment = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if moment.tzinfo is None:  # "-0000": UTC by the date's own rules
        moment = moment.replace(tzinfo=UTC)
    try:
        stamp = moment.timestamp()
    except (OverflowError, OSError, ValueError):
        return None
    return max(0.0, stamp - (time.time() if now is None else now))
