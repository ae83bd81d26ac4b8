"""fetch/judging.py: asking the judge. A failure of one question to the judge that is not the
judge's (the cache cannot be written) stops the others with it: none is left to send a
request after its client closed (the judge's whole flow: test_pipeline_judging.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from quantcheck.fetch.judging import JudgeClient, JudgeSettings
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.pipeline.event_loop import run_blocking
from quantcheck.store.files import StorageError
from quantcheck.store.folders.judge_cache import JudgeCache
from quantcheck.triage.judging import JudgeQuestion
from quantcheck.wire.client import EndpointClient

from .conftest import Serve

VERDICT = '{"class": "same", "reason": "Both say yes."}'


def test_a_cache_that_cannot_be_written_stops_every_judge_question(
        serve: Serve, tmp_path: Path) -> None:
    """One question to the judge's reply cannot be kept while another waits to be asked
    again (a 503 with Retry-After): that one is stopped too, never left to ask after the
    client closed (on a new session nothing would close)."""
    judge = serve(ScriptedModel({"": VERDICT}), faults=Faults(
        latency_s=0.05, status={1: 503}, retry_after_s=0.4))
    (tmp_path / "a-file").write_text("not a folder")
    settings = JudgeSettings(endpoint=judge.url, model="judge", concurrency=2, retries=1)
    judge_questions = [JudgeQuestion(f"question {n}", "yes", "yes") for n in range(2)]

    async def ask() -> bool:
        with JudgeCache(tmp_path / "a-file" / "cache.jsonl") as cache:
            async with EndpointClient(judge.url, timeout=10) as client:
                judge_client = JudgeClient(client, "judge", settings, cache)
                with pytest.raises(StorageError):
                    await judge_client.ask(judge_questions)
            await asyncio.sleep(0.8)  # past the other question's Retry-After
            return client._session is None

    assert run_blocking(ask()), "a question opened a new session after the client closed"
    assert len(judge.requests) == 2  # the 503 was not asked again
