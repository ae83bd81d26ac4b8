"""Two runs imported from eval logs (their manifests' `evaluation`): whether they pair,
and their figures task by task.

Refused, in one line naming the first difference: a side imported and the other
collected (one side would have no verdict); two harnesses; another set of tasks; and,
task by task, another version, few-shot count, filter, verdict metric, sample limit or
setting (generation settings, prompt template, dataset and split: whatever the log
records of the task; where the data lives is not compared); a sample id that holds
another prompt on B than on A (another document order, dataset, template or few-shot
draw: the samples would not be the same questions).

Paired on the samples both hold, the count left out said by the comparison's notes:
samples one log lacks (a sample the harness failed, a run stopped early)."""

from __future__ import annotations

from ..errors import EvalLogError
from ..store.evals.eval_records import EvalSource, EvalTask
from ..store.folders.run_dir import Manifest
from ..store.records.report_records import Evaluation, Stats, TaskFigures

_SHOWN = 60  # characters of a setting's value a refusal shows


def check_pairing(a: Manifest | None, b: Manifest | None) -> None:
    """Nothing when the two runs pair (or neither was imported); else one
    EvalLogError naming what differs."""
    refusal = pairing_refusal(a, b)
    if refusal is not None:
        raise EvalLogError(f"A and B do not pair: {refusal}")


def pairing_refusal(a: Manifest | None, b: Manifest | None) -> str | None:
    """What keeps the runs from pairing, in words; None when nothing does."""
    a_eval = a.evaluation if a is not None else None
    b_eval = b.evaluation if b is not None else None
    if a_eval is None and b_eval is None:
        return None
    if a_eval is None or b_eval is None:
        imported, collected = ("A", "B") if a_eval is not None else ("B", "A")
        return (f"{imported} was imported from an eval log and {collected} was not, so "
                f"{collected} has no verdict to compare; import {collected}'s log too "
                "(quantcheck import)")
    assert a is not None and b is not None
    return _source_refusal(a_eval, b_eval) or _prompt_refusal(a, b)


def _source_refusal(a: EvalSource, b: EvalSource) -> str | None:
    if a.harness != b.harness:
        return f"A is a log of {a.harness}, B of {b.harness}"
    a_names, b_names = [t.name for t in a.tasks], [t.name for t in b.tasks]
    if set(a_names) != set(b_names):
        only_a = sorted(set(a_names) - set(b_names))
        only_b = sorted(set(b_names) - set(a_names))
        said = [f"{_names(only_a)} only in A" if only_a else "",
                f"{_names(only_b)} only in B" if only_b else ""]
        return "another set of tasks: " + ", ".join(filter(None, said))
    for task in a.tasks:
        other = b.task(task.name)
        assert other is not None
        refusal = _task_refusal(task, other)
        if refusal:
            return f"task {task.name}: {refusal}"
    return None


def _task_refusal(a: EvalTask, b: EvalTask) -> str | None:
    for what, a_value, b_value in (("task version", a.version, b.version),
                                   ("few-shot count", a.few_shot, b.few_shot),
                                   ("filter", a.filter, b.filter),
                                   ("verdict metric", a.metric, b.metric),
                                   ("sample limit", a.limit, b.limit)):
        if a_value != b_value:
            return f"another {what} (A {_value(a_value)}, B {_value(b_value)})"
    for name in sorted(a.settings.keys() | b.settings.keys()):
        a_value, b_value = a.settings.get(name), b.settings.get(name)
        if a_value != b_value:
            return f"another {name} (A {_cut(a_value)}, B {_cut(b_value)})"
    return None


def _prompt_refusal(a: Manifest, b: Manifest) -> str | None:
    """The first shared sample id whose prompt differs, and how many do."""
    differing = [prompt_id for prompt_id, digest in a.prompt_hashes.items()
                 if b.prompt_hashes.get(prompt_id, digest) != digest]
    if not differing:
        return None
    shared = sum(prompt_id in b.prompt_hashes for prompt_id in a.prompt_hashes)
    return (f"sample {differing[0]} holds another prompt in B than in A ({len(differing)} "
            f"of {shared} shared samples differ): another document order, dataset, prompt "
            "template or few-shot draw")


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _value(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _cut(value: str | None) -> str:
    if value is None:
        return "not set"
    return value if len(value) <= _SHOWN else value[:_SHOWN] + "..."


def evaluation_of(a: Manifest | None, b: Manifest | None) -> Evaluation | None:
    """summary.json's `evaluation` of two imported runs (None unless both are): each
    task's metric and the harness's own figure for it on each side."""
    a_eval = a.evaluation if a is not None else None
    b_eval = b.evaluation if b is not None else None
    if a_eval is None or b_eval is None:
        return None
    tasks = []
    for task in a_eval.tasks:
        other = b_eval.task(task.name) or EvalTask(name=task.name)
        metric = task.metric
        tasks.append(TaskFigures(
            task=task.name, metric=metric, few_shot=task.few_shot,
            higher_is_better=task.higher_is_better,
            a_reported=task.reported.get(metric) if metric else None,
            b_reported=other.reported.get(metric) if metric else None,
            a_samples=task.samples, b_samples=other.samples))
    notes = [f"A: {note}" for note in a_eval.notes] + [f"B: {note}" for note in b_eval.notes]
    return Evaluation(harness=a_eval.harness, a_version=a_eval.harness_version,
                      b_version=b_eval.harness_version, tasks=tasks, notes=notes)


def add_averages(evaluation: Evaluation, stats: Stats) -> None:
    """The average over tasks of each side's paired pass rate, and B's over A's: a
    model card's Average row (tasks without a pass/fail metric are left out)."""
    rates = [stats.categories[task.task] for task in evaluation.tasks
             if task.metric and task.task in stats.categories]
    if not rates:
        return
    evaluation.a_average = sum(rate.a_pass_rate for rate in rates) / len(rates)
    evaluation.b_average = sum(rate.b_pass_rate for rate in rates) / len(rates)
    if evaluation.a_average > 0:
        evaluation.recovery_percent = 100 * evaluation.b_average / evaluation.a_average
