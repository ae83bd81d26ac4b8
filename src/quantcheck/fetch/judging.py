"""Ask the judge (`--judge URL`, an OpenAI-compatible endpoint): each question as one
chat completion at temperature 0, its reply kept in the cache the moment it arrives, a
question the cache holds never asked again. A judge that fails costs only its own
figures: a request without an answer is returned as the reason, never raised, and
after a run of connection failures the judge is given up on for the rest."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EndpointError, QuantcheckError
from ..store.folders.judge_cache import JudgeCache
from ..store.records.judge_records import JudgeReply
from ..store.redaction import public_url
from ..triage.judging import PROMPT_VERSION, REPLY_CHARS, JudgeQuestion
from ..wire.client import (
    EndpointClient,
    RequestFailed,
    RetryableError,
    sleep_backoff,
)
from ..wire.requests import judge_body
from .clients import all_or_none

# Given up on: this many connection failures in a row, over at least this long since
# the judge last answered (collect's rule for a dead endpoint).
GIVE_UP_AFTER_FAILURES = 10
GIVE_UP_AFTER_SECONDS = 5.0
JUDGE_RESPONSE_MB = 1  # a reply is a sentence; anything near this is refused at once


@dataclass
class JudgeSettings:
    """The judge endpoint and how it is asked (`--judge` and its options)."""

    endpoint: str
    model: str | None = None  # default: the one model /v1/models lists
    api_key_env: str | None = None
    concurrency: int = 4
    timeout: float = 120.0  # seconds, a request as a whole
    max_tokens: int = 200
    retries: int = 2
    cache: Path | None = None  # default: REPORT_DIR/judge-cache.jsonl


@dataclass
class Tally:
    """What asking cost: requests sent, replies found in the cache, requests left
    without an answer, and the tokens the judge reported for the requests sent."""

    requests: int = 0
    cached: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


async def judge_model(client: EndpointClient, settings: JudgeSettings) -> str:
    """--judge-model, or the one model the judge lists."""
    if settings.model:
        return settings.model
    ids = [str(entry["id"]) for entry in await client.list_models()]
    if len(ids) != 1:
        raise EndpointError(f"{public_url(client.base_url)} lists {len(ids)} models"
                            f"{': ' + ', '.join(ids[:5]) if ids else ''}; name one with "
                            "--judge-model")
    return ids[0]


@dataclass
class Judge:
    """The judge reached: its client and the model asked, or why it cannot be asked
    (`error`: a judge that fails costs its own figures, never the report)."""

    client: EndpointClient
    settings: JudgeSettings
    model: str | None
    error: str | None

    def asking(self, cache: JudgeCache) -> JudgeClient | None:
        """Questions asked to this judge with this cache; None when it cannot be asked."""
        if not self.model:
            return None
        return JudgeClient(self.client, self.model, self.settings, cache)


@asynccontextmanager
async def reaching_judge(settings: JudgeSettings) -> AsyncIterator[Judge]:
    """The judge's client, open while the block runs, and the model it is asked for."""
    key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
    async with EndpointClient(settings.endpoint, key, settings.timeout,
                              max(2 * settings.concurrency, 8), JUDGE_RESPONSE_MB) as client:
        try:
            model: str | None = await judge_model(client, settings)
            error = None
        except QuantcheckError as exc:  # costs the judge's figures, never the report
            model, error = None, str(exc)
        yield Judge(client, settings, model, error)


@dataclass
class JudgeClient:
    """One judge and one cache: `ask` a list of questions to the judge, get each reply (or why none
    came), `concurrency` requests in flight at a time."""

    client: EndpointClient
    model: str
    settings: JudgeSettings
    cache: JudgeCache
    tally: Tally = field(default_factory=Tally)
    down: str | None = None  # why the judge was given up on
    last_failure: str | None = None  # why the last question to the judge without an answer got none
    _unreachable: int = 0
    _last_answer: float = field(default_factory=time.monotonic)

    async def ask(self, judge_questions: list[JudgeQuestion]) -> list[JudgeReply | str]:
        gate = asyncio.Semaphore(self.settings.concurrency)

        async def one(judge_question: JudgeQuestion) -> JudgeReply | str:
            key = judge_question.key(self.model)
            kept = self.cache.get(key)
            if kept is not None:
                self.tally.cached += 1
                return kept
            async with gate:
                return await self._request(judge_question, key)

        # all_or_none: a failure here (the cache cannot be written) stops the other
        # questions to the judge too, before the client closes under them
        return await all_or_none(one(judge_question) for judge_question in judge_questions)

    async def _request(self, judge_question: JudgeQuestion, key: str) -> JudgeReply | str:
        if self.down is not None:
            return f"not asked: {self.down}"
        body = judge_body(self.model, judge_question.messages(), self.settings.max_tokens)
        why = "not asked"
        for attempt in range(self.settings.retries + 1):
            started = time.perf_counter()
            self.tally.requests += 1
            try:
                generation, _ = await self.client.generate("chat", body, False, 0)
            except RetryableError as exc:
                why = str(exc)
                if self._gone(exc):
                    break
                if attempt < self.settings.retries:
                    await sleep_backoff(attempt, exc.retry_after)
                continue
            except RequestFailed:  # beyond the size cap: asking again gets the same, kept
                self._answered()
                return self._keep(JudgeReply(
                    key=key, model=self.model, prompt_version=PROMPT_VERSION, at=_now(),
                    error=f"the reply is larger than {JUDGE_RESPONSE_MB} MB: not read"))
            except QuantcheckError as exc:
                self._answered()
                why = str(exc)
                break
            except Exception as exc:  # an answer no parser foresaw: no verdict, no crash
                self._answered()
                why = f"unreadable answer ({type(exc).__name__})"
                break
            self._answered()
            usage = generation.usage or {}
            return self._keep(JudgeReply(
                key=key, model=self.model, prompt_version=PROMPT_VERSION,
                reply=generation.text[:REPLY_CHARS], chars=len(generation.text),
                prompt_tokens=_count(usage.get("prompt_tokens")),
                completion_tokens=_count(usage.get("completion_tokens")),
                seconds=round(time.perf_counter() - started, 3), at=_now()))
        self.tally.failed += 1
        self.last_failure = why
        return why

    def trouble(self) -> str | None:
        """Why questions went without an answer (summary.json's `judge.error`): the judge
        given up on, or how many got none and the last reason; None when none failed."""
        if self.down is not None:
            return self.down
        if not self.tally.failed:
            return None
        failed = self.tally.failed
        return (f"{failed} question{'s' * (failed != 1)} to the judge got no answer; the "
                f"last: {self.last_failure}")

    def _keep(self, reply: JudgeReply) -> JudgeReply:
        self.cache.add(reply)
        self.tally.prompt_tokens += reply.prompt_tokens or 0
        self.tally.completion_tokens += reply.completion_tokens or 0
        return reply

    def _answered(self) -> None:
        self._unreachable = 0
        self._last_answer = time.monotonic()

    def _gone(self, exc: RetryableError) -> bool:
        """Whether the judge is now given up on (see GIVE_UP_AFTER_*)."""
        if not exc.unreachable:
            self._answered()  # there, only unhappy
            return False
        self._unreachable += 1
        silent = time.monotonic() - self._last_answer
        if self._unreachable >= GIVE_UP_AFTER_FAILURES and silent >= GIVE_UP_AFTER_SECONDS:
            self.down = (f"the judge stopped answering ({self._unreachable} connection "
                         f"failures in a row over {silent:.0f} s; last: {exc})")
        return self.down is not None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
