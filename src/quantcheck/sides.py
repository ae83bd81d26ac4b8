"""One side of a comparison: a run directory or a plain `*.texts.json` list, indexed.

A run is read once, line by line, into one small row per request (text, hashes,
counts, timings and the byte offset of its line); token arrays are not kept but
re-read by offset for the few records a pair needs. That keeps memory bounded at
10,000 prompts x 6 repeats x 256 tokens x top-20.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
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
    Blobs,
    CompletionLine,
    Manifest,
    decode_line,
    load_run,
    read_json,
)

# `text` is filled for a texts file only: a run's texts are read by `offset` (text_of).
INDEX_COLUMNS = ["prompt_id", "prompt_hash", "repeat", "text", "tool_calls", "text_hash",
                 "signature", "n_tokens", "finish_reason", "error", "ttft_s", "e2e_s", "offset"]


@dataclass
class Side:
    """Everything triage needs from one side, without the token arrays."""

    label: str
    prompts: dict[str, Prompt]
    index: pd.DataFrame
    manifest: Manifest | None = None  # None for a texts file
    completions_path: Path | None = None
    text_only: bool = False
    _lines: IO[bytes] | None = field(default=None, repr=False)
    _blobs: Blobs | None = field(default=None, repr=False)
    # the record read last: a pair reads one record's text, tokens and routing in turn
    _last_line: tuple[int, CompletionLine] | None = field(default=None, repr=False)
    _last_tokens: tuple[int, Tokens | None] | None = field(default=None, repr=False)

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
              prompts: dict[str, Prompt] | None = None, jobs: int = 1) -> Side:
    """A run directory, or a JSON list of texts in prompt order (then `prompts` names them).
    The signatures (a decompression and a digest per record) take `jobs` processes."""
    path = Path(source)
    if path.is_file() and path.suffix == ".json":
        return _texts_side(path, prompts)
    run = load_run(path)
    completions = run.path / COMPLETIONS
    rows = list(_index_rows(completions)) if completions.exists() else []
    column = INDEX_COLUMNS.index("signature")
    signatures = ordered_map(partial(_signatures, run.path, sig_digits),
                             [row[column] for row in rows], jobs)
    for row, found in zip(rows, signatures, strict=True):
        row[column] = found
    _refuse_duplicates(rows, completions)
    return Side(label=run.label, prompts=run.prompts, manifest=run.manifest,
                index=pd.DataFrame(rows, columns=INDEX_COLUMNS), completions_path=completions)


def _refuse_duplicates(rows: list[list[Any]], path: Path) -> None:
    """A request recorded twice (two collectors at once, before runs were locked) would
    be counted as an extra repeat: refused, with the way out."""
    seen: set[tuple[str, int]] = set()
    twice: list[tuple[str, int]] = []
    for row in rows:
        if row[INDEX_COLUMNS.index("error")] is None:  # a successful record
            key = (row[0], row[2])
            if key in seen:
                twice.append(key)
            seen.add(key)
    if twice:
        prompt_id, repeat = twice[0]
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


def _texts_side(path: Path, prompts: dict[str, Prompt] | None) -> Side:
    texts = read_json(path)
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise RunFormatError(f"{path}: a texts file must be a JSON list of strings")
    ids = list(prompts) if prompts else [str(n) for n in range(len(texts))]
    if len(ids) != len(texts):
        raise RunFormatError(f"{path}: {len(texts)} texts for {len(ids)} prompts; a texts "
                             "file lists one text per prompt, in prompt order")
    rows = [[prompt_id, None, 0, text, None, text_hash(text), None, None, None, None, None, None,
             -1]
            for prompt_id, text in zip(ids, texts, strict=True)]
    label = path.name.removesuffix(".json").removesuffix(".texts")
    return Side(label=label, prompts=dict(prompts or {}), text_only=True,
                index=pd.DataFrame(rows, columns=INDEX_COLUMNS))
