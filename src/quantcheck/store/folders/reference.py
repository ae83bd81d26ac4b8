"""A stored reference: a run of A collected earlier (on the main branch, kept as a CI
artifact or cache) that each candidate is compared with, A not collected again. It
may be reused only when the candidate is asked exactly what A was: the same prompt
set (every prompt hash) and the same settings that decide what is requested and how
the repeats are made. Anything else would compare answers to different questions,
which `compare` only finds prompt by prompt after everything was sent; here it is said
before any request goes out, every difference named.

The reference is also read whole before then (seconds, where a candidate's collection
takes minutes of a GPU): each of its files a regular file, every line of
completions.jsonl a complete record of a prompt of its prompt set (the manifest's
prompt hash), no failed request, every (prompt, repeat) there once, and every token
reference read from tokens.bin. A damaged reference is refused, what is wrong named."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

import msgspec

from ...errors import RunFormatError, RunMismatch
from .run_dir import (
    COMPLETIONS,
    MANIFEST,
    PROMPTS,
    Blobs,
    Manifest,
    Parameters,
    Run,
    decode_line,
    load_run,
)
from .token_columns import TOKENS_FILE

# What B must be asked as A was (the rest, e.g. concurrency or timeouts, may differ;
# the model and endpoint are what the candidate changes).
SHARED_WITH_THE_REFERENCE = ("repeats", "top_logprobs", "stream", "repeat_mode", "request",
                             "routed_experts", "routed_experts_shape", "shard")
SHOWN_IDS = 3  # prompt ids named per kind of prompt difference


class ReferenceMismatch(RunMismatch):
    """A stored reference that does not fit the candidates' settings or prompts."""


class DamagedReference(RunFormatError):
    """A stored reference whose files cannot be what its collection wrote."""


def open_reference(run_dir: Path) -> Run:
    """The stored reference run, refused unless its collection completed and its files
    hold every answer it was asked for (read whole: see the module's docstring)."""
    _regular_files(run_dir)
    try:
        run = load_run(run_dir)
    except RunFormatError as exc:
        raise _damaged(run_dir, str(exc)) from None
    status = run.status
    if status != "complete":
        counts = run.manifest.counts
        failed = f", {counts.failed} requests failed" if counts and counts.failed else ""
        raise ReferenceMismatch(
            f"the stored reference {run_dir} is {status}{failed}: finish collecting it "
            "(rerun its collect command) before comparing candidates with it")
    _check_prompts(run)
    _check_records(run)
    return run


def _damaged(run_dir: Path, what: str) -> DamagedReference:
    return DamagedReference(
        f"the stored reference {run_dir} is damaged (nothing was sent): {what}. Restore "
        "it as its collection wrote it, or collect it again")


def _regular_files(run_dir: Path) -> None:
    """The run's files are regular files (a link to one is read as it), never a device,
    a pipe or a folder, which would be read without end; completions.jsonl is there."""
    if not run_dir.is_dir():
        raise _damaged(run_dir, "not a directory")
    for name in (MANIFEST, PROMPTS, COMPLETIONS, TOKENS_FILE):
        path = run_dir / name
        try:
            info = os.stat(path)
        except FileNotFoundError:
            if name == TOKENS_FILE:
                continue  # a text-only run, or inline token arrays: said when read
            raise _damaged(run_dir, f"{path} is missing") from None
        except OSError as exc:
            raise _damaged(run_dir, f"{path}: cannot read: {exc.strerror or exc}") from None
        if not stat.S_ISREG(info.st_mode):
            raise _damaged(run_dir, f"{path} is not a regular file (a device, a pipe or "
                                    "a folder, or a link to one)")


def _check_prompts(run: Run) -> None:
    """prompts.jsonl holds each prompt of the manifest, asked as the manifest says."""
    hashes = run.manifest.prompt_hashes
    if not hashes:
        raise _damaged(run.path, f"{run.path / MANIFEST} names no prompt")
    missing = [p for p in hashes if p not in run.prompts]
    if missing:
        raise _damaged(run.path, f"{run.path / PROMPTS} lacks {_some(missing)} of its "
                                 "manifest's prompts")
    other = [p for p, prompt in run.prompts.items() if hashes.get(p) != prompt.hash]
    if other:
        raise _damaged(run.path, f"{run.path / PROMPTS} holds {_some(other)} not asked as "
                                 "its manifest says (another prompt hash, or not in it)")


def _check_records(run: Run) -> None:
    """Every line a complete, successful record of a prompt of the run, each request
    once, each token blob readable; no request of the run without its record."""
    path = run.path / COMPLETIONS
    hashes, repeats = run.manifest.prompt_hashes, run.manifest.parameters.repeats
    seen: set[tuple[str, int]] = set()
    number = 0
    with path.open("rb") as handle, Blobs(run.path) as blobs:
        for number, raw in enumerate(handle, 1):
            where = f"{path}:{number}"
            if not raw.endswith(b"\n"):
                raise _damaged(run.path, f"{where}: the last line is cut short (a torn "
                                         "write)")
            line = decode_line(raw)
            if line is None:
                raise _damaged(run.path, f"{where}: not a completion record")
            key = (line.prompt_id, line.repeat)
            if line.error is not None:
                raise _damaged(run.path, f"{where}: a failed request ({line.prompt_id!r} "
                                         f"repeat {line.repeat}: {line.error})")
            if line.prompt_id not in hashes:
                raise _damaged(run.path, f"{where}: a record of {line.prompt_id!r}, a prompt "
                                         "not in its prompt set")
            if line.prompt_hash != hashes[line.prompt_id]:
                raise _damaged(run.path, f"{where}: {line.prompt_id!r} was asked otherwise "
                                         "than its manifest says (another prompt hash)")
            if not 0 <= line.repeat < repeats:
                raise _damaged(run.path, f"{where}: repeat {line.repeat} of "
                                         f"{line.prompt_id!r}, of a run of {repeats} repeats")
            if key in seen:
                raise _damaged(run.path, f"{where}: {line.prompt_id!r} repeat {line.repeat} "
                                         "is recorded twice")
            seen.add(key)
            try:
                if line.tokens:
                    blobs.packed(line.tokens)
            except RunFormatError as exc:
                raise _damaged(run.path, f"{where}: {exc}") from None
    if not number:
        raise _damaged(run.path, f"{path} is empty")
    dropped = [f"{p!r} repeat {r}" for p in hashes for r in range(repeats)
               if (p, r) not in seen]
    if dropped:
        raise _damaged(run.path, f"{path} lacks {len(dropped)} of its "
                                 f"{len(hashes) * repeats} requests: "
                                 f"{_some(dropped, quoted=False)}")


def _some(items: list[str], quoted: bool = True) -> str:
    named = ", ".join(repr(i) if quoted else i for i in items[:SHOWN_IDS])
    more = f" and {len(items) - SHOWN_IDS} more" if len(items) > SHOWN_IDS else ""
    return named + more


def reference_differences(reference: Manifest, parameters: Parameters,
                          prompt_hashes: Mapping[str, str]) -> list[str]:
    """Every way a candidate asked with `parameters` and these prompts would not be
    asked what the reference was, in words; none when it may be compared."""
    found = []
    for name in SHARED_WITH_THE_REFERENCE:
        theirs = msgspec.to_builtins(getattr(reference.parameters, name))
        mine = msgspec.to_builtins(getattr(parameters, name))
        if isinstance(theirs, dict) and isinstance(mine, dict):  # the request options
            found += [f"{key}: the reference {theirs.get(key)!r}, B {mine.get(key)!r}"
                      for key in sorted(theirs.keys() | mine.keys())
                      if theirs.get(key) != mine.get(key)]
        elif theirs != mine:
            found.append(f"{name}: the reference {theirs!r}, B {mine!r}")
    return found + _prompt_differences(reference.prompt_hashes, prompt_hashes)


def _prompt_differences(theirs: Mapping[str, str], mine: Mapping[str, str]) -> list[str]:
    added = [p for p in mine if p not in theirs]
    missing = [p for p in theirs if p not in mine]
    changed = [p for p in mine if p in theirs and theirs[p] != mine[p]]
    said = []
    for ids, what in ((added, "not in the reference"), (missing, "only in the reference"),
                      (changed, "asked otherwise than in the reference (another prompt hash)")):
        if ids:
            named = ", ".join(repr(p) for p in ids[:SHOWN_IDS])
            more = f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
            said.append(f"{len(ids)} prompt{'s' * (len(ids) != 1)} {what}: {named}{more}")
    return said
