"""The whole A/B as one library call: collect the reference (or reuse one stored
earlier) and each candidate, measure throughput and score teacher-forced drift if
asked (all of it in one event loop), compare (asking a judge, if given, in one more:
it needs the triaged pairs), write the reports (and, for several candidates, the
overview); `quantcheck run` is this plus printing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import InitVar, dataclass, field, replace
from pathlib import Path

from ..errors import QuantcheckError
from ..fetch.clients import all_or_none
from ..fetch.collect import CollectSettings, Reporter, collect_async
from ..fetch.forced_scoring import ForcedSettings, score_run_async
from ..fetch.throughput import DEFAULT_CONCURRENCY, DEFAULT_MIN_SECONDS, measure
from ..gate.verdict import Policy
from ..present.matrix import check_matrix
from ..store.folders.folder_kinds import CANDIDATES_OVERVIEW, FORCED, REPORT, RUN, claim
from ..store.folders.reference import ReferenceMismatch, open_reference, reference_differences
from ..store.folders.report_dir import CANDIDATES
from ..store.folders.run_dir import Throughput, write_throughput
from ..store.folders.shards import shard_prompts
from ..store.inputs.prompt_sets import load_prompts
from ..store.inputs.rubric import load_rubric
from ..store.labels import check_label
from ..store.records.report_records import Overview, Summary
from ..store.redaction import public_url
from .comparing import (
    CompareOptions,
    ReportJob,
    compare_reports,
    judge_mapping,
    write_candidates_overview,
)
from .event_loop import run_blocking


@dataclass
class ThroughputSettings:
    """The throughput phase (throughput.py): after collection, one endpoint at a time."""

    concurrency: int = DEFAULT_CONCURRENCY
    min_seconds: float = DEFAULT_MIN_SECONDS
    warmup: int = 4


@dataclass
class ABRun:
    """A reference and one or more candidates, and where everything goes.

    One candidate: runs in OUT/a and OUT/b, the report in OUT (as `run` always did).
    Several: A in OUT/a, each candidate's run in OUT/candidates/LABEL/b and its report
    in OUT/candidates/LABEL/, the overview in OUT (overview.json, index.html,
    matrix.csv). `b` is the candidate or a list of them; `candidates` is always the
    list. `a` is A's collection, or the folder of a reference run collected earlier
    (a stored reference): then A is not collected again, and a candidate not asked
    what A was is refused before any request is sent (store/folders/reference.py)."""

    a: CollectSettings | Path
    b: InitVar[CollectSettings | Sequence[CollectSettings]]
    prompt_files: Sequence[Path]
    out: Path
    one_side_at_a_time: bool = False
    force: bool = False
    compare: CompareOptions = field(default_factory=CompareOptions)
    forced: ForcedSettings | None = None  # score A's tokens on each B (endpoint: B's)
    throughput: ThroughputSettings | None = None
    policy: Policy = field(default_factory=Policy)  # the overview's gate
    matrix: Path | None = None  # also append the serving matrix's rows here
    candidate_logs: dict[str, Path] = field(default_factory=dict)  # label -> B's log
    candidates: list[CollectSettings] = field(init=False)

    def __post_init__(self, b: CollectSettings | Sequence[CollectSettings]) -> None:
        self.candidates = [b] if isinstance(b, CollectSettings) else list(b)

    @property
    def several(self) -> bool:
        """Several candidates: a report each under OUT/candidates/, and the overview."""
        return len(self.candidates) > 1

    def report_dir(self, candidate: CollectSettings) -> Path:
        return self.out / CANDIDATES / candidate.label if self.several else self.out

    @property
    def a_dir(self) -> Path:
        """A's run: the stored reference, or OUT/a."""
        return self.a if isinstance(self.a, Path) else self.out / "a"

    def sides(self) -> list[tuple[CollectSettings, Path]]:
        """What is collected, with its run folder: A (unless stored), then each candidate."""
        collected = [] if isinstance(self.a, Path) else [(self.a, self.out / "a")]
        return collected + [(b, self.report_dir(b) / "b") for b in self.candidates]


def run_ab(ab: ABRun, reporters: Sequence[Reporter] | None = None,
           notify: Callable[[str], None] | None = None) -> Summary:
    """One candidate: collect both sides (together, or one after the other), measure
    throughput and score forced drift when asked, compare; the report's summary.
    `notify` hears which stage starts (the library never prints)."""
    if len(ab.candidates) != 1:
        raise QuantcheckError("run_ab takes one candidate; run_candidates takes several")
    return next(iter(_run(ab, reporters, notify).values()))


def run_candidates(ab: ABRun, reporters: Sequence[Reporter] | None = None,
                   notify: Callable[[str], None] | None = None) -> Overview:
    """Several candidates against one reference collected once: a report per
    candidate, and the overview with the recommendation."""
    summaries = _run(ab, reporters, notify)
    return write_candidates_overview(ab.out, ab.a_dir, summaries, ab.policy, ab.matrix,
                                     load_rubric(ab.compare.rubric))


def run_all(ab: ABRun, reporters: Sequence[Reporter] | None = None,
            notify: Callable[[str], None] | None = None) -> Summary | Overview:
    """The whole A/B (`quantcheck run`): one candidate's summary (`run_ab`), or the
    overview of several (`run_candidates`)."""
    if ab.several:
        return run_candidates(ab, reporters, notify)
    return run_ab(ab, reporters, notify)


def _run(ab: ABRun, reporters: Sequence[Reporter] | None,
         notify: Callable[[str], None] | None) -> dict[str, Summary]:
    """Everything sent over the network in one event loop, then each comparison."""
    _check_labels(ab)
    if ab.matrix is not None:
        check_matrix(ab.matrix)  # refused before anything is sent, not after the run
    _claim_folders(ab)
    if isinstance(ab.a, Path):
        check_reference(ab.a, ab.candidates, ab.prompt_files)
    judge_mapping(ab.compare)  # a judge that cannot be used is refused before collecting
    run_blocking(_fetch(ab, reporters, notify or _silent))
    jobs = []
    for b in ab.candidates:
        options = replace(ab.compare, b_log=ab.candidate_logs.get(b.label, ab.compare.b_log))
        if ab.forced is not None:
            options = replace(options, forced=_forced_dir(ab, b))
        jobs.append(ReportJob(ab.a_dir, ab.report_dir(b) / "b", ab.report_dir(b), options))
    if ab.compare.judge is not None:
        (notify or _silent)(f"asking the judge {public_url(ab.compare.judge.endpoint)} "
                            "about the pairs no expect decided ...")
    summaries = compare_reports(jobs)
    return {b.label: summary for b, summary in zip(ab.candidates, summaries, strict=True)}


async def _fetch(ab: ABRun, reporters: Sequence[Reporter] | None,
                 notify: Callable[[str], None]) -> None:
    """Collect every side, then measure throughput and score forced drift if asked (a
    stored reference keeps the throughput it was stored with, if any)."""
    runs = ab.sides()
    await _collect_all(ab, runs, reporters)
    if ab.throughput is not None:
        for settings, folder in runs:
            notify(f"measuring throughput on {public_url(settings.endpoint)} "
                   f"({settings.label}) ...")
            measured = await _measure(settings, ab.prompt_files, ab.throughput)
            if measured.error:
                notify(f"throughput not measured on {settings.label}: {measured.error}")
            write_throughput(folder, measured)
    if ab.forced is not None:
        for b in ab.candidates:
            notify(f"scoring A's tokens on {public_url(b.endpoint)} (teacher forcing) ...")
            await score_run_async(ab.a_dir, _forced_dir(ab, b),
                                  _scored_on(ab.forced, b, ab.report_dir(b) / "b"))


async def _collect_all(ab: ABRun, runs: list[tuple[CollectSettings, Path]],
                       reporters: Sequence[Reporter] | None) -> None:
    """Every side at once, or one after the other (--one-side-at-a-time)."""
    jobs = [collect_async(ab.prompt_files, folder, settings,
                          reporters[n] if reporters else None, ab.force)
            for n, (settings, folder) in enumerate(runs)]
    if ab.one_side_at_a_time:
        for job in jobs:
            await job
    else:
        await all_or_none(jobs)


def _claim_folders(ab: ABRun) -> None:
    """Every folder the A/B writes is claimed for its kind before anything is sent: a
    folder holding another output (a certificate, a run, ...) is refused."""
    claim(ab.out, CANDIDATES_OVERVIEW if ab.several else REPORT)
    for b in ab.candidates:
        claim(ab.report_dir(b), REPORT)
        if ab.forced is not None:
            claim(_forced_dir(ab, b), FORCED)
    for _, folder in ab.sides():
        claim(folder, RUN)


def _forced_dir(ab: ABRun, candidate: CollectSettings) -> Path:
    return ab.report_dir(candidate) / "forced"


async def _measure(settings: CollectSettings, prompt_files: Sequence[Path],
                   phase: ThroughputSettings) -> Throughput:
    """One endpoint's throughput; a failure costs only these figures (the record says
    why), never the collected runs or the report."""
    try:
        return await measure(settings.endpoint, prompt_files, label=settings.label,
                             model=settings.model, concurrency=phase.concurrency,
                             min_seconds=phase.min_seconds, warmup=phase.warmup,
                             request=settings.request, api_key_env=settings.api_key_env,
                             timeout=settings.timeout, retries=settings.retries,
                             max_response_mb=settings.max_response_mb)
    except QuantcheckError as exc:
        return Throughput(label=settings.label, endpoint=public_url(settings.endpoint),
                          model=settings.model or "", concurrency=phase.concurrency,
                          requests=0, seconds=0.0, error=str(exc))


def check_reference(reference: Path, candidates: Sequence[CollectSettings],
                    prompt_files: Sequence[Path]) -> None:
    """Refuse a stored reference that a candidate would not be asked as A was (its
    settings, its prompt set), naming every difference; nothing is sent before."""
    run = open_reference(reference)
    problems = []
    for b in candidates:
        prompts = load_prompts(prompt_files, b.request)
        if b.shard:
            prompts = shard_prompts(prompts, b.shard)
        found = reference_differences(run.manifest, b.parameters(),
                                      {p.id: p.hash for p in prompts})
        problems += [f"{b.label}: {difference}" if len(candidates) > 1 else difference
                     for difference in found]
    if problems:
        raise ReferenceMismatch(
            f"the stored reference {reference} was not asked what B would be, so they "
            f"cannot be compared (nothing was sent): {'; '.join(problems)}. Collect B "
            "with the reference's settings and prompt set, or collect the reference again")


def _scored_on(forced: ForcedSettings, b: CollectSettings, b_run: Path) -> ForcedSettings:
    """Teacher forcing on a candidate as it was collected: its endpoint, model, key,
    timeout, retries and extra body; its top-k (20 for a text-only collection) unless
    one was asked; its run, for B's noise floors."""
    top_k = forced.top_k if forced.top_k_fixed else b.top_logprobs or forced.top_k
    return replace(forced, endpoint=b.endpoint, model=b.model, api_key_env=b.api_key_env,
                   timeout=b.timeout, retries=b.retries, extra_body=b.request.extra_body,
                   top_k=top_k, b_run=b_run)


def _silent(stage: str) -> None:
    pass


def _check_labels(ab: ABRun) -> None:
    """Every side's label keeps the rule and the candidates' differ, before anything is
    sent."""
    if not isinstance(ab.a, Path):  # a stored reference keeps the label it was given
        check_label(ab.a.label, "--a-label")
    for candidate in ab.candidates:
        check_label(candidate.label, "--b-label")
    labels = [c.label for c in ab.candidates]
    if len(set(labels)) != len(labels):
        raise QuantcheckError(f"candidate labels must differ (given: {', '.join(labels)}); "
                              "name each with --b-label")
