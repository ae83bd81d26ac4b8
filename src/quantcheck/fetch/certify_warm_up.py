"""A determinism certificate's warm-up: requests that are not counted, sent before the
plan to one endpoint, that measure it (`Pace`): the seconds of an answer alone, the
seconds and tokens a prompt word adds, and how many answers it computes at once. The
time estimate rests on them (triage/certify_plan.py `estimate_seconds`), and so does
which levels fit its context (the tokens a plan word takes there).

Measured on a real llama-server (`-c 4096 --parallel 4`, Gemma 3 270M F16, 2 loaded
cores): 1.63 s an answer, 7.6 to 9.2 ms a prompt word, 1.9 of 4 answered at once; the
plan's estimate 254 s against 234 s taken, where one answer per round would have said
108 s for a run of 251 s.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable

from ..store.records.certificate_records import Probe
from ..triage.certify_plan import FILLER_HEAD, Pace, tokens_per_word, words, words_that_fit
from ..wire.dialects import Generation
from .certify import PlanSender
from .clients import all_or_none

WARM_UP_PREFIX_WORDS = 512
WARM_UP_AT_ONCE = 4  # requests sent together to see how many the server computes at once


async def _measure(sender: PlanSender, probe: Probe) -> tuple[float, int | None]:
    """A request's seconds, and the prompt tokens the server counted (None: unsaid)."""
    started = time.perf_counter()
    got = await sender.ask(probe)
    seconds = time.perf_counter() - started
    usage = got.usage if isinstance(got, Generation) else None
    counted = (usage or {}).get("prompt_tokens")
    return seconds, counted if isinstance(counted, int) else None


async def warm_up(sender: PlanSender) -> Pace:
    """Requests that are not counted: the first prompt alone (the server's first answer
    may differ from later ones: kernels chosen, caches filled), then measured: the
    first prompt alone, a short filler, the first prompt after a prefix with the cache
    off (the seconds and tokens a word adds), and fillers sent together (how many the
    server computes at once). A round's time is not one request's: a batch of 8 on a
    server with one slot takes 8 answers' time, and a long filler's prefill more."""
    rng = random.Random(0)
    alone = Probe(factor="repeat", level="warm-up", prompt_id=sender.first.id)
    filler = Probe(factor="batch", level="warm-up", filler=FILLER_HEAD + words(rng, 32))
    await sender.ask(alone)
    answer, counted = await _measure(sender, alone)
    filler_seconds, _ = await _measure(sender, filler)
    extra = min(WARM_UP_PREFIX_WORDS, words_that_fit(sender.facts.context_tokens,
                                                     sender.max_tokens)
                - sender.words[sender.first.id])
    per_word, per_token = 0.0, None
    if extra >= 32:
        prefixed = Probe(factor="prefix", level="warm-up", prompt_id=sender.first.id,
                         prefix=words(rng, extra))
        seconds, longer = await _measure(sender, prefixed)
        per_word = max(0.0, (seconds - answer) / extra)
        if counted is not None and longer is not None and longer > counted:
            per_token = (longer - counted) / extra
    tried = min(WARM_UP_AT_ONCE, sender.facts.slots or WARM_UP_AT_ONCE)
    at_once = 1.0
    if tried > 1:
        together = await _seconds(all_or_none(sender.ask(filler) for _ in range(tried)))
        at_once = min(float(tried), max(1.0, tried * filler_seconds / max(together, 1e-6)))
    sender.tokens_per_word = tokens_per_word(per_token)
    return Pace(max(answer, filler_seconds), per_word, at_once, tried, sender.facts.slots)


async def _seconds(work: Awaitable[object]) -> float:
    started = time.perf_counter()
    await work
    return time.perf_counter() - started
