"""The report directory (`compare`, `run`): its layout, and reading it back safely.

    REPORT_DIR/
      pairs.csv        one row per prompt (PairRow, PAIR_COLUMNS: store/records/pair_records.py)
      details.jsonl    per prompt, what the sheet shows beyond pairs.csv (PairDetails)
      summary.json     the totals (Summary)
      index.html       the review sheet
      reviews/NAME.json  reviewers' files (reviews.py), approvals.json (approvals.py),
      gate.json, junit.xml (gate/verdict.py), forced/ with `run --forced` (ForcedSummary)

A report is read by the gate, the sheet and the review server; whatever is malformed
in it (a binary pairs.csv, a summary without a side, a folder where a file belongs) is
one RunFormatError naming the file, never a traceback.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Container, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import numpy as np
import orjson

from ...errors import RunFormatError
from ..files import CSV_WRITTEN_WITH, AtomicFile, csv_rows, make_directory
from ..labels import is_label, shown
from ..records.pair_records import (
    ENUMERATED,
    NON_NEGATIVE,
    PAIR_COLUMNS,
    PAIR_DTYPES,
    TEXT_COLUMNS,
    PairDetails,
    PairRow,
)
from ..records.report_records import ForcedLine, ForcedSummary, Overview, Summary
from .folder_kinds import CANDIDATES as CANDIDATES  # the report's file names, re-exported
from .folder_kinds import CANDIDATES_OVERVIEW, REPORT, require_kind
from .folder_kinds import DETAILS as DETAILS
from .folder_kinds import FORCED_JSON as FORCED_JSON
from .folder_kinds import FORCED_JSONL as FORCED_JSONL
from .folder_kinds import OVERVIEW as OVERVIEW
from .folder_kinds import PAIRS as PAIRS
from .folder_kinds import SUMMARY as SUMMARY
from .run_dir import (
    MANIFEST,
    iter_jsonl,
    open_run_file,
    prompt_key,
    read_record,
    write_json_atomic,
    write_jsonl_atomic,
)

if TYPE_CHECKING:  # pandas is imported where a frame is made: `collect` never loads it
    import pandas as pd

REVIEWS = "reviews"
GATE_JSON = "gate.json"
JUNIT_XML = "junit.xml"
MATRIX = "matrix.csv"
PAIRS_READ_AT_ONCE = 2000  # rows of pairs.csv read at a time where it is streamed
# Pairs held, written and forgotten at a time while pairs.csv and details.jsonl are
# written (by compare, and again by the judge's pass): memory does not grow with the
# prompt count (a chunk is about 1 MB of rows and details at 128-token answers). The
# files are the same whatever the chunk size.
CHUNK_PAIRS = 256


def read_forced(folder: Path) -> tuple[ForcedSummary, dict[str, ForcedLine]]:
    """forced.json, and forced.jsonl's lines by prompt id; a file that is missing or
    malformed is a RunFormatError naming it."""
    hint = " (not written by `quantcheck forced`? score again)"
    summary = read_record(folder / FORCED_JSON, ForcedSummary, hint)
    lines: dict[str, ForcedLine] = {}
    for number, data in iter_jsonl(folder / FORCED_JSONL):
        try:
            line = msgspec.convert(data, ForcedLine)
        except msgspec.ValidationError as exc:
            raise RunFormatError(f"{folder / FORCED_JSONL}:{number}: {exc}{hint}") from None
        lines[line.prompt_id] = line
    return summary, lines


def write_forced(folder: Path, summary: ForcedSummary, lines: list[ForcedLine]) -> None:
    make_directory(folder)
    write_jsonl_atomic(folder / FORCED_JSONL, [msgspec.to_builtins(line) for line in lines])
    write_json_atomic(folder / FORCED_JSON, msgspec.to_builtins(summary))


def read_summary(report_dir: str | Path) -> Summary:
    """summary.json, as the typed record its readers rely on."""
    report_dir = Path(report_dir)
    path = report_dir / SUMMARY
    if not path.exists() and (report_dir / MANIFEST).exists():
        raise RunFormatError(f"{report_dir} is a run directory (it has {MANIFEST}), not a "
                             "report: compare two runs first, e.g. `quantcheck compare "
                             f"{report_dir} OTHER_RUN --out REPORT_DIR`")
    return read_record(path, Summary, " (written by another quantcheck version, or "
                       "edited? re-run compare)")


def write_summary(report_dir: Path, summary: Summary) -> None:
    write_json_atomic(report_dir / SUMMARY, msgspec.to_builtins(summary))


def pair_frame(rows: Sequence[PairRow]) -> pd.DataFrame:
    """Pairs as a frame with PAIR_COLUMNS, each of its own type (PAIR_DTYPES); an empty
    cell is NA, or NaN in a text column."""
    import pandas as pd

    columns = list(zip(*map(msgspec.structs.astuple, rows), strict=True)) or [()] * len(
        PAIR_COLUMNS)
    return pd.DataFrame({name: _column(values, PAIR_DTYPES[name])
                         for name, values in zip(PAIR_COLUMNS, columns, strict=True)})


def _column(values: Sequence[object], dtype: str) -> pd.Series:
    import pandas as pd

    if dtype == "object":
        values = [np.nan if value is None else value for value in values]
    return pd.Series(values, dtype=dtype)


def pairs_csv(rows: Sequence[PairRow], header: bool = True) -> bytes:
    """Rows of pairs.csv, with the header line first when asked."""
    return csv_rows(pair_frame(rows).to_csv(index=False, header=header,
                                            lineterminator=CSV_WRITTEN_WITH)).encode("utf-8")


def details_jsonl(details: Iterable[PairDetails]) -> bytes:
    """Lines of details.jsonl (a field left UNSET is not written)."""
    return b"".join(orjson.dumps(msgspec.to_builtins(detail)) + b"\n" for detail in details)


class PairsWriter:
    """Appends pairs, chunk by chunk, to the temporaries of pairs.csv and details.jsonl
    (`writing_pairs`)."""

    def __init__(self, table: AtomicFile, lines: AtomicFile) -> None:
        self._table = table
        self._lines = lines
        self._header = True

    def write(self, rows: Sequence[PairRow], details: Sequence[PairDetails]) -> None:
        """The next pairs in order: their rows and, line for line, their details."""
        self._table.write(pairs_csv(rows, header=self._header))
        self._lines.write(details_jsonl(details))
        self._header = False

    def finish(self) -> None:
        if self._header:
            self._table.write(pairs_csv([]))  # no pairs: the header alone
        self._table.flush()  # both written before either replaces the old report's
        self._lines.flush()


@contextmanager
def writing_pairs(report_dir: Path) -> Iterator[PairsWriter]:
    """The one writer of REPORT_DIR/pairs.csv and details.jsonl: what the block writes
    goes to temporaries that replace both when it ends without an exception (with one,
    or a full disk, both stay as they were)."""
    with AtomicFile(report_dir / PAIRS) as table, AtomicFile(report_dir / DETAILS) as lines:
        writer = PairsWriter(table, lines)
        yield writer
        writer.finish()


def read_pairs(report_dir: str | Path) -> pd.DataFrame:
    """pairs.csv whole, each column of its own type: integer columns as integers and
    boolean ones as booleans also beside empty cells (pandas' nullable Int64 and
    boolean: an empty cell is <NA>, never a float NaN), floats as floats, and an empty
    text cell as ""."""
    return next(iter_pairs(Path(report_dir)))


def read_pair_rows(report_dir: Path) -> list[PairRow]:
    """pairs.csv whole, as typed rows."""
    return [row for rows in iter_pair_rows(report_dir) for row in rows]


def iter_pair_rows(report_dir: Path, chunk: int = PAIRS_READ_AT_ONCE) -> Iterator[list[PairRow]]:
    """pairs.csv as typed rows, `chunk` at a time; a malformed file is one RunFormatError
    naming it, wherever it breaks."""
    for frame in iter_pairs(report_dir, chunk):
        yield pair_rows(frame)


def read_judge_labels(report_dir: Path) -> dict[str, str]:
    """The judge's label of each pair it labelled (pairs.csv's judge_label), by prompt."""
    labels: dict[str, str] = {}
    for frame in iter_pairs(report_dir, PAIRS_READ_AT_ONCE, ["prompt_id", "judge_label"]):
        labels.update((str(p), str(label)) for p, label in
                      zip(frame["prompt_id"], frame["judge_label"], strict=True) if label)
    return labels


class PromptIds(Container[str]):
    """The prompt ids of pairs.csv, held as sorted 64-bit keys (run_dir.prompt_key):
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
    RunFormatError naming it, wherever it breaks: a column of a few values
    (pair_records.ENUMERATED) holding another names the row, the column, the value and
    the values allowed."""
    import pandas as pd

    path = report_dir / PAIRS
    if not path.exists():
        raise RunFormatError(f"{path}: missing; run `quantcheck compare` first")
    wanted = usecols or PAIR_COLUMNS
    dtypes = {c: str if c in TEXT_COLUMNS else PAIR_DTYPES[c] for c in wanted}
    empty = {c: [""] for c in wanted if c not in TEXT_COLUMNS}
    try:
        header = _header(path)  # every column is checked, whichever are read
        missing = [c for c in PAIR_COLUMNS if c not in header]
        if missing:
            raise RunFormatError(f"{path}: missing columns {', '.join(missing)}")
        if chunk is None:
            frames: Iterable[pd.DataFrame] = [pd.read_csv(
                path, dtype=dtypes, usecols=usecols, keep_default_na=False, na_values=empty)]
            yield from _checked(path, frames)
        else:
            with pd.read_csv(path, dtype=dtypes, usecols=usecols, keep_default_na=False,
                             na_values=empty, chunksize=chunk) as reader:
                yield from _checked(path, reader)
    except (OSError, UnicodeDecodeError, ValueError, TypeError, csv.Error, pd.errors.ParserError,
            pd.errors.EmptyDataError) as exc:
        raise RunFormatError(f"{path}: not a pairs table written by compare "
                             f"({str(exc).splitlines()[0][:200]})") from None


def _checked(path: Path, frames: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """The frames, each once its enumerated columns hold only their values and its
    integer columns (counts and token positions, all of them) and its KLs and
    distances no negative number."""
    rows = 0
    for frame in frames:
        for column in frame.columns:
            values = frame[column]
            if column in ENUMERATED:
                wrong, why = ~values.isin(ENUMERATED[column]), (
                    "is not one of its values ("
                    + ", ".join(repr(v) if v else "empty" for v in ENUMERATED[column]) + ")")
            elif PAIR_DTYPES[column] == "Int64":
                wrong, why = (values < 0).fillna(False), "is negative (a count or a position)"
            elif column in NON_NEGATIVE:
                wrong, why = (values < 0).fillna(False), "is negative (a KL or a distance)"
            else:
                continue
            if wrong.any():
                at = int(np.argmax(wrong.to_numpy()))
                which = (f" (prompt {frame['prompt_id'].iloc[at]!r})"
                         if "prompt_id" in frame.columns else "")
                raise RunFormatError(f"{path}: row {rows + at + 1}{which}, column {column}: "
                                     f"{values.tolist()[at]!r} {why}; edited by hand? re-run "
                                     "compare")
        rows += len(frame)
        yield frame


def _header(path: Path) -> list[str]:
    with open_run_file(path) as handle:  # a regular file: pandas then reads it by name
        first = handle.readline().decode("utf-8")
    return next(csv.reader([first]), []) if first.strip() else []


def pair_rows(pairs: pd.DataFrame) -> list[PairRow]:
    """The typed rows of a pairs frame of PAIR_COLUMNS (an empty cell, NA or NaN in
    pandas, is None)."""
    import pandas as pd

    columns = [[None if value is pd.NA or value != value else value
                for value in pairs[name].tolist()] for name in PAIR_COLUMNS]
    return [PairRow(**dict(zip(PAIR_COLUMNS, values, strict=True)))
            for values in zip(*columns, strict=True)]


class DetailsReader:
    """details.jsonl by prompt id, read forward: asked in the file's order (pairs.csv's,
    as compare writes them) it holds one line at a time; a line asked out of order is
    found by reading on, keeping what it passed."""

    def __init__(self, report_dir: Path) -> None:
        path = report_dir / DETAILS
        self._lines = iter_jsonl(path) if path.exists() else iter(())
        self._passed: dict[str, dict[str, object]] = {}

    def get(self, prompt_id: str) -> dict[str, object]:
        """The line as written (the sheet passes it on to the page whole)."""
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
    """overview.json; each candidate's report is its folder's candidates/LABEL (a row
    naming another folder would have the gate read a report it was not given)."""
    require_kind(folder, CANDIDATES_OVERVIEW)
    overview = read_record(folder / OVERVIEW, Overview, " (re-run compare)")
    for row in overview.candidates:
        if not is_label(row.label) or row.report != f"{CANDIDATES}/{row.label}":
            raise RunFormatError(f"{folder / OVERVIEW}: candidate {shown(row.label)}: report "
                                 f"{shown(row.report)} is not {CANDIDATES}/LABEL, where "
                                 "compare writes it (edited? re-run compare)")
    _require_every_candidate_listed(folder, [row.label for row in overview.candidates])
    return overview


def _require_every_candidate_listed(folder: Path, labels: list[str]) -> None:
    """A report under candidates/ that overview.json leaves out would never be gated; a
    label listed twice would be gated as one."""
    on_disk = sorted(entry.name for entry in (folder / CANDIDATES).glob("*") if entry.is_dir())
    unlisted = [name for name in on_disk if name not in labels]
    twice = sorted(label for label, n in Counter(labels).items() if n > 1)
    if unlisted or twice:
        what = (f"{', '.join(shown(f'{CANDIDATES}/{name}') for name in unlisted)} not listed"
                if unlisted else f"{', '.join(map(shown, twice))} listed twice")
        raise RunFormatError(f"{folder / OVERVIEW}: {what}, so its verdict would not be "
                             "checked (edited? re-run compare)")


def write_overview(folder: Path, overview: Overview) -> None:
    write_json_atomic(folder / OVERVIEW, msgspec.to_builtins(overview))


def require_report(report_dir: Path) -> tuple[list[PairRow], Summary]:
    """The pairs and the summary of a report, or one clear RunFormatError (also for a
    folder that holds another output beside it)."""
    require_kind(report_dir, REPORT)
    summary = read_summary(report_dir)
    return read_pair_rows(report_dir), summary
