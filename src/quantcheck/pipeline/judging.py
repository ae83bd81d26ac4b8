"""The judge's second opinion on a compared report (`compare --judge`), and its agreement
with reviewers.

Triage writes the pairs into REPORT_DIR/.judging/; `judge_reports` asks the judge about
every pair that needs it (triage/judging.needs_judge), in both orders, in one event loop
for every report, one report after the other: it writes that report's pairs.csv and
details.jsonl with the judge's columns and raw replies in their place, and the caller
finishes it (summary.json, the sheet) before the next report is judged. Until its
turn a report is the one from before, so Ctrl-C leaves each report as it was or
written whole (but the one being finished at that moment), and every reply already
answered is in the cache for the rerun."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import msgspec

from ..errors import QuantcheckError
from ..fetch.judging import Judge, JudgeClient, JudgeSettings, Tally, reaching_judge
from ..present.sheet import write_sheet
from ..store.folders.judge_cache import JUDGE_CACHE, JudgeCache
from ..store.folders.report_dir import (
    CHUNK_PAIRS,
    DETAILS,
    PAIRS,
    DetailsReader,
    PromptIds,
    iter_pair_rows,
    read_judge_labels,
    read_summary,
    write_summary,
    writing_pairs,
)
from ..store.folders.reviews import load_reviews
from ..store.inputs.rubric import Rubric, load_rubric
from ..store.records.judge_records import Agreement, JudgeDetails, JudgeFigures, JudgeReply
from ..store.records.pair_records import PairDetails, PairRow
from ..store.redaction import public_url
from ..triage.agreement import agreement, review_verdicts
from ..triage.judging import (
    NO_VERDICT,
    PROMPT_VERSION,
    Read,
    combine,
    fill_row,
    judge_questions,
    needs_judge,
    order_verdict,
    read_reply,
)
from .event_loop import run_blocking

T = TypeVar("T")
JUDGING = ".judging"  # REPORT_DIR/.judging/: the triaged pairs, before the judge's columns


def staging(report_dir: Path) -> Path:
    return report_dir / JUDGING


def check_settings(settings: JudgeSettings) -> None:
    """What can be refused before any pair is triaged: a key variable not set."""
    if settings.api_key_env and settings.api_key_env not in os.environ:
        raise QuantcheckError(f"--judge-api-key-env {settings.api_key_env}: that "
                              "environment variable is not set")


def judge_reports(reports: Sequence[Path], settings: JudgeSettings,
                  mapping: Mapping[str, str], finish: Callable[[int, JudgeFigures], T]
                  ) -> list[T]:
    """Judge the staged pairs of each report in turn, write its pairs.csv and
    details.jsonl, and `finish` it (given its position and what the judge said and
    cost) before the next is judged; what each `finish` returned. One event loop for
    them all."""
    return run_blocking(_judge_all(reports, settings, mapping, finish))


async def _judge_all(reports: Sequence[Path], settings: JudgeSettings,
                     mapping: Mapping[str, str], finish: Callable[[int, JudgeFigures], T]
                     ) -> list[T]:
    async with reaching_judge(settings) as judge:
        return [finish(n, await _judge_report(judge, out, settings, mapping))
                for n, out in enumerate(reports)]


async def _judge_report(judge: Judge, out: Path, settings: JudgeSettings,
                        mapping: Mapping[str, str]) -> JudgeFigures:
    started = time.perf_counter()
    cache_path = settings.cache or out / JUDGE_CACHE
    classes: Counter[str] = Counter()
    with JudgeCache(cache_path, None if settings.cache else out) as cache, \
            writing_pairs(out) as writer:
        judge_client = judge.asking(cache)
        details = DetailsReader(staging(out))
        for rows in iter_pair_rows(staging(out), CHUNK_PAIRS):
            shown = [msgspec.convert(details.get(row.prompt_id) or {"prompt_id": row.prompt_id},
                                     PairDetails) for row in rows]
            await _judge_chunk(judge_client, judge.error, rows, shown, mapping, classes)
            writer.write(rows, shown)
    _remove(staging(out))
    tally = judge_client.tally if judge_client else Tally()
    return JudgeFigures(
        endpoint=public_url(settings.endpoint), model=judge.model,
        prompt_version=PROMPT_VERSION,
        cache=str(cache_path), pairs=sum(classes.values()),
        labels=_ranked(_labels(classes, mapping)), classes=_ranked(classes),
        requests=tally.requests, cached=tally.cached,
        failed=tally.failed, seconds=round(time.perf_counter() - started, 3),
        prompt_tokens=tally.prompt_tokens, completion_tokens=tally.completion_tokens,
        error=judge.error or (judge_client.trouble() if judge_client else None))


async def _judge_chunk(judge_client: JudgeClient | None, error: str | None, rows: list[PairRow],
                       shown: list[PairDetails], mapping: Mapping[str, str],
                       classes: Counter[str]) -> None:
    """Fill the judge's columns and details of the chunk's pairs that need it."""
    chosen = [n for n, row in enumerate(rows) if needs_judge(row)]
    asked = [judge_questions(rows[n], _request(shown[n])) for n in chosen]
    if judge_client is None:
        for n in chosen:
            fill_row(rows[n], Read(NO_VERDICT, f"the judge did not answer: {error}"), mapping)
            classes[NO_VERDICT] += 1
        return
    replies = await judge_client.ask([judge_question for pair in asked for judge_question in pair])
    for place, n in enumerate(chosen):
        with_a, with_b = replies[2 * place], replies[2 * place + 1]
        reads = _read(with_a), _read(with_b)
        fill_row(rows[n], combine(*reads), mapping)
        classes[rows[n].judge_class] += 1
        shown[n].judge = JudgeDetails(model=judge_client.model, prompt_version=PROMPT_VERSION,
                                      orders=[order_verdict("a", reads[0], _raw(with_a)),
                                              order_verdict("b", reads[1], _raw(with_b))])


def _request(details: PairDetails) -> Mapping[str, object] | None:
    return details.request if isinstance(details.request, dict) else None


def _read(reply: JudgeReply | str) -> Read:
    if isinstance(reply, str):
        return Read(None, f"the judge did not answer: {reply}")
    if reply.error:
        return Read(None, reply.error)
    return read_reply(reply.reply, reply.chars)


def _raw(reply: JudgeReply | str) -> str:
    return reply.reply if isinstance(reply, JudgeReply) else ""


def _labels(classes: Counter[str], mapping: Mapping[str, str]) -> Counter[str]:
    labels: Counter[str] = Counter()
    for judge_class, n in classes.items():
        if judge_class in mapping:
            labels[mapping[judge_class]] += n
    return labels


def _ranked(counts: Counter[str]) -> dict[str, int]:
    """Most common first, ties by name."""
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _remove(folder: Path) -> None:
    """The staged pairs, once the report holds them (nothing else is in the folder)."""
    for name in (PAIRS, DETAILS):
        try:
            (folder / name).unlink()
        except FileNotFoundError:
            pass
    try:
        folder.rmdir()
    except OSError:
        pass


def report_agreement(report_dir: Path, identity: str, rubric: Rubric) -> Agreement | None:
    """The judge's labels in pairs.csv against the review files in REPORT_DIR/reviews/
    that belong to this report (a refused file counts for nothing)."""
    reviews, _ = load_reviews(report_dir, identity, rubric, PromptIds.read(report_dir))
    return agreement(read_judge_labels(report_dir), review_verdicts(reviews),
                     [label.id for label in rubric.labels])


def refresh_report(report_dir: Path, rubric_path: Path | None = None
                   ) -> tuple[Path, JudgeFigures | None]:
    """`quantcheck report`: in a judged report, the judge's agreement with the reviews
    there now, written to summary.json; the sheet re-rendered. The sheet's path, and the
    judge's figures (None without a judge)."""
    summary = read_summary(report_dir)
    if summary.judge is not None:
        summary.judge.agreement = report_agreement(report_dir, summary.identity,
                                                   load_rubric(rubric_path))
        write_summary(report_dir, summary)
    return write_sheet(report_dir, rubric_path), summary.judge
