"""Faults in what a lab server generates, the way long answers go wrong, around any
engine (scripted or a real model), each answered with HTTP 200 and no error:

- `late_loop_after` N: the answer runs as the engine writes it for N tokens (or to its
  end, when shorter), then repeats its last LOOP_TOKENS tokens to the length limit;
- `bang_run`: every answer is `!` to the length limit, one token repeated (as an MLX
  server answered prompts of about 60K tokens, and a 4-bit KV cache every prompt);
- `collapse`: every prompt gets one answer, COLLAPSED_ANSWER, whatever it asks
  (distinct prompts converging to identical outputs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .request_body import json_int
from .steps import Emit, Step

LOOP_TOKENS = 8
COLLAPSED_ANSWER = (" I am unable to answer this one, so here is the same reply I give to "
                    "every question: please ask again later.")


def max_tokens_of(body: Mapping[str, object]) -> int:
    """The length limit the engines read (16 when the body names none)."""
    return json_int(body.get("max_tokens") or 16)


def fixed_step(token: str, top_k: int) -> Step:
    """A confident step: `token`, then filler alternatives far below it."""
    top = [(token, -0.01)] + [(f" alt{n}", -0.01 - 1.5 * n) for n in range(1, top_k)]
    return Step(token, token.encode(), token, -0.01, top[:max(top_k, 1)])


async def bang_run(body: Mapping[str, object], top_k: int, emit: Emit) -> str:
    """`!` to the length limit."""
    for _ in range(max_tokens_of(body)):
        await emit(fixed_step("!", top_k))
    return "length"


async def collapsed(body: Mapping[str, object], top_k: int, emit: Emit) -> str:
    """COLLAPSED_ANSWER, word by word, whatever the prompt (cut at the length limit)."""
    words = re.findall(r"\s*\S+", COLLAPSED_ANSWER)
    limit = max_tokens_of(body)
    for word in words[:limit]:
        await emit(fixed_step(word, top_k))
    return "stop" if len(words) <= limit else "length"


class LateLoop:
    """Passes the engine's first `after` steps on, then (`finish`) repeats the last
    LOOP_TOKENS of them to the length limit; the engine's steps past `after` are
    dropped."""

    def __init__(self, after: int, emit: Emit) -> None:
        self.after, self.downstream = after, emit
        self.sent: list[Step] = []

    async def emit(self, step: Step) -> None:
        if len(self.sent) < self.after:
            self.sent.append(step)
            await self.downstream(step)

    async def finish(self, body: Mapping[str, object]) -> str:
        """After the engine has run: the loop, to the length limit."""
        cycle = self.sent[-LOOP_TOKENS:]
        if not cycle:
            return "length"
        for n in range(max_tokens_of(body) - len(self.sent)):
            await self.downstream(cycle[n % len(cycle)])
        return "length"
