"""The report directory (`compare`, `run`): its layout, and reading it back safely.

    REPORT_DIR/
      pairs.csv        one row per prompt (PAIR_COLUMNS)
      details.jsonl    per prompt, what the sheet shows beyond pairs.csv
      summary.json     the totals (Summary)
      index.html       the review sheet
      reviews/NAME.json  reviewers' files (reviews.py), approvals.json (approvals.py),
      gate.json, junit.xml (gate.py), forced/ with `run --forced` (ForcedSummary)

A report is read by the gate, the sheet and the review server; whatever is malformed
in it (a binary pairs.csv, a summary without a side, a folder where a file belongs) is
one RunFormatError naming the file, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pandas as pd

from .checks import Check, Preflight
from .errors import RunFormatError
from .files import make_directory
from .records import DEGENERATE_KINDS, new_on_b
from .runstore import MANIFEST, iter_jsonl, read_json, write_json_atomic, write_jsonl_atomic

PAIRS = "pairs.csv"
DETAILS = "details.jsonl"
SUMMARY = "summary.json"
REVIEWS = "reviews"

class PairRow(msgspec.Struct, kw_only=True):
    """One row of pairs.csv: one prompt, A against B (README: the pairs.csv table).
    Only `compared` rows have the triage columns filled; None is an empty cell."""

    prompt_id: str
    category: str = ""
    prompt_hash: str | None = None
    status: str = "compared"
    identical: bool | None = None
    similarity: float | None = None
    first_divergence: int | None = None
    divergence_kind: str = ""
    divergence_gap: float | None = None
    divergence_b_gap: float | None = None
    divergence_a_token: str | None = None
    divergence_b_token: str | None = None
    a_repeats: int | None = None
    b_repeats: int | None = None
    a_texts: int | None = None
    b_texts: int | None = None
    a_signatures: int | None = None
    b_signatures: int | None = None
    a_repeat_mode: str = ""
    b_repeat_mode: str = ""
    noise: bool | None = None
    a_expect: str = ""
    b_expect: str = ""
    a_expect_failures: str = ""
    b_expect_failures: str = ""
    flip: str = ""
    numbers_changed: bool | None = None
    a_degenerate: str = ""
    b_degenerate: str = ""
    a_tokens: int | None = None
    b_tokens: int | None = None
    a_finish_reason: str | None = None
    b_finish_reason: str | None = None
    top1_agreement: float | None = None
    logprob_mean_abs_diff: float | None = None
    logprob_max_abs_diff: float | None = None
    kl_topk_mean: float | None = None
    kl_topk_max: float | None = None
    suggested_label: str = ""
    approved_label: str = ""
    approved_at: str = ""
    forced_positions: int | None = None
    forced_top1: float | None = None
    forced_kl_mean: float | None = None
    forced_kl_p99: float | None = None
    forced_kl_max: float | None = None
    forced_delta_p_mean: float | None = None
    a_text: str | None = None
    b_text: str | None = None

    @property
    def compared(self) -> bool:
        return self.status == "compared"

    @property
    def needs_review(self) -> bool:
        """Compared and not identical: a reviewer's question."""
        return self.compared and not self.identical


PAIR_COLUMNS = list(PairRow.__struct_fields__)


def new_degenerate_on_b(rows: list[PairRow]) -> list[str]:
    """Prompts whose B answer is degenerate (a loop, empty) and A's is not: the one
    definition the summary, the sheet and the gate count."""
    return [r.prompt_id for r in rows if r.compared
            and new_on_b(r.a_degenerate, r.b_degenerate, DEGENERATE_KINDS)]
PAIR_FORCED_COLUMNS = [c for c in PAIR_COLUMNS if c.startswith("forced_")]
TEXT_COLUMNS = ["prompt_id", "category", "status", "divergence_kind", "divergence_a_token",
                "divergence_b_token", "a_expect", "b_expect", "a_expect_failures",
                "b_expect_failures", "flip", "a_degenerate", "b_degenerate", "a_finish_reason",
                "b_finish_reason", "suggested_label", "approved_label", "approved_at",
                "prompt_hash", "a_repeat_mode", "b_repeat_mode", "a_text", "b_text"]


class SideIdentity(msgspec.Struct, kw_only=True):
    """Who a side is: `summary.a` / `summary.b`."""

    label: str
    endpoint: str | None = None
    model: str | None = None
    runtime: str | None = None
    runtime_version: str | None = None
    text_only: bool = False


class PerSide(msgspec.Struct):
    a: int
    b: int


class Flips(msgspec.Struct):
    regression: int
    improvement: int


class Counts(msgspec.Struct, kw_only=True):
    prompts: int
    pairs: int  # compared
    identical: int
    wording_similar: int
    divergent: int
    flips: Flips
    suggested_factual_flip: int
    approved: int
    noise: int
    degenerate: dict[str, dict[str, int]]  # side -> reason -> prompts
    degenerate_new_on_b: int  # loops and empty answers on B where A has neither
    degenerate_new_on_b_kinds: dict[str, int]
    length_capped_new_on_b: int  # cut by max_tokens on B where A stopped: not degenerate
    nondeterministic: PerSide
    divergence_kinds: dict[str, int]
    status: dict[str, int]
    unanswered: PerSide  # requests without a successful record


class Comparison(msgspec.Struct):
    """How many prompts were compared, and in words why the others were not."""

    compared: int
    prompts: int
    notes: list[str]
    sentence: str


class Cells(msgspec.Struct, kw_only=True):
    a: dict[str, Any]
    b: dict[str, Any]
    a_key: str | None = None
    b_key: str | None = None
    differs: list[str] = []
    warning: str | None = None


class SideDeterminism(msgspec.Struct):
    mode: str
    repeats: int | None = None


class Spread(msgspec.Struct):
    mean: float
    median: float
    p99: float
    max: float


class FirstDivergence(msgspec.Struct):
    median: float
    min: int


class Drift(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Mean, median, p99 and max of each drift column over the compared pairs."""

    top1_agreement: Spread | None = None
    logprob_mean_abs_diff: Spread | None = None
    logprob_max_abs_diff: Spread | None = None
    kl_topk_mean: Spread | None = None
    kl_topk_max: Spread | None = None
    first_divergence: FirstDivergence | None = None


class PassRate(msgspec.Struct, kw_only=True):
    """The expect pass rates of A and B over the prompts checked on both, the paired
    change and its 95% interval (Newcombe), and the sentence that says it."""

    checked: int
    both_pass: int
    regressions: int  # A pass, B fail
    improvements: int  # A fail, B pass
    both_fail: int
    a_pass_rate: float
    b_pass_rate: float
    difference: float  # B - A, a share (not points)
    low: float
    high: float
    mcnemar_p: float  # for reference; the verdict is read off the interval
    sentence: str = ""

    def rates(self) -> str:
        """The absolute pass rates: 'A 16/17, B 14/17'."""
        return (f"A {self.both_pass + self.regressions}/{self.checked}, "
                f"B {self.both_pass + self.improvements}/{self.checked}")

    @property
    def significant(self) -> bool:
        """Whether the 95% interval of B minus A excludes no change."""
        return self.low > 0 or self.high < 0


class Bootstrap(msgspec.Struct):
    mean: float
    low: float
    high: float
    prompts: int


class Stats(msgspec.Struct):
    pass_rate: PassRate | None
    drift: dict[str, Bootstrap]


class SidePerformance(msgspec.Struct, kw_only=True):
    requests: int
    failed: int
    output_tokens: int | None = None
    compared_output_tokens: int | None = None
    ttft_p50_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p99_s: float | None = None
    output_tokens_per_s: float | None = None


class Performance(msgspec.Struct, kw_only=True):
    a: SidePerformance
    b: SidePerformance
    throughput_comparable: bool = False
    throughput_note: str = ""
    throughput_ratio_b_over_a: float | None = None


class PreflightPair(msgspec.Struct, kw_only=True):
    """Both sides' recorded preflights, and whether their tokenizers agree."""

    a: Preflight | None = None
    b: Preflight | None = None
    tokenizer: Check
    token_metrics_withheld: str | None = None


class LogMatch(msgspec.Struct, kw_only=True):
    """A known failure signature found in a server log: where first, how often."""

    signature: str
    log: str
    line: int
    text: str
    count: int
    meaning: str
    action: str
    reference: str
    blocking: bool


class DeltaP(msgspec.Struct):
    """B's probability of A's token minus A's: the mean, and spread of its size."""

    mean: float
    abs_mean: float
    abs_median: float
    abs_p99: float
    abs_max: float


class ForcedStats(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Teacher-forced figures over some positions (none scored: `positions` 0 only)."""

    positions: int
    top1_agreement: float | None = None
    kl: Spread | None = None
    delta_p: DeltaP | None = None
    note: str | None = None  # why a noise floor is missing
    repeats_compared: int | None = None


class PerPosition(msgspec.Struct):
    top1: list[bool]
    kl: list[float]
    delta_p: list[float]
    b_logprob: list[float | None]


class ForcedLine(ForcedStats, kw_only=True, omit_defaults=True):
    """A line of forced.jsonl: one prompt's figures, and each position's."""

    prompt_id: str
    mode: str
    skipped: str | None = None
    aligned: bool | None = None
    per_position: PerPosition | None = None


class KLHistogram(msgspec.Struct):
    high: float
    counts: list[int]


class ForcedSummary(msgspec.Struct, kw_only=True):
    """forced.json (and summary.json's `forced`, with `source` and `kl_histogram`)."""

    endpoint: str
    model: str
    mode: str
    approximate: bool
    a_run: str
    top_k: int
    scored: int
    skipped: dict[str, str] = {}
    overall: ForcedStats
    noise_floor: ForcedStats
    source: str | None = None
    kl_histogram: KLHistogram | None = None


FORCED_JSON = "forced.json"
FORCED_JSONL = "forced.jsonl"


def read_forced(folder: Path) -> tuple[ForcedSummary, dict[str, ForcedLine]]:
    """forced.json, and forced.jsonl's lines by prompt id."""
    try:
        summary = msgspec.convert(read_json(folder / FORCED_JSON), ForcedSummary)
        lines = [msgspec.convert(line, ForcedLine) for _, line in
                 iter_jsonl(folder / FORCED_JSONL)]
    except msgspec.ValidationError as exc:
        raise RunFormatError(f"{folder}: not written by `quantcheck forced` ({exc})") from None
    return summary, {line.prompt_id: line for line in lines}


def write_forced(folder: Path, summary: ForcedSummary, lines: list[ForcedLine]) -> None:
    make_directory(folder)
    write_jsonl_atomic(folder / FORCED_JSONL, [msgspec.to_builtins(line) for line in lines])
    write_json_atomic(folder / FORCED_JSON, msgspec.to_builtins(summary))


class DeterminismRow(msgspec.Struct, kw_only=True):
    """One prompt in one repeat mode: how many distinct texts and signatures its
    repeats gave (determinism.csv and determinism.json's `prompts`)."""

    prompt_id: str
    category: str = ""
    mode: str
    repeats: int
    distinct_texts: int
    distinct_signatures: int | None = None
    texts: str  # "k distinct of n"
    signatures: str = ""
    first_text_divergence: int | None = None
    first_logprob_divergence: int | None = None
    max_logprob_spread: float | None = None
    verdict: str  # deterministic | logprobs vary | text varies


class ModeCounts(msgspec.Struct):
    prompts: int
    text_varies: int
    logprobs_vary: int
    deterministic: int


class DeterminismReport(msgspec.Struct, kw_only=True):
    """determinism.json: per repeat mode the counts, and every prompt's row."""

    sig_digits: int
    modes: dict[str, ModeCounts]
    prompts: list[DeterminismRow]

    @property
    def varying(self) -> int:
        return sum(row.verdict != "deterministic" for row in self.prompts)


class Summary(msgspec.Struct, kw_only=True):
    """summary.json: every total a reader shows (terminal, sheet, gate)."""

    quantcheck_version: str
    identity: str = ""  # what review files belong to (see compare.run_identity)
    a: SideIdentity
    b: SideIdentity
    counts: Counts
    comparison: Comparison
    cells: Cells
    determinism: dict[str, SideDeterminism]
    drift: Drift
    stats: Stats
    performance: Performance
    preflight: PreflightPair
    forced: ForcedSummary | None = None  # with --forced
    approvals_file: str | None = None
    log_matches: dict[str, list[LogMatch]] = {}
    sources: dict[str, str] = {}
    sig_digits: int = 12
    near_tie_nats: float | None = None


def read_summary(report_dir: Path) -> Summary:
    """summary.json, as the typed record its readers rely on."""
    path = report_dir / SUMMARY
    if not path.exists() and (report_dir / MANIFEST).exists():
        raise RunFormatError(f"{report_dir} is a run directory (it has {MANIFEST}), not a "
                             "report: compare two runs first, e.g. `quantcheck compare "
                             f"{report_dir} OTHER_RUN --out REPORT_DIR`")
    try:
        return msgspec.convert(read_json(path), Summary)
    except msgspec.ValidationError as exc:
        raise RunFormatError(f"{path}: {exc} (written by another quantcheck version, or "
                             "edited? re-run compare)") from None


def write_summary(report_dir: Path, summary: Summary) -> None:
    write_json_atomic(report_dir / SUMMARY, msgspec.to_builtins(summary))


def read_pairs(report_dir: Path) -> pd.DataFrame:
    path = report_dir / PAIRS
    if not path.exists():
        raise RunFormatError(f"{path}: missing; run `quantcheck compare` first")
    try:
        frame = pd.read_csv(path, dtype={c: str for c in TEXT_COLUMNS}, keep_default_na=False,
                            na_values={c: [""] for c in PAIR_COLUMNS if c not in TEXT_COLUMNS})
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError,
            pd.errors.EmptyDataError) as exc:
        raise RunFormatError(f"{path}: not a pairs table written by compare "
                             f"({str(exc).splitlines()[0][:200]})") from None
    missing = [c for c in PAIR_COLUMNS if c not in frame.columns]
    if missing:
        raise RunFormatError(f"{path}: missing columns {', '.join(missing)}")
    return frame


def pair_rows(pairs: pd.DataFrame) -> list[PairRow]:
    """The typed rows of a pairs frame (an empty cell, NaN in pandas, is None)."""
    rows = pairs.astype(object).where(pairs.notna(), None).to_dict("records")
    try:
        return [msgspec.convert({str(k): v for k, v in row.items() if v is not None},
                                PairRow, strict=False) for row in rows]
    except msgspec.ValidationError as exc:
        raise RunFormatError(f"{PAIRS}: {exc}") from None


def read_details(report_dir: Path) -> dict[str, dict[str, Any]]:
    """details.jsonl by prompt id: what the sheet shows beyond pairs.csv (the request,
    expect, each side's variants across repeats and top-k at the divergence)."""
    path = report_dir / DETAILS
    if not path.exists():
        return {}
    return {str(detail.get("prompt_id")): detail for _, detail in iter_jsonl(path)
            if isinstance(detail, dict)}


def require_report(report_dir: Path) -> tuple[pd.DataFrame, Summary]:
    """The pairs and the summary of a report, or one clear RunFormatError."""
    summary = read_summary(report_dir)
    return read_pairs(report_dir), summary
