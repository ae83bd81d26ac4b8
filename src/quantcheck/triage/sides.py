"""One side of a comparison: a run directory or a plain `*.texts.json` list, indexed.

A run is read once, line by line. Held per request: its prompt's key (store.folders.run_dir.
prompt_key, the id as a 64-bit digest), the byte offset of its line and the digest of
its token signature, 24 bytes in numpy columns sorted by prompt; at 100,000 prompts x 2
repeats, 4.8 MB a side. Everything else of a record (text, hashes, finish reason,
timings) is read again from its line when a pair needs it, and the side's request
counts and timings are summed while the run is read (Side.performance).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from array import array
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO

import numpy as np
import orjson

from ..errors import RunFormatError
from ..store.folders.run_dir import (
    COMPLETIONS,
    MAX_LINE_BYTES,
    PROMPTS,
    Blobs,
    CompletionLine,
    Manifest,
    PromptLines,
    decode_line,
    first_seen,
    open_run_file,
    prompt_key,
    read_json,
    read_manifest,
    run_lines,
    shared_key,
)
from ..store.records.preflight_records import Fingerprint, Preflight
from ..store.records.report_records import SideBackends, SidePerformance
from ..store.records.run_records import Prompt, Tokens
from .backends import BackendKey, BackendTally
from .parallel import ordered_map
from .routing import problem as routing_problem

BLOCK_RECORDS = 20_000  # records read before their signatures are computed
MISSING_DIGEST = -(2**63)


@dataclass
class Index:
    """A side's requests sorted by prompt key (a prompt's requests in file order): the
    key, the offset of the line (a texts file: the text's position) and the signature
    digest of each; and the keys in the order the prompts first appear."""

    keys: np.ndarray
    offsets: np.ndarray
    signatures: np.ndarray
    order: np.ndarray

    def rows(self, key: int) -> range:
        """The rows of a prompt's requests (empty when it has none)."""
        return range(int(np.searchsorted(self.keys, key, "left")),
                     int(np.searchsorted(self.keys, key, "right")))


@dataclass(frozen=True, slots=True)
class SideRecord:
    """One request of a side as its pair reads it back: its completions.jsonl line (for
    a texts file, a line made of the text), where that line starts (-1 in a texts file),
    the digest of its token signature (None without tokens), and its answer's tool
    calls as pairs.csv shows them and its digest."""

    line: CompletionLine
    offset: int
    signature: int | None
    tool_calls: str | None
    text_hash: str | None

    @property
    def prompt_id(self) -> str:
        return self.line.prompt_id

    @property
    def prompt_hash(self) -> str | None:
        return self.line.prompt_hash

    @property
    def repeat(self) -> int:
        return self.line.repeat

    @property
    def text(self) -> str:
        return self.line.text or ""

    @property
    def n_tokens(self) -> int | None:
        return self.line.n_tokens

    @property
    def finish_reason(self) -> str | None:
        return self.line.finish_reason

    @property
    def error(self) -> str | None:
        return self.line.error


@dataclass
class Side:
    """Everything triage needs from one side, without the texts and token arrays."""

    label: str
    prompts: Mapping[str, Prompt]  # a run's: PromptLines, each parsed when asked
    index: Index
    performance: SidePerformance  # counted while the run was read
    manifest: Manifest | None = None  # None for a texts file
    completions_path: Path | None = None
    text_only: bool = False
    unanswered: int = 0  # requests of the run without a successful record
    backends: SideBackends | None = None  # who answered (a run's records say; None: texts)
    texts: list[str] | None = None  # a texts file's, and the ids it names them by
    text_ids: list[str] | None = None
    _lines: IO[bytes] | None = field(default=None, repr=False)
    _blobs: Blobs | None = field(default=None, repr=False)
    # the lines of the prompt read last: a pair reads its records' texts, tokens and
    # routing in turn
    _read: dict[int, CompletionLine] = field(default_factory=dict, repr=False)
    # the record's tokens read last: its line's offset, its tokens, their blob as stored
    _last_tokens: tuple[int, Tokens | None, bytes | None] | None = field(default=None,
                                                                          repr=False)
    _prompt_keys: dict[int, Prompt] | None = field(default=None, repr=False)

    def prompt_keys(self) -> np.ndarray:
        """The keys of the side's prompt set, in its order."""
        if isinstance(self.prompts, PromptLines):
            return self.prompts.keys_in_order()
        return np.fromiter((prompt_key(i) for i in self.prompts), np.int64, len(self.prompts))

    def prompt_by_key(self, key: int) -> Prompt | None:
        if isinstance(self.prompts, PromptLines):
            return self.prompts.by_key(key)
        if self._prompt_keys is None:
            self._prompt_keys = {prompt_key(i): p for i, p in self.prompts.items()}
        return self._prompt_keys.get(key)

    def records(self, prompt_id: str, key: int | None = None) -> list[SideRecord] | None:
        """A prompt's requests, in file order (None without any)."""
        rows = self.index.rows(prompt_key(prompt_id) if key is None else key)
        if not rows:
            return None
        self._read = {}
        records = [self._record(row) for row in rows]
        for record in records:
            if record.prompt_id != prompt_id:
                raise shared_key(self.completions_path, prompt_id, record.prompt_id)
        return records

    def record_id(self, row: int) -> str:
        """The prompt id of the request in this row."""
        if self.text_ids is not None:
            return self.text_ids[int(self.index.offsets[row])]
        line = self._line_at(int(self.index.offsets[row]))
        assert line is not None
        return line.prompt_id

    def _record(self, row: int) -> SideRecord:
        offset = int(self.index.offsets[row])
        signature = int(self.index.signatures[row])
        if self.texts is not None and self.text_ids is not None:
            text = self.texts[offset]
            return SideRecord(CompletionLine(prompt_id=self.text_ids[offset], repeat=0,
                                             text=text), -1, None, None, text_hash(text))
        line = self._line_at(offset)
        assert line is not None
        self._read[offset] = line
        calls = calls_json(line.tool_calls)
        return SideRecord(line, offset, None if signature == MISSING_DIGEST else signature,
                          calls, text_hash(line.text, calls))

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

    def tokens_at(self, offset: int, other: Side | None = None) -> Tokens | None:
        """The token arrays of the record whose line starts at `offset` (the run's files
        stay open across calls until `close`); those `other` read last when its blob is
        stored as the same bytes (the two answers of an identical pair are unpacked
        once: a tenth of `compare` where most pairs are identical)."""
        if self._last_tokens is not None and self._last_tokens[0] == offset:
            return self._last_tokens[1]
        line = self._line_at(offset)
        if line is None:
            return None
        assert self._blobs is not None
        blob = self._blobs.blob(line.tokens)
        known = other._last_tokens if other is not None else None
        if blob is not None and known is not None and known[2] == blob:
            tokens = known[1]
        else:
            tokens = self._blobs.tokens(line.tokens, blob)
        self._last_tokens = (offset, tokens, blob)
        return tokens

    def _line_at(self, offset: int) -> CompletionLine | None:
        if self.completions_path is None or offset < 0:
            return None
        if offset in self._read:
            return self._read[offset]
        if self._lines is None:
            self._lines = open_run_file(self.completions_path)
            self._blobs = Blobs(self.completions_path.parent)
        self._lines.seek(offset)
        line = decode_line(self._lines.readline(MAX_LINE_BYTES + 1))
        if line is None:
            raise RunFormatError(f"{self.completions_path}: changed while it was read "
                                 f"(no record at byte {offset}); compare again")
        return line

    @property
    def routed(self) -> bool:
        """Whether the run asked for MoE routing (`--routed-experts`)."""
        return bool(self.manifest and self.manifest.parameters.routed_experts)

    def routing_of(self, records: list[SideRecord]) -> dict[int, np.ndarray]:
        """The routings of these records by repeat, in repeat order (those that have
        one that can be right)."""
        found = {}
        for record in sorted(records, key=lambda r: r.repeat):
            tokens = self.tokens_at(record.offset)
            if tokens is not None and tokens.routing is not None \
                    and routing_problem(tokens.routing, len(tokens)) is None:
                found[record.repeat] = tokens.routing
        return found

    def first_error(self, prompt_ids: list[str]) -> str | None:
        """The most common error of these prompts' failed requests ("(after N attempts)"
        left out), or None when none failed (they were never sent)."""
        errors: Counter[str] = Counter()
        for prompt_id in prompt_ids:
            for record in self.records(prompt_id) or ():
                if record.error is not None:
                    errors[_ATTEMPTS.sub("", record.error)] += 1
        return errors.most_common(1)[0][0] if errors else None

    def close(self) -> None:
        self._read, self._last_tokens = {}, None
        if isinstance(self.prompts, PromptLines):
            self.prompts.close()
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


_ATTEMPTS = re.compile(r" \(after \d+ attempts\)$")


def prompt_id_of(a: Side, b: Side, key: int) -> str | None:
    """The id of the prompt under this key (run_dir.prompt_key): from either side's
    prompt set, else from its records (a prompt outside the sets); None: neither has it."""
    prompt = a.prompt_by_key(key) or b.prompt_by_key(key)
    if prompt is not None:
        return prompt.id
    for side in (a, b):
        rows = side.index.rows(key)
        if rows:
            return side.record_id(rows[0])
    return None


def signature(reference: Mapping[str, object] | None, blobs: Blobs, digits: int) -> str | None:
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


def calls_json(calls: Sequence[Mapping[str, object]] | None) -> str | None:
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
    prompt_lines = PromptLines(path / PROMPTS)
    completions = path / COMPLETIONS
    requests = _Requests()
    block: list[_Row] = []
    for row in _index_rows(completions) if os.path.lexists(completions) else ():
        block.append(row)
        if len(block) == BLOCK_RECORDS:
            requests.add(block, _signatures_of(block, path, sig_digits, jobs))
            block = []
    requests.add(block, _signatures_of(block, path, sig_digits, jobs))
    side = Side(label=manifest.label or path.name, prompts=prompt_lines, manifest=manifest,
                index=requests.index(), performance=requests.performance(),
                completions_path=completions)
    _refuse_duplicates(side, requests)
    side.unanswered = requests.unanswered(prompt_lines, manifest.parameters.repeats)
    side.backends = requests.backends(side)
    return side


# A completions.jsonl line as the index reads it: its prompt's key, its offset, its
# token reference (for the signature), what the side's request counts need, and the
# replica and backend that answered it.
_Row = tuple[int, int, Mapping[str, object] | None, bool, int, float, float, float,
             str | None, BackendKey]


def _signatures_of(rows: list[_Row], run_dir: Path, digits: int, jobs: int) -> list[int]:
    return ordered_map(partial(_signatures, run_dir, digits), [row[2] for row in rows], jobs)


def _signatures(run_dir: Path, digits: int, references: Sequence[Mapping[str, object] | None]
                ) -> list[int]:
    """Each record's signature. Repeats that agree hold the same blob byte for byte
    (`pack` makes one blob of one content): a blob met before gets its signature again
    instead of being unpacked and digested again (half of `compare`'s reading, at two
    repeats that agree)."""
    known: dict[bytes, int] = {}  # a blob's SHA-1 -> its signature
    with Blobs(run_dir) as blobs:
        return [_blob_signature(reference, blobs, digits, known) for reference in references]


def _blob_signature(reference: Mapping[str, object] | None, blobs: Blobs, digits: int,
                    known: dict[bytes, int]) -> int:
    blob = blobs.blob(reference)
    if blob is None or reference is None:  # no tokens, or inline arrays
        return _digest64(signature(reference, blobs, digits))
    key = hashlib.sha1(blob, usedforsecurity=False).digest()
    if key not in known:
        known[key] = _digest64(blobs.packed(reference, blob).signature(digits))
    return known[key]


class _Requests:
    """A run's requests as they are read, in columns: the index's, and those the
    side's counts need (these are dropped once counted)."""

    def __init__(self) -> None:
        self.keys, self.offsets, self.signatures = array("q"), array("q"), array("q")
        self.ok, self.repeats = array("b"), array("q")
        self.tokens, self.ttft, self.e2e = array("d"), array("d"), array("d")
        self.tally = BackendTally()

    def add(self, rows: list[_Row], signatures: list[int]) -> None:
        for (key, offset, _, ok, repeat, tokens, ttft, e2e, replica, backend), found in zip(
                rows, signatures, strict=True):
            self.tally.add(ok, replica, backend)
            self.keys.append(key)
            self.offsets.append(offset)
            self.signatures.append(found)
            self.ok.append(ok)
            self.repeats.append(repeat)
            self.tokens.append(tokens)
            self.ttft.append(ttft)
            self.e2e.append(e2e)

    def column(self, name: str) -> np.ndarray:
        values = getattr(self, name)
        dtype = {"b": np.bool_, "q": np.int64, "d": np.float64}[values.typecode]
        return np.frombuffer(values, dtype) if len(values) else np.zeros(0, dtype)

    def index(self) -> Index:
        keys = self.column("keys")
        by_key = np.argsort(keys, kind="stable")
        return Index(keys=keys[by_key], offsets=self.column("offsets")[by_key],
                     signatures=self.column("signatures")[by_key], order=keys[first_seen(keys)])

    def performance(self) -> SidePerformance:
        ok = self.column("ok")
        tokens, ttft, e2e = (self.column(name)[ok] for name in ("tokens", "ttft", "e2e"))
        timed = ~np.isnan(e2e)
        counted = ~np.isnan(tokens)
        seconds = float(e2e[timed].sum())
        # in Python floats: a hostile run's subnormal latencies make the rate inf, not a
        # numpy overflow warning; an infinite rate is no rate
        rate = float(np.nansum(tokens[timed])) / seconds if timed.any() and seconds > 0 else None
        return SidePerformance(
            requests=len(ok), failed=int((~ok).sum()),
            output_tokens=int(tokens[counted].sum()) if counted.any() else None,
            ttft_p50_s=_percentile(ttft[~np.isnan(ttft)], 50),
            e2e_p50_s=_percentile(e2e[timed], 50), e2e_p99_s=_percentile(e2e[timed], 99),
            output_tokens_per_s=rate if rate is not None and math.isfinite(rate) else None)

    def backends(self, side: Side) -> SideBackends:
        """Who answered the side (triage/backends.py)."""
        offsets = self.column("offsets")

        def prompt_id(row: int) -> str:
            line = side._line_at(int(offsets[row]))
            return line.prompt_id if line is not None else ""

        return self.tally.side(side.manifest, self.column("keys"), self.column("ok"),
                               self.column("signatures"), MISSING_DIGEST, prompt_id)

    def answered(self) -> tuple[np.ndarray, np.ndarray]:
        """The successful requests' keys and repeats."""
        ok = self.column("ok")
        return self.column("keys")[ok], self.column("repeats")[ok]

    def unanswered(self, prompts: PromptLines, repeats: int) -> int:
        """Requests of the prompt set without a successful record: failed after
        retries, or never sent (an interrupted run)."""
        keys, numbers = self.answered()
        asked = np.isin(keys, prompts.keys_in_order()) & (numbers < repeats)
        keys, numbers, _ = _by_key_and_repeat(keys[asked], numbers[asked])
        distinct = int(((keys[1:] != keys[:-1]) | (numbers[1:] != numbers[:-1])).sum())
        return len(prompts) * repeats - (distinct + 1 if len(keys) else 0)


def _by_key_and_repeat(keys: np.ndarray, repeats: np.ndarray) -> tuple[np.ndarray, ...]:
    order = np.lexsort((repeats, keys))
    return keys[order], repeats[order], order


def _percentile(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _digest64(digest: str | None) -> int:
    """A hex digest as a signed 64-bit integer (MISSING_DIGEST for None)."""
    if digest is None:
        return MISSING_DIGEST
    value = int(digest[:16], 16)
    signed = value - 2**64 if value >= 2**63 else value
    return signed if signed != MISSING_DIGEST else signed + 1


def _refuse_duplicates(side: Side, requests: _Requests) -> None:
    """A request recorded twice (two collectors at once, before runs were locked) would
    be counted as an extra repeat: refused, with the way out."""
    keys, repeats, order = _by_key_and_repeat(*requests.answered())
    twice = np.flatnonzero((keys[1:] == keys[:-1]) & (repeats[1:] == repeats[:-1]))
    if len(twice):
        offsets = requests.column("offsets")[requests.column("ok")]
        at = int(np.argmin(order[twice + 1]))  # the first in the file
        line, earlier = (side._line_at(int(offsets[order[twice[at] + n]])) for n in (1, 0))
        side.close()
        assert line is not None and earlier is not None
        if line.prompt_id != earlier.prompt_id:
            raise shared_key(side.completions_path, earlier.prompt_id, line.prompt_id)
        raise RunFormatError(
            f"{side.completions_path}: {len(twice):,} requests are recorded more than once "
            f"(e.g. {line.prompt_id!r} repeat {line.repeat}), as when two collectors write "
            "one run; resume the collection (rerun the same collect command) to keep one "
            "of each")


def _index_rows(path: Path) -> Iterator[_Row]:
    """The index's rows, each with the record's token reference (load_side computes
    the signatures)."""
    offset = 0
    with open_run_file(path) as handle:
        for number, raw in run_lines(handle, path):
            start, offset = offset, offset + len(raw)
            if not raw.endswith(b"\n"):
                return  # torn by a kill: a resume collects it again
            line = decode_line(raw)
            if line is None:
                raise RunFormatError(f"{path}:{number}: not a completion record")
            yield (prompt_key(line.prompt_id), start, line.tokens, line.error is None,
                   line.repeat, _number(line.n_tokens), _number(line.ttft_s),
                   _number(line.e2e_s), line.replica,
                   (line.model, line.system_fingerprint, line.weight_version))


def _number(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _texts_side(path: Path, prompts: Mapping[str, Prompt] | None) -> Side:
    texts = read_json(path)
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise RunFormatError(f"{path}: a texts file must be a JSON list of strings")
    ids = list(prompts) if prompts else [str(n) for n in range(len(texts))]
    if len(ids) != len(texts):
        raise RunFormatError(f"{path}: {len(texts)} texts for {len(ids)} prompts; a texts "
                             "file lists one text per prompt, in prompt order")
    requests = _Requests()
    requests.add([(prompt_key(i), n, None, True, 0, math.nan, math.nan, math.nan, None,
                   (None, None, None)) for n, i in enumerate(ids)], [MISSING_DIGEST] * len(ids))
    label = path.name.removesuffix(".json").removesuffix(".texts")
    return Side(label=label, prompts=prompts or {}, text_only=True, index=requests.index(),
                performance=requests.performance(), texts=texts, text_ids=ids)
