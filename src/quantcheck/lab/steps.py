"""What an engine generates, step by step, for the lab server to send: a token with
its logprob and top-k (`Step`), a forced position's figures (`Scored`), and the
callback each step goes to (`Emit`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass
class Step:
    """One generated token: its string, bytes, the content it adds, logprob, top-k."""

    token: str
    raw: bytes
    content: str
    logprob: float
    top: list[tuple[str, float]]
    reasoning: bool = False  # part of the reasoning, not of the answer
    call: int | None = None  # part of tool call number `call`: its name, or its arguments
    call_name: str | None = None  # set on a call's first step (the name's token)


@dataclass
class Scored:
    """One forced position: the logprob of the given token, and the top-k (id, text,
    logprob) the model had there."""

    logprob: float
    top: list[tuple[int, str, float]]


Emit = Callable[[Step], Awaitable[None]]
