"""The judge's replies, kept by key so a rerun asks only what is new: a JSONL file of
JudgeReply lines (by default REPORT_DIR/judge-cache.jsonl), each appended in one write
as its reply arrives, so Ctrl-C or a kill loses nothing already answered (a torn last
line is skipped when read, and the next line starts on a line of its own). A line holds
at most MAX_LINE_BYTES (files.bounded_lines): a longer one is one error naming it."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from ..files import (
    append,
    bounded_lines,
    check_target,
    make_directory,
    open_append,
    open_regular,
    storage_error,
)
from ..records.judge_records import JudgeReply

JUDGE_CACHE = "judge-cache.jsonl"
MAX_LINE_BYTES = 64 << 20  # a reply: a verdict, a reason, the judge's answer (capped)

_decode = msgspec.json.Decoder(JudgeReply)
_encode = msgspec.json.Encoder()


class JudgeCache:
    """The replies of one cache file by key; `add` appends a reply as it comes."""

    def __init__(self, path: Path, within: Path | None = None) -> None:
        check_target(path, within)
        self.path = path
        self.within = within
        self.replies: dict[str, JudgeReply] = {}
        self._descriptor: int | None = None
        self._torn = False  # the file ends in a line cut short
        if path.exists():
            self._read()

    def _read(self) -> None:
        try:
            with open_regular(self.path, "judge cache") as handle:
                for _, line in bounded_lines(handle, self.path, MAX_LINE_BYTES,
                                             "judge cache"):
                    if not line.endswith(b"\n"):
                        self._torn = True  # cut by a kill: that reply is asked again
                        break
                    try:
                        reply = _decode.decode(line)
                    except msgspec.DecodeError:
                        continue  # not ours, or damaged: asked again, never trusted
                    self.replies[reply.key] = reply
        except OSError as exc:
            raise storage_error(self.path, exc) from None

    def get(self, key: str) -> JudgeReply | None:
        return self.replies.get(key)

    def add(self, reply: JudgeReply) -> None:
        """Keep a reply, on disk at once."""
        if self._descriptor is None:
            make_directory(self.path.parent)
            self._descriptor = open_append(self.path, self.within)
            if self._torn:
                append(self._descriptor, b"\n", self.path)
        append(self._descriptor, _encode.encode(reply) + b"\n", self.path)
        self.replies[reply.key] = reply

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None

    def __enter__(self) -> JudgeCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

