"""One side of a comparison: a run directory or a plain `*.texts.json` list, indexed.

A run is read once, line by line, into one small row per request (hashes, counts,
timings and the byte offset of its line, about 95 bytes in numpy columns: prompt ids,
hashes and finish reasons as categories, digests as 64-bit integers); texts and token
arrays are not kept but re-read by offset for the few records a pair needs. At
100,000 prompts x 2 repeats a side's index is about 30 MB, its ids and hashes included.
"""

from __future__ import annotations

import hashlib
import math
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson
import pandas as pd

from .checks import Fingerprint, Preflight
from .errors import RunFormatError
from .parallel import ordered_map
from .records import Prompt, Tokens
from .runstore import (
    COMPLETIONS,
    PROMPTS,
    Blobs,
    CompletionLine,
    Manifest,
    PromptLines,
    decode_line,
    read_json,
    read_manifest,
)

# `text` is filled for a texts file only: a run's texts are read by `offset` (text_of).
# text_hash and signature are 64-bit digests: only compared within a prompt's records.
INDEX_COLUMNS = ["prompt_id", "prompt_hash", "repeat", "text", "tool_calls", "text_hash",
                 "signature", "n_tokens", "finish_reason", "error", "ttft_s", "e2e_s", "offset"]
CATEGORY_COLUMNS = ("prompt_id", "prompt_hash", "finish_reason")
DIGEST_COLUMNS = ("text_hash", "signature")
INTEGER_COLUMNS = ("repeat", "offset")
FLOAT_COLUMNS = ("n_tokens", "ttft_s", "e2e_s")
OBJECT_COLUMNS = ("text", "tool_calls", "error")
BLOCK_RECORDS = 20_000  # records read before their signatures are computed


@dataclass
class Side:
    """Everything triage needs from one side, without the token arrays."""

    label: str
    prompts: Mapping[str, Prompt]  # a run's: PromptLines, each parsed when asked
    index: pd.DataFrame
    manifest: Manifest | None = None  # None for a texts file
    completions_path: Path | None = None
    text_only: bool = False
    _lines: IO[bytes] | None = field(default=None, repr=False)
    _blobs: Blobs | None = field(default=None, repr=False)
    # the record read last: a pair reads one record's text, tokens and routing in turn
    _last_line: tuple[int, CompletionLine] | None = field(default=None, repr=False)
    _last_tokens: tuple[int, Tokens | None] | None = field(default=None, repr=False)
    _getters: dict[str, Any] | None = field(default=None, repr=False)

    def groups(self) -> Groups:
        """The index's rows by prompt id."""
        codes = self.index["prompt_id"].cat.codes.to_numpy()
        ids = self.index["prompt_id"].cat.categories
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(ids) + 1))
        return Groups(ids, order, bounds)

    def records(self, rows: np.ndarray | None) -> list[dict[str, Any]] | None:
        """Index rows as plain records (None for None)."""
        if rows is None:
            return None
        columns = self._columns()
        return [{name: get(int(row)) for name, get in columns.items()} for row in rows]

    def _columns(self) -> dict[str, Any]:
        if self._getters is None:
            self._getters = {name: _getter(self.index[name]) for name in INDEX_COLUMNS}
        return self._getters

    @property
    def preflight(self) -> Preflight | None:
        return self.manifest.preflight if self.manifest else None

    @property
    def fingerprint(self) -> Fingerprint | None:
        return self.preflight.tokenizer if self.preflight else None

    @property
    def run_dir(self) -> Path | None:
        return self.completions_path.parent if self.completions_path else None

    @property
    def repeat_mode(self) -> str:
        """The --repeat-mode that made the repeats ("" for a texts file)."""
        return self.manifest.parameters.repeat_mode if self.manifest else ""

    def tokens_at(self, offset: int) -> Tokens | None:
        """The token arrays of the record whose line starts at `offset` (the run's files
        stay open across calls until `close`)."""
        if self._last_tokens is not None and self._last_tokens[0] == offset:
            return self._last_tokens[1]
        line = self._line_at(offset)
        if line is None:
            return None
        assert self._blobs is not None
        tokens = self._blobs.tokens(line.tokens)
        self._last_tokens = (offset, tokens)
        return tokens

    def text_of(self, record: dict[str, Any]) -> str:
        """An index record's text: a run's index holds none (read from its line, so
        that the index stays small), a texts file's holds it."""
        if isinstance(record["text"], str):
            return record["text"]
        line = self._line_at(int(record["offset"]))
        return line.text or "" if line is not None else ""

    def _line_at(self, offset: int) -> CompletionLine | None:
        if self.completions_path is None or offset < 0:
            return None
        if self._last_line is not None and self._last_line[0] == offset:
            return self._last_line[1]
        if self._lines is None:
            self._lines = self.completions_path.open("rb")
            self._blobs = Blobs(self.completions_path.parent)
        self._lines.seek(offset)
        line = decode_line(self._lines.readline())
        if line is None:
            raise RunFormatError(f"{self.completions_path}: changed while it was read "
                                 f"(no record at byte {offset}); compare again")
        self._last_line = (offset, line)
        return line

    @property
    def routed(self) -> bool:
        """Whether the run asked for MoE routing (`--routed-experts`)."""
        return bool(self.manifest and self.manifest.parameters.routed_experts)

    def routing_of(self, records: list[dict[str, Any]]) -> dict[int, np.ndarray]:
        """The routings of these index records by repeat, in repeat order (those that
        have one)."""
        found = {}
        for record in sorted(records, key=lambda r: r["repeat"]):
            tokens = self.tokens_at(int(record["offset"]))
            if tokens is not None and tokens.routing is not None:
                found[int(record["repeat"])] = tokens.routing
        return found

    def close(self) -> None:
        self._last_line = self._last_tokens = None
        if self._lines is not None:
            self._lines.close()
            self._lines = None
        if self._blobs is not None:
            self._blobs.close()
            self._blobs = None

    def __enter__(self) -> Side:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Groups:
    """A side's index rows by prompt: prompt k's rows are order[bounds[k]:bounds[k+1]]."""

    ids: pd.Index
    order: np.ndarray
    bounds: np.ndarray

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def get(self, prompt_id: str) -> np.ndarray | None:
        try:
            k = int(self.ids.get_loc(prompt_id))  # type: ignore[arg-type]
        except KeyError:
            return None
        return self.order[self.bounds[k]:self.bounds[k + 1]]


def _getter(column: pd.Series) -> Any:
    """Row number -> the plain Python value (None for a missing one)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes, names = column.cat.codes.to_numpy(), column.cat.categories.to_numpy(object)
        return lambda row: names[codes[row]] if codes[row] >= 0 else None
    if isinstance(column.dtype, pd.Int64Dtype):
        values, missing = column.to_numpy("int64", na_value=0), column.isna().to_numpy()
        return lambda row: None if missing[row] else int(values[row])
    values = column.to_numpy()
    if values.dtype.kind in "if":
        return lambda row: values[row].item()
    return values.__getitem__


def signature(reference: dict[str, Any] | None, blobs: Blobs, digits: int) -> str | None:
    """Digest of the token sequence and every position's top-k, logprobs rounded
    (the same for inline arrays and tokens.bin blobs of the same content)."""
    return blobs.packed(reference).signature(digits) if reference else None


def text_hash(text: str | None, tool_calls: str | None = None) -> str | None:
    """Digest of an answer: its text, and its tool calls when it made any."""
    if text is None:
        return None
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12)
    if tool_calls:
        digest.update(b"\0" + tool_calls.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def calls_json(calls: list[dict[str, Any]] | None) -> str | None:
    """An answer's tool calls as pairs.csv shows them: a JSON list of {name, arguments}
    (the arguments string as sent), or None without calls."""
    if not calls:
        return None
    return orjson.dumps([{"name": c.get("name"), "arguments": c.get("arguments")}
                         for c in calls]).decode()


def load_side(source: str | Path, sig_digits: int = 12,
              prompts: Mapping[str, Prompt] | None = None, jobs: int = 1) -> Side:
    """A run directory, or a JSON list of texts in prompt order (then `prompts` names them).
    The signatures (a decompression and a digest per record) take `jobs` processes."""
    path = Path(source)
    if path.is_file() and path.suffix == ".json":
        return _texts_side(path, prompts)
    if not path.is_dir():
        raise RunFormatError(f"{path}: not a directory")
    manifest = read_manifest(path)
    manifest.prompt_hashes = {}  # compare never reads it: 20 MB at 100,000 prompts
    prompts = PromptLines(path / PROMPTS)
    completions = path / COMPLETIONS
    index = _IndexBuilder()
    block: list[list[Any]] = []
    rows = _index_rows(completions) if completions.exists() else iter(())
    for row in rows:
        block.append(row)
        if len(block) == BLOCK_RECORDS:
            index.add(_with_signatures(block, path, sig_digits, jobs))
            block = []
    index.add(_with_signatures(block, path, sig_digits, jobs))
    frame = index.frame()
    _refuse_duplicates(frame, completions)
    return Side(label=manifest.label or path.name, prompts=prompts, manifest=manifest,
                index=frame, completions_path=completions)


def _with_signatures(rows: list[list[Any]], run_dir: Path, digits: int, jobs: int
                     ) -> list[list[Any]]:
    column = INDEX_COLUMNS.index("signature")
    signatures = ordered_map(partial(_signatures, run_dir, digits),
                             [row[column] for row in rows], jobs)
    for row, found in zip(rows, signatures, strict=True):
        row[column] = found
    return rows


class _IndexBuilder:
    """The index's columns, grown block by block (no row objects are kept)."""

    def __init__(self) -> None:
        self.names: dict[str, dict[Any, int]] = {c: {} for c in CATEGORY_COLUMNS}
        self.codes = {c: array("i") for c in CATEGORY_COLUMNS}
        self.digests = {c: array("q") for c in DIGEST_COLUMNS}
        self.integers = {c: array("q") for c in INTEGER_COLUMNS}
        self.floats = {c: array("d") for c in FLOAT_COLUMNS}
        self.objects: dict[str, list[Any]] = {c: [] for c in OBJECT_COLUMNS}

    def add(self, rows: list[list[Any]]) -> None:
        where = {name: n for n, name in enumerate(INDEX_COLUMNS)}
        for row in rows:
            for name, codes in self.codes.items():
                value = row[where[name]]
                codes.append(-1 if value is None else
                             self.names[name].setdefault(value, len(self.names[name])))
            for name, digests in self.digests.items():
                digests.append(_digest64(row[where[name]]))
            for name, numbers in self.integers.items():
                numbers.append(row[where[name]])
            for name, floats in self.floats.items():
                value = row[where[name]]
                floats.append(math.nan if value is None else value)
            for name, values in self.objects.items():
                values.append(row[where[name]])

    def frame(self) -> pd.DataFrame:
        columns: dict[str, Any] = {}
        for name, codes in self.codes.items():
            columns[name] = pd.Categorical.from_codes(
                np.frombuffer(codes, np.int32), categories=pd.Index(list(self.names[name]),
                                                                    dtype=object))
        for name, digests in self.digests.items():
            hashes = np.frombuffer(digests, np.int64)
            columns[name] = pd.arrays.IntegerArray(hashes.copy(), hashes == MISSING_DIGEST)
        for name, numbers in self.integers.items():
            columns[name] = np.frombuffer(numbers, np.int64).copy()
        for name, floats in self.floats.items():
            columns[name] = np.frombuffer(floats, np.float64).copy()
        for name, objects in self.objects.items():
            columns[name] = pd.Series(objects, dtype=object)
        return pd.DataFrame(columns)[INDEX_COLUMNS]


MISSING_DIGEST = -(2**63)


def _digest64(digest: str | None) -> int:
    """A hex digest as a signed 64-bit integer (MISSING_DIGEST for None)."""
    if digest is None:
        return MISSING_DIGEST
    value = int(digest[:16], 16)
    signed = value - 2**64 if value >= 2**63 else value
    return signed if signed != MISSING_DIGEST else signed + 1


def _refuse_duplicates(index: pd.DataFrame, path: Path) -> None:
    """A request recorded twice (two collectors at once, before runs were locked) would
    be counted as an extra repeat: refused, with the way out."""
    ok = index.loc[index["error"].isna(), ["prompt_id", "repeat"]]
    twice = ok[ok.duplicated()]
    if len(twice):
        prompt_id, repeat = twice.iloc[0]
        raise RunFormatError(
            f"{path}: {len(twice):,} requests are recorded more than once (e.g. "
            f"{prompt_id!r} repeat {repeat}), as when two collectors write one run; "
            "resume the collection (rerun the same collect command) to keep one of each")


def _signatures(run_dir: Path, digits: int, references: Sequence[dict[str, Any] | None]
                ) -> list[str | None]:
    with Blobs(run_dir) as blobs:
        return [signature(reference, blobs, digits) for reference in references]


def _index_rows(path: Path) -> Iterator[list[Any]]:
    """The index's rows, each with the record's token reference where its signature
    goes (load_side computes them)."""
    offset = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            start, offset = offset, offset + len(raw)
            if not raw.endswith(b"\n"):
                return  # torn by a kill: a resume collects it again
            line = decode_line(raw)
            if line is None:
                raise RunFormatError(f"{path}:{number}: not a completion record")
            calls = calls_json(line.tool_calls)
            yield [line.prompt_id, line.prompt_hash, line.repeat, None, calls,
                   text_hash(line.text, calls), line.tokens,
                   line.n_tokens, line.finish_reason, line.error, line.ttft_s, line.e2e_s,
                   start]


def _texts_side(path: Path, prompts: Mapping[str, Prompt] | None) -> Side:
    texts = read_json(path)
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise RunFormatError(f"{path}: a texts file must be a JSON list of strings")
    ids = list(prompts) if prompts else [str(n) for n in range(len(texts))]
    if len(ids) != len(texts):
        raise RunFormatError(f"{path}: {len(texts)} texts for {len(ids)} prompts; a texts "
                             "file lists one text per prompt, in prompt order")
    index = _IndexBuilder()
    index.add([[prompt_id, None, 0, text, None, text_hash(text), None, None, None, None, None,
                None, -1] for prompt_id, text in zip(ids, texts, strict=True)])
    label = path.name.removesuffix(".json").removesuffix(".texts")
    return Side(label=label, prompts=prompts or {}, text_only=True, index=index.frame())
