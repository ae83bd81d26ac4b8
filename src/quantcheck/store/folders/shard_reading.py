"""A shard read as hostile input (`quantcheck merge`): only regular files inside the
shard are opened (no link, device or pipe: a `completions.jsonl` linked to /dev/zero is
refused, never read), every line and token blob has a size limit, every prompt and
record must belong to the shard's slice and its manifest, a token reference must point
at a blob inside the shard's own `tokens.bin`, and every problem is one ShardError
naming the shard file and line."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import msgspec
import orjson

from ..records.run_records import Prompt
from .run_dir import COMPLETIONS, MANIFEST, PROMPTS, Run, read_manifest
from .shards import ShardError, in_shard, parse_shard
from .token_columns import TOKENS_FILE

# A line or blob beyond this is not one quantcheck wrote: collect refuses answers above
# --max-response-mb (256 MiB by default), and a record or blob holds about one answer.
SIZE_LIMIT = 1 << 30
MANIFEST_LIMIT = 256 << 20
BLOB_MAGIC = b"\x28\xb5\x2f\xfd"  # a zstandard frame: every blob of tokens.bin is one


def own_file(path: Path, limit: int | None = None) -> bool:
    """Whether a shard's file is there; a ShardError when it is not a regular file of
    the shard's own (or larger than `limit`)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ShardError(f"cannot read {path}: {exc.strerror or exc}") from None
    _check_regular(path, info)
    if limit is not None and info.st_size > limit:
        raise ShardError(f"{path} holds {info.st_size:,} bytes, more than a shard's "
                         f"{path.name} ever does ({limit >> 20} MiB)")
    return True


def _check_regular(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
        raise ShardError(f"{path} is {kind}; merge reads a shard's own files only")


class ShardFile:
    """One regular file of a shard, opened without following a link; its size as
    opened bounds every read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise ShardError(f"cannot read {path}: {exc.strerror or exc} (merge reads a "
                             "shard's own regular files only)") from None
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            os.close(descriptor)
            _check_regular(path, info)
        self.size = info.st_size
        self._handle = os.fdopen(descriptor, "rb")

    def __enter__(self) -> ShardFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """(line number, line) for each whole line; a torn last line (a collector
        killed while writing it) is left out, as reading a run does."""
        number, left = 0, self.size
        while left > 0:
            number += 1
            line = self._read(self._handle.readline, min(left, SIZE_LIMIT + 1))
            left -= len(line)
            if len(line) > SIZE_LIMIT:
                raise ShardError(f"{self.path}:{number}: a line of more than "
                                 f"{SIZE_LIMIT >> 20} MiB is not one quantcheck wrote")
            if not line.endswith(b"\n"):
                return
            yield number, line

    def blob(self, offset: int, length: int, where: str) -> bytes:
        """`length` bytes at `offset`, which must lie inside the file as opened and be
        the start of a token blob; `where` names the record asking."""
        if length > SIZE_LIMIT or offset + length > self.size:
            raise ShardError(f"{where}: its tokens (offset {offset:,}, length {length:,}) "
                             f"lie outside {self.path} ({self.size:,} bytes)")
        blob = self._read(os.pread, self._handle.fileno(), length, offset)
        if len(blob) != length or not blob.startswith(BLOB_MAGIC):
            raise ShardError(f"{where}: offset {offset:,} of {self.path} is not the start "
                             "of a token blob")
        return blob

    def _read(self, read: Callable[..., bytes], *arguments: int) -> bytes:
        try:
            return read(*arguments)
        except OSError as exc:
            raise ShardError(f"cannot read {self.path}: {exc.strerror or exc}") from None


@dataclass
class Shard:
    """A shard run as read for merging: shard `index` of `count`."""

    run: Run
    index: int
    count: int

    @property
    def name(self) -> str:
        return f"{self.index}/{self.count}"


# --- a shard's manifest and prompts ----------------------------------------------------

def read_shard(path: Path) -> Shard:
    """A shard's manifest and prompts; every prompt must be in the shard's slice and
    its manifest's."""
    if not path.is_dir():
        raise ShardError(f"{path}: not a directory")
    if not own_file(path / MANIFEST, MANIFEST_LIMIT):
        raise ShardError(f"{path / MANIFEST}: missing (is {path} a run directory?)")
    manifest = read_manifest(path)
    if not manifest.parameters.shard:
        raise ShardError(f"{path} is not a shard (collect with --shard I/N)")
    try:
        index, count = parse_shard(manifest.parameters.shard)
    except ShardError as exc:
        raise ShardError(f"{path / MANIFEST}: {exc}") from None
    shard = Shard(Run(path=path, manifest=manifest), index, count)
    for prompt_id in manifest.prompt_hashes:
        if not in_shard(prompt_id, index, count):
            raise ShardError(f"{path / MANIFEST}: prompt {prompt_id!r} is not in shard "
                             f"{shard.name}")
    shard.run.prompts = _shard_prompts(shard)
    return shard


def _shard_prompts(shard: Shard) -> dict[str, Prompt]:
    path = shard.run.path / PROMPTS
    prompts: dict[str, Prompt] = {}
    if not own_file(path):
        return prompts
    with ShardFile(path) as file:
        for number, line in file.lines():
            where = f"{path}:{number}"
            prompt = _prompt(line, where)
            if prompt.id in prompts:
                raise ShardError(f"{where}: prompt {prompt.id!r} is listed twice")
            if shard.run.manifest.prompt_hashes.get(prompt.id) != prompt.hash:
                raise ShardError(f"{where}: prompt {prompt.id!r} is not in the shard's "
                                 f"{MANIFEST} with that hash")
            prompts[prompt.id] = prompt
    return prompts


def _prompt(line: bytes, where: str) -> Prompt:
    try:
        prompt = Prompt.from_json(orjson.loads(line))
    except orjson.JSONDecodeError as exc:
        raise ShardError(f"{where}: not valid JSON ({exc})") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ShardError(f"{where}: malformed prompt ({exc})") from None
    if not all(isinstance(value, str) for value in (prompt.id, prompt.hash, prompt.source)):
        raise ShardError(f"{where}: malformed prompt (id, hash and source are strings)")
    return prompt


# --- copying a shard's records ----------------------------------------------------------

class _RecordKey(msgspec.Struct):
    """The fields of a record merge checks (the rest is copied as it is)."""

    prompt_id: str
    repeat: Annotated[int, msgspec.Meta(ge=0)]
    prompt_hash: str | None = None
    tokens: dict[str, object] | None = None


class _TokenReference(msgspec.Struct):
    file: str
    offset: Annotated[int, msgspec.Meta(ge=0)]
    length: Annotated[int, msgspec.Meta(ge=1)]
    n_tokens: Annotated[int, msgspec.Meta(ge=0)]


def shard_records(shard: Shard) -> Iterator[tuple[str, dict[str, object], bytes | None]]:
    """A shard's records, each checked to belong to it: where it is (file:line), the
    record and its token blob."""
    path = shard.run.path
    if not own_file(path / COMPLETIONS):
        return
    with ExitStack() as files:
        lines = files.enter_context(ShardFile(path / COMPLETIONS))
        blobs = files.enter_context(ShardFile(path / TOKENS_FILE)) \
            if own_file(path / TOKENS_FILE) else None
        for number, line in lines.lines():
            where = f"{lines.path}:{number}"
            data = _record(shard, line, where)
            yield where, data, _blob(data.get("tokens"), blobs, where)


def _record(shard: Shard, line: bytes, where: str) -> dict[str, object]:
    try:
        data: dict[str, object] = orjson.loads(line)  # an object once converted below
        key = msgspec.convert(data, _RecordKey)
    except orjson.JSONDecodeError as exc:
        raise ShardError(f"{where}: not valid JSON ({exc})") from None
    except msgspec.ValidationError as exc:
        raise ShardError(f"{where}: not a record ({exc})") from None
    prompt = shard.run.prompts.get(key.prompt_id)
    if not in_shard(key.prompt_id, shard.index, shard.count):
        raise ShardError(f"{where}: a record for prompt {key.prompt_id!r}, which is not in "
                         f"shard {shard.name}")
    if prompt is None:
        raise ShardError(f"{where}: a record for prompt {key.prompt_id!r}, which the "
                         f"shard's {PROMPTS} does not list")
    if key.prompt_hash is not None and key.prompt_hash != prompt.hash:
        raise ShardError(f"{where}: a record of another version of prompt "
                         f"{key.prompt_id!r} (hash {key.prompt_hash}, not {prompt.hash})")
    repeats = shard.run.manifest.parameters.repeats
    if key.repeat >= repeats:
        raise ShardError(f"{where}: repeat {key.repeat} of a run of {repeats} repeats")
    return data


def _blob(reference: object, blobs: ShardFile | None, where: str) -> bytes | None:
    """The record's token blob from its shard's tokens.bin, or None (no tokens, or the
    arrays inline, as older runs wrote them)."""
    if not isinstance(reference, dict) or "file" not in reference:
        return None
    try:
        tokens = msgspec.convert(reference, _TokenReference)
    except msgspec.ValidationError as exc:
        raise ShardError(f"{where}: a malformed token reference ({exc})") from None
    if tokens.file != TOKENS_FILE:
        raise ShardError(f"{where}: its tokens name {tokens.file!r}; a shard's tokens are "
                         f"in its own {TOKENS_FILE}")
    if blobs is None:
        raise ShardError(f"{where}: its tokens are in {TOKENS_FILE}, which the shard lacks")
    return blobs.blob(tokens.offset, tokens.length, where)
