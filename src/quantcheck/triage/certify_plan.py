"""The determinism certificate's request plan: a pure function of the prompts, the
options and a seed, so the same command sends the same requests.

In order: each prompt alone (`repeat`, `trials` times; the first is its baseline),
streamed (`stream`), sampled at SEED_TEMPERATURE with the plan's seed sent as `seed`
(`seed`, `trials` times; the first is that prompt's sampled baseline), inside
concurrent batches of 2, 4, 8, ... up to `max_batch`
whose other members are filler prompts of random lengths at random positions, fresh
each trial (`batch`), then the prefix ladder: each prompt after a shared prefix of
each length, twice with the prefix cache off or emptied (`prefix`; the first is that
prompt's baseline at that length), then with the cache on: a sibling (the prompt's
request asking SIBLING_QUESTION after the same prefix) computes the prefix, and the
prompt is asked twice (`cache`); then, the cache emptied, the prompt and its sibling
at once, both writing the prefix into the cache (`cobatch`, twice, each first once).
Then the cache's own factors: each prompt cold (the cache emptied, or computed
without it) and right after warm, from its own cached prompt (`warm`, `trials` times;
the first cold answer is the baseline); a cached prefix of exactly one cache block
(`block_tokens`) and a token either side, written by a sibling and read by the prompt,
held to the same request cold (`block`); and the prompts and a sibling after one
shared prefix, one after another with the cache on, the first of each order cold, in
the given order (the baseline), reversed, then shuffled (`order`, `trials` orders).

Every level of the ladder is planned, whatever the server; a round is sent where each
of its requests fits the endpoint's context (`fits`: the tokens a word takes there, as
the warm-up measured them, the answer's tokens and CONTEXT_MARGIN more), and the levels
of a round that does not fit are said not tested. The fillers are sized to fit the
smallest context of the endpoints a plan is sent to (a certificate and its control).
`plan_requests` counts a plan's requests by arithmetic, before anything is built.

`estimate_seconds`: a round takes its requests' seconds (an answer alone, plus each
prompt word beyond the prompt's own that is not cached) over the answers the server
computes at once, all of them measured in the warm-up (`Pace`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from msgspec.structs import replace

from ..store.records.certificate_records import Plan, Probe, Round

BATCH_SIZES = (2, 4, 8, 16, 32, 64, 128, 256)
# Shared prefixes in words (a token each on Gemma 3's tokenizer, measured with
# llama-server's /tokenize): one word, then SGLang's ladder.
PREFIX_LENGTHS = (1, 511, 2048, 4097)
# A word is allowed two tokens where the server does not count them (the plan's words
# are a token each on Gemma 3, measured with llama-server's /tokenize), else what the
# warm-up measured and a tenth more; the server's template and the question this many
# more: a level is sent only where it fits so.
TOKENS_PER_WORD = 2
MEASURED_SLACK = 1.1
CONTEXT_MARGIN = 256
# A server that does not say its context is sent what fits this many tokens
ASSUMED_CONTEXT = 2048
SHORT_FILLER = (8, 64)  # words
FILLER_HEAD = "Repeat these words: "
# the prefix ladder's rounds per prompt and length: two cache off, the cache's sibling
# and two cached, and two co-batches of the prompt and its sibling
LADDER_REQUESTS = 5
COBATCH_TRIALS = 2
SIBLING_QUESTION = "Name a colour."
# A cache without blocks of its own (token by token) is tested at this many tokens and
# one either side: vLLM's default block
DEFAULT_CACHE_BLOCK = 16
BLOCK_REQUESTS = 9  # per prompt: 3 levels x (the sibling, the prompt cached, cold)
# words drawn for a block's prefix beyond its tokens (the sender cuts it to size)
BLOCK_SLACK_WORDS = 8
ORDER_PREFIX_WORDS = 64  # the prefix the `order` factor's requests share
SEED_TEMPERATURE = 1.0
LONG_FILLER_WORDS = 1500  # near a chunked-prefill size (llama.cpp's batch is 2048)
WORDS = ("river stone lamp orange window garden paper silver music winter bridge "
         "market candle forest number yellow engine castle letter mountain pocket "
         "ladder island morning thunder basket violin planet coffee saddle harbor").split()


def batch_sizes(max_batch: int) -> list[int]:
    return [size for size in BATCH_SIZES if size <= max_batch]


def fits(words: int, context_tokens: int | None, max_tokens: int,
         per_word: float = TOKENS_PER_WORD) -> bool:
    """Whether a request of `words` words (`per_word` tokens each) and its answer fit
    the context; a context not said is taken as ASSUMED_CONTEXT."""
    context = ASSUMED_CONTEXT if context_tokens is None else context_tokens
    return math.ceil(per_word * words) + max_tokens + CONTEXT_MARGIN <= context


def tokens_per_word(measured: float | None) -> float:
    """The tokens a plan's word is allowed: what the server counted and a tenth more
    (one at least), or TOKENS_PER_WORD where it counted nothing."""
    if measured is None:
        return float(TOKENS_PER_WORD)
    return min(float(TOKENS_PER_WORD), max(1.0, measured)) * MEASURED_SLACK


def words_that_fit(context_tokens: int | None, max_tokens: int) -> int:
    context = ASSUMED_CONTEXT if context_tokens is None else context_tokens
    return max(0, (context - max_tokens - CONTEXT_MARGIN) // TOKENS_PER_WORD)


def prefix_lengths(context_tokens: int | None, max_tokens: int) -> list[int]:
    """The ladder's lengths that fit the context (a prompt's own words aside)."""
    return [length for length in PREFIX_LENGTHS if fits(length, context_tokens, max_tokens)]


def plan_requests(prompts: int, trials: int, max_batch: int) -> int:
    """The requests `make_plan` would make, counted without making it."""
    alone = 3 * trials * prompts  # repeat, stream, seed
    batches = trials * prompts * sum(batch_sizes(max_batch))
    ladder = len(PREFIX_LENGTHS) * prompts * (LADDER_REQUESTS + 2 * COBATCH_TRIALS)
    warm, order = 2 * trials * prompts, trials * (prompts + 1)
    return alone + batches + ladder + warm + BLOCK_REQUESTS * prompts + order


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def filler_text(rng: random.Random, long_words: int) -> str:
    """A filler prompt: short most of the time, sometimes near a prefill chunk."""
    if rng.random() < 0.25:
        count = rng.randint(long_words // 2, long_words)
    else:
        count = rng.randint(*SHORT_FILLER)
    return FILLER_HEAD + words(rng, count)


def long_filler_words(context_tokens: int | None, max_tokens: int) -> int:
    """The longest filler: near a prefill chunk where the context holds it."""
    room = words_that_fit(context_tokens, max_tokens) - len(FILLER_HEAD.split())
    return max(SHORT_FILLER[1], min(LONG_FILLER_WORDS, room))


def make_plan(prompt_ids: Sequence[str], trials: int, max_batch: int, seed: int,
              context_tokens: int | None = None, max_tokens: int = 64,
              block_tokens: int = DEFAULT_CACHE_BLOCK) -> Plan:
    """`context_tokens`: the smallest context of the endpoints it is sent to (sizes
    the fillers; None when none says it); `block_tokens`: the target's cache block
    (DEFAULT_CACHE_BLOCK for a cache kept token by token)."""
    rng = random.Random(seed)
    sizes = batch_sizes(max_batch)
    long_words = long_filler_words(context_tokens, max_tokens)
    rounds = _alone_rounds(prompt_ids, trials, seed)
    rounds += _batch_rounds(rng, prompt_ids, trials, sizes, long_words)
    for length in PREFIX_LENGTHS:
        rounds += _ladder_rounds(prompt_ids, length, words(rng, length))
    rounds += _warm_rounds(prompt_ids, trials)
    block = block_tokens if block_tokens > 1 else DEFAULT_CACHE_BLOCK
    for tokens in (block - 1, block, block + 1):
        rounds += _block_rounds(prompt_ids, tokens, words(rng, tokens + BLOCK_SLACK_WORDS))
    rounds += _order_rounds(rng, prompt_ids, trials)
    return Plan(seed=seed, trials=trials, batch_sizes=sizes,
                prefix_lengths=list(PREFIX_LENGTHS), prompts=len(prompt_ids), rounds=rounds,
                block_lengths=[block - 1, block, block + 1])


def _alone_rounds(prompt_ids: Sequence[str], trials: int, seed: int) -> list[Round]:
    rounds: list[Round] = []
    for trial in range(trials):
        rounds += [Round(probes=[Probe(factor="repeat", level="alone", trial=trial,
                                       prompt_id=p, baseline=trial == 0)])
                   for p in prompt_ids]
    for trial in range(trials):
        rounds += [Round(probes=[Probe(factor="stream", level="streamed", trial=trial,
                                       prompt_id=p, stream=True)]) for p in prompt_ids]
    for trial in range(trials):
        rounds += [Round(probes=[Probe(factor="seed", level="seeded", trial=trial,
                                       prompt_id=p, seed=seed, temperature=SEED_TEMPERATURE,
                                       baseline=trial == 0)]) for p in prompt_ids]
    return rounds


def _batch_rounds(rng: random.Random, prompt_ids: Sequence[str], trials: int,
                  sizes: Sequence[int], long_words: int) -> list[Round]:
    rounds = []
    for trial in range(trials):
        for size in sizes:
            for prompt_id in prompt_ids:
                probes = [Probe(factor="batch", level=f"batch={size}", trial=trial,
                                filler=filler_text(rng, long_words))
                          for _ in range(size - 1)]
                probes.insert(rng.randrange(size), Probe(
                    factor="batch", level=f"batch={size}", trial=trial, prompt_id=prompt_id))
                rounds.append(Round(probes=probes))
    return rounds


def _ladder_rounds(prompt_ids: Sequence[str], length: int, shared: str) -> list[Round]:
    """One length of the ladder: cold twice (`prefix`), cached by a sibling (`cache`),
    and sent at once with the sibling (`cobatch`)."""
    level = f"prefix={length}"
    rounds: list[Round] = []
    for prompt_id in prompt_ids:
        rounds += [Round(action="flush", probes=[Probe(
            factor="prefix", level=level, trial=trial, prompt_id=prompt_id, prefix=shared,
            baseline=trial == 0)]) for trial in range(2)]
        rounds.append(Round(probes=[Probe(factor="cache", level=level, prompt_id=prompt_id,
                                          prefix=shared, cache=True, sibling=True)]))
        rounds += [Round(probes=[Probe(factor="cache", level=level, trial=trial,
                                       prompt_id=prompt_id, prefix=shared, cache=True)])
                   for trial in range(2)]
        for trial in range(COBATCH_TRIALS):
            pair = [Probe(factor="cobatch", level=level, trial=trial, prompt_id=prompt_id,
                          prefix=shared, cache=True, sibling=sibling)
                    for sibling in (False, True)]
            rounds.append(Round(action="flush", probes=pair[::-1] if trial % 2 else pair))
    return rounds


def _warm_rounds(prompt_ids: Sequence[str], trials: int) -> list[Round]:
    """Each prompt cold (the cache emptied first), then warm from its own prompt."""
    rounds = []
    for prompt_id in prompt_ids:
        for trial in range(trials):
            rounds.append(Round(action="flush", probes=[Probe(
                factor="warm", level="cold", trial=trial, prompt_id=prompt_id,
                baseline=trial == 0)]))
            rounds.append(Round(probes=[Probe(factor="warm", level="warm", trial=trial,
                                              prompt_id=prompt_id, cache=True)]))
    return rounds


def _block_rounds(prompt_ids: Sequence[str], tokens: int, prefix: str) -> list[Round]:
    """A sibling writes a prefix it shares with the prompt for exactly `tokens` tokens,
    the prompt reads it; then the prompt cold (the baseline, after, so that nothing of
    its own is cached when it reads its sibling's)."""
    level = f"block={tokens}"
    rounds = []
    for prompt_id in prompt_ids:
        probe = Probe(factor="block", level=level, prompt_id=prompt_id, prefix=prefix,
                      shared_tokens=tokens)
        rounds += [Round(action="flush", probes=[replace(probe, cache=True, sibling=True)]),
                   Round(probes=[replace(probe, trial=1, cache=True)]),
                   Round(action="flush", probes=[replace(probe, baseline=True)])]
    return rounds


def _order_rounds(rng: random.Random, prompt_ids: Sequence[str], trials: int) -> list[Round]:
    """The prompts and the first one's sibling after one shared prefix, one at a time,
    the first of each order cold (the cache emptied), the rest reading the cache: in
    the given order, reversed, then shuffled."""
    shared = words(rng, ORDER_PREFIX_WORDS)
    members = [(p, False) for p in prompt_ids] + [(prompt_ids[0], True)]
    rounds = []
    for trial in range(trials):
        order = members if trial == 0 else members[::-1] if trial == 1 \
            else rng.sample(members, len(members))
        rounds += [Round(action="" if n else "flush", probes=[Probe(
            factor="order", level="reordered", trial=trial, prompt_id=prompt_id,
            prefix=shared, cache=n > 0, baseline=trial == 0 and not sibling,
            sibling=sibling)]) for n, (prompt_id, sibling) in enumerate(order)]
    return rounds


@dataclass(frozen=True)
class Pace:
    """What the warm-up measured: seconds for one answer alone, seconds per prompt word
    beyond the prompt's own (prefill), and how many answers the server computes at once
    out of `tried` sent together (1: one after another)."""

    answer: float
    per_word: float = 0.0
    at_once: float = 1.0
    tried: int = 1
    slots: int | None = None  # the server's own limit, where it says it

    def parallel(self, requests: int) -> float:
        """Answers computed at once in a round of `requests`: the share measured with
        `tried`, over as many as the server has slots for."""
        share = self.at_once / max(self.tried, 1)
        return max(1.0, share * min(requests, self.slots or requests))


def probe_words(probe: Probe) -> int:
    """The words a probe adds to its prompt (a prefix), or a filler's whole text."""
    return len(probe.prefix.split()) + len(probe.filler.split())


def computed_words(probe: Probe) -> int:
    """The words a probe's server computes beyond its prompt: none of a prefix already
    in the cache (a prompt's request with the cache on: a sibling or its own cold
    request wrote it)."""
    return 0 if probe.cache and probe.target else probe_words(probe)


def round_seconds(round_: Round, pace: Pace) -> float:
    seconds = [pace.answer + pace.per_word * computed_words(p) for p in round_.probes]
    if not seconds:
        return 0.0
    return max(max(seconds), sum(seconds) / pace.parallel(len(seconds)))


def estimate_seconds(rounds: Sequence[Round], pace: Pace) -> float:
    return sum(round_seconds(round_, pace) for round_ in rounds)
