"""A report as a model card's accuracy block (Markdown): the recovery table in the
shape Red Hat's model cards give it, then the paired figures behind it.

    | Category | Metric | A | B | Recovery (%) |
    |---|---|---:|---:|---:|
    | lm-evaluation-harness | gsm8k (exact_match,strict-match, 5-shot) | 75.21 | 75.89 | 100.90 |
    |  | **Average** | **75.21** | **75.89** | **100.90** |

A row per task (an imported eval log's task; a collected report's prompt category),
scores in percent with two decimals, recovery B over A in percent; the Average row
averages the tasks' scores (each task weighs the same, as the cards average their
benchmarks) and gives B's average over A's. Each score is the pass rate over the
samples both sides hold (paired): an imported log whose samples all pair gives the
harness's own figure. The second table says what the first cannot: per task the
samples paired, the flips each way, the exact McNemar p and the smallest change the
samples could detect (80% power, 5% two-sided)."""

from __future__ import annotations

from ..store.records.report_records import PassRate, Summary


def model_card(summary: Summary) -> str:
    """The Markdown block (ends with a newline); a report with no pass/fail check on
    both sides gets a sentence saying so instead of the tables."""
    rows = _rows(summary)
    a, b = _cell(summary.a.label), _cell(summary.b.label)
    if not rows:
        return (f"No task of this report has a pass/fail check on both {a} and {b}: "
                "there is no accuracy to give.\n")
    category = summary.evaluation.harness if summary.evaluation else "quantcheck expect checks"
    lines = [f"| Category | Metric | {a} | {b} | Recovery (%) |", "|---|---|---:|---:|---:|"]
    for n, (name, metric, rate) in enumerate(rows):
        lines.append(f"| {_cell(category) if n == 0 else ''} | {_cell(name)} ({_cell(metric)}) "
                     f"| {_percent(rate.a_pass_rate)} | {_percent(rate.b_pass_rate)} "
                     f"| {_recovery(rate.a_pass_rate, rate.b_pass_rate)} |")
    a_average = sum(rate.a_pass_rate for _, _, rate in rows) / len(rows)
    b_average = sum(rate.b_pass_rate for _, _, rate in rows) / len(rows)
    lines.append(f"|  | **Average** | **{_percent(a_average)}** | **{_percent(b_average)}** "
                 f"| **{_recovery(a_average, b_average)}** |")
    return "\n".join([*lines, "", *_paired(rows, a, b)]) + "\n"


def _rows(summary: Summary) -> list[tuple[str, str, PassRate]]:
    """(task, its metric in words, its paired pass rates) for each task with checks on
    both sides, in the report's task order."""
    categories = summary.stats.categories
    if summary.evaluation is not None:
        return [(task.task, task.metric + (f", {task.few_shot}-shot" if task.few_shot
                                           is not None else ""), categories[task.task])
                for task in summary.evaluation.tasks
                if task.metric and task.task in categories]
    return [(name or "(no category)", "expect pass rate", rate)
            for name, rate in categories.items()]


def _paired(rows: list[tuple[str, str, PassRate]], a: str, b: str) -> list[str]:
    lines = [f"Paired on the same samples ({a} the reference, {b} the candidate):", "",
             "| Task | Samples paired | Flips (pass to fail) | Improvements | McNemar p "
             "| Smallest detectable change |", "|---|---:|---:|---:|---:|---:|"]
    for name, _, rate in rows:
        detectable = (f"{100 * rate.detectable_change:.2g} points"
                      if rate.detectable_change is not None else "none at this size")
        lines.append(f"| {_cell(name)} | {rate.checked} | {rate.regressions} "
                     f"| {rate.improvements} | {rate.mcnemar_p:.3g} | {detectable} |")
    return lines


def _percent(share: float) -> str:
    return f"{100 * share:.2f}"


def _recovery(a: float, b: float) -> str:
    return f"{100 * b / a:.2f}" if a > 0 else "-"


def _cell(text: str) -> str:
    """Text in a table cell: a | or a line break would end the cell."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
