"""The serving matrix (matrix.csv): one row per endpoint and test, in the
columns a serving matrix of models, runtimes and quantizations is kept in.

`write_matrix` writes a report's rows; `append_matrix` adds them to a user's matrix
without rewriting earlier rows, except that a row for the same serving cell on the
same date replaces the one already there (a rerun of one test, never a duplicate).
Unknown values are empty cells. A matrix read back is a regular file of at most
`MAX_MATRIX_BYTES` (files.read_regular).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigFileError
from ..store.files import (
    CSV_WRITTEN_WITH,
    UnreadableFile,
    csv_rows,
    read_regular,
    write_atomic,
)
from ..store.folders.run_dir import Throughput
from ..store.records.report_records import Overview

COLUMNS = ["model_id", "runtime", "runtime_version", "gpu", "gpu_arch", "vram_gb",
           "quantization", "kv_cache_dtype", "tp", "backend", "context_len", "concurrency",
           "startup_status", "correctness_status", "agg_tokens_per_second", "ttft_ms_p50",
           "e2e_s_p99", "available_kv_cache_gib", "max_concurrency_x", "peak_vram_gb",
           "artifact_url", "tested_at", "note"]
# What makes two rows the same test: the serving cell and the date.
MAX_MATRIX_BYTES = 64 << 20  # a row per serving cell
CELL_COLUMNS = ["model_id", "runtime", "runtime_version", "gpu", "gpu_arch", "vram_gb",
                "quantization", "kv_cache_dtype", "tp", "backend", "context_len",
                "concurrency", "tested_at"]


def matrix_rows(overview: Overview, tested_at: str) -> list[dict[str, str]]:
    """The reference's row, then each candidate's (correctness from the gate)."""
    rows = [_row(overview.reference_cell, overview.reference_throughput, "reference",
                 tested_at, f"reference ({overview.reference.label})")]
    for candidate in overview.candidates:
        throughput = candidate.throughput.b if candidate.throughput else None
        note = candidate.label
        if candidate.throughput and candidate.throughput.a and throughput:
            note += f"; {candidate.throughput.note}"
        rows.append(_row(candidate.cell, throughput, candidate.gate, tested_at, note))
    return rows


def _row(cell: Mapping[str, object], throughput: Throughput | None, correctness: str,
         tested_at: str, note: str) -> dict[str, str]:
    values: dict[str, object] = {
        "model_id": cell.get("model"), "correctness_status": correctness,
        "startup_status": "ok", "tested_at": tested_at, "note": note,
        **{k: cell.get(k) for k in ("runtime", "runtime_version", "gpu", "gpu_arch",
                                    "vram_gb", "quantization", "kv_cache_dtype", "tp",
                                    "backend", "context_len", "concurrency",
                                    "available_kv_cache_gib", "max_concurrency_x",
                                    "peak_vram_gb", "artifact_url")}}
    if throughput is not None:
        values.update(
            concurrency=throughput.concurrency,
            agg_tokens_per_second=_round(throughput.tokens_per_s, 1),
            ttft_ms_p50=_round(1000 * throughput.ttft_p50_s
                               if throughput.ttft_p50_s is not None else None, 1),
            e2e_s_p99=_round(throughput.e2e_p99_s, 3))
    return {column: "" if values.get(column) is None else str(values[column])
            for column in COLUMNS}


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def write_matrix(path: Path, rows: list[dict[str, str]]) -> None:
    write_atomic(path, _csv(rows))


def check_matrix(path: Path) -> None:
    """Refuse now a file at `path` that `append_matrix` would refuse after the run."""
    if path.exists():
        _read(path)


def append_matrix(path: Path, rows: list[dict[str, str]]) -> int:
    """Add `rows` to the matrix at `path` (created if missing); how many rows it holds."""
    kept = _read(path) if path.exists() else []
    new_keys = {_key(row) for row in rows}
    merged = [row for row in kept if _key(row) not in new_keys] + rows
    write_atomic(path, _csv(merged), path.parent)
    return len(merged)


def _key(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row.get(column, "") for column in CELL_COLUMNS)


def _read(path: Path) -> list[dict[str, str]]:
    try:
        text = read_regular(path, MAX_MATRIX_BYTES, "matrix").decode("utf-8")
    except (UnreadableFile, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path}: cannot read the matrix: {exc}") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames != COLUMNS:
        raise ConfigFileError(f"{path}: not a serving matrix: its columns must be exactly "
                              f"{', '.join(COLUMNS)} (found {', '.join(reader.fieldnames or [])})")
    return [dict(row) for row in reader]


def _csv(rows: list[dict[str, str]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator=CSV_WRITTEN_WITH)
    writer.writeheader()
    writer.writerows(rows)
    return csv_rows(buffer.getvalue()).encode("utf-8")
