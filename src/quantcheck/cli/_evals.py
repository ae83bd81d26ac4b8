"""`quantcheck import` (an eval harness's log as a run) and `quantcheck export` (a
report as Every Eval Ever records and a model card's recovery table)."""

from __future__ import annotations

from pathlib import Path

import click

from ..pipeline.evals import ExportOptions, ImportOptions, export_report, import_log
from ..present.sentences import plural
from ._group import cli
from .guard import run_guarded
from .options import EXISTING_DIR, refuse_writing_an_input


@cli.command("import")
@click.argument("log", type=click.Path(exists=True, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Run directory to write (compare it like a collected run).")
@click.option("--metric", help="The metric each sample's pass or fail is read from (e.g. "
                               "acc_norm); default: each task's first metric that scores "
                               "every sample 0 or 1.")
@click.option("--label", help="The run's label (default: the log's folder or file name).")
@click.option("--force", is_flag=True,
              help="Replace a run already in --out (its files are set aside, not deleted).")
def import_command(log: Path, out: Path, metric: str | None, label: str | None,
                   force: bool) -> None:
    """Import an eval harness's log as a run: lm-evaluation-harness output (the
    --output_path folder of `lm_eval --log_samples`, or its results_*.json with the
    samples files beside it), an Inspect log (.eval or .json), or an Every Eval Ever
    record (UUID.json beside UUID_samples.jsonl). Each sample becomes a prompt and its
    answer; the harness's own score is each answer's verdict (docs/evals.md).

    \b
    Example:
      quantcheck import lm-eval/f16 --out runs/f16
      quantcheck import logs/2026-12-03T09-45-53_arith.eval --out runs/arith-fp8
      quantcheck import lm-eval/q2k --metric acc_norm --label q2k --out runs/q2k
    """
    refuse_writing_an_input([out], [log])
    imported = run_guarded(lambda: import_log(log, out, ImportOptions(metric, label, force)),
                           "Nothing was written.")
    source = imported.source
    click.echo(f"{source.harness} {source.harness_version} ({source.format}): "
               f"{plural(imported.prompts, 'sample')}, {plural(imported.records, 'answer')}"
               + (f", {imported.failed} failed in the eval" if imported.failed else ""))
    for task in source.tasks:
        verdict = task.metric or "no pass/fail metric"
        reported = f" = {task.reported[task.metric]!r}" if task.metric in task.reported else ""
        click.echo(f"  task {task.name}: {plural(task.samples, 'sample')}, verdict "
                   f"{verdict}{reported}")
    for note in source.notes:
        click.echo(f"note: {note}")
    click.echo(f"run: {imported.run_dir}")


@cli.command("export")
@click.argument("report_dir", type=EXISTING_DIR)
@click.option("--eee", type=click.Path(file_okay=False, path_type=Path),
              help="Write each side's Every Eval Ever records (aggregate and per-sample) "
                   "under this folder, in the datastore's data/ layout.")
@click.option("--model-card", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the recovery table per task (Markdown, as model cards give it).")
@click.option("--a-run", type=EXISTING_DIR,
              help="A's run, when it is no longer where the report found it.")
@click.option("--b-run", type=EXISTING_DIR,
              help="B's run, when it is no longer where the report found it.")
@click.option("--organization", default="unknown", show_default=True,
              help="Who ran the evaluation (the records' source organization).")
def export_command(report_dir: Path, eee: Path | None, model_card: Path | None,
                   a_run: Path | None, b_run: Path | None, organization: str) -> None:
    """Export a report, collected or imported: Every Eval Ever records of each side (its
    per-sample pass or fail and each task's score) and a model card's accuracy block
    (each task's scores, recovery B over A, the average; then the paired figures).

    \b
    Example:
      quantcheck export reports/q2k --model-card card.md
      quantcheck export reports/q2k --eee records --organization "My team"
    """
    refuse_writing_an_input([model_card], [a_run, b_run])
    exported = run_guarded(lambda: export_report(report_dir, ExportOptions(
        eee=eee, model_card=model_card, a_run=a_run, b_run=b_run,
        organization=organization)), "Nothing was written.")
    for written in exported.eee:
        click.echo(f"wrote {written.aggregate} and {written.samples} "
                   f"({plural(written.rows, 'sample')})")
    if exported.model_card is not None:
        click.echo(f"wrote {exported.model_card}")
