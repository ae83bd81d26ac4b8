"""The sentences people read of a report: the terminal's and the sheet's headline, and
the plurals and phrases it is made of. Triage counts; these say it in words."""

from __future__ import annotations

from dataclasses import dataclass

from ..store.records.judge_records import JudgeFigures
from ..store.records.pair_records import FLIP_CAUSE_WORDS, FLIP_CAUSES, REVIEW_CAUSES
from ..store.records.report_records import Counts, ForcedSummary, SideBackends, Summary
from ..store.records.run_records import DEGENERATE_KINDS
from ..triage.agreement import agreement_sentence
from ..triage.backends import mixed_sentence

__all__ = ["agreement_sentence", "backends_warning", "collapse_warning", "collecting_speed",
           "degenerate_phrase", "evaluation_sentences", "flip_causes_phrase", "headline",
           "order_floor_sentence", "replicas_lines", "repeats_phrases", "repeats_sent",
           "task_lines", "judge_sentence", "plural", "template_warning", "PROMPT_CACHE_HINT"]
KIND_NAMES = {"repetition": ("loop", "loops"), "empty": ("empty", "empty")}


def degenerate_phrase(counts: Counts) -> str:
    """'2 degenerate outputs new on B (1 loop, 1 empty)': the count and its parts."""
    total, kinds = counts.degenerate_new_on_b, counts.degenerate_new_on_b_kinds
    parts = [f"{kinds[kind]} {KIND_NAMES[kind][kinds[kind] != 1]}" for kind in DEGENERATE_KINDS
             if kinds.get(kind)]
    return (f"{plural(total, 'degenerate output')} new on B"
            + (f" ({', '.join(parts)})" if parts else ""))


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """'1 flip', '2 flips' ('1 empty', '2 empty' with nouns='empty')."""
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"


def headline(summary: Summary) -> str:
    """The one-line verdict: "7 of 20 identical, 9 wording only, ..."."""
    counts = summary.counts
    parts = [f"{counts.identical} of {counts.pairs} identical",
             f"{counts.wording_similar} wording only (suggested)",
             f"{counts.divergent} to review",
             f"{plural(counts.flips.regression, 'factual flip')} by expect (A pass, B fail)"]
    if causes := flip_causes_phrase(counts.flip_causes):
        parts.append(causes)
    if counts.flips.improvement:
        parts.append(plural(counts.flips.improvement, "improvement"))
    by_check = [f"{check} {c.regressions}" for check, c in counts.checks.items()
                if c.regressions]
    if len(counts.checks) > 1 and by_check:
        parts.append("flips by check: " + ", ".join(by_check))
    skipped = sum(c.skipped for check, c in counts.checks.items() if check != "verdict")
    if skipped:
        parts.append(f"{plural(skipped, 'check')} skipped (code: compare with "
                     "--allow-code-exec to run them)")
    undecided = counts.checks["verdict"].skipped if "verdict" in counts.checks else 0
    if undecided:
        parts.append(f"{plural(undecided, 'verdict')} neither pass nor fail (partial "
                     "credit, or no score on a side)")
    if counts.tool_calls:
        parts.append("tool calls: " + ", ".join(f"{v} {k.replace('_', ' ')}"
                                                for k, v in counts.tool_calls.items()))
    parts.append(degenerate_phrase(counts))
    if counts.collapse is not None and counts.collapse.new_on_b:
        parts.append(f"{plural(counts.collapse.new_on_b, 'prompt')} collapsed on B (the same "
                     "answer to distinct prompts)")
    if counts.length_capped_new_on_b:
        parts.append(f"{plural(counts.length_capped_new_on_b, 'more answer')} on B cut by "
                     "max_tokens where A stopped")
    parts += repeats_phrases(summary)
    if counts.noise:
        parts.append(f"{plural(counts.noise, 'difference')} within repeat noise")
    others = {k: v for k, v in counts.status.items() if k != "compared"}
    if others:
        parts.append("not compared: " + ", ".join(f"{v} {k.replace('_', ' ')}"
                                                  for k, v in others.items()))
    return ", ".join(parts) + "."


FIRST_REQUEST_PATTERN = "only each prompt's first request differs: the prefix cache"


def repeats_phrases(summary: Summary) -> list[str]:
    """What the repeats show, for the headline: the prompts whose texts vary, those whose
    logprobs alone moved beside them, and per side the first-request pattern of a warm
    prefix cache where it explains most of the variation."""
    counts = summary.counts
    texts, moved = counts.text_varies, counts.logprobs_only
    if texts is None or moved is None:  # a report made before texts were told apart
        varying = counts.nondeterministic
        return [f"nondeterministic prompts: A {varying.a}, B {varying.b}"] \
            if varying.a or varying.b else []
    if not (texts.a or texts.b or moved.a or moved.b):
        return []
    phrase = f"repeats' texts vary: A {texts.a}, B {texts.b}"
    if moved.a or moved.b:
        phrase += f" (logprobs only: A {moved.a}, B {moved.b})"
    return [phrase] + [f"{name.upper()}: {FIRST_REQUEST_PATTERN}"
                       for name, side in sorted(summary.determinism.items())
                       if side.first_request_pattern]


def repeats_sent(summary: Summary) -> str:
    """How each side's repeats met the prefix cache, in one line ("" when no side
    recorded it, or no side has repeats)."""
    shown = [f"{name.upper()}: {side.cache}" for name, side in sorted(summary.determinism.items())
             if side.cache and (side.repeats or 0) > 1]
    return ("Repeats and the prefix cache: " + "; ".join(shown)) if shown else ""


def order_floor_sentence(forced: ForcedSummary) -> str:
    """The scoring-order floor in words ("" without one): B's prefix cache stayed on, so
    A's tokens were scored twice; whether the A-vs-B KL lies within that."""
    floor = forced.order_floor
    if floor is None or not floor.positions or floor.kl is None:
        return ""
    verdict = ("the A-vs-B KL mean lies within it: not called drift" if forced.within_order_floor
               else "the A-vs-B KL mean is above it")
    return (f"Scoring-order floor (B scoring A's tokens again in the reverse order, its prefix "
            f"cache on): KL mean {floor.kl.mean:.3g}, p99 {floor.kl.p99:.3g}; {verdict}")


def collecting_speed(summary: Summary) -> list[str]:
    """What was measured of speed, each in a line that says what it compares: output
    tokens per second while collecting (logprobs asked), B against A when the compared
    answers generated as many tokens; then the throughput phase's figures, when it ran."""
    if summary.evaluation is not None:  # nothing was sent: the eval harnesses ran it
        return ["speed: not measured (both sides were imported from eval logs)"]
    performance = summary.performance
    a, b = performance.a, performance.b
    what = "output tokens per second while collecting (logprobs on)"
    ratio = performance.throughput_ratio_b_over_a
    if performance.throughput_comparable and ratio is not None:
        lines = [f"{what}, B/A = {ratio:.2f}x (B {b.output_tokens_per_s or 0:,.1f}, A "
                 f"{a.output_tokens_per_s or 0:,.1f}; both generated "
                 f"{a.compared_output_tokens} tokens)"]
    elif a.compared_output_tokens is not None and b.compared_output_tokens is not None \
            and a.compared_output_tokens != b.compared_output_tokens:
        lines = [f"{what}: not compared, the answers generated other token counts "
                 f"(A {a.compared_output_tokens}, B {b.compared_output_tokens})"]
    else:
        lines = [f"{what}: not compared (no timings or token counts on one side)"]
    if summary.throughput is not None:
        lines.append("throughput phase (without logprobs, one endpoint at a time): "
                     f"{summary.throughput.note}")
    return lines


def flip_causes_phrase(causes: dict[str, int]) -> str:
    """'of the flips, 1 confident, 1 B's repeats disagree (counted); 1 near tie on A
    (to review: the reference itself unsure)' (the classes with flips, in FLIP_CAUSES
    order), or "" without flips."""
    def listed(kinds: tuple[str, ...]) -> str:
        return ", ".join(f"{causes[cause]} {FLIP_CAUSE_WORDS[cause]}" for cause in kinds
                         if causes.get(cause))

    counted = listed(tuple(c for c in FLIP_CAUSES if c not in REVIEW_CAUSES))
    review = listed(REVIEW_CAUSES)
    parts = ([f"{counted} (counted)"] if counted else []) + (
        [f"{review} (to review: the reference itself unsure)"] if review else [])
    if not parts:
        return ""
    return f"of the flip{'' if sum(causes.values()) == 1 else 's'}, " + "; ".join(parts)


PROMPT_CACHE_HINT = (
    "only the first request differs, the repeats after it agree: the mark of a prompt "
    "cache (a repeat finds the prompt cached and evaluates it differently); on "
    "llama-server, check with --extra-body '{\"cache_prompt\": false}'")


def template_warning(summary: Summary) -> str | None:
    """Once, at the top: what says a chat template is wrong (a side's preflight, A's
    rendering against B's, answers that echo the question or carry template markers),
    with the fix; None when nothing does."""
    preflight, signs = summary.preflight, summary.counts.template
    warned: dict[str, list[str]] = {}  # message -> the sides whose preflight said it
    for side, report in (("A", preflight.a), ("B", preflight.b)):
        for check in report.checks if report else []:
            if check.name == "template" and check.status == "warn":
                warned.setdefault(check.message, []).append(side)
    found = [f"{_whose(sides)}: {message}" for message, sides in warned.items()]
    if preflight.template is not None and preflight.template.status == "warn":
        found.append(preflight.template.message)
    if signs is not None and signs.any:
        found.append(f"answers that echo the question: A {signs.a_echo}, B {signs.b_echo}; "
                     f"answers with template markers: A {signs.a_markers}, "
                     f"B {signs.b_markers}")
    if not found:
        return None
    return "Chat template: " + "; ".join(found) + ". " + _template_advice(summary)


def _template_advice(summary: Summary) -> str:
    """Only the answers show it while both servers' templates passed preflight: the
    model is likely not trained for chat (measured: a base Gemma 3 270M behind its own
    template echoed 8 of 8 questions)."""
    reports = (summary.preflight.a, summary.preflight.b)
    passed = all(report is not None and any(c.name == "template" and c.status == "pass"
                                            for c in report.checks) for report in reports)
    rendered = summary.preflight.template
    if passed and (rendered is None or rendered.status != "warn"):
        return ("Both servers' templates passed preflight, so the model itself may not be "
                "trained for chat (a base model echoes the question whatever the template): "
                "differences in these answers measure that, not the change; give it raw "
                "prompts (prompt: instead of messages:) or use an instruction-tuned model.")
    return ("Differences this causes measure the template, not the change: serve the model "
            "with its own chat template.")


def _whose(sides: list[str]) -> str:
    """"A's server", "A's and B's servers"."""
    return " and ".join(f"{side}'s" for side in sides) + " server" + "s" * (len(sides) > 1)


def collapse_warning(summary: Summary) -> str | None:
    """Distinct prompts B answers alike while A answers them differently, group by group
    (the first ids, the answer's start); also when A collapses where B does not. None
    when neither does."""
    collapse = summary.counts.collapse
    if collapse is None or not (collapse.new_on_b or collapse.new_on_a):
        return None
    found = []
    if collapse.new_on_b:
        groups = "; ".join(
            f"{plural(group.prompts, 'prompt')} ({', '.join(group.ids)}"
            f"{', ...' if group.prompts > len(group.ids) else ''}) answer "
            f"\"{' '.join(group.answer.split())}{'...' if len(group.answer) == 80 else ''}\""
            for group in collapse.groups)
        found.append(f"B gives {plural(collapse.new_on_b, 'distinct prompt')} the same answer "
                     f"while A answers them differently (collapse): {groups}")
    if collapse.new_on_a:
        found.append(f"A gives {plural(collapse.new_on_a, 'distinct prompt')} the same answer "
                     "while B answers them differently")
    return ". ".join(found)


def judge_sentence(judge: JudgeFigures) -> str:
    """"judge qwen (quantcheck-factuality/1) on 6 pairs no expect decided: 2 factual_flip,
    ...; 12 requests, 0 from the cache, in 3.1 s, 2,400 tokens"."""
    who = f"judge {judge.model or judge.endpoint} ({judge.prompt_version})"
    if not judge.pairs:
        said = "no pair needed it"
    else:
        said = (f"on {plural(judge.pairs, 'pair')} no expect decided: " + ", ".join(
            f"{n} {judge_class.replace('_', ' ')}" for judge_class, n in judge.classes.items()))
    cost = (f"{plural(judge.requests, 'request')} sent, {judge.cached} replies from the "
            f"cache, {judge.failed} without an answer, {judge.seconds:.1f} s, "
            f"{judge.prompt_tokens + judge.completion_tokens:,} tokens")
    stopped = f"; {judge.error}" if judge.error else ""
    return f"{who} {said} ({cost}){stopped}"



@dataclass
class TaskLine:
    """One task of two imported eval logs, in the words and figures the terminal and
    the sheet show (the sheet's eval-task table, one row)."""

    task: str
    metric: str
    shots: str
    paired: str
    a_rate: str
    b_rate: str
    a_reported: str
    b_reported: str
    flips: str
    mcnemar: str
    detectable: str
    recovery: str


def figure(value: float | None) -> str:
    """A share as its shortest exact decimal (repr): compared digit for digit with
    what the harness reported."""
    return "-" if value is None else repr(float(value))


def task_lines(summary: Summary) -> list[TaskLine]:
    """Each task of an imported pair of eval logs: its verdict metric, the paired pass
    rates beside the harness's own figures, the flips, McNemar, the detectable change
    and the recovery."""
    evaluation = summary.evaluation
    if evaluation is None:
        return []
    lines = []
    for task in evaluation.tasks:
        rate = summary.stats.categories.get(task.task) if task.metric else None
        lines.append(TaskLine(
            task=task.task, metric=task.metric or "no pass/fail metric",
            shots="-" if task.few_shot is None else f"{task.few_shot}-shot",
            paired=(f"{rate.checked} of {task.a_samples} / {task.b_samples}" if rate
                    else f"0 of {task.a_samples} / {task.b_samples}"),
            a_rate=figure(rate.a_pass_rate if rate else None),
            b_rate=figure(rate.b_pass_rate if rate else None),
            a_reported=figure(task.a_reported), b_reported=figure(task.b_reported),
            flips=(f"{rate.regressions} / {rate.improvements}" if rate else "-"),
            mcnemar=f"{rate.mcnemar_p:.3g}" if rate else "-",
            detectable=(f"{100 * rate.detectable_change:.2g} points"
                        if rate and rate.detectable_change is not None
                        else "none detectable" if rate else "-"),
            recovery=(f"{rate.recovery_percent:.2f}%" if rate and rate.recovery_percent
                      is not None else "-")))
    return lines


def evaluation_sentences(summary: Summary) -> list[str]:
    """The terminal's lines on imported eval logs: a line per task, the average, the
    imports' notes."""
    evaluation = summary.evaluation
    if evaluation is None:
        return []
    harness = evaluation.harness
    said = []
    for line in task_lines(summary):
        said.append(f"Task {line.task} ({line.metric}, {line.shots}, {line.paired} samples "
                    f"paired): A {line.a_rate} ({harness}: {line.a_reported}), B {line.b_rate} "
                    f"({harness}: {line.b_reported}); flips A pass B fail / improvements "
                    f"{line.flips}; McNemar p = {line.mcnemar}; detectable change "
                    f"{line.detectable}; recovery {line.recovery}")
    if evaluation.recovery_percent is not None and len(evaluation.tasks) > 1:
        said.append(f"Average over {plural(len(evaluation.tasks), 'task')}: A "
                    f"{figure(evaluation.a_average)}, B {figure(evaluation.b_average)}; "
                    f"recovery {evaluation.recovery_percent:.2f}%")
    said += [f"note: {note}" for note in evaluation.notes]
    return said


def backends_warning(summary: Summary) -> str | None:
    """Once, at the top: a side whose answers name more than one backend; None when each
    side was answered by one."""
    said = [sentence for name, found in sorted(summary.backends.items())
            if (sentence := mixed_sentence(name.upper(), found))]
    if not said:
        return None
    return ("; ".join(said) + ". Its pairs mix what two servers answered: collect again "
            "once one build serves (the gate's mixed_backends rule fails this report)")


SPREAD_WORDS = {"prompt": "each prompt's repeats on one replica",
                "repeat": "each prompt's repeats on different replicas"}


def replicas_lines(summary: Summary) -> list[str]:
    """A line per side served by several URLs: how many replicas answered, whether they
    agree, and which stopped answering."""
    return [_replicas_line(name.upper(), found)
            for name, found in sorted(summary.backends.items()) if found.replicas]


def _replicas_line(name: str, found: SideBackends) -> str:
    answered = sum(1 for replica in found.replicas if replica.requests)
    spread = f" ({SPREAD_WORDS[found.spread]})" if found.spread in SPREAD_WORDS else ""
    parts = [f"{name}: {answered} of {plural(len(found.replicas), 'replica')} answered"
             f"{spread}",
             "their answers name more than one backend" if found.mixed
             else "one backend"]
    if not found.spread_prompts:
        parts.append("answers not compared across replicas (no prompt was answered on "
                     "more than one; --replica-spread repeat compares them)")
    elif found.spread_differing is None:
        parts.append(f"{plural(found.spread_prompts, 'prompt')} answered on several "
                     "replicas, not compared (no logprobs)")
    elif found.spread_differing:
        shown = ", ".join(found.spread_differing_ids[:3])
        parts.append(f"{found.spread_differing} of {plural(found.spread_prompts, 'prompt')} "
                     f"answered on several replicas differ between them ({shown}"
                     f"{', ...' if found.spread_differing > 3 else ''}): the replicas "
                     "do not agree")
    else:
        parts.append(f"the {plural(found.spread_prompts, 'prompt')} answered on several "
                     "replicas agree")
    for replica in found.replicas:
        if replica.dropped:
            parts.append(f"mid-run, {replica.dropped}; "
                         "its requests went to the others")
    return "; ".join(parts)
