"""An Inspect AI log's two forms, entry by entry: the `.eval` zip archive (each entry
read when asked, stored, deflate or Zstandard: zip method 93, which Python's zipfile
does not read before 3.14) and the `.json` log read whole. An entry may inflate to no
more than the size the archive's directory states, nor past MAX_LINE_BYTES: an archive
that claims less is refused, never inflated without bound. What the entries mean:
store/evals/inspect_logs.py."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import zstandard

from ...errors import EvalLogError
from ..files import UnreadableFile, open_regular
from .eval_records import (
    MAX_LINE_BYTES,
    list_at,
    log_error,
    mapping_at,
    parse_json,
    read_log_json,
    shown,
)

ZSTANDARD = 93  # the zip compression method of Inspect 0.3.285's archives (0.3.150: deflate)


def open_entries(path: Path) -> Entries:
    """The log's header and samples, from an `.eval` archive or a `.json` log."""
    return _Archive(path) if path.suffix == ".eval" else _Whole(path)


class Entries:
    """A log's header and its samples, whichever form it is in."""

    format = ""

    def header(self) -> dict[str, object]:
        raise NotImplementedError

    def samples(self) -> Iterator[tuple[str, dict[str, object]]]:
        raise NotImplementedError

    def where(self, name: str) -> str:
        raise NotImplementedError


class _Whole(Entries):
    """A `.json` log: one object, read whole once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._log = mapping_at(read_log_json(path), str(path), "log")
        self.format = f"Inspect JSON log, format version {shown(self._log.get('version'))}"

    def header(self) -> dict[str, object]:
        return self._log

    def samples(self) -> Iterator[tuple[str, dict[str, object]]]:
        given = self._log.get("samples")
        for n, sample in enumerate(list_at(given, str(self.path), "samples")
                                   if given is not None else []):
            where = f"{self.path}: samples[{n}]"
            yield where, mapping_at(sample, where, "sample")

    def where(self, name: str) -> str:
        return str(self.path)


class _Archive(Entries):
    """A `.eval` zip archive, each entry read when asked (deflate or Zstandard)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            with open_regular(path, "log") as handle, zipfile.ZipFile(handle) as archive:
                self._entries = {info.filename: info for info in archive.infolist()}
        except UnreadableFile as exc:
            raise EvalLogError(str(exc)) from None
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise log_error(str(path), f"not a zip archive ({exc})",
                            "give the .eval file Inspect wrote") from None
        methods = {info.compress_type for info in self._entries.values()}
        self.format = ("Inspect .eval archive, Zstandard entries" if ZSTANDARD in methods
                       else "Inspect .eval archive, deflate entries")
        self._header: dict[str, object] | None = None

    def where(self, name: str) -> str:
        return f"{self.path}: {name}"

    def header(self) -> dict[str, object]:
        if self._header is None:
            name = "header.json" if "header.json" in self._entries else "_journal/start.json"
            if name not in self._entries:
                raise log_error(str(self.path), "holds neither header.json nor "
                                "_journal/start.json", "give the .eval file Inspect wrote")
            self._header = mapping_at(parse_json(self._read(name), self.where(name)),
                                      self.where(name), name)
        return self._header

    def samples(self) -> Iterator[tuple[str, dict[str, object]]]:
        for name in self._entries:
            if name.startswith("samples/") and name.endswith(".json"):
                where = self.where(name)
                yield where, mapping_at(parse_json(self._read(name), where), where, "sample")

    def _read(self, name: str) -> bytes:
        info = self._entries[name]
        if info.file_size > MAX_LINE_BYTES:
            raise log_error(self.where(name), f"an entry of {info.file_size:,} bytes, more "
                            f"than the {MAX_LINE_BYTES >> 20} MiB quantcheck reads")
        try:
            with open_regular(self.path, "log") as handle:
                raw = _stored_bytes(handle, info)
                if info.compress_type == zipfile.ZIP_STORED:
                    return raw
                if info.compress_type == zipfile.ZIP_DEFLATED:
                    return _inflated(raw, info.file_size)
                if info.compress_type == ZSTANDARD:
                    return _unzstd(raw, info.file_size)
        except UnreadableFile as exc:
            raise EvalLogError(str(exc)) from None
        except (OSError, ValueError, struct.error, zstandard.ZstdError, zlib.error) as exc:
            raise log_error(self.where(name), f"cannot be read ({exc})") from None
        raise log_error(self.where(name), f"compressed with zip method {info.compress_type}",
                        "quantcheck reads stored, deflate and Zstandard entries")


def _stored_bytes(handle: BinaryIO, info: zipfile.ZipInfo) -> bytes:
    """The entry's bytes as stored: after its local header (30 bytes, its name and its
    extra field, whose lengths that header gives)."""
    handle.seek(info.header_offset)
    local = handle.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise ValueError("no local file header where the directory points")
    name_length, extra_length = struct.unpack("<HH", local[26:30])
    handle.seek(info.header_offset + 30 + name_length + extra_length)
    raw: bytes = handle.read(info.compress_size)
    if len(raw) != info.compress_size:
        raise ValueError("the entry is cut short")
    return raw


def _inflated(raw: bytes, size: int) -> bytes:
    decompressor = zlib.decompressobj(-15)
    data = decompressor.decompress(raw, size + 1)
    if len(data) > size:
        raise ValueError("the entry inflates beyond its stated size")
    return data


def _unzstd(raw: bytes, size: int) -> bytes:
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)) as reader:
        data: bytes = reader.read(size + 1)
    if len(data) > size:
        raise ValueError("the entry decompresses beyond its stated size")
    return data
