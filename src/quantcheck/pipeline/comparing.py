"""Compare collected runs into report directories: one candidate's report (pairs,
details, summary, the review sheet), or several candidates' reports, each written whole
before the next is begun, and the overview that recommends one; `quantcheck compare`
is this plus printing."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..fetch.judging import JudgeSettings
from ..gate.overview import build_overview, candidate_row
from ..gate.verdict import Policy, gate_report
from ..present.matrix import append_matrix, matrix_rows, write_matrix
from ..present.sheet import write_overview_page, write_sheet
from ..store.folders.folder_kinds import CANDIDATES_OVERVIEW, REPORT, claim
from ..store.folders.report_dir import CANDIDATES, MATRIX, write_overview, write_summary
from ..store.folders.reviews import set_aside_stale_reviews
from ..store.folders.run_dir import MANIFEST, load_run, read_throughput
from ..store.inputs.prompt_sets import RequestOptions, SourceOptions, load_prompts
from ..store.inputs.rubric import Rubric, load_rubric
from ..store.labels import LABEL_CHARACTERS, check_label, label_from_name
from ..store.records.judge_records import JudgeFigures
from ..store.records.report_records import LogMatch, Overview, Summary
from ..store.records.run_records import Prompt
from ..triage.approvals import Approval, default_approvals_path, load_approvals
from ..triage.evaluations import add_averages
from ..triage.judging import label_map
from ..triage.log_signatures import scan_logs
from ..triage.pairs import resolve_sides, write_pairs
from ..triage.parallel import available_cores
from ..triage.sandbox import Limits
from ..triage.summary import PairTotals
from .evals import imported_sides, is_eval_log
from .judging import check_settings, judge_reports, report_agreement, staging


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
    jobs: int | None = 1  # processes for the signatures and the pairs (None: every core)
    judge: JudgeSettings | None = None  # ask a judge about pairs no expect decided
    rubric: Path | None = None  # the sheet's labels and the judge's mapping (default rubric)

    def processes(self) -> int:
        return self.jobs if self.jobs is not None else available_cores()


def code_limits(seconds: float, memory_mb: int) -> Limits:
    """The limits of one code check from its wall-clock seconds (the CPU limit too,
    rounded up to whole seconds) and its memory."""
    return Limits(wall_s=seconds, cpu_s=math.ceil(seconds), memory_mb=memory_mb)


@dataclass
class ReportJob:
    """One report to write: A against one B, into `out`, with these options."""

    a: str | Path
    b: str | Path
    out: Path
    options: CompareOptions = field(default_factory=CompareOptions)


@dataclass
class Written:
    """The reports a comparison has replaced so far: those written whole, and the folder
    being written (a report whose pairs are in place and whose summary or sheet may not
    be yet, or the overview's); everything else is as it was."""

    whole: list[Path] = field(default_factory=list)
    writing: Path | None = None

    def begin(self, folder: Path) -> None:
        self.writing = folder

    def end(self) -> None:
        if self.writing is not None:
            self.whole.append(self.writing)
        self.writing = None


def compare_runs(a: str | Path, b: str | Path, out: str | Path,
                 options: CompareOptions | None = None,
                 prompts: Mapping[str, Prompt] | None = None) -> Summary:
    """Compare two sides; write REPORT_DIR/pairs.csv, details.jsonl, summary.json and the
    review sheet index.html; the summary."""
    return compare_reports([ReportJob(a, b, Path(out), options or CompareOptions())],
                           prompts)[0]


def compare_reports(jobs: Sequence[ReportJob], prompts: Mapping[str, Prompt] | None = None,
                    written: Written | None = None) -> list[Summary]:
    """Write each job's report whole (pairs, details, summary, sheet) before the next is
    begun; what every job reads besides its sides is read first, so bad input is
    refused before any report is touched. With a judge (the first job's options name
    it) every report is triaged into its staging folder, then the judge is asked about
    each in one event loop, each report finished right after the judge answered it. `written`
    follows which reports were replaced (what an interruption or a failure leaves)."""
    written = written if written is not None else Written()
    for job in jobs:
        claim(job.out, REPORT)
    judge = jobs[0].options.judge if jobs else None
    mapping = judge_mapping(jobs[0].options) if jobs else None
    inputs = [_read_inputs(job) for job in jobs]
    if judge is None or mapping is None:
        return [_compare_one(job, read, prompts, written)
                for job, read in zip(jobs, inputs, strict=True)]
    triaged = [_triage(job, prompts, read, staged=True) for job, read in zip(
        jobs, inputs, strict=True)]

    def finish(n: int, judged: JudgeFigures) -> Summary:
        written.begin(jobs[n].out)
        summary = _finish(jobs[n], *triaged[n], inputs[n], judged)
        written.end()
        return summary

    return judge_reports([job.out for job in jobs], judge, mapping, finish)


@dataclass
class _Inputs:
    """What a report reads besides its two sides, read before anything is written."""

    approvals_path: Path
    approvals: dict[str, Approval]
    log_matches: dict[str, list[LogMatch]]
    rubric: Rubric


def _read_inputs(job: ReportJob) -> _Inputs:
    options = job.options
    approvals_path = options.approvals or default_approvals_path(job.out)
    return _Inputs(approvals_path, load_approvals(approvals_path),
                   scan_logs({"a": options.a_log, "b": options.b_log}, options.signature_files),
                   load_rubric(options.rubric))


def judge_mapping(options: CompareOptions) -> dict[str, str] | None:
    """With a judge: the rubric's mapping of its classes to labels, checked with the
    judge's settings before anything is written or sent (None without a judge)."""
    if options.judge is None:
        return None
    check_settings(options.judge)
    return label_map(load_rubric(options.rubric), str(options.rubric or "the default rubric"))


def _compare_one(job: ReportJob, read: _Inputs, prompts: Mapping[str, Prompt] | None,
                 written: Written) -> Summary:
    """One report without a judge: its pairs in place, then its summary and sheet."""
    summary, totals = _triage(job, prompts, read, staged=False)
    written.begin(job.out)
    summary = _finish(job, summary, totals, read, None)
    written.end()
    return summary


def _triage(job: ReportJob, prompts: Mapping[str, Prompt] | None, read: _Inputs,
            staged: bool) -> tuple[Summary, PairTotals]:
    """The pairs judged offline and written: into the report, or (for the judge to add
    its columns) into its staging folder."""
    options = job.options
    jobs = options.processes()
    side_a, side_b = resolve_sides(job.a, job.b, options.sig_digits, prompts, jobs)
    summary, totals = write_pairs(side_a, side_b, staging(job.out) if staged else job.out,
                                  read.approvals, options.forced, options.code_exec, jobs)
    summary.approvals_file = str(read.approvals_path)
    return summary, totals


def _finish(job: ReportJob, summary: Summary, totals: PairTotals, read: _Inputs,
            judged: JudgeFigures | None) -> Summary:
    """The statistics, logs and sources; summary.json and the review sheet."""
    options, out = job.options, job.out
    summary.stats = totals.statistics()
    if summary.evaluation is not None:
        add_averages(summary.evaluation, summary.stats)
    summary.log_matches = read.log_matches
    summary.sources = {"a": str(job.a), "b": str(job.b)}
    summary.sig_digits = options.sig_digits
    summary.reviews_set_aside = [str(p) for p in set_aside_stale_reviews(out, summary.identity)]
    if judged is not None:
        judged.agreement = report_agreement(out, summary.identity, read.rubric)
        summary.judge = judged
    write_summary(out, summary)
    write_sheet(out, read.rubric)
    return summary


def compare_all(a: Path, bs: Sequence[Path], out: Path, options: CompareOptions,
                prompt_files: Sequence[Path] = (), matrix: Path | None = None,
                written: Written | None = None, source: SourceOptions | None = None
                ) -> Summary | Overview:
    """A with every B (`quantcheck compare`): one B's summary, or the overview of
    several B; the prompts of `prompt_files` (data files read as `source` says) name a
    text side's prompts; a side that is an eval harness's log is imported into
    OUT/runs/LABEL first. `written` follows which reports were replaced."""
    prompts = {p.id: p for p in load_prompts(prompt_files, RequestOptions(
        source=source or SourceOptions()))} if prompt_files else None
    if any(is_eval_log(side) for side in (a, *bs)):
        claim(out, CANDIDATES_OVERVIEW if len(bs) > 1 else REPORT)  # before OUT/runs/
        a, bs = imported_sides(a, bs, out)
    if len(bs) > 1:
        return compare_candidates(a, bs, out, options, matrix=matrix, prompts=prompts,
                                  written=written)
    return compare_reports([ReportJob(a, bs[0], out, options)], prompts, written)[0]


def compare_candidates(a: Path, bs: Sequence[Path], out: Path,
                       options: CompareOptions | None = None,
                       policy: Policy | None = None, matrix: Path | None = None,
                       prompts: Mapping[str, Prompt] | None = None,
                       written: Written | None = None) -> Overview:
    """Compare one reference run with several candidate runs (collected one at a time):
    a report per candidate in OUT/candidates/LABEL/, each written whole before the
    next, then the overview (gated under the options' rubric)."""
    options = options or CompareOptions()
    written = written if written is not None else Written()
    claim(out, CANDIDATES_OVERVIEW)
    labels = _candidate_labels(bs)
    rubric = load_rubric(options.rubric)
    jobs = [ReportJob(a, b, out / CANDIDATES / label, options)
            for label, b in zip(labels, bs, strict=True)]
    summaries = dict(zip(labels, compare_reports(jobs, prompts, written), strict=True))
    written.begin(out)
    overview = write_candidates_overview(out, a, summaries, policy or Policy(), matrix,
                                         rubric)
    written.end()
    return overview


def write_candidates_overview(out: Path, a: Path, summaries: dict[str, Summary],
                              policy: Policy, matrix: Path | None,
                              rubric: Rubric | None = None) -> Overview:
    """Gate each candidate's report (with the rubric its reviews were made with), decide,
    and write overview.json, the overview page and matrix.csv (and append to `matrix`)."""
    claim(out, CANDIDATES_OVERVIEW)
    rows = []
    for label in summaries:
        result, summary = gate_report(out / CANDIDATES / label, policy, rubric)
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


def _candidate_labels(bs: Sequence[Path]) -> list[str]:
    """The candidates' folder names: each run's label, which must keep the rule for
    labels (a run without one: its folder's name made into one), made distinct (fp8,
    fp8-2, ...) when runs share one."""
    unique: list[str] = []
    for b in bs:
        run = load_run(b)
        label = run.manifest.label
        label = check_label(label, f"{b / MANIFEST}: label",
                            "set the manifest's label to one that keeps it") if label \
            else label_from_name(b.name)
        name, n = label, 1
        while name in unique:
            n += 1
            suffix = f"-{n}"
            name = label[:LABEL_CHARACTERS - len(suffix)] + suffix
        unique.append(name)
    return unique
