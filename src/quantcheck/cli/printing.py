"""What the commands print of the library's results: the summary, the overview, the
gate's verdict, the preflight, the forced figures, throughput, determinism, probes, log
matches; and `run`, `compare` and `demo` ending on the gate's verdict."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

import click
import msgspec

from ..errors import ExitCode
from ..gate.explain import Failure, markdown_table, markdown_text
from ..gate.overview import CandidatesGate
from ..gate.verdict import review_phrase
from ..pipeline.checking import PreflightResult, Probe
from ..present.sentences import (
    PROMPT_CACHE_HINT,
    agreement_sentence,
    backends_warning,
    collapse_warning,
    collecting_speed,
    evaluation_sentences,
    headline,
    judge_sentence,
    order_floor_sentence,
    plural,
    repeats_sent,
    replicas_lines,
    template_warning,
)
from ..store.folders.run_dir import Throughput
from ..store.inputs.suites import Suite
from ..store.records.preflight_records import Preflight
from ..store.records.report_records import (
    DeterminismReport,
    ForcedSummary,
    LogMatch,
    Overview,
    Summary,
)
from ..triage.cells import CELL_AXES
from ..triage.forced_figures import llama_cpp_sentence
from .guard import run_guarded

STATUS_MARK = {"pass": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


def echo_preflight(report: Preflight, label: str, err: bool = True) -> None:
    """One line per check (and its fix): on stderr beside a collection's progress, on
    stdout as the `preflight` command's own result."""
    click.echo(f"{label}: preflight {report.status} ({report.seconds:.1f} s)", err=err)
    for check in report.checks:
        click.echo(f"  {STATUS_MARK[check.status]} {check.name:<10} {check.message}", err=err)
        if check.fix and check.status in ("warn", "fail"):
            click.echo(f"       {'':<10} fix: {check.fix}", err=err)


def echo_preflights(result: PreflightResult, as_json: bool) -> None:
    """`quantcheck preflight`: each endpoint's checks, then whether they tokenize alike."""
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins({
            "endpoints": result.reports, "tokenizer_agreement": result.tokenizer_agreement,
            "template_agreement": result.template_agreement}),
            indent=2))
        return
    for label, report in zip("AB", result.reports, strict=False):
        echo_preflight(report, f"{label} {report.endpoint}", err=False)
    shown = [result.tokenizer_agreement]
    if result.template_agreement and result.template_agreement.status != "skip":
        shown.append(result.template_agreement)
    for agreement in filter(None, shown):
        click.echo(f"A and B: {agreement.name} {agreement.status}: {agreement.message}")


def echo_forced(forced: ForcedSummary) -> None:
    """The teacher-forced figures in one sentence, with the noise floor."""
    overall, noise = forced.overall, forced.noise_floor
    if not overall.positions or overall.kl is None or overall.delta_p is None:
        click.echo(f"Teacher-forced ({forced.mode}): nothing scored "
                   f"({'; '.join(sorted(set(forced.skipped.values()))) or 'no tokens'}).")
        return
    floor = (f"; A against its own repeats: top-1 {100 * (noise.top1_agreement or 0):.1f}%, "
             f"KL mean {noise.kl.mean:.3g}" if noise.positions and noise.kl else "")
    approximate = ", approximate" if forced.approximate else ""
    speed = (f" ({overall.positions / forced.seconds:,.0f} positions/s)"
             if forced.seconds else "")
    click.echo(f"Teacher-forced ({forced.mode}{approximate}): B's top-1 is A's token at "
               f"{100 * (overall.top1_agreement or 0):.1f}% of {overall.positions} positions"
               f"{speed}, KL mean {overall.kl.mean:.3g} (p99 {overall.kl.p99:.3g}, max "
               f"{overall.kl.max:.3g}), mean delta p {overall.delta_p.mean:+.4f}{floor}.")
    click.echo(llama_cpp_sentence(overall, min(forced.a_top_k or forced.top_k, forced.top_k),
                                  forced.quarter_k) + ".")
    if forced.within_floor is not None:
        click.echo(forced.within_floor.sentence[0].upper() + forced.within_floor.sentence[1:] + ".")
    if forced.cache:
        click.echo(f"Prefix cache: {forced.cache}.")
    if floor := order_floor_sentence(forced):
        click.echo(floor + ".")
    if forced.by_position_sentence:
        click.echo(forced.by_position_sentence + ".")
    if forced.tokenizer:
        click.echo(f"Tokenizer: {forced.tokenizer}.")


def print_result(result: Summary | Overview, out: Path) -> None:
    """One candidate's summary, or the overview of several."""
    if isinstance(result, Overview):
        print_overview(result, out)
    else:
        print_summary(result, out)


def print_summary(summary: Summary, out: Path) -> None:
    sides = f"{summary.a.label} (A) vs {summary.b.label} (B)"
    comparison = summary.comparison
    if not comparison.compared:
        click.echo(f"{sides}: {comparison.sentence}.")
        click.echo(f"report: {out}")
        return
    click.echo(f"{sides}: {headline(summary)}")
    if comparison.compared != comparison.prompts:
        click.echo(comparison.sentence[0].upper() + comparison.sentence[1:] + ".")
    if summary.stats.pass_rate:
        click.echo(summary.stats.pass_rate.sentence + ".")
        if summary.stats.pass_rate.resolution_sentence:
            click.echo(summary.stats.pass_rate.resolution_sentence + ".")
    for line in evaluation_sentences(summary):
        click.echo(line + ("" if line.startswith("note:") else "."))
    if summary.forced is not None and summary.forced.scored:
        echo_forced(summary.forced)
    if sent := repeats_sent(summary):
        click.echo(sent + ".")
    for line in collecting_speed(summary):
        click.echo(line)
    if summary.judge is not None:
        line = judge_sentence(summary.judge)
        said = agreement_sentence(summary.judge.agreement, sum(summary.judge.labels.values()))
        click.echo(f"{line[0].upper()}{line[1:]}; {said}.")
    if summary.cells.warning:
        click.echo(f"warning: {summary.cells.warning}")
    if template := template_warning(summary):
        click.echo(f"warning: {template}")
    if collapse := collapse_warning(summary):
        click.echo(f"warning: {collapse}.")
    for session in summary.sessions:
        click.echo(session.sentence[0].upper() + session.sentence[1:] + ".")
    if mixed := backends_warning(summary):
        click.echo(f"warning: {mixed}")
    for line in replicas_lines(summary):
        click.echo(f"replicas: {line}")
    for side, found in sorted(summary.log_matches.items()):
        for match in found:
            kind = "BLOCKING" if match.blocking else "warning"
            click.echo(f"{kind}: {side.upper()} log {match.log}:{match.line}: "
                       f"{match.signature}: {match.meaning}")
    if summary.reviews_set_aside:
        click.echo(f"{len(summary.reviews_set_aside)} review file(s) made for the report this "
                   f"one replaces set aside in {Path(summary.reviews_set_aside[0]).parent} "
                   "(they reviewed other answers)")
    click.echo(f"report: {out} (review sheet: {out / 'index.html'}; or "
               f"`{invocation()} review {shlex.quote(str(out))}`)")


def print_overview(overview: Overview, out: Path) -> None:
    """One line per candidate, then the recommendation and why the others were not."""
    head = (f"{'candidate':<16} {'gate':<5} {'compared':>9} {'identical':>9} {'flips':>6} "
            f"{'degen.':>7} {'pass rate (A, B)':<18} {'forced KL':>9}  throughput")
    click.echo(f"{overview.reference.label} (reference) against "
               f"{len(overview.candidates)} candidates:")
    click.echo(head)
    for row in overview.candidates:
        rates = row.pass_rate.rates() if row.pass_rate else "-"
        kl = f"{row.forced_kl_mean:.3g}" if row.forced_kl_mean is not None else "-"
        speed = row.throughput.note if row.throughput else "not measured"
        click.echo(f"{row.label:<16} {row.gate:<5} {f'{row.compared}/{row.prompts}':>9} "
                   f"{row.identical:>9} {row.factual_flips:>6} {row.degenerate_new_on_b:>7} "
                   f"{rates:<18} {kl:>9}  {speed}")
    decision = overview.recommendation
    if decision.label:
        click.echo(f"recommended: {decision.label}, {decision.reason}")
    else:
        click.echo(f"no candidate is recommended: {decision.reason}")
    for label, why in decision.not_picked.items():
        click.echo(f"  not {label}: {why}")
    click.echo(f"overview: {out / 'index.html'} (overview.json, matrix.csv; each "
               f"candidate's report in {out / 'candidates'})")


def echo_gate_verdict(result: Summary | Overview, report_dir: Path,
                      rubric: Path | None = None, write: bool = False) -> bool:
    """The gate's verdict on what was just compared, under the default policy, in one
    line, as `quantcheck gate REPORT_DIR --rubric RUBRIC` would say it (`write`: with its
    gate.json and junit.xml, as the demo leaves them); whether a candidate fails it."""
    if isinstance(result, Overview):
        failing = [row for row in result.candidates if row.gate != "pass"]
        passed = not failing
        said = ("FAIL: " + "; ".join(f"{row.label}: {', '.join(row.gate_reasons) or 'fails'}"
                                     for row in failing)
                if failing else "PASS: every candidate passes")
    else:
        from ..gate.verdict import gate_report, one_line, report_verdict
        from ..store.inputs.rubric import load_rubric

        decide = gate_report if write else report_verdict
        verdict = run_guarded(lambda: decide(report_dir, rubric=load_rubric(rubric))[0], "")
        passed, said = verdict.passed, one_line(verdict)
    click.echo(f"gate (default policy): {said}")
    return not passed


def exit_like_the_gate(result: Summary | Overview, report_dir: Path,
                       rubric: Path | None = None) -> None:
    """`run` and `compare` end as `quantcheck gate REPORT_DIR --rubric RUBRIC` would
    under the default policy, saying why: 1 when a candidate fails it (a factual flip, a
    new degenerate output, a request without an answer, a review's blocking label,
    ...), 2 when nothing could be compared, else 0 (after the report was written and
    printed)."""
    if echo_gate_verdict(result, report_dir, rubric):
        sys.exit(ExitCode.FAIL)


def invocation() -> str:
    """quantcheck as the user can type it again: `quantcheck` when that name on PATH is
    this program, else this program's path (a virtual environment not activated), else
    `python -m quantcheck`."""
    program = Path(sys.argv[0])
    if program.name == "quantcheck" and program.exists():
        found = shutil.which("quantcheck")
        if found and Path(found).resolve() == program.resolve():
            return "quantcheck"
        return shlex.quote(str(program.resolve()))
    return f"{shlex.quote(sys.executable)} -m quantcheck"


def echo_throughput(result: Throughput, concurrency: int) -> None:
    speed = f"{result.tokens_per_s:,.0f} output tokens/s" if result.tokens_per_s else \
        "no token counts (the server reports no usage)"
    ttft = f"{1000 * result.ttft_p50_s:.0f} ms" if result.ttft_p50_s is not None else "-"
    e2e = f"{result.e2e_p99_s:.2f} s" if result.e2e_p99_s is not None else "-"
    click.echo(f"{result.label}: {speed} at concurrency {concurrency}, {result.requests} "
               f"requests in {result.seconds:.1f} s; TTFT p50 {ttft}, end-to-end p99 {e2e}")


def echo_determinism(report: DeterminismReport, out: Path, page: Path) -> None:
    """Each mode's counts and routing diagnoses, then where the report is."""
    for mode, counts in report.modes.items():
        click.echo(f"{mode}: {counts.prompts} prompts: {counts.deterministic} "
                   f"deterministic, {counts.logprobs_vary} with varying logprobs, "
                   f"{counts.text_varies} with varying text")
        if counts.only_first_differs:
            click.echo(f"  {plural(counts.only_first_differs, 'prompt')}: {PROMPT_CACHE_HINT}")
        echo_routing_verdicts(report, mode)
    click.echo(f"report: {out / 'determinism.csv'}, {page}")


def echo_routing_verdicts(report: DeterminismReport, mode: str) -> None:
    """One line per routing diagnosis of a mode, with an example prompt's sentence."""
    for kind, prompts in report.modes[mode].routing.items():
        example = next(row for row in report.prompts if row.mode == mode and row.routing == kind)
        click.echo(f"  routing: {plural(prompts, 'prompt')}: "
                   f"{example.routing_sentence} (e.g. {example.prompt_id})")


def echo_probe(found: Probe, as_json: bool) -> None:
    """The server's facts and cell key, or all of it as JSON."""
    if as_json:
        click.echo(json.dumps({"endpoint": found.endpoint,
                               "server": msgspec.to_builtins(found.server),
                               "cell": found.cell, "cell_key": found.cell_key},
                              indent=2, sort_keys=True))
        return
    axes = [*CELL_AXES, *sorted(set(found.cell) - set(CELL_AXES))]
    known = [(axis, found.cell[axis]) for axis in axes
             if found.cell.get(axis) not in (None, "")]
    width = max(len(name) for name in ["endpoint", "cell key", *(a for a, _ in known)])
    click.echo(f"{'endpoint':<{width}}  {found.endpoint}")
    for axis, value in known:
        click.echo(f"{axis:<{width}}  {value}")
    click.echo(f"{'cell key':<{width}}  {found.cell_key}")
    unknown = [axis for axis in axes if found.cell.get(axis) in (None, "")
               and axis != "concurrency"]  # a property of a collection, not of the server
    if unknown:
        click.echo(f"not revealed by the server: {', '.join(unknown)} (give them with "
                   "--cell KEY=VALUE, e.g. --cell gpu=H100)")


def echo_log_matches(matches: list[LogMatch], logs: int, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(matches), indent=2))
        return
    for match in matches:
        kind = "BLOCKING" if match.blocking else "warning"
        click.echo(f"{kind} {match.log}:{match.line} ({match.count}x) {match.signature}\n"
                   f"  {match.text}\n  meaning: {match.meaning}\n  action: {match.action}\n"
                   f"  reference: {match.reference}")
    if not matches:
        click.echo(f"no known failure signature in {logs} log(s)")


def candidates_markdown(decision: CandidatesGate, overview: Overview,
                        failures: Mapping[str, list[Failure]] | None = None) -> str:
    """The gate's verdict on every candidate as the Markdown the step summary gets, then
    why each failing candidate fails, prompt by prompt."""
    lines = [f"## quantcheck: {decision.verdict.upper()}", "",
             f"**{markdown_text(overview.reference.label)}** (reference) against "
             f"{len(decision.candidates)} candidates", "",
             "| candidate | verdict | why |", "|---|---|---|"]
    for label, result in decision.candidates.items():
        why = [*result.reasons(), review_phrase(result.flips_to_review)]
        lines.append(f"| {markdown_text(label)} | {result.verdict} | "
                     f"{markdown_text('; '.join(filter(None, why)))} |")
    choice = decision.recommendation
    lines += ["", f"Recommended: **{markdown_text(choice.label)}**, "
              f"{markdown_text(choice.reason)}." if choice.label
              else f"No candidate is recommended: {markdown_text(choice.reason)}."]
    for label, found in (failures or {}).items():
        lines += markdown_table(found, overview.reference.label, label,
                                title=f"Why {markdown_text(label)} fails")
    return "\n".join(lines) + "\n"


def echo_suites(suites: list[Suite]) -> None:
    width = max(len(s.name) for s in suites)
    for suite in suites:
        click.echo(f"{suite.name:<{width}}  {suite.prompts:>3} prompts  "
                   f"checks: {', '.join(suite.checks)}")
        click.echo(f"{'':<{width}}  {suite.description}")
    click.echo(f"\nFiles: {suites[0].path.parent}")
