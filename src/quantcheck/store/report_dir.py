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

import csv
from collections.abc import Container, Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ..errors import RunFormatError
from .files import make_directory
from .report_records import ForcedLine, ForcedSummary, Overview, Summary
from .run_dir import (
    MANIFEST,
    iter_jsonl,
    prompt_key,
    read_json,
    write_json_atomic,
    write_jsonl_atomic,
)
from .run_records import DEGENERATE_KINDS, new_on_b

PAIRS = "pairs.csv"
DETAILS = "details.jsonl"
SUMMARY = "summary.json"
REVIEWS = "reviews"
GATE_JSON = "gate.json"
JUNIT_XML = "junit.xml"
OVERVIEW = "overview.json"  # several candidates: DIR/overview.json,
CANDIDATES = "candidates"  # and each one's report in DIR/candidates/LABEL/
MATRIX = "matrix.csv"
PAIRS_READ_AT_ONCE = 2000  # rows of pairs.csv read at a time where it is streamed

class PairRow(msgspec.Struct, kw_only=True):
    """One row of pairs.csv: one prompt, A against B (docs/formats.md: the pairs.csv table).
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
    a_checks: str = ""
    b_checks: str = ""
    flipped_checks: str = ""
    tool_call_change: str = ""
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
    a_routings: int | None = None
    b_routings: int | None = None
    a_routing: str = ""
    b_routing: str = ""
    routing_first_token: int | None = None
    routing_first_layer: int | None = None
    routing_diff_share: float | None = None
    a_text: str | None = None
    b_text: str | None = None
    a_tool_calls: str | None = None
    b_tool_calls: str | None = None

    @property
    def compared(self) -> bool:
        return self.status == "compared"

    @property
    def needs_review(self) -> bool:
        """Compared and not identical: a reviewer's question."""
        return self.compared and not self.identical


PAIR_COLUMNS = list(PairRow.__struct_fields__)


def _dtype(annotation: str) -> str:
    """A column's pandas type: nullable integers and booleans stay what they are, so a
    chunk of pairs.csv writes 5, not 5.0, whether or not its column has an empty cell."""
    kind = annotation.split(" ")[0]
    return {"int": "Int64", "float": "float64", "bool": "boolean"}.get(kind, "object")


PAIR_DTYPES = {name: _dtype(PairRow.__annotations__[name]) for name in PAIR_COLUMNS}


def pair_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Pairs as a frame with PAIR_COLUMNS, each of its own type."""
    return pd.DataFrame(rows, columns=PAIR_COLUMNS).astype(PAIR_DTYPES)


def new_degenerate_on_b(rows: list[PairRow]) -> list[str]:
    """Prompts whose B answer is degenerate (a loop, empty) and A's is not: the one
    definition the summary, the sheet and the gate count."""
    return [r.prompt_id for r in rows if r.compared
            and new_on_b(r.a_degenerate, r.b_degenerate, DEGENERATE_KINDS)]
PAIR_FORCED_COLUMNS = [c for c in PAIR_COLUMNS if c.startswith("forced_")]
TEXT_COLUMNS = ["prompt_id", "category", "status", "divergence_kind", "divergence_a_token",
                "divergence_b_token", "a_expect", "b_expect", "a_expect_failures",
                "b_expect_failures", "flip", "a_checks", "b_checks", "flipped_checks",
                "tool_call_change", "a_degenerate", "b_degenerate", "a_finish_reason",
                "b_finish_reason", "suggested_label", "approved_label", "approved_at",
                "prompt_hash", "a_repeat_mode", "b_repeat_mode", "a_routing", "b_routing", "a_text",
                "b_text",
                "a_tool_calls", "b_tool_calls"]


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
    return next(iter_pairs(report_dir))


class PromptIds(Container[str]):
    """The prompt ids of pairs.csv, held as sorted 64-bit keys (runstore.prompt_key):
    8 bytes a prompt where a set of the ids took about 90."""

    def __init__(self, keys: list[np.ndarray]) -> None:
        self.keys = np.sort(np.concatenate(keys)) if keys else np.zeros(0, np.int64)

    @staticmethod
    def of(pairs: pd.DataFrame) -> np.ndarray:
        """The keys of some rows' prompt ids."""
        return np.fromiter((prompt_key(str(i)) for i in pairs["prompt_id"]), np.int64)

    @classmethod
    def read(cls, report_dir: Path) -> PromptIds:
        return cls([cls.of(frame) for frame in
                    iter_pairs(report_dir, PAIRS_READ_AT_ONCE, ["prompt_id"])])

    def __contains__(self, prompt_id: object) -> bool:
        if not isinstance(prompt_id, str):
            return False
        key = prompt_key(prompt_id)
        at = int(np.searchsorted(self.keys, key))
        return at < len(self.keys) and bool(self.keys[at] == key)

    def __len__(self) -> int:
        return len(self.keys)


def iter_pairs(report_dir: Path, chunk: int | None = None,
               usecols: list[str] | None = None) -> Iterator[pd.DataFrame]:
    """pairs.csv, `chunk` rows at a time (whole without one); a malformed file is one
    RunFormatError naming it, wherever it breaks."""
    path = report_dir / PAIRS
    if not path.exists():
        raise RunFormatError(f"{path}: missing; run `quantcheck compare` first")
    wanted = usecols or PAIR_COLUMNS
    try:
        header = _header(path)  # every column is checked, whichever are read
        missing = [c for c in PAIR_COLUMNS if c not in header]
        if missing:
            raise RunFormatError(f"{path}: missing columns {', '.join(missing)}")
        options: dict[str, Any] = {
            "dtype": {c: str for c in TEXT_COLUMNS if c in wanted}, "usecols": usecols,
            "keep_default_na": False,
            "na_values": {c: [""] for c in wanted if c not in TEXT_COLUMNS}}
        if chunk is None:
            yield pd.read_csv(path, **options)
        else:
            with pd.read_csv(path, chunksize=chunk, **options) as frames:
                yield from frames
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError,
            pd.errors.EmptyDataError) as exc:
        raise RunFormatError(f"{path}: not a pairs table written by compare "
                             f"({str(exc).splitlines()[0][:200]})") from None


def _header(path: Path) -> list[str]:
    with path.open("rb") as handle:
        first = handle.readline().decode("utf-8")
    return next(csv.reader([first]), []) if first.strip() else []


def pair_rows(pairs: pd.DataFrame) -> list[PairRow]:
    """The typed rows of a pairs frame (an empty cell, NaN in pandas, is None)."""
    rows = pairs.astype(object).where(pairs.notna(), None).to_dict("records")
    try:
        return [msgspec.convert({str(k): v for k, v in row.items() if v is not None},
                                PairRow, strict=False) for row in rows]
    except msgspec.ValidationError as exc:
        raise RunFormatError(f"{PAIRS}: {exc}") from None


class DetailsReader:
    """details.jsonl by prompt id, read forward: asked in the file's order (pairs.csv's,
    as compare writes them) it holds one line at a time; a line asked out of order is
    found by reading on, keeping what it passed."""

    def __init__(self, report_dir: Path) -> None:
        path = report_dir / DETAILS
        self._lines = iter_jsonl(path) if path.exists() else iter(())
        self._passed: dict[str, dict[str, Any]] = {}

    def get(self, prompt_id: str) -> dict[str, Any]:
        if prompt_id in self._passed:
            return self._passed.pop(prompt_id)
        for _, detail in self._lines:
            if not isinstance(detail, dict):
                continue
            found = str(detail.get("prompt_id"))
            if found == prompt_id:
                return detail
            self._passed[found] = detail
        return {}


def read_overview(folder: Path) -> Overview:
    path = folder / OVERVIEW
    try:
        return msgspec.convert(read_json(path), Overview)
    except msgspec.ValidationError as exc:
        raise RunFormatError(f"{path}: {exc} (re-run compare)") from None


def write_overview(folder: Path, overview: Overview) -> None:
    write_json_atomic(folder / OVERVIEW, msgspec.to_builtins(overview))


def require_report(report_dir: Path) -> tuple[pd.DataFrame, Summary]:
    """The pairs and the summary of a report, or one clear RunFormatError."""
    summary = read_summary(report_dir)
    return read_pairs(report_dir), summary
