"""Sharded collection: a deterministic slice of a prompt set per machine or day
(`--shard I/N` on collect and run), and `quantcheck merge` joining the shard runs of
one endpoint into one run.

A prompt belongs to shard I of N when blake2b(its id) mod N is I - 1: the same on
every machine, and a prompt keeps its shard when others are added to the set. Merge
refuses shards of other endpoints, models, settings or prompt sets, a shard given
twice or missing, and a prompt found in two shards. The merged run lists its prompts
in the prompt set's own order (file by file, line by line) and copies every record and
token blob as stored, so comparing it gives the same pairs.csv as an unsharded run.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import msgspec

from ..errors import QuantcheckError
from .files import LOCK_FILE, storage_error
from .run_dir import (
    COMPLETIONS,
    Blobs,
    Manifest,
    Run,
    RunCounts,
    RunWriter,
    iter_jsonl,
    load_run,
    lock_run,
    write_manifest,
    write_prompts,
)
from .run_records import Prompt

SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
# Settings every shard of one run must share (the rest, e.g. concurrency, may differ).
SHARED_PARAMETERS = ("model", "repeats", "top_logprobs", "stream", "repeat_mode", "request",
                     "routed_experts", "routed_experts_shape")
STATUS_ORDER = ("complete", "incomplete", "interrupted", "running")


class ShardError(QuantcheckError):
    """Shards that cannot be merged, or a malformed --shard."""


def parse_shard(text: str) -> tuple[int, int]:
    """"2/4" -> (2, 4)."""
    match = SHARD.match(text)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise ShardError(f"--shard {text!r}: expected I/N with 1 <= I <= N, e.g. 2/4")
    return int(match.group(1)), int(match.group(2))


def in_shard(prompt_id: str, index: int, count: int) -> bool:
    digest = hashlib.blake2b(prompt_id.encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "little") % count == index - 1


def shard_prompts(prompts: list[Prompt], shard: str) -> list[Prompt]:
    index, count = parse_shard(shard)
    return [prompt for prompt in prompts if in_shard(prompt.id, index, count)]


@dataclass
class MergeResult:
    out: Path
    shards: int
    prompts: int
    records: int


def merge_runs(run_dirs: list[Path], out: Path) -> MergeResult:
    """Join the shard runs of one endpoint into `out` (a new, empty run directory)."""
    runs = [load_run(path) for path in run_dirs]
    _check_shards(runs)
    # built beside `out` and renamed into place whole: an interrupted merge leaves no
    # half run under the name (only OUT.merging, which the next merge replaces)
    building = out.with_name(out.name + ".merging")
    for path in (out, building):
        if path.is_symlink():  # its stale files would be deleted wherever it points
            raise ShardError(f"{path} is a symbolic link; merge into a real directory")
    if out.exists() and any(out.iterdir()):
        raise ShardError(f"{out} is not empty; merge into a new directory")
    prompts = _in_set_order(runs)
    with lock_run(building):  # a second merge into `out` at the same time is refused
        try:
            _clear_except_lock(building)
            write_prompts(building, prompts)
            records = _copy_records(runs, building)
            write_manifest(building, _merged_manifest(runs, prompts))
            if out.exists():
                out.rmdir()  # empty, checked above
            building.rename(out)
        except OSError as exc:
            raise storage_error(out, exc) from None
    return MergeResult(out, len(runs), len(prompts), records)


def _clear_except_lock(folder: Path) -> None:
    """What an interrupted merge left in `folder`, its lock aside."""
    for stale in folder.iterdir():
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
        elif stale.name != LOCK_FILE:
            stale.unlink()


def _check_shards(runs: list[Run]) -> None:
    if not runs:
        raise ShardError("give the shard runs to merge")
    first = runs[0]
    shards = [_shard_of(run) for run in runs]
    counts = {count for _, count in shards}
    if len(counts) != 1:
        raise ShardError(f"the runs were cut into different numbers of shards: "
                         f"{', '.join(run.manifest.parameters.shard or '' for run in runs)}")
    (count,) = counts
    given = [index for index, _ in shards]
    twice = sorted({index for index in given if given.count(index) > 1})
    missing = sorted(set(range(1, count + 1)) - set(given))
    if twice or missing:
        raise ShardError("; ".join(
            [f"shard {', '.join(f'{i}/{count}' for i in twice)} given twice"] * bool(twice)
            + [f"shard {', '.join(f'{i}/{count}' for i in missing)} missing"] * bool(missing)))
    for run in runs[1:]:
        differs = _differences(first, run)
        if differs:
            raise ShardError(f"{run.path} and {first.path} are not shards of one run: "
                             f"{'; '.join(differs)}")
    seen: dict[str, Path] = {}
    for run in runs:
        for prompt_id in run.manifest.prompt_hashes:
            if prompt_id in seen:
                raise ShardError(f"prompt {prompt_id!r} is in {seen[prompt_id]} and "
                                 f"{run.path}: shards must not overlap")
            seen[prompt_id] = run.path


def _shard_of(run: Run) -> tuple[int, int]:
    shard = run.manifest.parameters.shard
    if not shard:
        raise ShardError(f"{run.path} is not a shard (collect with --shard I/N)")
    return parse_shard(shard)


def _differences(a: Run, b: Run) -> list[str]:
    found = []
    for name in ("endpoint", "model"):
        if getattr(a.manifest, name) != getattr(b.manifest, name):
            found.append(f"{name} {getattr(b.manifest, name)!r} vs "
                         f"{getattr(a.manifest, name)!r}")
    for name in SHARED_PARAMETERS:
        mine, theirs = (msgspec.to_builtins(getattr(run.manifest.parameters, name))
                        for run in (b, a))
        if mine != theirs:
            found.append(f"{name} {mine!r} vs {theirs!r}")
    if [f.sha256 for f in a.manifest.prompt_files] != [f.sha256 for f in b.manifest.prompt_files]:
        found.append("another prompt set (the prompt files' contents differ)")
    return found


def _in_set_order(runs: list[Run]) -> list[Prompt]:
    """Every shard's prompts in the set's order: by prompt file, then line."""
    files = [f.path for f in runs[0].manifest.prompt_files]

    def position(prompt: Prompt) -> tuple[int, int, str]:
        path, _, line = prompt.source.rpartition(":")
        where = files.index(path) if path in files else len(files)
        return where, int(line) if line.isdigit() else 0, prompt.id

    return sorted((p for run in runs for p in run.prompts.values()), key=position)


def _copy_records(runs: list[Run], out: Path) -> int:
    writer = RunWriter(out)
    writer.open()
    copied = 0
    try:
        for run in runs:
            with Blobs(run.path) as blobs:
                for _, data in iter_jsonl(run.path / COMPLETIONS):
                    writer.append_line(data, blobs.blob(data.get("tokens")))
                    copied += 1
    finally:
        writer.close()
    return copied


def _merged_manifest(runs: list[Run], prompts: list[Prompt]) -> Manifest:
    first = runs[0].manifest
    counts = [run.manifest.counts for run in runs]
    merged = msgspec.structs.replace(
        first, parameters=msgspec.structs.replace(first.parameters, shard=None),
        prompt_hashes={p.id: p.hash for p in prompts},
        started_at=min(run.manifest.started_at for run in runs),
        finished_at=max((run.manifest.finished_at or "" for run in runs), default="") or None,
        status=max((run.status for run in runs), key=_status_rank),
        stop_reason=next((run.manifest.stop_reason for run in runs
                          if run.manifest.stop_reason), None),
        counts=RunCounts(requests=sum(c.requests for c in counts if c),
                         ok=sum(c.ok for c in counts if c),
                         failed=sum(c.failed for c in counts if c))
        if all(counts) else None)
    return merged


def _status_rank(status: str) -> int:
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)
