"""The degenerate-output check on long answers: time per answer at 4K to 32K tokens.

Each kind of long answer (plain prose; prose ending in a phrase loop over its last
quarter; prose ending in a 60-word paragraph repeated; prose ending in a `!` run; code
that counts, `def step_1` to `def step_N`; a list of squares) is checked by
`triage.signals.degenerate_reason` as an answer cut by max_tokens, the least CPU time of 5 runs,
against a baseline measured in the same run: one linear pass over the same text that
any word-level check must make (`text.split()` and the set of its words). Linear time
shows as a time per 1,000 tokens that stays flat from 4K to 32K tokens.

    .venv/bin/python bench/degenerate_long.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _common import save  # noqa: E402

from quantcheck.store.inputs.haystack import TOKENS_PER_WORD, haystack  # noqa: E402
from quantcheck.triage.signals import degenerate_reason  # noqa: E402

SIZES = (4096, 8192, 16384, 32768)  # tokens


def _prose(tokens: int, seed: int = 3) -> str:
    return haystack(tokens, 0.5, "The ledger closed at dusk.", seed)


def _late_loop(tokens: int) -> str:
    phrase = " and then the ship sailed on"
    return _prose(tokens * 3 // 4) + phrase * int(tokens / 4 / 6 / TOKENS_PER_WORD)


def _paragraph_loop(tokens: int) -> str:
    paragraph = " " + _prose(80, seed=9).replace("\n\n", " ")
    copies = max(3, int(tokens / 4 / (len(paragraph.split()) * TOKENS_PER_WORD)))
    return _prose(tokens * 3 // 4) + paragraph * copies


def _bang_run(tokens: int) -> str:
    return _prose(tokens * 3 // 4) + "!" * (tokens // 4)


def _counting_code(tokens: int) -> str:
    blocks, n = [], 0
    while len(blocks) * 24 < tokens:
        n += 1
        blocks.append(f'def step_{n}(x):\n    """Return x times {n} plus {n}."""\n'
                      f"    return x * {n} + {n}")
    return "\n\n".join(blocks)


def _squares(tokens: int) -> str:
    return "\n".join(f"{n}: {n * n}" for n in range(1, tokens // 8))


KINDS: dict[str, Callable[[int], str]] = {
    "prose": _prose, "late phrase loop": _late_loop, "late paragraph loop": _paragraph_loop,
    "late ! run": _bang_run, "counting code": _counting_code, "list of squares": _squares}


def _best(function: Callable[[], object], runs: int = 5) -> float:
    """The least CPU time of this process over `runs` calls (CPU, not wall time: on a
    machine shared with other work the wall clock also counts their turns)."""
    times = []
    for _ in range(runs):
        started = time.process_time()
        function()
        times.append(time.process_time() - started)
    return min(times)


def main() -> None:
    figures: dict[str, dict[str, object]] = {}
    print(f"{'answer':22s} {'tokens':>7s} {'reason':>11s} {'check ms':>9s} {'base ms':>8s} "
          f"{'ratio':>6s} {'check us/1K tok':>15s}")
    for kind, make in KINDS.items():
        for tokens in SIZES:
            text = make(tokens)
            reason = degenerate_reason(text, "length", "stop")
            check = _best(lambda text=text: degenerate_reason(text, "length", "stop"))
            base = _best(lambda text=text: set(text.split()))
            per_k = 1e6 * check / (tokens / 1000)
            figures[f"{kind} {tokens}"] = {"tokens": tokens, "chars": len(text),
                                           "reason": reason, "check_s": check,
                                           "baseline_s": base, "ratio": check / base,
                                           "check_us_per_1k_tokens": per_k}
            print(f"{kind:22s} {tokens:7d} {reason or '-':>11s} {1e3 * check:9.2f} "
                  f"{1e3 * base:8.2f} {check / base:6.2f} {per_k:15.1f}")
    path = save("degenerate_long", figures)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
