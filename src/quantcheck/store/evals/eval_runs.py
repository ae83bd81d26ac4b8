"""An eval harness's log written as a quantcheck run directory, which every reader of
a run takes as it takes a collected one (compare, the sheet, the gate, merge).

- prompts.jsonl: one prompt per sample, id TASK/SAMPLE_ID, category the task, the
  request as the harness sent it, and, when the task has a pass/fail metric, the
  expect `{verdict: {metric, target}}`: the pair's flip is the harness's own verdict
  on each side;
- completions.jsonl (and tokens.bin): one record per sample and epoch (Inspect's
  epochs are repeats), with its text, its tokens where the log holds logprobs, every
  score the harness gave (`scores`), the part of the answer it scored (`answer`), and
  the error of a sample the harness could not finish;
- manifest.json: the label, the log's model, status `complete`, and `evaluation`
  (store/evals/eval_records.EvalSource: the harness, each task's settings and figures).

RUN_DIR is claimed for a run first (store/folders/folder_kinds.py: a folder holding a report,
a certificate or any other output is refused before the log is read). The run is written
into a folder beside RUN_DIR and moved into place whole once every sample is read: a log
that fails halfway leaves RUN_DIR as it was. A sample id seen
twice in one task and epoch is refused, naming both places; two ids holding the same
document are a note of the run's `evaluation`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import orjson

from ..._version import __version__
from ...errors import EvalLogError
from ..files import AtomicFile, make_directory, storage_error
from ..folders.folder_kinds import RUN, claim
from ..folders.run_dir import (
    MANIFEST,
    PROMPTS,
    Manifest,
    Parameters,
    RunCounts,
    RunWriter,
    set_aside,
    write_manifest,
)
from ..inputs.prompt_entries import request_hash
from ..records.run_records import Completion, Expect, Prompt, VerdictExpect
from .eval_records import EvalSample, EvalSource, log_error


class EvalLog(Protocol):
    """What each log reader gives: the log's source, complete once it is opened, and
    its samples, read again each time they are asked for."""

    @property
    def source(self) -> EvalSource: ...

    def samples(self) -> Iterator[EvalSample]: ...


@dataclass
class Imported:
    """A log written as a run: where, what it holds."""

    run_dir: Path
    source: EvalSource
    prompts: int
    records: int
    failed: int


def write_eval_run(log: EvalLog, out: Path, label: str, force: bool = False,
                   started_at: str = "") -> Imported:
    """The log as the run directory `out` (see the module docstring); an `out` that
    already holds a run is refused unless `force` (then its files are set aside, as
    collect --force does)."""
    claim(out, RUN)
    if (out / MANIFEST).exists() and not force:
        raise EvalLogError(f"{out}: already holds a run; give another --out, or --force "
                           "to set its files aside")
    staging = out.parent / f".{out.name}.importing-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    make_directory(staging)
    try:
        imported = _write(log, staging, label, started_at)
        place_run(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    imported.run_dir = out
    return imported


def _write(log: EvalLog, folder: Path, label: str, started_at: str) -> Imported:
    source = log.source
    verdicts = {task.name: task.metric for task in source.tasks}
    hashes: dict[str, str] = {}
    places: dict[tuple[str, int], str] = {}
    documents: dict[tuple[str, str], str] = {}
    twins: list[str] = []
    writer = RunWriter(folder)
    writer.open()
    records = failed = 0
    try:
        with AtomicFile(folder / PROMPTS) as prompts:
            for sample in log.samples():
                key = (sample.prompt_id, sample.repeat)
                if key in places:
                    raise log_error(sample.where, f"sample {sample.sample_id} of task "
                                    f"{sample.task} (epoch {sample.repeat + 1}) appears "
                                    f"twice (first at {places[key]})",
                                    "give the log the harness wrote, unedited")
                places[key] = sample.where
                if sample.prompt_id not in hashes:
                    prompt = _prompt(sample, verdicts.get(sample.task))
                    hashes[prompt.id] = prompt.hash
                    prompts.write(orjson.dumps(prompt.to_json()) + b"\n")
                    _twin(sample, documents, twins)
                writer.append(_completion(sample, hashes[sample.prompt_id]))
                records += 1
                failed += sample.error is not None
    finally:
        writer.close()
    source.notes = [*source.notes, *_twin_notes(twins)]
    repeats = 1 + max((repeat for _, repeat in places), default=0)
    manifest = Manifest(quantcheck_version=__version__, label=label, model=source.model,
                        # no request was sent: no prefix cache was turned off (cache null)
                        parameters=Parameters(model=source.model or None, repeats=repeats,
                                              top_logprobs=0, stream=False, cache_off=False),
                        prompt_hashes=hashes, started_at=started_at,
                        finished_at=started_at or None, status="complete",
                        counts=RunCounts(requests=records, ok=records - failed,
                                         failed=failed),
                        evaluation=source)
    write_manifest(folder, manifest)
    return Imported(folder, source, len(hashes), records, failed)


def _prompt(sample: EvalSample, metric: str | None) -> Prompt:
    expect = Expect(verdict=VerdictExpect(metric, sample.target)) if metric else None
    return Prompt(id=sample.prompt_id, category=sample.task, request=sample.request,
                  api=sample.api, hash=request_hash(sample.request), expect=expect,
                  source=sample.where.rsplit(":", 1)[0])


def _completion(sample: EvalSample, prompt_hash: str) -> Completion:
    return Completion(prompt_id=sample.prompt_id, prompt_hash=prompt_hash,
                      repeat=sample.repeat, text=None if sample.error else sample.text or "",
                      tokens=None if sample.error else sample.tokens,
                      finish_reason=sample.finish_reason, usage=sample.usage,
                      error=sample.error, scores=dict(sample.scores) or None,
                      answer=sample.answer)


def _twin(sample: EvalSample, documents: dict[tuple[str, str], str],
          twins: list[str]) -> None:
    """Notes two sample ids of a task that hold one document (its digest)."""
    if sample.document is None:
        return
    first = documents.setdefault((sample.task, sample.document), sample.sample_id)
    if first != sample.sample_id:
        twins.append(f"{sample.task}: samples {first} and {sample.sample_id}")


def _twin_notes(twins: list[str]) -> list[str]:
    if not twins:
        return []
    shown = "; ".join(twins[:5]) + (f"; and {len(twins) - 5} more" if len(twins) > 5 else "")
    return [f"{len(twins)} sample(s) hold the same document as an earlier one ({shown}): "
            "each is paired by its own id"]


def place_run(staging: Path, out: Path) -> None:
    """The run written whole in `staging` moved to `out` (claimed for a run), a run
    already there set aside as collect --force does."""
    claim(out, RUN)
    if (out / MANIFEST).exists():
        set_aside(out)
    make_directory(out)
    try:
        for entry in staging.iterdir():
            os.replace(entry, out / entry.name)
        staging.rmdir()
    except OSError as exc:
        raise storage_error(out, exc) from None
