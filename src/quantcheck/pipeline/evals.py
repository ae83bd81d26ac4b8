"""Eval harnesses' logs in, records out: `quantcheck import` (a log as a run),
compare's sides that are logs (imported into the report's `runs/`, once they pair), and
`quantcheck export` (a report as Every Eval Ever records and a model card's table)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from .._version import __version__
from ..errors import EvalLogError
from ..present.model_card import model_card
from ..present.sheet import SHEET
from ..store.evals.eee_export import EeeSample, EeeSide, EeeTaskScore, EeeWritten, write_eee
from ..store.evals.eval_logs import log_kind, open_eval_log
from ..store.evals.eval_runs import Imported, place_run, write_eval_run
from ..store.files import write_atomic
from ..store.folders.folder_kinds import RUN, claim
from ..store.folders.report_dir import DETAILS, PAIRS, SUMMARY, read_pair_rows, read_summary
from ..store.folders.run_dir import MANIFEST, CompletionLine, Manifest, Run, load_run, read_manifest
from ..store.labels import check_label, label_from_name
from ..store.records.pair_records import PairRow
from ..store.records.report_records import Summary
from ..store.records.run_records import Prompt
from ..triage.evaluations import check_pairing
from ..triage.templates import last_user_message

RUNS = "runs"  # a report's folder of the runs compare imported from logs


@dataclass
class ImportOptions:
    """What `quantcheck import` is told besides the log and the run directory."""

    metric: str | None = None  # the verdict metric (else the first pass/fail one)
    label: str | None = None  # the run's label (else made from the log's name)
    force: bool = False  # replace a run already in the folder (its files set aside)


def import_log(source: Path, out: Path, options: ImportOptions | None = None) -> Imported:
    """One eval log written as the run directory `out`."""
    options = options or ImportOptions()
    label = check_label(options.label, "--label") if options.label else default_label(source)
    log = open_eval_log(source, options.metric)
    return write_eval_run(log, out, label, options.force)


def default_label(source: Path) -> str:
    """A log's run label: its folder's or file's name (an lm-eval results file: its
    folder's, the model's)."""
    if source.is_file():
        named = source.parent.name if source.name.startswith("results_") else source.stem
        return label_from_name(named)
    return label_from_name(source.name)


def is_eval_log(path: Path) -> bool:
    return log_kind(path) is not None


def imported_sides(a: Path, bs: Sequence[Path], out: Path) -> tuple[Path, list[Path]]:
    """Compare's sides with every eval log imported into OUT/runs/LABEL (a run stays
    as it is); labels made distinct (a, b when two logs share a name). The logs are
    imported beside OUT first and each B's pairing with A checked (check_pairing): a
    log that cannot be read, or sides that do not pair, leave nothing in OUT. A run
    already at OUT/runs/LABEL is set aside (collect --force's way)."""
    sides = [a, *bs]
    labels: list[str] = []
    for side in sides:
        label = default_label(side)
        labels.append(label if label not in labels else f"{label}-{len(labels) + 1}")
    placed = [out / RUNS / label if is_eval_log(side) else side
              for side, label in zip(sides, labels, strict=True)]
    for side, target in zip(sides, placed, strict=True):
        if target != side:
            claim(target, RUN)
    staging = out.parent / f".{out.name}.importing-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staged = [import_log(side, staging / label, ImportOptions(label=label)).run_dir
                  if target != side else side
                  for side, label, target in zip(sides, labels, placed, strict=True)]
        _check_pairing(staged)
        for side, run_dir, target in zip(sides, staged, placed, strict=True):
            if target != side:
                place_run(run_dir, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return placed[0], placed[1:]


def _check_pairing(sides: list[Path]) -> None:
    """Each B's pairing with A (check_pairing), where both are runs or texts files (a
    texts file has no manifest); any other side is left to the comparison's reader,
    which names what it is."""
    def known(side: Path) -> bool:
        return (side / MANIFEST).is_file() or (side.is_file() and side.suffix == ".json")

    def manifest(side: Path) -> Manifest | None:
        return read_manifest(side) if (side / MANIFEST).is_file() else None

    if known(sides[0]):
        for b in filter(known, sides[1:]):
            check_pairing(manifest(sides[0]), manifest(b))


# --- records out --------------------------------------------------------------------


@dataclass
class ExportOptions:
    """Where `quantcheck export` writes, and which runs hold the report's answers."""

    eee: Path | None = None  # a folder: each side's EEE aggregate and per-sample file
    model_card: Path | None = None  # a Markdown file: the recovery table
    a_run: Path | None = None  # the runs (default: the report's own sources)
    b_run: Path | None = None
    organization: str = "unknown"  # EEE's source_organization_name


@dataclass
class Exported:
    summary: Summary
    eee: list[EeeWritten] = field(default_factory=list)
    model_card: Path | None = None


def export_report(report_dir: Path, options: ExportOptions) -> Exported:
    """A report's records: EEE per side (its per-sample lines from the runs, the pass
    or fail from the report), and the model card's block."""
    if options.eee is None and options.model_card is None:
        raise EvalLogError("nothing to write: give --eee FOLDER, --model-card FILE or both")
    summary = read_summary(report_dir)
    exported = Exported(summary)
    if options.model_card is not None and options.model_card.resolve() in {
            (report_dir / name).resolve() for name in (SUMMARY, PAIRS, DETAILS, SHEET)}:
        raise EvalLogError(f"{options.model_card}: a file of the report itself; write the "
                           "model card to another file")
    if options.model_card is not None:
        write_atomic(options.model_card, model_card(summary).encode())
        exported.model_card = options.model_card
    if options.eee is not None:
        rows = [row for row in read_pair_rows(report_dir) if _decided(row)]
        for side in ("a", "b"):
            run = _side_run(summary, side, options, report_dir)
            exported.eee.append(_write_side(options.eee, summary, side, run, rows, options))
    return exported


def _decided(row: PairRow) -> bool:
    return row.compared and row.a_expect in ("pass", "fail") and row.b_expect in ("pass", "fail")


def _side_run(summary: Summary, side: str, options: ExportOptions, report_dir: Path) -> Run:
    given = options.a_run if side == "a" else options.b_run
    path = given or Path(summary.sources.get(side, ""))
    if not path.is_absolute() and not path.exists() and (report_dir / path).exists():
        path = report_dir / path
    if not str(path) or not (path / "manifest.json").exists():
        raise EvalLogError(f"{report_dir}: {side.upper()}'s run ({path or 'not named'}) is not "
                           f"there to read its prompts and answers from; give --{side}-run "
                           "RUN_DIR")
    return load_run(path)


def _write_side(folder: Path, summary: Summary, side: str, run: Run, rows: list[PairRow],
                options: ExportOptions) -> EeeWritten:
    identity = summary.a if side == "a" else summary.b
    evaluation = summary.evaluation
    source = run.manifest.evaluation
    library = source.harness if source else "quantcheck"
    version = source.harness_version if source else __version__
    first = _first_lines(run)
    few_shot = {t.task: t.few_shot for t in evaluation.tasks} if evaluation else {}
    scores = [EeeTaskScore(task=name, metric=_metric(run, name), passed=_passed(rows, side, name),
                           checked=sum(row.category == name for row in rows),
                           few_shot=few_shot.get(name))
              for name in dict.fromkeys(row.category for row in rows)]
    side_record = EeeSide(label=identity.label, model=run.manifest.model or identity.label,
                          library=library, library_version=version,
                          organization=options.organization)
    samples = _samples(run, rows, side, first)
    return write_eee(folder, side_record, scores, samples,
                     seed=f"{summary.identity}/{side}/{identity.label}")


def _first_lines(run: Run) -> dict[str, CompletionLine]:
    """Each prompt's first successful answer (repeat 0), by id."""
    return {line.prompt_id: line for line in run.lines()
            if line.repeat == 0 and line.error is None}


def _metric(run: Run, task: str) -> str:
    source = run.manifest.evaluation
    found = source.task(task) if source else None
    return found.metric if found and found.metric else "expect"


def _passed(rows: list[PairRow], side: str, task: str) -> int:
    return sum((row.a_expect if side == "a" else row.b_expect) == "pass"
               for row in rows if row.category == task)


def _samples(run: Run, rows: list[PairRow], side: str,
             first: dict[str, CompletionLine]) -> Iterator[EeeSample]:
    for row in rows:
        prompt = run.prompts.get(row.prompt_id)
        line = first.get(row.prompt_id)
        if prompt is None or line is None:
            continue
        verdict = prompt.expect.verdict if prompt.expect else None
        text = line.text or ""
        usage = line.usage or {}
        counted = {"input_tokens": usage.get("prompt_tokens"),
                   "output_tokens": usage.get("completion_tokens")}
        yield EeeSample(
            task=row.category, sample_id=_sample_id(row.prompt_id, row.category),
            metric=verdict.metric if verdict else "expect", raw=_raw(prompt),
            formatted=_formatted(prompt),
            reference=[verdict.target] if verdict else [_expected(prompt)], output=text,
            answer=line.answer if line.answer is not None else text,
            extraction=("the harness's filter" if verdict else "quantcheck expect checks"),
            passed=(row.a_expect if side == "a" else row.b_expect) == "pass",
            usage={k: v for k, v in counted.items() if isinstance(v, int)} or None,
            metadata={"quantcheck_prompt_id": row.prompt_id})


def _sample_id(prompt_id: str, task: str) -> str:
    """An imported sample's own id (TASK/ID's ID); a collected prompt's id as it is."""
    prefix = f"{task}/"
    return prompt_id[len(prefix):] if task and prompt_id.startswith(prefix) else prompt_id


def _raw(prompt: Prompt) -> str:
    text = prompt.request.get("prompt")
    if isinstance(text, str):
        return text
    return last_user_message(prompt.request) or ""


def _formatted(prompt: Prompt) -> str | None:
    messages = prompt.request.get("messages")
    return orjson.dumps(messages).decode() if isinstance(messages, list) else None


def _expected(prompt: Prompt) -> str:
    return orjson.dumps(prompt.expect.to_json()).decode() if prompt.expect else ""
