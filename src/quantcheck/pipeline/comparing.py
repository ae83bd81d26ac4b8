"""Compare collected runs into report directories: one candidate's report (pairs,
details, summary, the review sheet), or several candidates' reports and the overview
that recommends one; `quantcheck compare` is this plus printing."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..fetch.grading import JudgeSettings
from ..gate.overview import build_overview, candidate_row
from ..gate.verdict import Policy, gate_report
from ..judge.approvals import default_approvals_path, load_approvals
from ..judge.grades import label_map
from ..judge.log_signatures import scan_logs
from ..judge.pairs import resolve_sides, write_pairs
from ..judge.parallel import available_cores
from ..judge.sandbox import Limits
from ..judge.summary import PairTotals
from ..present.matrix import append_matrix, matrix_rows, write_matrix
from ..present.sheet import write_overview_page, write_sheet
from ..store.grade_records import JudgeFigures
from ..store.labels import LABEL_CHARACTERS, check_label, label_from_name
from ..store.prompt_sets import load_prompts
from ..store.report_dir import CANDIDATES, MATRIX, write_overview, write_summary
from ..store.report_records import Overview, Summary
from ..store.reviews import set_aside_stale_reviews
from ..store.rubric import load_rubric
from ..store.run_dir import MANIFEST, load_run, read_throughput
from ..store.run_records import Prompt
from .grading import check_settings, grade_reports, report_agreement, staging


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


def compare_runs(a: str | Path, b: str | Path, out: str | Path,
                 options: CompareOptions | None = None,
                 prompts: Mapping[str, Prompt] | None = None) -> Summary:
    """Compare two sides; write REPORT_DIR/pairs.csv, details.jsonl, summary.json and the
    review sheet index.html; the summary."""
    return compare_reports([ReportJob(a, b, Path(out), options or CompareOptions())],
                           prompts)[0]


def compare_reports(jobs: Sequence[ReportJob], prompts: Mapping[str, Prompt] | None = None
                    ) -> list[Summary]:
    """Write each job's report. With a judge (the first job's options name it) every
    report is triaged first, then the judge is asked about all of them in one event
    loop, then each report is finished."""
    judge = jobs[0].options.judge if jobs else None
    mapping = judge_mapping(jobs[0].options) if jobs else None
    triaged = [_triage(job, prompts, staged=judge is not None) for job in jobs]
    figures: list[JudgeFigures | None] = [None] * len(jobs)
    if judge is not None and mapping is not None:
        figures = list(grade_reports([job.out for job in jobs], judge, mapping))
    return [_finish(job, summary, totals, judged)
            for job, (summary, totals), judged in zip(jobs, triaged, figures, strict=True)]


def judge_mapping(options: CompareOptions) -> dict[str, str] | None:
    """With a judge: the rubric's mapping of its classes to labels, checked with the
    judge's settings before anything is written or sent (None without a judge)."""
    if options.judge is None:
        return None
    check_settings(options.judge)
    return label_map(load_rubric(options.rubric), str(options.rubric or "the default rubric"))


def _triage(job: ReportJob, prompts: Mapping[str, Prompt] | None, staged: bool
            ) -> tuple[Summary, PairTotals]:
    """The pairs judged offline and written: into the report, or (for the judge to add
    its columns) into its staging folder."""
    options = job.options
    approvals_path = options.approvals or default_approvals_path(job.out)
    jobs = options.processes()
    side_a, side_b = resolve_sides(job.a, job.b, options.sig_digits, prompts, jobs)
    summary, totals = write_pairs(side_a, side_b, staging(job.out) if staged else job.out,
                                  load_approvals(approvals_path), options.forced,
                                  options.code_exec, jobs)
    summary.approvals_file = str(approvals_path)
    return summary, totals


def _finish(job: ReportJob, summary: Summary, totals: PairTotals,
            judged: JudgeFigures | None) -> Summary:
    """The statistics, logs and sources; summary.json and the review sheet."""
    options, out = job.options, job.out
    summary.stats = totals.statistics()
    summary.log_matches = scan_logs({"a": options.a_log, "b": options.b_log},
                                    options.signature_files)
    summary.sources = {"a": str(job.a), "b": str(job.b)}
    summary.sig_digits = options.sig_digits
    summary.reviews_set_aside = [str(p) for p in set_aside_stale_reviews(out, summary.identity)]
    if judged is not None:
        judged.agreement = report_agreement(out, summary.identity, load_rubric(options.rubric))
        summary.judge = judged
    write_summary(out, summary)
    write_sheet(out, options.rubric)
    return summary


def compare_to_dir(a: str | Path, b: str | Path, out: str | Path, sig_digits: int = 12,
                   prompts: Mapping[str, Prompt] | None = None,
                   approvals: str | Path | None = None,
                   logs: dict[str, Path | None] | None = None,
                   signature_files: tuple[Path, ...] = (),
                   forced: str | Path | None = None, code_exec: Limits | None = None,
                   jobs: int = 1) -> Summary:
    """`compare_runs` with its options as keywords. `forced`: a folder written by
    `quantcheck forced`; `jobs`: processes for the signatures and the pairs."""
    logs = logs or {}
    return compare_runs(a, b, out, CompareOptions(
        sig_digits=sig_digits, approvals=Path(approvals) if approvals else None,
        a_log=logs.get("a"), b_log=logs.get("b"), signature_files=signature_files,
        forced=Path(forced) if forced else None, code_exec=code_exec, jobs=jobs), prompts)


def compare_all(a: Path, bs: Sequence[Path], out: Path, options: CompareOptions,
                prompt_files: Sequence[Path] = (), matrix: Path | None = None
                ) -> Summary | Overview:
    """A with every B (`quantcheck compare`): one B's summary, with the prompts of
    `prompt_files` naming a text side's prompts; or the overview of several B."""
    if len(bs) > 1:
        return compare_candidates(a, bs, out, options, matrix=matrix)
    prompts = {p.id: p for p in load_prompts(prompt_files)} if prompt_files else None
    return compare_runs(a, bs[0], out, options, prompts)


def compare_candidates(a: Path, bs: Sequence[Path], out: Path,
                       options: CompareOptions | None = None,
                       policy: Policy | None = None, matrix: Path | None = None) -> Overview:
    """Compare one reference run with several candidate runs (collected one at a time):
    a report per candidate in OUT/candidates/LABEL/, and the overview."""
    labels = _candidate_labels(bs)
    jobs = [ReportJob(a, b, out / CANDIDATES / label, options or CompareOptions())
            for label, b in zip(labels, bs, strict=True)]
    summaries = dict(zip(labels, compare_reports(jobs), strict=True))
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
