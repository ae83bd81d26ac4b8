"""The determinism certificate's request plan: a pure function of the prompts, the
options and a seed, so the same command sends the same requests.

In order: each prompt alone (`repeat`, `trials` times; the first is its baseline),
streamed (`stream`), inside concurrent batches of 2, 4, 8, ... up to `max_batch`
whose other members are filler prompts of random lengths at random positions, fresh
each trial (`batch`), then the prefix ladder: each prompt after a shared prefix of
each length, twice with the prefix cache off or emptied (`prefix`; the first is that
prompt's baseline at that length), then with the cache on: a sibling sharing the
prefix computes it, and the prompt is asked twice (`cache`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ..store.certificate_records import Plan, Probe, Round

BATCH_SIZES = (2, 4, 8, 16, 32, 64, 128, 256)
# Shared prefixes in words (about a token each): one word, then SGLang's ladder.
PREFIX_LENGTHS = (1, 511, 2048, 4097)
UNKNOWN_CONTEXT_PREFIXES = (1, 256, 1024)
SHORT_FILLER = (8, 64)  # words
LONG_FILLER_WORDS = 1500  # near a chunked-prefill size (llama.cpp's batch is 2048)
WORDS = ("river stone lamp orange window garden paper silver music winter bridge "
         "market candle forest number yellow engine castle letter mountain pocket "
         "ladder island morning thunder basket violin planet coffee saddle harbor").split()


def batch_sizes(max_batch: int) -> list[int]:
    return [size for size in BATCH_SIZES if size <= max_batch]


def prefix_lengths(context_tokens: int | None, max_tokens: int) -> list[int]:
    """The ladder's lengths that fit the context twice over (a word may be more than
    one token), and the answer; without a known context, a short ladder."""
    if context_tokens is None:
        return list(UNKNOWN_CONTEXT_PREFIXES)
    room = (context_tokens - max_tokens - 256) // 2
    return [length for length in PREFIX_LENGTHS if length <= room] or [1]


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def filler_text(rng: random.Random, long_words: int) -> str:
    """A filler prompt: short most of the time, sometimes near a prefill chunk."""
    if rng.random() < 0.25:
        count = rng.randint(long_words // 2, long_words)
    else:
        count = rng.randint(*SHORT_FILLER)
    return "Repeat these words: " + words(rng, count)


def make_plan(prompt_ids: Sequence[str], trials: int, max_batch: int, seed: int,
              context_tokens: int | None = None, max_tokens: int = 64,
              cache_factor: bool = True) -> Plan:
    """`cache_factor=False` (the requests themselves turn the prefix cache off): the
    ladder is asked with the cache off only."""
    rng = random.Random(seed)
    sizes = batch_sizes(max_batch)
    lengths = prefix_lengths(context_tokens, max_tokens)
    long_words = LONG_FILLER_WORDS if context_tokens is None else \
        max(SHORT_FILLER[1], min(LONG_FILLER_WORDS, (context_tokens - max_tokens) // 3))
    rounds: list[Round] = []
    for trial in range(trials):
        rounds += [Round(probes=[Probe(factor="repeat", level="alone", trial=trial,
                                       prompt_id=p, baseline=trial == 0)])
                   for p in prompt_ids]
    for trial in range(trials):
        rounds += [Round(probes=[Probe(factor="stream", level="streamed", trial=trial,
                                       prompt_id=p, stream=True)]) for p in prompt_ids]
    for trial in range(trials):
        for size in sizes:
            for prompt_id in prompt_ids:
                probes = [Probe(factor="batch", level=f"batch={size}", trial=trial,
                                filler=filler_text(rng, long_words))
                          for _ in range(size - 1)]
                probes.insert(rng.randrange(size), Probe(
                    factor="batch", level=f"batch={size}", trial=trial, prompt_id=prompt_id))
                rounds.append(Round(probes=probes))
    for length in lengths:
        shared = words(rng, length)
        for prompt_id in prompt_ids:
            level = f"prefix={length}"
            for trial in range(2):
                rounds.append(Round(action="flush", probes=[Probe(
                    factor="prefix", level=level, trial=trial, prompt_id=prompt_id,
                    prefix=shared, baseline=trial == 0)]))
            if not cache_factor:
                continue
            rounds.append(Round(probes=[Probe(
                factor="cache", level=level, cache=True,
                filler=f"{shared}\n\nName a colour.")]))
            rounds += [Round(probes=[Probe(factor="cache", level=level, trial=trial,
                                           prompt_id=prompt_id, prefix=shared, cache=True)])
                       for trial in range(2)]
    return Plan(seed=seed, trials=trials, batch_sizes=sizes, prefix_lengths=lengths,
                prompts=len(prompt_ids), rounds=rounds)
