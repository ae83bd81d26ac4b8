"""The run directory: manifest.json, prompts.jsonl and completions.jsonl, and loading it back.

completions.jsonl is appended one flushed line per finished request, so a killed
process loses at most the requests in flight; a resume drops failed and half-written
lines and collects those requests again, so no (prompt_id, repeat) ever appears twice.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
import pandas as pd

from .errors import RunFormatError
from .records import Completion, Prompt

MANIFEST = "manifest.json"
PROMPTS = "prompts.jsonl"
COMPLETIONS = "completions.jsonl"

FRAME_COLUMNS = ["prompt_id", "prompt_hash", "repeat", "text", "reasoning", "finish_reason",
                 "n_tokens", "prompt_tokens", "completion_tokens", "ttft_s", "e2e_s", "error"]


def write_json_atomic(path: Path, data: Any) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    os.replace(temporary, path)


def read_json(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise RunFormatError(f"{path}: missing") from None
    except orjson.JSONDecodeError as exc:
        raise RunFormatError(f"{path}: not valid JSON ({exc})") from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each complete line; a torn last line is skipped."""
    with path.open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.endswith(b"\n"):
                return  # written while the process was killed
            try:
                yield number, orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise RunFormatError(f"{path}:{number}: not valid JSON ({exc})") from None


class RunWriter:
    """Appends completion records to a run directory, one flushed line each."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._handle: IO[bytes] | None = None

    def open(self) -> None:
        self._handle = (self.run_dir / COMPLETIONS).open("ab")

    def append(self, record: Completion) -> None:
        assert self._handle is not None
        self._handle.write(orjson.dumps(record.to_json()) + b"\n")
        self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def completed_keys(run_dir: Path) -> set[tuple[str, int]]:
    """Keys of successful records; rewrites the file without failed or torn lines."""
    path = run_dir / COMPLETIONS
    if not path.exists():
        return set()
    keep: list[bytes] = []
    keys: set[tuple[str, int]] = set()
    dropped = False
    with path.open("rb") as handle:
        for line in handle:
            record = _loads_or_none(line) if line.endswith(b"\n") else None
            key = (record["prompt_id"], record["repeat"]) if record else None
            if record is None or record.get("error") or key in keys:
                dropped = True
                continue
            keys.add(key)  # type: ignore[arg-type]
            keep.append(line)
    if dropped:
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_bytes(b"".join(keep))
        os.replace(temporary, path)
    return keys


def _loads_or_none(line: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) and "prompt_id" in value else None


def set_aside(run_dir: Path) -> Path:
    """Move a previous run's files into a dated subfolder (used by --force): nothing lost."""
    target = run_dir / f"superseded-{time.strftime('%Y%m%d-%H%M%S')}"
    target.mkdir()
    for name in (MANIFEST, PROMPTS, COMPLETIONS):
        if (run_dir / name).exists():
            shutil.move(str(run_dir / name), str(target / name))
    return target


def frame_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The frame's rows as plain dicts with string keys."""
    return [{str(k): v for k, v in row.items()} for row in frame.to_dict("records")]


def write_jsonl_atomic(path: Path, rows: list[Any]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    os.replace(temporary, path)


def write_prompts(run_dir: Path, prompts: list[Prompt]) -> None:
    write_jsonl_atomic(run_dir / PROMPTS, [p.to_json() for p in prompts])


@dataclass
class Run:
    """A collected run directory, read lazily."""

    path: Path
    manifest: dict[str, Any]
    prompts: dict[str, Prompt] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return str(self.manifest.get("label") or self.path.name)

    def completions(self) -> Iterator[Completion]:
        path = self.path / COMPLETIONS
        if not path.exists():
            return
        for _, data in iter_jsonl(path):
            yield Completion.from_json(data)

    def frame(self) -> pd.DataFrame:
        """One row per request, without the token arrays (see FRAME_COLUMNS)."""
        rows = []
        for record in self.completions():
            usage = record.usage or {}
            rows.append([record.prompt_id, record.prompt_hash, record.repeat, record.text,
                         record.reasoning, record.finish_reason,
                         len(record.tokens) if record.tokens is not None else None,
                         usage.get("prompt_tokens"), usage.get("completion_tokens"),
                         record.ttft_s, record.e2e_s, record.error])
        return pd.DataFrame(rows, columns=FRAME_COLUMNS)


def load_run(run_dir: str | Path) -> Run:
    """Open a run directory written by `quantcheck collect`."""
    path = Path(run_dir)
    if not path.is_dir():
        raise RunFormatError(f"{path}: not a directory")
    manifest = read_json(path / MANIFEST)
    prompts: dict[str, Prompt] = {}
    if (path / PROMPTS).exists():
        for number, data in iter_jsonl(path / PROMPTS):
            try:
                prompt = Prompt.from_json(data)
            except (KeyError, TypeError) as exc:
                raise RunFormatError(f"{path / PROMPTS}:{number}: malformed prompt ({exc})") \
                    from None
            prompts[prompt.id] = prompt
    return Run(path=path, manifest=manifest, prompts=prompts)
