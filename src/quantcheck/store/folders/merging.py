"""`quantcheck merge`: the shard runs of one endpoint joined into one run.

Merge refuses shards of other endpoints, models, settings or prompt sets, a shard given
twice or missing, and a prompt found in two shards; each shard is read as hostile input
(shard_reading.py). The merged run lists its prompts in the prompt set's own order
(file by file, line by line) and copies every record and token blob as stored, so
comparing it gives the same pairs.csv as an unsharded run.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import msgspec

from ..files import LOCK_FILE, storage_error
from ..records.run_records import Prompt
from .run_dir import (
    Manifest,
    RecordNotStorable,
    Replica,
    Replication,
    Run,
    RunCounts,
    RunWriter,
    lock_run,
    write_manifest,
    write_prompts,
)
from .shard_reading import Shard, read_shard, shard_records
from .shards import ShardError

# Settings every shard of one run must share (the rest, e.g. concurrency, may differ).
SHARED_PARAMETERS = ("model", "repeats", "top_logprobs", "stream", "repeat_mode", "request",
                     "routed_experts", "routed_experts_shape")
STATUS_ORDER = ("complete", "incomplete", "interrupted", "running")
NAMED = 5  # shards named in an error about missing ones; the rest are counted


@dataclass
class MergeResult:
    out: Path
    shards: int
    prompts: int
    records: int


def merge_runs(run_dirs: list[Path], out: Path) -> MergeResult:
    """Join the shard runs of one endpoint into `out` (a new, empty run directory).
    Shards are read as hostile input: see shard_reading.py."""
    shards = [read_shard(path) for path in run_dirs]
    _check_shards(shards)
    runs = [shard.run for shard in shards]
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
            records = _copy_records(shards, building)
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


def _check_shards(shards: list[Shard]) -> None:
    if not shards:
        raise ShardError("give the shard runs to merge")
    first = shards[0].run
    counts = {shard.count for shard in shards}
    if len(counts) != 1:
        raise ShardError(f"the runs were cut into different numbers of shards: "
                         f"{', '.join(shard.name for shard in shards)}")
    (count,) = counts
    given = Counter(shard.index for shard in shards)
    twice = sorted(index for index, times in given.items() if times > 1)
    missing = _missing(set(given), count)
    if twice or missing:
        raise ShardError("; ".join(
            [f"shard {', '.join(f'{i}/{count}' for i in twice)} given twice"] * bool(twice)
            + [missing] * bool(missing)))
    for shard in shards[1:]:
        differs = _differences(first, shard.run)
        if differs:
            raise ShardError(f"{shard.run.path} and {first.path} are not shards of one run: "
                             f"{'; '.join(differs)}")
    seen: dict[str, Path] = {}
    for shard in shards:
        for prompt_id in shard.run.manifest.prompt_hashes:
            if prompt_id in seen:
                raise ShardError(f"prompt {prompt_id!r} is in {seen[prompt_id]} and "
                                 f"{shard.run.path}: shards must not overlap")
            seen[prompt_id] = shard.run.path


def _missing(given: set[int], count: int) -> str:
    """Which of shards 1..count are not given, the first few by name: a manifest may
    claim any count, so the shards are never listed all at once."""
    named = []
    for index in range(1, count + 1):
        if index not in given:
            named.append(f"{index}/{count}")
            if len(named) == NAMED:
                break
    absent = count - len(given)
    if not absent:
        return ""
    more = f" and {absent - len(named):,} more" if absent > len(named) else ""
    return f"shard {', '.join(named)}{more} missing"


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


# A prompt's `source` (prompt_entries.Where.place): FILE:LINE (YAML, JSONL), FILE:LINE
# (row N) (CSV), FILE: row N (Parquet, Arrow), or FILE.
SOURCE = re.compile(r"(?P<path>.*?)(?::(?P<line>\d+))?(?: \(row (?P<row>\d+)\)|: row "
                    r"(?P<only_row>\d+))?", re.DOTALL)


def _in_set_order(runs: list[Run]) -> list[Prompt]:
    """Every shard's prompts in the set's order: by prompt file (a data file inside a
    folder, or the one a YAML source file names, counts as that prompt file), then by
    file inside it, line and row."""
    files = [str(Path(f.path)) for f in runs[0].manifest.prompt_files]
    prompts = [p for run in runs for p in run.prompts.values()]
    places = {p.id: _place(p.source) for p in prompts}
    found = {path: _file_of(path, files) for path, _, _ in places.values()}
    named = set(found.values())
    for path, where in found.items():  # a data file no prompt file holds: a source file's
        if where == len(files):
            found[path] = _source_file_of(path, files, named)

    def position(prompt: Prompt) -> tuple[int, str, int, int, str]:
        path, line, row = places[prompt.id]
        return found[path], path, line, row, prompt.id

    return sorted(prompts, key=position)


def _place(source: str) -> tuple[str, int, int]:
    """(file, line, row) of a prompt's source; 0 where it has none."""
    match = SOURCE.fullmatch(source)
    assert match is not None  # every part but the path is optional
    row = match.group("row") or match.group("only_row")
    return (str(Path(match.group("path"))) if match.group("path") else "",
            int(match.group("line") or 0), int(row or 0))


def _file_of(path: str, files: list[str]) -> int:
    """Which prompt file holds `path`: it, or the folder it is in (len(files): none)."""
    for number, file in enumerate(files):
        if path == file or path.startswith(file.rstrip("/") + "/"):
            return number
    return len(files)


def _source_file_of(path: str, files: list[str], named: set[int]) -> int:
    """The YAML source file that names data file `path`: a prompt file no source names
    itself, in whose folder the data file is (len(files): none)."""
    for number, file in enumerate(files):
        folder = str(Path(file).parent)
        if number not in named and (folder == "." or path.startswith(folder + "/")):
            return number
    return len(files)


def _copy_records(shards: list[Shard], out: Path) -> int:
    writer = RunWriter(out)
    writer.open()
    copied = 0
    try:
        for shard in shards:
            for where, data, blob in shard_records(shard):
                try:
                    writer.append_line(data, blob)
                except RecordNotStorable as exc:  # read, but not as quantcheck writes
                    raise ShardError(f"{where}: a record no run can hold ({exc})") from None
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
        if all(counts) else None,
        replication=_merged_replication(runs))
    return merged


def _merged_replication(runs: list[Run]) -> Replication | None:
    """The shards' replicas, each once (a shard's records name the one that answered)."""
    found = [run.manifest.replication for run in runs if run.manifest.replication]
    if not found:
        return None
    replicas: dict[str, Replica] = {}
    for replication in found:
        for replica in replication.replicas:
            replicas.setdefault(replica.endpoint, replica)
    return msgspec.structs.replace(found[0], replicas=list(replicas.values()))


def _status_rank(status: str) -> int:
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)
