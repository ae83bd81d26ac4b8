"""Rows of data files, streamed: JSONL lines, CSV rows, Parquet and Arrow record
batches (a `datasets` save_to_disk folder, a folder of Parquet shards); and a seeded
sample of them drawn in bounded memory. pyarrow (the `data` extra) reads the columnar
files.

Every file read is a regular file (files.open_regular: a FIFO or a device, even one
named *.parquet inside a folder, is refused before it is opened for reading); text is
UTF-8, and a byte that is not is one error naming its line and column, with the command
that converts the file, wherever in the file it is; a line of JSONL, CSV or TSV holds at
most MAX_LINE_BYTES (a longer one is one error naming the file and the line, read no
further: files.bounded_lines); a JSON integer beyond 64 bits is read exactly
(prompt_entries.loads_exact), never as a float."""

from __future__ import annotations

import bisect
import csv
import io
import itertools
import math
import mmap
import os
import random
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Protocol, TypeVar

import orjson

from ...errors import PromptFileError
from ..files import UnreadableFile, bounded_lines, open_regular
from .entry_fields import Where, mapping
from .prompt_entries import loads_exact
from .yamlfile import MAX_YAML_BYTES, not_utf8_at

T = TypeVar("T")
LINE_SUFFIXES = (".jsonl", ".ndjson")
TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t"}
COLUMNAR_SUFFIXES = (".parquet", ".arrow")
SUFFIXES = (*LINE_SUFFIXES, *TABLE_SUFFIXES, *COLUMNAR_SUFFIXES)
DATA_EXTRA = "pip install 'quantcheck[data]'"
# A line (and a CSV field): a long prompt (a haystack of 1,000,000 tokens is about 5 MB)
# is one; a YAML prompt set holds at most as much (yamlfile.MAX_YAML_BYTES).
MAX_LINE_BYTES = MAX_YAML_BYTES
CSV_FIELD_LIMIT = MAX_LINE_BYTES


@dataclass
class Row:
    """One row and where it is (file, line or row number, for errors)."""

    where: Where
    values: object  # a JSON line as parsed; a dict of column values otherwise


@dataclass
class DataFile:
    """A data file or folder, and the files that hold its rows, in order."""

    path: Path
    kind: str  # jsonl, csv, tsv, parquet, arrow
    files: list[Path]

    @property
    def columnar(self) -> bool:
        return self.kind in ("parquet", "arrow")

    @property
    def described(self) -> str:
        names = {"jsonl": "JSONL", "csv": "CSV", "tsv": "TSV", "parquet": "Parquet",
                 "arrow": "Arrow"}
        if self.path.is_dir():
            return ("datasets folder" if self.kind == "arrow" else "Parquet folder") + \
                f" ({len(self.files)} file{'s' * (len(self.files) != 1)})"
        return names[self.kind]


def is_data_file(path: Path) -> bool:
    return path.is_dir() or path.suffix.lower() in SUFFIXES


def open_data(path: Path) -> DataFile:
    """What kind of data `path` holds, or one clear error."""
    if path.is_dir():
        return _folder(path)
    suffix = path.suffix.lower()
    _check_regular(path)
    if suffix in LINE_SUFFIXES:
        return DataFile(path, "jsonl", [path])
    if suffix in TABLE_SUFFIXES:
        return DataFile(path, suffix[1:], [path])
    if suffix in COLUMNAR_SUFFIXES:
        return DataFile(path, suffix[1:], [path])
    raise PromptFileError(f"{path}: not a prompt file quantcheck reads (YAML, "
                          f"{', '.join(SUFFIXES)}, or a folder)")


def _folder(path: Path) -> DataFile:
    if (path / "dataset_dict.json").is_file():
        splits = sorted(p.name for p in path.iterdir() if (p / "state.json").is_file())
        raise PromptFileError(f"{path}: a DatasetDict folder with the splits "
                              f"{', '.join(splits) or '(none)'}: give one split's folder, "
                              f"e.g. {path / (splits[0] if splits else 'test')}")
    state = path / "state.json"
    if state.is_file():
        return DataFile(path, "arrow", _state_files(path, state))
    for kind in ("parquet", "arrow"):
        files = sorted(path.glob(f"*.{kind}"))
        for file in files:
            _check_regular(file)
        if files:
            return DataFile(path, kind, files)
    raise PromptFileError(f"{path}: no data files: a folder of prompts is a datasets "
                          "save_to_disk folder (state.json and .arrow files) or a folder of "
                          ".parquet files")


def _check_regular(path: Path) -> None:
    """A data file must be a regular file (a link to one is one)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise PromptFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise PromptFileError(f"{path}: not a regular file (a FIFO, a device or a socket "
                              "is never read); give a file")


def _opened(path: Path) -> io.BufferedReader:
    try:
        stream = open_regular(path, "data file")
    except UnreadableFile as exc:
        raise PromptFileError(str(exc)) from None
    assert isinstance(stream, io.BufferedReader)
    return stream


def _state_files(path: Path, state: Path) -> list[Path]:
    """The Arrow files a save_to_disk folder lists in state.json's `_data_files`."""
    where = Where(state)
    try:
        with _opened(state) as stream:
            document = orjson.loads(stream.read())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise where.error(None, f"not readable JSON: {exc}") from None
    fields = mapping(document)
    entries = fields.get("_data_files") if fields is not None else None
    if not isinstance(entries, list) or not entries:
        raise where.error("_data_files", "must list the folder's .arrow files")
    files = []
    for entry in entries:
        name = (mapping(entry) or {}).get("filename")
        if not isinstance(name, str) or "/" in name or not (path / name).exists():
            raise where.error("_data_files", f"no such data file: {name!r}")
        _check_regular(path / name)
        files.append(path / name)
    return files


def columns(data: DataFile) -> list[str] | None:
    """The column names of a table (None for JSONL, whose lines name their own)."""
    if data.kind == "jsonl":
        return None
    if data.columnar:
        return list(_schema_names(data))
    with _text(data.path) as stream:
        header = next(csv.reader(stream, delimiter=TABLE_SUFFIXES[f".{data.kind}"]), None)
    if not header:
        raise PromptFileError(f"{data.path}: empty: the first row must name the columns")
    return header


def rows(data: DataFile, sample: int | None = None, seed: int = 0) -> Iterator[Row]:
    """Every row in order; or a seeded sample of `sample` rows, the same every time for
    the same file and seed, in file order, without holding the file."""
    if data.kind == "jsonl":
        lines: Iterable[tuple[int, bytes]] = _jsonl_lines(data.path)
        if sample is not None:
            lines = sorted(reservoir(lines, sample, seed))
        return (_json_row(data.path, number, line) for number, line in lines)
    if data.columnar:
        return _columnar_rows(data, sample, seed)
    table: Iterable[Row] = _table_rows(data)
    if sample is not None:
        return iter(sorted(reservoir(table, sample, seed), key=lambda row: row.where.row))
    return iter(table)


def count_rows(data: DataFile) -> int:
    """How many rows the file holds (a pass over a text file; metadata for Parquet)."""
    if data.kind == "jsonl":
        return sum(1 for _ in _jsonl_lines(data.path))
    if data.columnar:
        return sum(count for _, count in _file_counts(data))
    return sum(1 for _ in _table_rows(data))


def reservoir(items: Iterable[T], k: int, seed: int) -> list[T]:
    """A uniform sample of k items of a stream of unknown length, in one pass holding
    k items (Li's algorithm L: a few random draws per item taken, none per item skipped).
    The same items for the same stream and seed."""
    rng = random.Random(seed)
    stream = iter(items)
    chosen = list(itertools.islice(stream, k))
    if len(chosen) < k or k == 0:
        return chosen
    weight = math.exp(math.log(_uniform(rng)) / k)
    while True:
        skip = math.floor(math.log(_uniform(rng)) / math.log1p(-weight)) if weight < 1 else 0
        following = next(itertools.islice(stream, skip, None), _END)
        if following is _END:
            return chosen
        chosen[rng.randrange(k)] = following  # type: ignore[assignment]
        weight *= math.exp(math.log(_uniform(rng)) / k)


_END = object()


def _uniform(rng: random.Random) -> float:
    """A draw in (0, 1): a logarithm is taken of it."""
    return rng.random() or sys.float_info.min


def _jsonl_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of each line that is not blank."""
    try:
        with _opened(path) as stream:
            for number, line in bounded_lines(stream, path, MAX_LINE_BYTES, "data file"):
                if not line.isspace():  # a blank line is no row
                    yield number, line
    except UnreadableFile as exc:
        raise PromptFileError(str(exc)) from None
    except OSError as exc:
        raise PromptFileError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _json_row(path: Path, number: int, line: bytes) -> Row:
    where = Where(path, number)
    if number == 1:
        line = line.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark some editors write
    try:
        value = loads_exact(line)
    except orjson.JSONDecodeError as exc:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise PromptFileError(not_utf8_at(path, number, bad.start + 1,
                                              line[bad.start:bad.start + 1],
                                              "data file")) from None
        raise where.error(None, f"not valid JSON: {exc}") from None
    if mapping(value) is None:
        raise where.error(None, f"expected a JSON object, not {type(value).__name__}")
    return Row(where, value)


def _text(path: Path) -> _TextFile:
    return _TextFile(path)


class _TextFile:
    """A UTF-8 text file (a byte-order mark skipped) whose read errors are one line: a
    byte that is not UTF-8, wherever it is, names its line and column."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> Iterator[str]:
        self.stream = io.TextIOWrapper(_opened(self.path), encoding="utf-8-sig", newline="")
        return self._lines()

    def _lines(self) -> Iterator[str]:
        """The file's lines, each of at most MAX_LINE_BYTES characters (a longer one is
        read no further)."""
        try:
            for _, line in bounded_lines(self.stream, self.path, MAX_LINE_BYTES, "data file"):
                yield line
        except UnreadableFile as exc:
            raise PromptFileError(str(exc)) from None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 *rest: object) -> None:
        self.stream.close()
        if isinstance(error, UnicodeDecodeError):
            raise PromptFileError(_first_bad_byte(self.path)) from None
        if isinstance(error, OSError):
            raise PromptFileError(f"{self.path}: cannot read: "
                                  f"{error.strerror or error}") from None


def _first_bad_byte(path: Path) -> str:
    """Where the first byte that is not UTF-8 is (the text decoder reads ahead in
    chunks, so its own error says little), as the error to show."""
    with _opened(path) as stream:
        utf16 = stream.peek(2)[:2] in (b"\xff\xfe", b"\xfe\xff")
        try:
            for number, line in bounded_lines(stream, path, MAX_LINE_BYTES, "data file"):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as bad:
                    return not_utf8_at(path, number, bad.start + 1,
                                       line[bad.start:bad.start + 1], "data file",
                                       utf16=utf16)
        except UnreadableFile as exc:
            return str(exc)
    return f"{path}: not UTF-8 text"


def _table_rows(data: DataFile) -> Iterator[Row]:
    csv.field_size_limit(CSV_FIELD_LIMIT)
    with _text(data.path) as stream:
        reader = csv.reader(stream, delimiter=TABLE_SUFFIXES[f".{data.kind}"])
        try:
            header = next(reader, None)
            if not header:
                raise PromptFileError(f"{data.path}: empty: the first row must name the "
                                      "columns")
            twice = sorted({name for name in header if header.count(name) > 1})
            if twice:
                raise PromptFileError(f"{data.path}:1: the header names {twice[0]!r} twice")
            start, number = reader.line_num + 1, 0
            for cells in reader:
                where = Where(data.path, start, row=number + 1)
                start = reader.line_num + 1
                if not any(cells):
                    continue
                number += 1
                if len(cells) != len(header):
                    raise where.error(None, f"{len(cells)} fields where the header names "
                                      f"{len(header)} columns")
                yield Row(where, dict(zip(header, cells, strict=True)))
        except csv.Error as exc:
            raise PromptFileError(f"{data.path}:{reader.line_num}: not valid "
                                  f"{data.kind.upper()}: {exc}") from None


# --- Parquet and Arrow (pyarrow) ---------------------------------------------------

def pyarrow_module(path: Path) -> ModuleType:
    try:
        import pyarrow
    except ImportError:
        raise PromptFileError(f"{path}: reading Parquet and Arrow needs pyarrow: "
                              f"{DATA_EXTRA}") from None
    module: ModuleType = pyarrow
    return module


class _Batch(Protocol):
    """What is read of a pyarrow RecordBatch or Table."""

    num_rows: int

    def to_pylist(self) -> list[object]: ...

    def take(self, indices: list[int]) -> _Batch: ...


class _Schema(Protocol):
    names: list[str]


class _Metadata(Protocol):
    num_rows: int


class _ParquetFile(Protocol):
    num_row_groups: int
    metadata: _Metadata
    schema_arrow: _Schema

    def read_row_group(self, group: int) -> _Batch: ...


class _ArrowReader(Protocol):
    schema: _Schema

    def __iter__(self) -> Iterator[_Batch]: ...


def _parquet(data: DataFile, file: Path) -> _ParquetFile:
    pa = pyarrow_module(data.path)
    import pyarrow.parquet as pq

    try:
        opened: _ParquetFile = pq.ParquetFile(_mapped(pa, file))
    except (OSError, pa.ArrowException) as exc:
        raise PromptFileError(f"{file}: not a readable Parquet file: {exc}") from None
    return opened


def _arrow(data: DataFile, file: Path) -> _ArrowReader:
    """An Arrow IPC stream (what save_to_disk writes) or IPC file, memory-mapped."""
    pa = pyarrow_module(data.path)
    try:
        try:
            opened: _ArrowReader = pa.ipc.open_stream(_mapped(pa, file))
        except pa.ArrowInvalid:
            opened = pa.ipc.open_file(_mapped(pa, file))
    except (OSError, pa.ArrowException) as exc:
        raise PromptFileError(f"{file}: not a readable Arrow file: {exc}") from None
    return opened


def _mapped(pa: ModuleType, file: Path) -> object:
    """The file memory-mapped through a descriptor checked to be a regular file (pyarrow
    opening the path itself would wait on a FIFO)."""
    with _opened(file) as stream:
        if os.fstat(stream.fileno()).st_size == 0:
            raise PromptFileError(f"{file}: empty, not a {file.suffix[1:]} file")
        mapped = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    return pa.BufferReader(pa.py_buffer(mapped))


def _schema_names(data: DataFile) -> list[str]:
    schema = _parquet(data, data.files[0]).schema_arrow if data.kind == "parquet" \
        else _arrow(data, data.files[0]).schema
    return [str(name) for name in schema.names]


def _batches(data: DataFile, file: Path) -> Iterator[_Batch]:
    """The record batches (Parquet: row groups) of one file, one at a time."""
    pa = pyarrow_module(data.path)
    try:
        if data.kind == "parquet":
            opened = _parquet(data, file)
            for group in range(opened.num_row_groups):
                yield opened.read_row_group(group)
        else:
            yield from _arrow(data, file)
    except (OSError, pa.ArrowException) as exc:
        raise PromptFileError(f"{file}: not a readable {data.kind} file: {exc}") from None


def _file_counts(data: DataFile) -> Iterator[tuple[Path, int]]:
    for file in data.files:
        if data.kind == "parquet":
            yield file, _parquet(data, file).metadata.num_rows
        else:
            yield file, sum(batch.num_rows for batch in _batches(data, file))


def _columnar_rows(data: DataFile, sample: int | None, seed: int) -> Iterator[Row]:
    """Rows batch by batch; a sample by row numbers drawn first (a count from metadata),
    so only the batches holding them are turned into Python values."""
    wanted: list[int] | None = None
    if sample is not None:
        total = sum(count for _, count in _file_counts(data))
        wanted = sorted(random.Random(seed).sample(range(total), min(sample, total)))
    offset = 0  # rows before this batch, over every file
    for file in data.files:
        first = offset  # the file's own row numbers start here
        for batch in _batches(data, file):
            size = batch.num_rows
            if wanted is None:
                picked = list(range(size))
                values = batch.to_pylist()
            else:
                picked = [n - offset for n in wanted[bisect.bisect_left(wanted, offset):
                                                     bisect.bisect_left(wanted, offset + size)]]
                values = batch.take(picked).to_pylist() if picked else []
            for local, value in zip(picked, values, strict=True):
                yield Row(Where(file, row=offset + local - first + 1), value)
            offset += size
