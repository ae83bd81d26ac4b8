"""The whole A/B as one library call: collect the reference and each candidate, measure
throughput and score teacher-forced drift if asked, compare, write the reports (and,
for several candidates, the overview); `quantcheck run` is this plus printing."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .client import all_or_none, run_blocking
from .collect import CollectSettings, Reporter, collect_async
from .compare import compare_to_dir
from .errors import QuantcheckError
from .forced import ForcedSettings, score_run
from .gate import Policy, gate_report
from .matrix import append_matrix, matrix_rows, write_matrix
from .overview import build_overview, candidate_row
from .records import Prompt
from .report import write_overview_page
from .reportdir import CANDIDATES, MATRIX, write_overview
from .reportrecords import Overview, Summary
from .runstore import Throughput, load_run, read_throughput, write_throughput
from .sandbox import Limits
from .throughput import DEFAULT_CONCURRENCY, DEFAULT_MIN_SECONDS, measure

LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass
class CompareOptions:
    """What a comparison reads besides the two sides (`compare` and `run` options)."""

    sig_digits: int = 12
    approvals: Path | None = None
    a_log: Path | None = None
    b_log: Path | None = None
    signature_files: tuple[Path, ...] = ()
    forced: Path | None = None  # a folder written by `quantcheck forced`
    code_exec: Limits | None = None  # run `code` checks in these limits (else skipped)
    jobs: int = 1  # processes for the signatures and the pairs


def compare_runs(a: Path, b: Path, out: Path, options: CompareOptions | None = None,
                 prompts: dict[str, Prompt] | None = None) -> Summary:
    """Compare two sides into a report directory; its summary."""
    options = options or CompareOptions()
    return compare_to_dir(a, b, out, sig_digits=options.sig_digits, prompts=prompts,
                          approvals=options.approvals,
                          logs={"a": options.a_log, "b": options.b_log},
                          signature_files=options.signature_files, forced=options.forced,
                          code_exec=options.code_exec, jobs=options.jobs)


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
    matrix.csv)."""

    a: CollectSettings
    b: CollectSettings | list[CollectSettings]
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

    @property
    def candidates(self) -> list[CollectSettings]:
        return self.b if isinstance(self.b, list) else [self.b]

    def report_dir(self, candidate: CollectSettings) -> Path:
        return self.out if len(self.candidates) == 1 else \
            self.out / CANDIDATES / candidate.label


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
    return write_candidates_overview(ab.out, ab.out / "a", summaries, ab.policy, ab.matrix)


def _run(ab: ABRun, reporters: Sequence[Reporter] | None,
         notify: Callable[[str], None] | None) -> dict[str, Summary]:
    _check_labels(ab.candidates)
    runs = {"a": (ab.a, ab.out / "a")} | {
        str(n): (b, ab.report_dir(b) / "b") for n, b in enumerate(ab.candidates)}

    async def collect_all() -> None:
        jobs = [collect_async(ab.prompt_files, folder, settings,
                              reporters[n] if reporters else None, ab.force)
                for n, (settings, folder) in enumerate(runs.values())]
        if ab.one_side_at_a_time:
            for job in jobs:
                await job
        else:
            await all_or_none(jobs)

    run_blocking(collect_all())
    if ab.throughput is not None:
        for settings, folder in runs.values():
            if notify:
                notify(f"measuring throughput on {settings.endpoint} ({settings.label}) ...")
            write_throughput(folder, measure_endpoint(settings, ab.prompt_files,
                                                      ab.throughput))
    summaries = {}
    for b in ab.candidates:
        options = replace(ab.compare, b_log=ab.candidate_logs.get(b.label, ab.compare.b_log))
        if ab.forced is not None:
            if notify:
                notify(f"scoring A's tokens on {b.endpoint} (teacher forcing) ...")
            folder = ab.report_dir(b) / "forced"
            score_run(ab.out / "a", folder, replace(ab.forced, endpoint=b.endpoint,
                                                    model=b.model))
            options = replace(options, forced=folder)
        summaries[b.label] = compare_runs(ab.out / "a", ab.report_dir(b) / "b",
                                          ab.report_dir(b), options)
    return summaries


def measure_endpoint(settings: CollectSettings, prompt_files: Sequence[Path],
                     phase: ThroughputSettings) -> Throughput:
    return measure(settings.endpoint, prompt_files, label=settings.label,
                   model=settings.model, concurrency=phase.concurrency,
                   min_seconds=phase.min_seconds, warmup=phase.warmup,
                   request=settings.request, api_key_env=settings.api_key_env,
                   timeout=settings.timeout)


def compare_candidates(a: Path, bs: Sequence[Path], out: Path,
                       options: CompareOptions | None = None,
                       policy: Policy | None = None, matrix: Path | None = None) -> Overview:
    """Compare one reference run with several candidate runs (collected one at a time):
    a report per candidate in OUT/candidates/LABEL/, and the overview."""
    labels = _unique_labels([load_run(b).label for b in bs])
    summaries = {label: compare_runs(a, b, out / CANDIDATES / label, options)
                 for label, b in zip(labels, bs, strict=True)}
    return write_candidates_overview(out, a, summaries, policy or Policy(), matrix)


def write_candidates_overview(out: Path, a: Path, summaries: dict[str, Summary],
                              policy: Policy, matrix: Path | None) -> Overview:
    """Gate each candidate's report, decide, and write overview.json, the overview
    page and matrix.csv (and append to `matrix`)."""
    rows = []
    for label in summaries:
        result, summary = gate_report(out / CANDIDATES / label, policy)
        rows.append(candidate_row(label, f"{CANDIDATES}/{label}", summary, result))
    first = next(iter(summaries.values()))
    overview = build_overview(first.a, first.cells.a, read_throughput(a), rows)
    write_overview(out, overview)
    write_overview_page(out, overview)
    rows_of_matrix = matrix_rows(overview, time.strftime("%Y-%m-%d", time.gmtime()))
    write_matrix(out / MATRIX, rows_of_matrix)
    if matrix is not None:
        append_matrix(matrix, rows_of_matrix)
    return overview


def _check_labels(candidates: list[CollectSettings]) -> None:
    labels = [c.label for c in candidates]
    if len(set(labels)) != len(labels):
        raise QuantcheckError(f"candidate labels must differ (given: {', '.join(labels)}); "
                              "name each with --b-label")
    for label in labels:
        if len(candidates) > 1 and not LABEL.match(label):
            raise QuantcheckError(f"candidate label {label!r}: use letters, digits, '.', "
                                  "'_' or '-' (it names the folder candidates/LABEL)")


def _unique_labels(labels: list[str]) -> list[str]:
    """Folder-safe labels, made distinct (fp8, fp8-2, ...) when runs share one."""
    unique: list[str] = []
    for label in labels:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", label).strip("._") or "candidate"
        name, n = safe, 1
        while name in unique:
            n += 1
            name = f"{safe}-{n}"
        unique.append(name)
    return unique
