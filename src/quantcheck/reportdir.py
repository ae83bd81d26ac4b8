"""The report directory (`compare`, `run`): its layout, and reading it back safely.

    REPORT_DIR/
      pairs.csv        one row per prompt (PAIR_COLUMNS)
      details.jsonl    per prompt, what the sheet shows beyond pairs.csv
      summary.json     the totals (the parts every reader relies on: SummaryShape)
      index.html       the review sheet
      reviews/NAME.json, approvals.json, gate.json, junit.xml

A report is read by the gate, the sheet and the review server; whatever is malformed
in it (a binary pairs.csv, a summary without a side, a folder where a file belongs) is
one RunFormatError naming the file, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pandas as pd

from .errors import RunFormatError
from .runstore import MANIFEST, read_json

PAIRS = "pairs.csv"
DETAILS = "details.jsonl"
SUMMARY = "summary.json"
REVIEWS = "reviews"

PAIR_FORCED_COLUMNS = ["forced_positions", "forced_top1", "forced_kl_mean", "forced_kl_p99",
                       "forced_kl_max", "forced_delta_p_mean"]
PAIR_COLUMNS = [
    "prompt_id", "category", "prompt_hash", "status", "identical", "similarity", "first_divergence",
    "divergence_kind", "divergence_gap", "divergence_b_gap", "divergence_a_token",
    "divergence_b_token",
    "a_repeats", "b_repeats", "a_texts", "b_texts", "a_signatures", "b_signatures",
    "a_repeat_mode", "b_repeat_mode", "noise",
    "a_expect", "b_expect", "a_expect_failures", "b_expect_failures", "flip",
    "numbers_changed", "a_degenerate", "b_degenerate", "a_tokens", "b_tokens",
    "a_finish_reason", "b_finish_reason", "top1_agreement", "logprob_mean_abs_diff",
    "logprob_max_abs_diff", "kl_topk_mean", "kl_topk_max", "suggested_label",
    "approved_label", "approved_at", *PAIR_FORCED_COLUMNS, "a_text", "b_text",
]
TEXT_COLUMNS = ["prompt_id", "category", "status", "divergence_kind", "divergence_a_token",
                "divergence_b_token", "a_expect", "b_expect", "a_expect_failures",
                "b_expect_failures", "flip", "a_degenerate", "b_degenerate", "a_finish_reason",
                "b_finish_reason", "suggested_label", "approved_label", "approved_at",
                "prompt_hash", "a_repeat_mode", "b_repeat_mode", "a_text", "b_text"]


class _Side(msgspec.Struct):
    label: str


class _Flips(msgspec.Struct):
    regression: int
    improvement: int


class _PerSide(msgspec.Struct):
    a: int
    b: int


class _Counts(msgspec.Struct):
    prompts: int
    pairs: int
    identical: int
    wording_similar: int
    divergent: int
    flips: _Flips
    degenerate_new_on_b: int
    nondeterministic: _PerSide
    unanswered: _PerSide
    noise: int
    status: dict[str, int]


class SummaryShape(msgspec.Struct):
    """The parts of summary.json that the gate, the sheet and the terminal read."""

    identity: str
    a: _Side
    b: _Side
    counts: _Counts


def read_summary(report_dir: Path) -> dict[str, Any]:
    """summary.json, checked to hold what its readers rely on."""
    path = report_dir / SUMMARY
    if not path.exists() and (report_dir / MANIFEST).exists():
        raise RunFormatError(f"{report_dir} is a run directory (it has {MANIFEST}), not a "
                             "report: compare two runs first, e.g. `quantcheck compare "
                             f"{report_dir} OTHER_RUN --out REPORT_DIR`")
    summary = read_json(path)
    try:
        msgspec.convert(summary, SummaryShape)
    except msgspec.ValidationError as exc:
        raise RunFormatError(f"{path}: {exc} (written by another quantcheck version, or "
                             "edited? re-run compare)") from None
    assert isinstance(summary, dict)
    return summary


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


def require_report(report_dir: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The pairs and the summary of a report, or one clear RunFormatError."""
    summary = read_summary(report_dir)
    return read_pairs(report_dir), summary
