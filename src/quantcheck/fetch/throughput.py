"""Throughput measured without logprobs: a warm-up, then the prompt set
without logprobs (top-20 logprobs cost the server and the client more than generation
does), cycled at a fixed concurrency for at least a minimum duration, greedy, with the
run's own max_tokens. Aggregate output tokens per second over the measured window, TTFT
p50 and end-to-end p99, and every prompt's generated token count: two endpoints'
throughputs are compared only when those counts match (a 10% difference in generated
tokens quietly becomes a 10% throughput lie).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..errors import QuantcheckError, RequestsFailed
from ..store.folders.run_dir import Throughput
from ..store.inputs.prompt_sets import RequestOptions, load_prompts
from ..store.records.run_records import DEFAULT_MAX_RESPONSE_MB, Prompt
from ..store.redaction import public_url
from ..store.runtimes import choose_model
from ..wire.client import (
    EndpointClient,
    RequestFailed,
    RetryableError,
    sleep_backoff,
)
from ..wire.requests import generation_body
from .clients import all_or_none, api_key_from_env

DEFAULT_CONCURRENCY = 32
DEFAULT_MIN_SECONDS = 30.0


async def measure(endpoint: str, prompt_files: Sequence[Path], *, label: str = "",
                  model: str | None = None, concurrency: int = DEFAULT_CONCURRENCY,
                  min_seconds: float = DEFAULT_MIN_SECONDS, warmup: int = 4,
                  request: RequestOptions | None = None, api_key_env: str | None = None,
                  timeout: float = 600.0, retries: int = 4,
                  progress: Callable[[int, float], None] | None = None,
                  max_response_mb: int = DEFAULT_MAX_RESPONSE_MB) -> Throughput:
    """Measure one endpoint. A request is retried as collection retries it (a server
    closing a kept-alive connection, a 503); one that still fails, or whose answer
    cannot be used, raises RequestsFailed; `progress(requests, seconds)` hears each
    answer."""
    prompts = load_prompts(prompt_files, request or RequestOptions())
    async with EndpointClient(endpoint, api_key_from_env(api_key_env), timeout,
                              max(concurrency * 2, 16), max_response_mb) as client:
        chosen = choose_model(await client.list_models(), model, public_url(endpoint))
        sender = _Sender(client, retries)
        bodies = [(p, generation_body(p.request, p.api, chosen, 0, None)) for p in prompts]
        for prompt, body in bodies[:warmup]:
            await sender.one(prompt.api, body)
        window = _Window(prompts, min_seconds, progress)
        cycle = itertools.cycle(bodies)
        await all_or_none(window.worker(sender, cycle)
                          for _ in range(min(concurrency, max(len(bodies), 1) * 4)))
    return window.result(label or public_url(endpoint), public_url(endpoint), chosen,
                         concurrency, sender.retried)


class _Sender:
    """Streamed requests without logprobs, each retried up to `retries` times."""

    def __init__(self, client: EndpointClient, retries: int) -> None:
        self.client, self.retries = client, retries
        self.retried = 0

    async def one(self, api: str, body: dict[str, object]
                  ) -> tuple[int | None, float | None, float]:
        """(completion tokens, TTFT, end to end) of one request. Any failure of the
        request is RequestsFailed (a QuantcheckError): what collection records as a
        failed request costs the throughput phase its figures, never a traceback."""
        for attempt in range(self.retries + 1):
            try:
                generation, timing = await self.client.generate(api, dict(body), True, 0)
            except RetryableError as exc:
                if attempt == self.retries:
                    raise RequestsFailed(f"throughput request failed after {attempt + 1} "
                                        f"attempts: {exc}") from None
                self.retried += 1
                await sleep_backoff(attempt, exc.retry_after)
                continue
            except QuantcheckError:
                raise
            except RequestFailed as exc:  # another attempt would get the same
                raise RequestsFailed(f"throughput request failed: {exc}") from None
            except Exception as exc:  # an answer no parser foresaw, as collect records it
                raise RequestsFailed(f"throughput request failed: unreadable answer "
                                     f"({type(exc).__name__}: {exc})") from None
            tokens = (generation.usage or {}).get("completion_tokens")
            return (tokens if isinstance(tokens, int) else None), timing.ttft_s, timing.e2e_s
        raise AssertionError("unreachable: the last attempt returns or raises")


class _Window:
    """The measured window: requests keep starting until every prompt has been answered
    once and `min_seconds` have passed."""

    def __init__(self, prompts: list[Prompt], min_seconds: float,
                 progress: Callable[[int, float], None] | None) -> None:
        self.prompts, self.min_seconds, self.progress = prompts, min_seconds, progress
        self.started = time.perf_counter()
        self.ended = self.started
        self.tokens: list[int | None] = []
        self.ttft: list[float] = []
        self.e2e: list[float] = []
        self.first_counts: dict[str, int | None] = {}

    def open(self) -> bool:
        elapsed = time.perf_counter() - self.started
        return elapsed < self.min_seconds or len(self.first_counts) < len(self.prompts)

    async def worker(self, sender: _Sender,
                     cycle: itertools.cycle[tuple[Prompt, dict[str, object]]]) -> None:
        while self.open():
            prompt, body = next(cycle)
            tokens, ttft, e2e = await sender.one(prompt.api, body)
            self.ended = time.perf_counter()
            self.tokens.append(tokens)
            self.e2e.append(e2e)
            if ttft is not None:
                self.ttft.append(ttft)
            self.first_counts.setdefault(prompt.id, tokens)
            if self.progress:
                self.progress(len(self.tokens), self.ended - self.started)

    def result(self, label: str, endpoint: str, model: str, concurrency: int,
               retried: int) -> Throughput:
        seconds = max(self.ended - self.started, 1e-9)
        counted = None if None in self.tokens else sum(t or 0 for t in self.tokens)
        known = None if None in self.first_counts.values() else {
            k: int(v or 0) for k, v in self.first_counts.items()}
        return Throughput(
            label=label, endpoint=endpoint, model=model, concurrency=concurrency,
            requests=len(self.tokens), seconds=seconds, output_tokens=counted,
            tokens_per_s=counted / seconds if counted is not None else None,
            ttft_p50_s=float(np.percentile(self.ttft, 50)) if self.ttft else None,
            e2e_p99_s=float(np.percentile(self.e2e, 99)) if self.e2e else None,
            prompt_tokens=known, retried=retried)
