"""Shared pieces of the commands: options, progress, errors, the A/B flow."""

from __future__ import annotations

import functools
import json
import math
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from ..errors import QuantcheckError
from ..fetch.collect import (
    REPEAT_MODES,
    CollectResult,
    CollectSettings,
    collect,
)
from ..fetch.forced_scoring import MODES
from ..judge.cells import parse_cell_options
from ..judge.parallel import available_cores
from ..judge.sandbox import Limits
from ..pipeline.ab import ABRun, run_ab, run_candidates
from ..pipeline.comparing import CompareOptions
from ..present.sentences import headline
from ..store.preflight_records import Preflight
from ..store.prompt_sets import APIS, RequestOptions
from ..store.report_records import ForcedSummary, Overview, Summary
from ..store.run_records import DEFAULT_CONTEXT_TOKENS, DEFAULT_MAX_RESPONSE_MB, Completion

F = TypeVar("F", bound=Callable[..., Any])
EXISTING_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
EXISTING_DIR = click.Path(exists=True, file_okay=False, path_type=Path)


class PlainProgress:
    """Progress for logs (stderr is not a terminal): a line at every tenth, with ETA."""

    def __init__(self, length: int, label: str) -> None:
        self.length, self.label = length, label
        self.done = 0
        self.started = time.monotonic()
        self.next_report = 0.1

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, count: int) -> None:
        self.done += count
        share = self.done / self.length if self.length else 1.0
        if share + 1e-9 < self.next_report and self.done != self.length:
            return
        while self.next_report <= share + 1e-9:
            self.next_report += 0.1
        elapsed = time.monotonic() - self.started
        eta = elapsed / share - elapsed if share else 0.0
        click.echo(f"{self.label}: {self.done}/{self.length} ({share:.0%}), "
                   f"{elapsed:.0f} s elapsed, ETA {eta:.0f} s", err=True)


def progress_bar(length: int, label: str) -> Any:
    """A live bar on a terminal; periodic lines in a log."""
    if sys.stderr.isatty():
        return click.progressbar(length=length, label=label, show_eta=True, show_pos=True,
                                 file=sys.stderr)
    return PlainProgress(length, label)


class ProgressReporter:
    """Shows a progress bar with ETA on stderr and prints warnings once."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Any = None
        self.failures = 0
        self.causes: dict[str, int] = {}  # error -> requests that failed with it

    def checking(self, endpoint: str) -> None:
        click.echo(f"{self.label}: preflight checks on {endpoint} ...", err=True)

    def checked(self, report: Preflight) -> None:
        echo_preflight(report, self.label)

    def started(self, total: int, already_done: int) -> None:
        self.announce_resume(total, already_done)
        self.bar = progress_bar(total - already_done, self.label)
        self.bar.__enter__()

    def announce_resume(self, total: int, already_done: int) -> None:
        if already_done:
            click.echo(f"{self.label}: resuming, {already_done} of {total} requests already "
                       "collected", err=True)

    def completed(self, record: Completion) -> None:
        """A failure is printed the first time its cause is seen; the same cause again
        is only counted (a dead server fails every request alike), and `close` prints
        the counts."""
        if record.error:
            self.failures += 1
            seen = self.causes.get(record.error, 0)
            self.causes[record.error] = seen + 1
            if not seen:
                self._line(f"{self.label}: {record.prompt_id} repeat {record.repeat} failed: "
                           f"{record.error}")
        if self.bar is not None:
            self.bar.update(1)

    def warn(self, message: str) -> None:
        self._line(f"warning: {message}")

    def _line(self, text: str) -> None:
        """A line of its own, also when a live bar holds the terminal's last line."""
        click.echo(("\n" if sys.stderr.isatty() else "") + text, err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
        if any(count > 1 for count in self.causes.values()):
            for cause, count in sorted(self.causes.items(), key=lambda item: -item[1]):
                click.echo(f"{self.label}: {count} request{'s' * (count != 1)} failed: {cause}",
                           err=True)
        self.causes = {}


STATUS_MARK = {"pass": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


def echo_preflight(report: Preflight, label: str, err: bool = True) -> None:
    """One line per check (and its fix): on stderr beside a collection's progress, on
    stdout as the `preflight` command's own result."""
    click.echo(f"{label}: preflight {report.status} ({report.seconds:.1f} s)", err=err)
    for check in report.checks:
        click.echo(f"  {STATUS_MARK[check.status]} {check.name:<10} {check.message}", err=err)
        if check.fix and check.status in ("warn", "fail"):
            click.echo(f"       {'':<10} fix: {check.fix}", err=err)


def json_object_option(ctx: click.Context, param: click.Parameter, value: str | None
                 ) -> dict[str, Any]:
    if not value:
        return {}
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise click.BadParameter('must be a JSON object, e.g. {"repeat_penalty": null}')
    return data


def request_options(function: F) -> F:
    """Options shared by every command that sends prompts; --suite names join the
    --prompts files."""
    return _request_options(function, repeats=1, least_repeats=1, repeat_mode=True)


def determinism_request_options(function: F) -> F:
    """The same for `determinism`: six repeats by default (two at least: one request
    has nothing to differ from), the modes given by --modes."""
    return _request_options(function, repeats=6, least_repeats=2, repeat_mode=False)


def _request_options(function: F, repeats: int, least_repeats: int, repeat_mode: bool) -> F:

    @functools.wraps(function)
    def with_suites(*args: Any, suite: tuple[str, ...] = (), **kwargs: Any) -> Any:
        from ..store.suites import suite_files

        files = tuple(kwargs["prompt_files"]) + tuple(run_guarded(lambda: suite_files(suite),
                                                                  ""))
        if not files:
            raise click.UsageError("give a prompt set with --prompts FILE or a built-in suite "
                                   "with --suite NAME (see `quantcheck suites`)")
        kwargs["prompt_files"] = files
        return function(*args, **kwargs)

    options = [
        click.option("--prompts", "prompt_files", multiple=True, type=EXISTING_FILE,
                     help="Prompt set (YAML); repeat for several."),
        click.option("--suite", multiple=True, metavar="NAME[,NAME]",
                     help="A built-in suite (facts, math, json, tools, code, multilingual, "
                          "long-context); with or instead of --prompts."),
        click.option("--repeats", default=repeats, show_default=True,
                     type=click.IntRange(least_repeats),
                     help="Identical requests per prompt (feeds the determinism signature)."),
        *([click.option("--repeat-mode", type=click.Choice(REPEAT_MODES), default="pool",
                        show_default=True,
                        help="pool: everything at --concurrency; sequential: one request at "
                             "a time; burst: a prompt's repeats all at once; loaded: each "
                             "repeat while fillers keep the server busy.")]
          if repeat_mode else []),
        click.option("--top-logprobs", default=20, show_default=True, type=click.IntRange(0),
                     help="Top-k alternatives per token; 0 collects text only."),
        click.option("--max-tokens", type=click.IntRange(1),
                     help="Cap for every prompt (overrides the prompt set)."),
        click.option("--concurrency", default=8, show_default=True, type=click.IntRange(1),
                     help="Requests in flight at once."),
        click.option("--api", type=click.Choice(APIS),
                     help="Send prompts through this API (default: from the prompt set)."),
        click.option("--stream/--no-stream", default=True, show_default=True,
                     help="Stream responses (measures time to first token)."),
        click.option("--extra-body", callback=json_object_option,
                     help='JSON merged into every request; null drops a field, e.g. '
                          '\'{"repeat_penalty": null}\'.'),
        click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(0.1),
                     help="Seconds a request may take as a whole, stream included."),
        click.option("--max-response-mb", default=DEFAULT_MAX_RESPONSE_MB, show_default=True,
                     type=click.IntRange(1),
                     help="Size cap of one answer; a larger one fails at once."),
        click.option("--retries", default=4, show_default=True, type=click.IntRange(0),
                     help="Retries on connection errors, 429 and 5xx (with backoff)."),
        click.option("--preflight/--no-preflight", default=True, show_default=True,
                     help="Check the endpoint first (model, logprobs, greedy decoding, "
                          "context truncation, reasoning, tokenizer); a failed check stops "
                          "before any prompt is sent."),
        click.option("--context-tokens", default=DEFAULT_CONTEXT_TOKENS, show_default=True,
                     type=click.IntRange(0),
                     help="Length of the preflight's context-truncation probe; 0 skips it."),
        click.option("--force", is_flag=True,
                     help="Set aside a run made with other parameters and start over."),
        click.option("--shard", metavar="I/N", callback=_shard_option,
                     help="Collect only shard I of N of the prompts (a deterministic slice "
                          "by prompt id); join the shard runs with `quantcheck merge`."),
        click.option("--routed-experts", is_flag=True,
                     help="Record MoE expert routing per token and layer (vLLM started with "
                          "--enable-return-routed-experts; SGLang with routed experts "
                          "capture); collects without streaming."),
        click.option("--routed-experts-shape", callback=_layers_and_k, metavar="LAYERS,K",
                     help="The model's num_hidden_layers and num_experts_per_tok: SGLang "
                          "sends routing without its shape."),
    ]
    return cast(F, _apply(options, with_suites))


def _shard_option(context: click.Context, parameter: click.Parameter, value: str | None
                  ) -> str | None:
    from ..store.shards import ShardError, parse_shard

    if value is None:
        return None
    try:
        index, count = parse_shard(value)
    except ShardError as exc:
        raise click.BadParameter(str(exc), context, parameter) from None
    return f"{index}/{count}"


def _layers_and_k(context: click.Context, parameter: click.Parameter, value: str | None
                  ) -> list[int] | None:
    if value is None:
        return None
    parts = value.replace(" ", "").split(",")
    if len(parts) != 2 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise click.BadParameter(f"{value!r}: expected LAYERS,K, e.g. 48,8", context,
                                 parameter)
    return [int(part) for part in parts]


def settings_from(endpoint: str, label: str, model: str | None, api_key_env: str | None,
                  options: dict[str, Any], cell: tuple[str, ...] = ()) -> CollectSettings:
    return CollectSettings(
        endpoint=endpoint, label=label, model=model, repeats=options["repeats"],
        top_logprobs=options["top_logprobs"], stream=options["stream"],
        concurrency=options["concurrency"], timeout=options["timeout"],
        max_response_mb=options.get("max_response_mb", DEFAULT_MAX_RESPONSE_MB),
        retries=options["retries"], api_key_env=api_key_env,
        repeat_mode=options.get("repeat_mode", "pool"),
        preflight=options.get("preflight", True),
        context_tokens=options.get("context_tokens", DEFAULT_CONTEXT_TOKENS),
        shard=options.get("shard"),
        routed_experts=options.get("routed_experts", False),
        routed_experts_shape=options.get("routed_experts_shape"),
        request=RequestOptions(max_tokens=options["max_tokens"], api=options["api"],
                               extra_body=options["extra_body"]),
        cell=run_guarded(lambda: parse_cell_options(cell), ""))


def collect_with_progress(prompt_files: Sequence[Path], out: Path, settings: CollectSettings,
                           force: bool) -> CollectResult:
    reporter = ProgressReporter(settings.label)
    try:
        result: CollectResult = run_guarded(
            lambda: collect(prompt_files, out, settings, reporter, force),
            f"Records so far are kept in {out}; rerun the same command to resume.")
    finally:
        reporter.close()
    return result


def run_guarded(function: Callable[[], Any], interrupted_hint: str) -> Any:
    """Turn library errors into one clear line and Ctrl-C into a resume hint."""
    try:
        return function()
    except QuantcheckError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted. {interrupted_hint}", err=True)
        sys.exit(130)


def compare_flags(function: F) -> F:
    """Options of every command that compares: logs to scan and approvals to apply."""
    options = [
        click.option("--a-log", type=EXISTING_FILE, help="A's server log, scanned for known "
                     "failure signatures."),
        click.option("--b-log", type=EXISTING_FILE, help="B's server log."),
        click.option("--signatures", "signature_files", multiple=True, type=EXISTING_FILE,
                     help="Your own signatures YAML, besides the shipped one."),
        click.option("--approvals", type=click.Path(dir_okay=False, path_type=Path),
                     help="Approvals file (default: REPORT_DIR/approvals.json)."),
        click.option("--allow-code-exec", is_flag=True,
                     help="Run the answers' code for `code` checks (untrusted code, in a "
                          "limited process: see docs/prompts.md); without it they are skipped."),
        click.option("--code-timeout", default=Limits.wall_s, show_default=True,
                     type=click.FloatRange(0.1), metavar="SECONDS",
                     help="Wall-clock and CPU limit of one code check."),
        click.option("--code-memory-mb", default=Limits.memory_mb, show_default=True,
                     type=click.IntRange(32), help="Memory limit of one code check."),
        click.option("--jobs", type=click.IntRange(1), metavar="N",
                     help="Processes that judge pairs (default: every core)."),
    ]
    return _apply(options, function)


def _apply(options: Sequence[Callable[[Any], Any]], function: F) -> F:
    for option in reversed(options):
        function = option(function)
    return function


def forced_options(function: F) -> F:
    """Options of the commands that score A's tokens on B (teacher forcing)."""
    options = [
        click.option("--forced-mode", type=click.Choice(MODES), default="auto",
                     show_default=True,
                     help="prompt-logprobs: token ids with vLLM's prompt_logprobs (exact); "
                          "token-ids: token ids on llama-server's /completion, one "
                          "position per request (exact); echo: text with echo + logprobs "
                          "(approximate); auto: prompt-logprobs on vLLM, token-ids on "
                          "llama-server, else echo."),
        click.option("--forced-concurrency", default=4, show_default=True,
                     type=click.IntRange(1),
                     help="Scoring requests in flight at once (token-ids: at most "
                          "llama-server's slots)."),
    ]
    return _apply(options, function)


def compare_options(sig_digits: int, options: dict[str, Any]) -> CompareOptions:
    """The compare options of a command (see `compare_flags`)."""
    limits = Limits(wall_s=options["code_timeout"], cpu_s=math.ceil(options["code_timeout"]),
                    memory_mb=options["code_memory_mb"])
    return CompareOptions(sig_digits=sig_digits, approvals=options["approvals"],
                          jobs=options.get("jobs") or available_cores(),
                          a_log=options["a_log"], b_log=options["b_log"],
                          signature_files=options["signature_files"],
                          forced=options.get("forced"),
                          code_exec=limits if options["allow_code_exec"] else None)


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
    if forced.tokenizer:
        click.echo(f"Tokenizer: {forced.tokenizer}.")


def sig_digits_option(function: F) -> F:
    return click.option("--sig-digits", default=12, show_default=True, type=click.IntRange(1, 17),
                        help="Significant digits of logprobs in determinism signatures.")(function)


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
    if summary.forced is not None and summary.forced.scored:
        echo_forced(summary.forced)
    click.echo(summary.performance.throughput_note)
    if summary.cells.warning:
        click.echo(f"warning: {summary.cells.warning}")
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


class SharedBar:
    """One progress bar for both sides of `run`."""

    def __init__(self) -> None:
        self.reporters: list[SideReporter] = []
        self.bar: Any = None

    def side(self, label: str) -> SideReporter:
        reporter = SideReporter(self, label)
        self.reporters.append(reporter)
        return reporter

    def grow(self, count: int) -> None:
        if self.bar is None:
            self.bar = progress_bar(count, "collecting")
            self.bar.__enter__()
        else:
            self.bar.length += count

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


class SideReporter(ProgressReporter):
    def __init__(self, shared: SharedBar, label: str) -> None:
        super().__init__(label)
        self.shared = shared

    def started(self, total: int, already_done: int) -> None:
        self.announce_resume(total, already_done)
        self.shared.grow(total - already_done)
        self.bar = self.shared.bar


def run_ab_with_progress(ab: ABRun) -> Summary | Overview:
    """`pipeline.run_ab` (one candidate) or `run_candidates` (several) with one progress
    bar for every side; prints the summary or the overview."""
    bar = SharedBar()
    reporters = [bar.side(settings.label) for settings in (ab.a, *ab.candidates)]
    several = len(ab.candidates) > 1

    def work() -> Summary | Overview:
        notify = (lambda stage: click.echo(stage, err=True))  # noqa: E731
        return (run_candidates(ab, reporters, notify) if several
                else run_ab(ab, reporters, notify))

    try:
        result: Summary | Overview = run_guarded(
            work, f"Records so far are kept in {ab.out}; rerun the same command to resume.")
    finally:
        bar.close()
    if any(r.failures for r in bar.reporters):
        click.echo("some requests failed after retries; the comparison skips them. Rerun the "
                   "same command to retry.", err=True)
    if isinstance(result, Overview):
        print_overview(result, ab.out)
    else:
        print_summary(result, ab.out)
    return result


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
