"""The run directory: manifest.json, prompts.jsonl, completions.jsonl, tokens.bin, and
throughput.json after a throughput phase.

completions.jsonl is appended one flushed line per finished request, so a killed
process loses at most the requests in flight; a resume drops failed and half-written
lines and collects those requests again, so no (prompt_id, repeat) ever appears twice.
A line's token arrays live in tokens.bin (see token_columns.py), written before the line:
a line never points at a blob that is not there; a blob without a line is ignored.

Every file of a run or report directory is read as a regular file only (files.
open_regular): one that is a link to a device such as /dev/zero, a FIFO or a folder is
refused naming it (exit 2), before a byte is read; a JSON file is read whole within
`MAX_JSON_BYTES` (`MAX_SMALL_JSON_BYTES` for reviews and approvals), a JSON lines file
one line at a time, each within `MAX_LINE_BYTES` (`run_lines`: a longer line is one
error naming the file and the line, read no further). A record whose line would be
longer is not written: it fails (RecordNotStorable), and the run stays readable.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import time
import weakref
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO, TypedDict, TypeVar, cast

import msgspec
import numpy as np
import orjson
import zstandard

from ...errors import QuantcheckError, RunFormatError
from ..evals.eval_records import EvalSource
from ..files import (
    DirectoryLock,
    UnreadableFile,
    append,
    bounded_lines,
    make_directory,
    open_append,
    open_regular,
    read_regular,
    storage_error,
    write_atomic,
)
from ..inputs.prompt_sets import RequestOptions
from ..records.formats import MANIFEST_FORMAT, THROUGHPUT_FORMAT, ManifestFormat, ThroughputFormat
from ..records.preflight_records import Preflight
from ..records.run_records import (
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_MAX_RESPONSE_MB,
    Completion,
    Prompt,
    PromptJson,
    Tokens,
    TokensJson,
)
from .folder_kinds import COMPLETIONS as COMPLETIONS  # their names, re-exported
from .folder_kinds import MANIFEST as MANIFEST
from .folder_kinds import PROMPTS as PROMPTS
from .folder_kinds import RUN, claim
from .token_columns import TOKENS_FILE, PackedTokens, pack, packed_from_tokens, unpack

if TYPE_CHECKING:  # pandas is imported by Run.frame alone: reading records never loads it
    import pandas as pd

RecordT = TypeVar("RecordT", bound=msgspec.Struct)
THROUGHPUT = "throughput.json"
MAX_JSON_BYTES = 1 << 30  # a manifest names each prompt's hash: 10 MB at 100,000 prompts
MAX_SMALL_JSON_BYTES = 64 << 20  # a review or an approvals file
# A line of a JSON lines file of a run or report: a record holds an answer's text, which
# is at most the answer (256 MiB unless --max-response-mb raises the cap).
MAX_LINE_BYTES = DEFAULT_MAX_RESPONSE_MB << 20

FRAME_COLUMNS = ["prompt_id", "prompt_hash", "repeat", "text", "reasoning", "finish_reason",
                 "n_tokens", "prompt_tokens", "completion_tokens", "ttft_s", "e2e_s", "error"]


class Parameters(msgspec.Struct, kw_only=True):
    """Everything that decides what is requested from an endpoint, and how: the
    manifest's `parameters` (collect's settings add the endpoint, label and cell)."""

    model: str | None = None
    repeats: int = 1
    top_logprobs: int = 20
    stream: bool = True
    concurrency: int = 8
    timeout: float = 600.0
    retries: int = 4
    api_key_env: str | None = None
    request: RequestOptions = msgspec.field(default_factory=RequestOptions)
    repeat_mode: str = "pool"
    preflight: bool = True
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    max_response_mb: int = DEFAULT_MAX_RESPONSE_MB
    shard: str | None = None  # "I/N": this run holds shard I of N of the prompt set
    routed_experts: bool = False  # ask for MoE routing (forces non-streamed requests)
    routed_experts_shape: list[int] | None = None  # [layers, k] of a flat (SGLang) routing
    # Every request sent with the engine's prefix cache off, where its profile can do it
    # per request (llama.cpp: `cache_prompt: false`): a repeat then cannot find its
    # prompt cached and be computed otherwise than the first request. `determinism`
    # measures the server as it serves, cache included (False).
    cache_off: bool = True


class ServerInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a server told about itself: its `/v1/models` entries, and the answers of the
    runtimes' info endpoints (vLLM's `/version`, SGLang's `/get_server_info`, llama.cpp's
    `/props`; any other engine's under `answers`, by path) as they were sent, whatever
    their shape; `runtime` and `runtime_version` are what quantcheck read from them
    ("unknown" and null when they do not say)."""

    models: list[dict[str, object]] = []
    version: object = None
    server_info: object = None
    props: object = None
    answers: dict[str, object] = {}
    runtime: str = "unknown"
    runtime_version: str | None = None


CellValue = str | int | float | bool | None
Cell = dict[str, CellValue]  # a serving cell: axis -> what is known of it (triage/cells.py)


class PromptFile(msgspec.Struct):
    path: str
    sha256: str


class CacheControl(msgspec.Struct, kw_only=True):
    """How a run's requests met the engine's prefix cache: `off` when no request could
    reuse a cached prefix, and `how` in words ("llama.cpp: cache_prompt false in every
    request", "left on: SGLang cannot turn its prefix cache off per request")."""

    off: bool
    how: str


class Replica(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One URL of a side served by several (manifest.json's `replication.replicas`): its
    public URL, what it said of itself when it was checked against the first (its
    runtime and version, its serving cell's key, and the `model`, `system_fingerprint`
    and `weight_version` its answer to a one-token probe named), and, when it stopped
    answering in the middle of the pass, why (its requests went to the others)."""

    endpoint: str
    runtime: str | None = None
    runtime_version: str | None = None
    cell_key: str | None = None
    model: str | None = None
    system_fingerprint: str | None = None
    weight_version: str | None = None
    dropped: str | None = None


class Replication(msgspec.Struct, kw_only=True):
    """How a side's requests were spread over several URLs that serve one configuration
    (manifest.json's `replication`; null for a side of one URL): `spread` is `prompt`
    (a prompt's repeats on one replica) or `repeat` (a prompt's repeats on different
    replicas), `replicas` each URL as it was checked, `checked` what was compared
    between them before any prompt was sent, and `not_checked` what could not be, and
    why."""

    spread: str = "prompt"
    replicas: list[Replica] = []
    checked: list[str] = []
    not_checked: list[str] = []


class RunCounts(msgspec.Struct):
    requests: int
    ok: int
    failed: int


class Manifest(msgspec.Struct, kw_only=True):
    """manifest.json: which endpoint, model, settings and prompts made the run, and how
    its last pass ended."""

    format: ManifestFormat = MANIFEST_FORMAT
    quantcheck_version: str = ""
    label: str = ""
    endpoint: str = ""
    model: str = ""
    parameters: Parameters = msgspec.field(default_factory=Parameters)
    prompt_files: list[PromptFile] = []
    prompt_hashes: dict[str, str] = {}
    started_at: str = ""
    finished_at: str | None = None
    status: str = "running"
    stop_reason: str | None = None
    server: ServerInfo = msgspec.field(default_factory=ServerInfo)
    cell: Cell = {}
    cell_key: str | None = None
    preflight: Preflight | None = None
    counts: RunCounts | None = None
    cache: CacheControl | None = None  # None: a run made before it was recorded, or imported
    evaluation: EvalSource | None = None  # a run imported from an eval harness's log
    replication: Replication | None = None  # a side served by several URLs

    def served_by(self) -> list[str]:
        """The public URLs the run's requests went to: its replicas, or its endpoint."""
        if self.replication is not None and self.replication.replicas:
            return [replica.endpoint for replica in self.replication.replicas]
        return [self.endpoint]

    def identity(self) -> dict[str, object]:
        """What must match for a resume: not concurrency, timeouts, retries, repeats or
        label. MoE routing is in it when asked for (a run without routing has the
        identity it always had)."""
        parameters = self.parameters
        identity: dict[str, object] = {
            "endpoint": self.endpoint, "model": self.model,
            "top_logprobs": parameters.top_logprobs, "stream": parameters.stream,
            "repeat_mode": parameters.repeat_mode, "prompt_hashes": self.prompt_hashes}
        if parameters.routed_experts:
            identity["routed_experts"] = True
        if parameters.routed_experts_shape is not None:
            identity["routed_experts_shape"] = parameters.routed_experts_shape
        if not parameters.cache_off:
            identity["cache_off"] = False
        return identity


class CompletionLine(msgspec.Struct, kw_only=True):
    """The fields of a completions.jsonl line that indexes and resumes read (decoded
    without the rest; `Completion` is the whole record)."""

    prompt_id: str
    prompt_hash: str | None = None
    repeat: int
    text: str | None = None
    reasoning: str | None = None
    tokens: dict[str, object] | None = None  # a TokenBlob, or inline arrays (TokensJson)
    finish_reason: str | None = None
    usage: dict[str, object] | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    error: str | None = None
    tool_calls: list[dict[str, object]] | None = None  # ToolCall.to_json
    routing_unusable: str | None = None  # why a routing that came could not be right
    scores: dict[str, float] | None = None  # an imported eval log's scores (Completion)
    answer: str | None = None
    # what names the backend that answered (compare counts the backends of a side)
    model: str | None = None
    system_fingerprint: str | None = None
    weight_version: str | None = None
    replica: str | None = None  # the replica that answered, on a side with several

    @property
    def n_tokens(self) -> int | None:
        if self.tokens:
            return token_count(self.tokens)
        tokens = (self.usage or {}).get("completion_tokens")
        return tokens if isinstance(tokens, int) else None


_LINE = msgspec.json.Decoder(CompletionLine)


def decode_line(line: bytes) -> CompletionLine | None:
    """A completions.jsonl line, or None when it is torn or not a record."""
    if not line.endswith(b"\n"):
        return None
    try:
        return _LINE.decode(line)
    except msgspec.MsgspecError:
        return None


class Throughput(msgspec.Struct, kw_only=True):
    """RUN_DIR/throughput.json: one endpoint's throughput, measured without logprobs
    after collection (a warm-up, then the prompt set cycled at a fixed concurrency)."""

    format: ThroughputFormat = THROUGHPUT_FORMAT
    label: str
    endpoint: str
    model: str
    concurrency: int
    requests: int
    seconds: float  # the measured window, after the warm-up
    output_tokens: int | None = None  # None when the server reports no usage
    tokens_per_s: float | None = None
    ttft_p50_s: float | None = None
    e2e_p99_s: float | None = None
    prompt_tokens: dict[str, int] | None = None  # each prompt's first answer, in tokens
    retried: int = 0  # requests sent again (a dropped connection, a 503)
    error: str | None = None  # why it was not measured (then the figures are empty)


def read_throughput(run_dir: Path) -> Throughput | None:
    path = run_dir / THROUGHPUT
    if not path.exists():
        return None
    return read_record(path, Throughput)


def write_throughput(run_dir: Path, throughput: Throughput) -> None:
    """RUN_DIR/throughput.json, beside a run (or in a folder of its own)."""
    claim(run_dir, RUN)
    make_directory(run_dir)
    write_json_atomic(run_dir / THROUGHPUT, msgspec.to_builtins(throughput))


def read_manifest(run_dir: Path) -> Manifest:
    return read_record(run_dir / MANIFEST, Manifest)


def write_manifest(run_dir: Path, manifest: Manifest) -> None:
    write_json_atomic(run_dir / MANIFEST, msgspec.to_builtins(manifest))


def write_json_atomic(path: Path, data: object, within: Path | None = None) -> None:
    write_atomic(path, orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS),
                 within)


def open_run_file(path: Path) -> BinaryIO:
    """A file of a run or report directory opened for reading, a regular file only; one
    that is missing, not a regular file or unreadable is a RunFormatError naming it."""
    try:
        return open_regular(path)
    except UnreadableFile as exc:
        if not os.path.lexists(path):
            raise RunFormatError(f"{path}: missing") from None
        raise RunFormatError(str(exc)) from None


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> Any:
    """A JSON file of a run or report directory (or a user's JSON file beside one),
    read whole: a regular file of at most `limit` bytes, or a RunFormatError naming it."""
    try:
        data = read_regular(path, limit)
    except UnreadableFile as exc:
        if not os.path.lexists(path):
            raise RunFormatError(f"{path}: missing") from None
        raise RunFormatError(str(exc)) from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise RunFormatError(f"{path}: not valid JSON ({exc})") from None


def read_record(path: Path, kind: type[RecordT], hint: str = "") -> RecordT:
    """A JSON file as its typed record; one that does not fit it is a RunFormatError
    naming the file (and `hint`, what to do)."""
    try:
        return msgspec.convert(read_json(path), kind)
    except msgspec.ValidationError as exc:
        raise RunFormatError(f"{path}: {exc}{hint}") from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each complete line; a torn last line is skipped."""
    for number, _, data in jsonl_lines(path):
        yield number, data


def run_lines(handle: BinaryIO, path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a run or report file opened by open_run_file, each of at
    most MAX_LINE_BYTES; a longer line is a RunFormatError naming the file and the line."""
    try:
        yield from bounded_lines(handle, path, MAX_LINE_BYTES, "run or report file")
    except UnreadableFile as exc:
        raise RunFormatError(str(exc)) from None


def jsonl_lines(path: Path) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(line number, the line's length in bytes, object), as iter_jsonl reads them; a
    file that is missing or cannot be read is a RunFormatError naming it."""
    try:
        with open_run_file(path) as handle:
            for number, line in run_lines(handle, path):
                if not line.endswith(b"\n"):
                    return  # written while the process was killed
                try:
                    yield number, len(line), orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    raise RunFormatError(f"{path}:{number}: not valid JSON ({exc})") from None
    except OSError as exc:  # a read that fails midway (an I/O error)
        raise RunFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None


class RecordNotStorable(QuantcheckError):
    """A record holds a value JSON lines cannot keep (an integer beyond 64 bits, nesting
    deeper than 254 levels): the record, not the run, is what fails."""


class RunWriter:
    """Appends completion records to a run directory: the token blob, then the line.

    Unbuffered: each record reaches the file in one write call or raises StorageError
    at once (a full disk leaves at most one torn last line, which a resume drops)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._lines: int | None = None
        self._blobs: int | None = None

    def open(self) -> None:
        self._lines = open_append(self.run_dir / COMPLETIONS)
        self._blobs = open_append(self.run_dir / TOKENS_FILE)

    def append(self, record: Completion) -> None:
        data = record.to_json()
        blob = None
        if record.tokens is not None:
            blob = pack(record.tokens)
            data["tokens"] = {"file": TOKENS_FILE, "length": len(blob),
                              "n_tokens": len(record.tokens)}
        self.append_line(data, blob)

    def append_line(self, data: Mapping[str, object], blob: bytes | None) -> None:
        """A record's line, its token blob first (at the end of tokens.bin: the line's
        `tokens` gets that offset). merge copies other runs' blobs as they are."""
        assert self._lines is not None and self._blobs is not None
        if blob is not None:
            reference = data["tokens"]
            assert isinstance(reference, dict)  # a blob comes with its reference
            data = {**data, "tokens": {**reference,
                                       "offset": os.fstat(self._blobs).st_size}}
        try:  # before the blob: a record that cannot be written leaves nothing behind
            line = orjson.dumps(data) + b"\n"
        except orjson.JSONEncodeError as exc:
            raise RecordNotStorable(str(exc)) from None
        if len(line) > MAX_LINE_BYTES:
            raise RecordNotStorable(f"its line would be {len(line):,} bytes, more than the "
                                    f"{MAX_LINE_BYTES >> 20} MiB a run's line holds")
        if blob is not None:
            append(self._blobs, blob, self.run_dir / TOKENS_FILE)
        append(self._lines, line, self.run_dir / COMPLETIONS)

    def close(self) -> None:
        for descriptor in (self._lines, self._blobs):
            if descriptor is not None:
                os.close(descriptor)
        self._lines = self._blobs = None


def lock_run(run_dir: Path) -> DirectoryLock:
    """The run directory for this process alone while it collects (`RUN_DIR/.lock`)."""
    make_directory(run_dir)
    return DirectoryLock(run_dir, "collecting into it")


class TokenBlob(TypedDict):
    """A record's `tokens` when its arrays are in tokens.bin: where its blob starts, how
    long it is, and how many tokens it holds."""

    file: str
    offset: int
    length: int
    n_tokens: int


def token_count(reference: Mapping[str, object] | None) -> int | None:
    """How many tokens a record's `tokens` holds; None when it does not say (a malformed
    reference is refused when its blob is read)."""
    if not reference:
        return None
    counted = reference.get("n_tokens") if "file" in reference else reference.get("text")
    if isinstance(counted, list):
        return len(counted)
    return int(counted) if isinstance(counted, int | float) else None


class Blobs:
    """Reads the token arrays records point at, keeping tokens.bin open across records.

    A record's `tokens` is either inline arrays (older runs) or a reference into
    tokens.bin; both are read here.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._handles: dict[str, IO[bytes]] = {}

    def __enter__(self) -> Blobs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()

    def tokens(self, reference: Mapping[str, object] | None, blob: bytes | None = None
               ) -> Tokens | None:
        """A record's token arrays; `blob`: its blob, when `blob()` read it already."""
        if not reference:
            return None
        if "file" not in reference:
            return Tokens.from_json(cast("TokensJson", reference))
        packed = self.packed(reference, blob)
        try:
            return packed.to_tokens()
        except (ValueError, IndexError, TypeError, KeyError) as exc:
            raise self._not_a_blob(cast("TokenBlob", reference), exc) from None

    def packed(self, reference: Mapping[str, object], blob: bytes | None = None
               ) -> PackedTokens:
        """A record's token columns; `blob`: its blob, when `blob()` read it already."""
        if "file" not in reference:
            return packed_from_tokens(Tokens.from_json(cast("TokensJson", reference)))
        if blob is None:
            blob = self._read(cast("TokenBlob", reference))
        try:
            return unpack(blob)
        except (zstandard.ZstdError, struct.error, ValueError, IndexError, TypeError,
                KeyError) as exc:  # orjson's error is a ValueError
            raise self._not_a_blob(cast("TokenBlob", reference), exc) from None

    def _not_a_blob(self, reference: TokenBlob, exc: Exception) -> RunFormatError:
        return RunFormatError(f"{self.run_dir / TOKENS_FILE}: the blob at offset "
                              f"{reference.get('offset')} is not token arrays quantcheck "
                              f"wrote ({type(exc).__name__}: {exc})")

    def blob(self, reference: Mapping[str, object] | None) -> bytes | None:
        """A record's compressed token blob as stored, or None (no tokens, or inline)."""
        if not reference or "file" not in reference:
            return None
        return self._read(cast("TokenBlob", reference))

    def _read(self, reference: TokenBlob) -> bytes:
        name, offset, length = (reference.get(key) for key in ("file", "offset", "length"))
        if name != TOKENS_FILE or not all(isinstance(n, int) and not isinstance(n, bool)
                                          and n >= 0 for n in (offset, length)):
            # a run's tokens are in its own tokens.bin: never a file outside the run
            raise RunFormatError(f"{self.run_dir / COMPLETIONS}: a token reference "
                                 f"{reference!r} that does not point into {TOKENS_FILE}")
        path = self.run_dir / name
        try:
            if name not in self._handles:
                self._handles[name] = open_run_file(path)
            handle = self._handles[name]
            size = os.fstat(handle.fileno()).st_size
            if reference["offset"] + reference["length"] > size:  # never read past its end
                raise RunFormatError(f"{path}: truncated: a record's tokens lie at offset "
                                     f"{reference['offset']:,}, length "
                                     f"{reference['length']:,}, beyond its {size:,} bytes")
            handle.seek(reference["offset"])
            blob: bytes = handle.read(reference["length"])
        except RunFormatError:
            if os.path.lexists(path):
                raise
            raise RunFormatError(f"{path}: missing (the run's token arrays; copy it with "
                                 f"{COMPLETIONS})") from None
        except OSError as exc:
            raise RunFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if len(blob) != reference["length"]:
            raise RunFormatError(f"{path}: truncated at offset {reference['offset']}")
        return blob


def completed_keys(run_dir: Path) -> set[tuple[str, int]]:
    """Keys of successful records; rewrites the file without failed or torn lines."""
    path = run_dir / COMPLETIONS
    if not path.exists():
        return set()
    keep: list[bytes] = []
    keys: set[tuple[str, int]] = set()
    dropped = False
    with open_run_file(path) as handle:
        for _, line in run_lines(handle, path):
            record = decode_line(line)
            key = (record.prompt_id, record.repeat) if record else None
            if record is None or key is None or record.error or key in keys:
                dropped = True
                continue
            keys.add(key)
            keep.append(line)
    if dropped:
        write_atomic(path, b"".join(keep))
    return keys


def set_aside(run_dir: Path) -> Path:
    """Move a previous run's files into a dated subfolder (used by --force): nothing lost."""
    target = run_dir / f"superseded-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        target.mkdir()
        for name in (MANIFEST, PROMPTS, COMPLETIONS, TOKENS_FILE):
            if (run_dir / name).exists():
                shutil.move(str(run_dir / name), str(target / name))
    except OSError as exc:
        raise storage_error(target, exc) from None
    return target


def write_jsonl_atomic(path: Path, rows: Sequence[object], within: Path | None = None
                       ) -> None:
    write_atomic(path, b"".join(orjson.dumps(row) + b"\n" for row in rows), within)


def write_prompts(run_dir: Path, prompts: list[Prompt]) -> None:
    write_jsonl_atomic(run_dir / PROMPTS, [p.to_json() for p in prompts])


@dataclass
class Run:
    """A collected run directory, read lazily."""

    path: Path
    manifest: Manifest
    prompts: dict[str, Prompt] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.manifest.label or self.path.name

    @property
    def status(self) -> str:
        """The manifest's status; `running` only while a collector holds the lock
        (a process that died, or could not write its last manifest, was interrupted)."""
        status = self.manifest.status
        if status == "running" and not DirectoryLock.held(self.path):
            return "interrupted"
        return status

    def completions(self) -> Iterator[Completion]:
        path = self.path / COMPLETIONS
        if not path.exists():
            return
        with Blobs(self.path) as blobs:
            for _, data in iter_jsonl(path):
                record = Completion.from_json({**data, "tokens": None})
                record.tokens = blobs.tokens(data.get("tokens"))
                yield record

    def frame(self) -> pd.DataFrame:
        """One row per request, without the token arrays (see FRAME_COLUMNS)."""
        import pandas as pd

        rows = []
        for line in self.lines():
            usage = line.usage or {}
            rows.append([line.prompt_id, line.prompt_hash, line.repeat, line.text,
                         line.reasoning, line.finish_reason, token_count(line.tokens),
                         usage.get("prompt_tokens"), usage.get("completion_tokens"),
                         line.ttft_s, line.e2e_s, line.error])
        return pd.DataFrame(rows, columns=FRAME_COLUMNS)

    def lines(self) -> Iterator[CompletionLine]:
        """Every complete record line (a torn last line is skipped)."""
        path = self.path / COMPLETIONS
        for number, data in iter_jsonl(path) if path.exists() else ():
            try:
                yield msgspec.convert(data, CompletionLine)
            except msgspec.ValidationError as exc:
                raise RunFormatError(f"{path}:{number}: {exc}") from None


def load_run(run_dir: str | Path) -> Run:
    """Open a run directory written by `quantcheck collect`."""
    path = Path(run_dir)
    if not path.is_dir():
        raise RunFormatError(f"{path}: not a directory")
    manifest = read_manifest(path)
    prompts: dict[str, Prompt] = {}
    if (path / PROMPTS).exists():
        for number, data in iter_jsonl(path / PROMPTS):
            prompt = _prompt(data, path / PROMPTS, number)
            prompts[prompt.id] = prompt
    return Run(path=path, manifest=manifest, prompts=prompts)


def _prompt(data: object, path: Path, number: int) -> Prompt:
    try:  # read as a PromptJson: whatever is malformed fails here
        return Prompt.from_json(cast("PromptJson", data))
    except (KeyError, TypeError, AttributeError) as exc:
        raise RunFormatError(f"{path}:{number}: malformed prompt ({exc})") from None


def prompt_key(prompt_id: str) -> int:
    """A prompt id as a signed 64-bit integer (blake2b): what compare holds of an id.
    Two ids of one run that share a key are refused where they meet (PromptLines,
    Side.records), never merged."""
    digest = hashlib.blake2b(prompt_id.encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "little", signed=True)


def first_seen(keys: np.ndarray) -> np.ndarray:
    """Where each distinct key first appears, in order."""
    return np.sort(np.unique(keys, return_index=True)[1])


def shared_key(path: Path | None, one: str, other: str) -> RunFormatError:
    """Two prompt ids of one run with one key: refused, never merged."""
    return RunFormatError(f"{path}: prompt ids {one!r} and {other!r} share a 64-bit key; "
                          "rename one of them")


class PromptLines(Mapping[str, Prompt]):
    """A run's prompts.jsonl by id, each prompt parsed when asked. Held: each line's
    prompt key and offset, and the keys sorted, 32 bytes a prompt where the ids alone
    took 120 and the parsed prompt set 740 (at 100,000 prompts: 74 MB). Every line is
    checked when it is opened; an id written twice reads as its last line (as load_run
    keeps it), in the place of its first. The file stays open from the first prompt
    asked until `close` (opening it for every prompt took a tenth of `compare`); its
    lines are read at their offsets, so processes forked meanwhile share it safely."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: BinaryIO | None = None
        self._closing: Callable[[], object] | None = None
        keys, lengths, code = array("q"), array("q"), array("b")
        for number, length, data in jsonl_lines(path) if path.exists() else ():
            prompt = _prompt(data, path, number)
            keys.append(prompt_key(prompt.id))
            lengths.append(length)
            code.append(bool(prompt.expect and prompt.expect.code))
        self._keys = np.frombuffer(keys, np.int64).copy()  # by line
        self._ends = np.cumsum(np.frombuffer(lengths, np.int64), dtype=np.int64)
        # the last line of each key, sorted by key: a stable sort keeps a key's lines in
        # file order, so the last of a run of equal keys is its last line
        by_key = np.argsort(self._keys, kind="stable")
        sorted_keys = self._keys[by_key]
        last = np.append(sorted_keys[1:] != sorted_keys[:-1], True)[:len(sorted_keys)]
        self._sorted, self._line_of = sorted_keys[last], by_key[last]
        first = first_seen(self._keys)
        self._first_lines = None if len(first) == len(self._keys) else first
        # whether a prompt (each id's last line) asks for its code to be run
        self.code_checked = bool(np.frombuffer(code, np.int8)[self._line_of].any())
        self._check_keys(by_key, sorted_keys)

    def _check_keys(self, by_key: np.ndarray, sorted_keys: np.ndarray) -> None:
        """Lines that share a key hold one id (the same id twice), or are refused."""
        repeated = np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1])
        for at in repeated:
            one, other = (self._line(int(by_key[n])).id for n in (at, at + 1))
            if one != other:
                raise shared_key(self.path, one, other)

    def _line(self, number: int) -> Prompt:
        start, end = int(self._ends[number - 1]) if number else 0, int(self._ends[number])
        if self._handle is None:
            self._handle = open_run_file(self.path)
            self._closing = weakref.finalize(self, self._handle.close)
        try:
            line = os.pread(self._handle.fileno(), end - start, start)
        except OSError as exc:
            raise RunFormatError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        try:
            return _prompt(orjson.loads(line), self.path, number + 1)
        except orjson.JSONDecodeError:
            raise RunFormatError(f"{self.path}:{number + 1}: changed while it was read; "
                                 "compare again") from None

    def close(self) -> None:
        """The file closed (a prompt asked later opens it again)."""
        if self._closing is not None:
            self._closing()
        self._handle = self._closing = None

    def by_key(self, key: int) -> Prompt | None:
        """The prompt whose id has this key, or None."""
        at = int(np.searchsorted(self._sorted, key))
        if at == len(self._sorted) or self._sorted[at] != key:
            return None
        return self._line(int(self._line_of[at]))

    def keys_in_order(self) -> np.ndarray:
        """The ids' keys in the order the ids first appear."""
        return self._keys if self._first_lines is None else self._keys[self._first_lines]

    def __getitem__(self, prompt_id: str) -> Prompt:
        prompt = self.by_key(prompt_key(prompt_id))
        if prompt is None or prompt.id != prompt_id:
            raise KeyError(prompt_id)
        return prompt

    def __iter__(self) -> Iterator[str]:
        lines = range(len(self._keys)) if self._first_lines is None else self._first_lines
        for number in lines:
            yield self._line(int(self._line_of[np.searchsorted(
                self._sorted, self._keys[number])])).id

    def __len__(self) -> int:
        return len(self._sorted)

    def __contains__(self, prompt_id: object) -> bool:
        return isinstance(prompt_id, str) and self.get(prompt_id) is not None

