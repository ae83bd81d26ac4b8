"""The quantcheck command line: parse, call one library function, print."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from . import __version__
from .cells import CELL_AXES, parse_cell_options
from .collect import REPEAT_MODES, CollectResult, CollectSettings, collect, collect_async
from .compare import compare_to_dir
from .errors import QuantcheckError
from .prompts import APIS, RequestOptions, load_prompts
from .records import Completion
from .summary import headline

F = TypeVar("F", bound=Callable[..., Any])


class ProgressReporter:
    """Shows a progress bar with ETA on stderr and prints warnings once."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Any = None
        self.failures = 0

    def started(self, total: int, already_done: int) -> None:
        if already_done:
            click.echo(f"{self.label}: resuming, {already_done} of {total} requests already "
                       "collected", err=True)
        self.bar = click.progressbar(length=total - already_done, label=self.label,
                                     show_eta=True, show_pos=True, file=sys.stderr)
        self.bar.__enter__()

    def completed(self, record: Completion) -> None:
        if record.error:
            self.failures += 1
            click.echo(f"\n{self.label}: {record.prompt_id} repeat {record.repeat} failed: "
                       f"{record.error}", err=True)
        if self.bar is not None:
            self.bar.update(1)

    def warn(self, message: str) -> None:
        click.echo(f"\nwarning: {message}", err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def _json_object(ctx: click.Context, param: click.Parameter, value: str | None
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
    """Options shared by every command that sends prompts."""
    options = [
        click.option("--prompts", "prompt_files", multiple=True, required=True,
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="Prompt set (YAML); repeat for several."),
        click.option("--repeats", default=1, show_default=True, type=click.IntRange(1),
                     help="Identical requests per prompt (feeds the determinism signature)."),
        click.option("--repeat-mode", type=click.Choice(REPEAT_MODES), default="pool",
                     show_default=True,
                     help="pool: everything at --concurrency; sequential: one request at a "
                          "time; burst: a prompt's repeats all at once; loaded: each repeat "
                          "while fillers keep the server busy."),
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
        click.option("--extra-body", callback=_json_object,
                     help='JSON merged into every request; null drops a field, e.g. '
                          '\'{"repeat_penalty": null}\'.'),
        click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(0.1),
                     help="Seconds per request."),
        click.option("--retries", default=4, show_default=True, type=click.IntRange(0),
                     help="Retries on connection errors, 429 and 5xx (with backoff)."),
        click.option("--force", is_flag=True,
                     help="Set aside a run made with other parameters and start over."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def settings_from(endpoint: str, label: str, model: str | None, api_key_env: str | None,
                  options: dict[str, Any], cell: tuple[str, ...] = ()) -> CollectSettings:
    return CollectSettings(
        endpoint=endpoint, label=label, model=model, repeats=options["repeats"],
        top_logprobs=options["top_logprobs"], stream=options["stream"],
        concurrency=options["concurrency"], timeout=options["timeout"],
        retries=options["retries"], api_key_env=api_key_env,
        repeat_mode=options.get("repeat_mode", "pool"),
        request=RequestOptions(max_tokens=options["max_tokens"], api=options["api"],
                               extra_body=options["extra_body"]),
        cell=run_guarded(lambda: parse_cell_options(cell), ""))


def _collect_with_progress(prompt_files: Sequence[Path], out: Path, settings: CollectSettings,
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="quantcheck")
def cli() -> None:
    """Did this serving change make the model worse?

    Sends the same greedy prompts to two OpenAI-compatible endpoints, triages every
    pair, renders a review sheet and gates CI on factual flips.
    """


@cli.command("collect")
@click.option("--endpoint", required=True, help="Base URL, e.g. http://127.0.0.1:8000/v1.")
@click.option("--label", help="Name of this side, e.g. bf16 (default: the --out folder name).")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Run directory (created; an existing one is resumed).")
@click.option("--model", help="Model name (default: the one model /v1/models lists).")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@click.option("--cell", multiple=True, metavar="KEY=VALUE",
              help="Serving-cell facts the server cannot tell, e.g. gpu=H100 vram_gb=80.")
@request_options
def collect_command(endpoint: str, label: str | None, out: Path, model: str | None,
                    api_key_env: str | None, cell: tuple[str, ...],
                    prompt_files: tuple[Path, ...], force: bool, **options: Any) -> None:
    """Collect greedy generations with top-k logprobs from one endpoint.

    Writes RUN_DIR/manifest.json, prompts.jsonl and completions.jsonl. Running the
    same command again resumes: finished requests are skipped, never duplicated.

    \b
    Example:
      quantcheck collect --endpoint http://127.0.0.1:8000/v1 --label bf16 \\
          --prompts prompts/default.yaml --repeats 3 --out runs/bf16
    """
    settings = settings_from(endpoint, label or out.name, model, api_key_env, options, cell)
    result = _collect_with_progress(prompt_files, out, settings, force)
    click.echo(f"{settings.label}: {result.collected} collected, {result.skipped} already there, "
               f"{result.failed} failed -> {out}", err=True)
    if result.failed:
        click.echo(f"{result.failed} requests failed after retries; rerun the same command to "
                   "retry them.", err=True)
        sys.exit(1)


def compare_options(function: F) -> F:
    """Options of every command that compares: logs to scan and approvals to apply."""
    existing_file = click.Path(exists=True, dir_okay=False, path_type=Path)
    options = [
        click.option("--a-log", type=existing_file, help="A's server log, scanned for known "
                     "failure signatures."),
        click.option("--b-log", type=existing_file, help="B's server log."),
        click.option("--signatures", "signature_files", multiple=True, type=existing_file,
                     help="Your own signatures YAML, besides the shipped one."),
        click.option("--approvals", type=click.Path(dir_okay=False, path_type=Path),
                     help="Approvals file (default: approvals.json next to the prompt set)."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _comparison(out: Path, a: Path, b: Path, sig_digits: int, options: dict[str, Any],
                prompts: dict[str, Any] | None = None) -> dict[str, Any]:
    summary: dict[str, Any] = compare_to_dir(
        a, b, out, sig_digits, prompts, options["approvals"],
        {"a": options["a_log"], "b": options["b_log"]}, options["signature_files"])[1]
    return summary


def _sig_digits(function: F) -> F:
    return click.option("--sig-digits", default=12, show_default=True, type=click.IntRange(1, 17),
                        help="Significant digits of logprobs in determinism signatures.")(function)


@cli.command("compare")
@click.argument("a_run", type=click.Path(exists=True, path_type=Path))
@click.argument("b_run", type=click.Path(exists=True, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Report directory (pairs.csv, summary.json).")
@click.option("--prompts", "prompt_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Prompt set naming the texts of a *.texts.json side (and its expects).")
@_sig_digits
@compare_options
def compare_command(a_run: Path, b_run: Path, out: Path, prompt_files: tuple[Path, ...],
                    sig_digits: int, **options: Any) -> None:
    """Triage every pair of two runs (A = reference, B = candidate).

    A side is a run directory from collect, or a JSON list of texts in prompt order
    (`*.texts.json`, the seeds' format) for text-only triage.

    \b
    Example:
      quantcheck compare runs/bf16 runs/fp8 --out reports/fp8
      quantcheck compare bf16.texts.json fp8.texts.json --prompts prompts/default.yaml \\
          --out reports/texts
    """
    def work() -> dict[str, Any]:
        prompts = {p.id: p for p in load_prompts(prompt_files)} if prompt_files else None
        return _comparison(out, a_run, b_run, sig_digits, options, prompts)

    summary = run_guarded(work, "Nothing was written.")
    _print_summary(summary, out)


def _print_summary(summary: dict[str, Any], out: Path) -> None:
    click.echo(f"{summary['a']['label']} (A) vs {summary['b']['label']} (B): {headline(summary)}")
    click.echo(summary["performance"]["throughput_note"])
    if summary["cells"]["warning"]:
        click.echo(f"warning: {summary['cells']['warning']}")
    for side, found in sorted(summary.get("log_matches", {}).items()):
        for match in found:
            kind = "BLOCKING" if match["blocking"] else "warning"
            click.echo(f"{kind}: {side.upper()} log {match['log']}:{match['line']}: "
                       f"{match['signature']}: {match['meaning']}")
    click.echo(f"report: {out} (review sheet: {out / 'index.html'}; or `quantcheck review {out}`)")


@cli.command("report")
@click.argument("report_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--rubric", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Rubric YAML (default: rubrics/default.yaml).")
def report_command(report_dir: Path, rubric: Path | None) -> None:
    """Re-render the review sheet REPORT_DIR/index.html (e.g. with another rubric,
    or to show every reviewer's file from REPORT_DIR/reviews/).

    \b
    Example:
      quantcheck report reports/fp8 --rubric rubrics/default.yaml
    """
    from .report import write_sheet

    path = run_guarded(lambda: write_sheet(report_dir, rubric), "Nothing was written.")
    click.echo(f"wrote {path}")


@cli.command("review")
@click.argument("report_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--reviewer", default="reviewer", show_default=True,
              help="Your name: every change is written to REPORT_DIR/reviews/NAME.json.")
@click.option("--port", default=8765, show_default=True, type=int)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (only this machine by default).")
@click.option("--rubric", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Rubric YAML (default: rubrics/default.yaml).")
def review_command(report_dir: Path, reviewer: str, port: int, host: str,
                   rubric: Path | None) -> None:
    """Serve the review sheet and save every change to REPORT_DIR/reviews/NAME.json.

    \b
    Example:
      quantcheck review reports/fp8 --reviewer dana
      # then open http://127.0.0.1:8765/ in a browser
    """
    import asyncio

    from aiohttp import web

    from .reviews import review_app

    app = run_guarded(lambda: review_app(report_dir, reviewer, rubric), "Nothing was written.")

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        click.echo(f"review sheet for {report_dir} on http://{host}:{port}/ ; saving to "
                   f"{report_dir / 'reviews' / (reviewer + '.json')} (Ctrl-C stops)", err=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        click.echo("stopped; the review file is saved after every change.", err=True)
    except OSError as exc:
        click.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        sys.exit(2)


class _SharedBar:
    """One progress bar for both sides of `run`."""

    def __init__(self) -> None:
        self.reporters: list[_SideReporter] = []
        self.bar: Any = None

    def side(self, label: str) -> _SideReporter:
        reporter = _SideReporter(self, label)
        self.reporters.append(reporter)
        return reporter

    def grow(self, count: int) -> None:
        if self.bar is None:
            self.bar = click.progressbar(length=count, label="collecting", show_eta=True,
                                         show_pos=True, file=sys.stderr)
            self.bar.__enter__()
        else:
            self.bar.length += count

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


class _SideReporter(ProgressReporter):
    def __init__(self, shared: _SharedBar, label: str) -> None:
        super().__init__(label)
        self.shared = shared

    def started(self, total: int, already_done: int) -> None:
        if already_done:
            click.echo(f"{self.label}: resuming, {already_done} of {total} requests already "
                       "collected", err=True)
        self.shared.grow(total - already_done)
        self.bar = self.shared.bar


@cli.command("run")
@click.option("--a", "a_url", required=True, help="Reference endpoint (e.g. BF16).")
@click.option("--b", "b_url", required=True, help="Candidate endpoint (e.g. FP8).")
@click.option("--a-label", default="a", show_default=True)
@click.option("--b-label", default="b", show_default=True)
@click.option("--a-model", help="Model name on A (default: the one it lists).")
@click.option("--b-model", help="Model name on B (default: the one it lists).")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Report directory; runs go to OUT/a and OUT/b.")
@click.option("--one-side-at-a-time", is_flag=True,
              help="Collect A fully, then B (when both cannot be served at once).")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@click.option("--a-cell", multiple=True, metavar="KEY=VALUE", help="Cell facts for A.")
@click.option("--b-cell", multiple=True, metavar="KEY=VALUE", help="Cell facts for B.")
@_sig_digits
@compare_options
@request_options
def run_command(a_url: str, b_url: str, a_label: str, b_label: str, a_model: str | None,
                b_model: str | None, out: Path, one_side_at_a_time: bool,
                api_key_env: str | None, a_cell: tuple[str, ...], b_cell: tuple[str, ...],
                sig_digits: int, prompt_files: tuple[Path, ...], force: bool,
                a_log: Path | None, b_log: Path | None, signature_files: tuple[Path, ...],
                approvals: Path | None, **options: Any) -> None:
    """The whole A/B in one command: collect both sides, then compare.

    Resumable like collect: rerun the same command after an interruption.

    \b
    Example:
      quantcheck run --a http://127.0.0.1:8000/v1 --a-label bf16 \\
          --b http://127.0.0.1:8001/v1 --b-label fp8 \\
          --prompts prompts/default.yaml --repeats 3 --out reports/fp8
    """
    a = settings_from(a_url, a_label, a_model, api_key_env, options, a_cell)
    b = settings_from(b_url, b_label, b_model, api_key_env, options, b_cell)
    _run_ab(a, b, prompt_files, out, one_side_at_a_time, force, sig_digits,
            {"a_log": a_log, "b_log": b_log, "signature_files": signature_files,
             "approvals": approvals})


def _run_ab(a: CollectSettings, b: CollectSettings, prompt_files: Sequence[Path], out: Path,
            one_side_at_a_time: bool, force: bool, sig_digits: int,
            compare_with: dict[str, Any]) -> dict[str, Any]:
    """Collect both sides (together or one after the other), compare, print the summary."""
    import asyncio

    bar = _SharedBar()

    async def both() -> None:
        jobs = [collect_async(prompt_files, out / side, settings, bar.side(settings.label), force)
                for side, settings in (("a", a), ("b", b))]
        if one_side_at_a_time:
            for job in jobs:
                await job
        else:
            await asyncio.gather(*jobs)

    try:
        run_guarded(lambda: asyncio.run(both()),
                    f"Records so far are kept in {out}; rerun the same command to resume.")
    finally:
        bar.close()
    if any(r.failures for r in bar.reporters):
        click.echo("some requests failed after retries; the comparison skips them. Rerun the "
                   "same command to retry.", err=True)
    summary: dict[str, Any] = run_guarded(
        lambda: _comparison(out, out / "a", out / "b", sig_digits, compare_with),
        "Nothing was written.")
    _print_summary(summary, out)
    return summary


@cli.command("demo")
@click.option("--engine", type=click.Choice(["gemma", "scripted"]), default="gemma",
              show_default=True,
              help="gemma: the real Gemma 3 270M on CPU (needs the demo extra); scripted: "
                   "planted changes, no model.")
@click.option("--b-precision", type=click.Choice(["bf16", "fp8", "int4"]), default="fp8",
              show_default=True, help="The candidate's weight format (A is bf16).")
@click.option("--fault", type=click.Choice(["none", "nondeterministic", "lmhead-noscale"]),
              default="none", show_default=True, help="A fault planted in B.")
@click.option("--out", default=Path("reports/demo"), show_default=True,
              type=click.Path(file_okay=False, path_type=Path))
@click.option("--repeats", default=2, show_default=True, type=click.IntRange(1))
def demo_command(engine: str, b_precision: str, fault: str, out: Path, repeats: int) -> None:
    """The whole A/B on built-in local endpoints: no GPU, no endpoints of your own.

    Starts two lab servers on 127.0.0.1 (A = bf16, B = --b-precision, with --fault),
    runs prompts/demo.yaml, compares, writes the review sheet, prints the summary and
    the gate's verdict, stops the servers, and prints how to go on.

    \b
    Example:
      quantcheck demo
      quantcheck demo --b-precision int4
      quantcheck demo --fault lmhead-noscale
    """
    for side in ("a", "b"):  # the demo's own runs: its servers get new ports every time
        shutil.rmtree(out / side, ignore_errors=True)
    options: dict[str, Any] = {
        "repeats": repeats, "top_logprobs": 5, "stream": True, "concurrency": 2,
        "timeout": 300.0, "retries": 2, "max_tokens": None, "api": None, "extra_body": {}}
    if engine == "scripted":
        summary = _scripted_demo(out, options)
    else:
        summary = _model_demo(out, options, b_precision, fault)
    from . import gate
    from .rubric import load_rubric

    pairs, _ = gate.require_report(out)
    verdict = gate.evaluate(pairs, {}, set(load_rubric().blocking), gate.Policy(),
                            summary.get("log_matches"))
    click.echo(f"gate (default policy): {gate.one_line(verdict)}")
    click.echo(f"\nOpen the review sheet: {(out / 'index.html').resolve().as_uri()}\n"
               f"  or serve it and save reviews to disk: quantcheck review {out}\n"
               "Run the same A/B on your own endpoints:\n"
               "  quantcheck run --a http://HOST_A:8000/v1 --b http://HOST_B:8000/v1 "
               "--prompts prompts/default.yaml --out reports/mine")


def _scripted_demo(out: Path, options: dict[str, Any]) -> dict[str, Any]:
    from .lab.demo import demo_servers
    from .prompts import shipped_prompt_file

    prompt_file = run_guarded(lambda: shipped_prompt_file("spot-check.yaml"), "")
    reference, candidate = demo_servers()
    with reference, candidate:
        click.echo(f"A (reference) on {reference.url}/v1, B (candidate) on {candidate.url}/v1 "
                   "[scripted: planted changes, no model]", err=True)
        a = settings_from(reference.url, "bf16-demo", None, None, options)
        b = settings_from(candidate.url, "fp8-demo", None, None, options)
        return _run_ab(a, b, [prompt_file], out, False, False, 12, _NO_EXTRAS)


def _model_demo(out: Path, options: dict[str, Any], b_precision: str,
                fault: str) -> dict[str, Any]:
    from .lab.launch import lab_servers
    from .lab.model import prepare_model
    from .prompts import shipped_prompt_file

    prompt_file = run_guarded(lambda: shipped_prompt_file("demo.yaml"), "")
    click.echo("preparing Gemma 3 270M (the first run converts the shipped GGUF once, about "
               "a minute)...", err=True)
    run_guarded(prepare_model, "")
    b_label = b_precision + ("" if fault == "none" else f"+{fault}")
    click.echo(f"starting lab servers: A = bf16, B = {b_label} (loading takes ~10 s)...",
               err=True)
    with run_guarded(lambda: lab_servers([("bf16", "none"), (b_precision, fault)],
                                         out / "logs"), "") as (a_url, b_url):
        click.echo(f"A on {a_url}/v1, B on {b_url}/v1; collecting...", err=True)
        a = settings_from(a_url, "bf16", None, None, options, ("quantization=bf16",))
        b = settings_from(b_url, b_label, None, None, options, (f"quantization={b_precision}",))
        extras = {**_NO_EXTRAS, "a_log": out / "logs" / "server-a.log",
                  "b_log": out / "logs" / "server-b.log"}
        return _run_ab(a, b, [prompt_file], out, False, False, 12, extras)


_NO_EXTRAS: dict[str, Any] = {"a_log": None, "b_log": None, "signature_files": (),
                              "approvals": None}


@cli.command("probe")
@click.argument("endpoint")
@click.option("--model", help="Model name (default: the one model /v1/models lists).")
@click.option("--cell", multiple=True, metavar="KEY=VALUE",
              help="Facts the server cannot tell, e.g. gpu=H100.")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole description as JSON.")
def probe_command(endpoint: str, model: str | None, cell: tuple[str, ...],
                  api_key_env: str | None, as_json: bool) -> None:
    """Print what a server reveals about itself and its serving-cell key.

    \b
    Example:
      quantcheck probe http://127.0.0.1:8000/v1 --cell gpu="RTX PRO 6000" --cell vram_gb=96
    """
    from .servers import probe

    overrides = run_guarded(lambda: parse_cell_options(cell), "")
    found = run_guarded(lambda: probe(endpoint, model, overrides, api_key_env), "")
    if as_json:
        click.echo(json.dumps(found, indent=2, sort_keys=True))
        return
    click.echo(f"endpoint: {found['endpoint']}")
    for axis in [*CELL_AXES, *sorted(set(found["cell"]) - set(CELL_AXES))]:
        value = found["cell"].get(axis)
        click.echo(f"{axis:>16}: {'(unknown)' if value is None else value}")
    click.echo(f"cell key: {found['cell_key']}")


@cli.command("determinism")
@click.option("--endpoint", required=True, help="Base URL, e.g. http://127.0.0.1:8000/v1.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder: one run per mode, determinism.csv/.json, index.html.")
@click.option("--modes", default="sequential,burst,loaded", show_default=True,
              help="Comma-separated repeat modes: sequential, burst, loaded, pool.")
@click.option("--model", help="Model name (default: the one model /v1/models lists).")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@click.option("--fail-on-nondeterminism", is_flag=True,
              help="Exit 1 when any prompt gives more than one signature (or text).")
@_sig_digits
@request_options
def determinism_command(endpoint: str, out: Path, modes: str, model: str | None,
                        api_key_env: str | None, fail_on_nondeterminism: bool,
                        sig_digits: int, prompt_files: tuple[Path, ...], force: bool,
                        **options: Any) -> None:
    """Is this endpoint deterministic? Repeated identical greedy requests, per mode.

    Reports per prompt and mode "k distinct of n" for texts and logprob signatures,
    the first position where repeats differ and the largest logprob spread.

    \b
    Example:
      quantcheck determinism --endpoint http://127.0.0.1:8000/v1 \\
          --prompts prompts/spot-check.yaml --repeats 6 --out reports/determinism
    """
    from .determinism import determinism_report, render_determinism

    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in REPEAT_MODES]
    if unknown or not chosen:
        raise click.BadParameter(f"unknown mode {unknown[0] if unknown else modes!r}; choose "
                                 f"from {', '.join(REPEAT_MODES)}", param_hint="--modes")
    if options["repeats"] == 1:
        options["repeats"] = 6
    runs = {}
    for mode in chosen:
        settings = settings_from(endpoint, mode, model, api_key_env,
                                 {**options, "repeat_mode": mode})
        _collect_with_progress(prompt_files, out / mode, settings, force)
        runs[mode] = out / mode
    frame, summary = run_guarded(lambda: determinism_report(runs, out, sig_digits), "")
    page = render_determinism(out, frame.to_dict("records"), summary, endpoint, model or "")
    for mode, counts in summary["modes"].items():
        click.echo(f"{mode}: {counts['prompts']} prompts: {counts['deterministic']} "
                   f"deterministic, {counts['logprobs_vary']} with varying logprobs, "
                   f"{counts['text_varies']} with varying text")
    click.echo(f"report: {out / 'determinism.csv'}, {page}")
    varying = int((frame["verdict"] != "deterministic").sum())
    if fail_on_nondeterminism and varying:
        click.echo(f"FAIL: {varying} prompt/mode results are nondeterministic", err=True)
        sys.exit(1)


@cli.command("logscan")
@click.argument("logs", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--signatures", "signature_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Your own signatures YAML, besides the shipped one.")
@click.option("--json", "as_json", is_flag=True, help="Print the matches as JSON.")
def logscan_command(logs: tuple[Path, ...], signature_files: tuple[Path, ...],
                    as_json: bool) -> None:
    """Scan server logs for known failure signatures; exit 1 on a blocking one.

    \b
    Example:
      quantcheck logscan sglang-server.log
    """
    from dataclasses import asdict

    from .logscan import load_signatures, scan_log

    def work() -> list[Any]:
        signatures = load_signatures(signature_files)
        return [match for log in logs for match in scan_log(log, signatures)]

    matches = run_guarded(work, "")
    if as_json:
        click.echo(json.dumps([asdict(m) for m in matches], indent=2))
    for match in [] if as_json else matches:
        kind = "BLOCKING" if match.blocking else "warning"
        click.echo(f"{kind} {match.log}:{match.line} ({match.count}x) {match.signature}\n"
                   f"  {match.text}\n  meaning: {match.meaning}\n  action: {match.action}\n"
                   f"  reference: {match.reference}")
    if not matches and not as_json:
        click.echo(f"no known failure signature in {len(logs)} log(s)")
    sys.exit(1 if any(m.blocking for m in matches) else 0)


@cli.command("gate")
@click.argument("report_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--policy", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Policy YAML; the options below override it.")
@click.option("--max-factual-flips", type=click.IntRange(0),
              help="Expect regressions plus reviewer-labelled blocking pairs (default 0).")
@click.option("--max-new-degenerate", type=click.IntRange(0),
              help="Repetition loops or empty answers on B that A did not have (default 0).")
@click.option("--max-nondeterministic", type=click.IntRange(0),
              help="Prompts with more than one text or signature, per side (default off).")
@click.option("--require-review/--no-require-review", default=None,
              help="Fail while a non-identical pair has no verdict and no approval.")
@click.option("--min-identical-share", type=click.FloatRange(0, 1),
              help="Minimum share of identical pairs (default off).")
@click.option("--max-not-compared", type=click.IntRange(0),
              help="Prompts not compared: other hash, one side only, failed (default off).")
@click.option("--max-blocking-log-signatures", type=click.IntRange(0),
              help="Blocking failure signatures found in --a-log/--b-log (default 0).")
@click.option("--review", "review_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="An exported review file, besides REPORT_DIR/reviews/*.json.")
@click.option("--rubric", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Rubric YAML naming the blocking labels (default: rubrics/default.yaml).")
def gate_command(report_dir: Path, policy: Path | None, review_files: tuple[Path, ...],
                 rubric: Path | None, **overrides: Any) -> None:
    """Fail the build on any factual flip: exit 0 pass, 1 fail, 2 input error.

    Writes REPORT_DIR/gate.json and junit.xml, prints a Markdown summary (also
    appended to $GITHUB_STEP_SUMMARY) and a one-line verdict on stderr.

    \b
    Example:
      quantcheck gate reports/fp8 --require-review
      quantcheck gate reports/fp8 --policy prompts/policy.yaml
    """
    from dataclasses import replace

    from . import gate
    from .rubric import load_rubric

    def work() -> tuple[gate.Verdict, dict[str, Any]]:
        pairs, summary = gate.require_report(report_dir)
        chosen = load_rubric(rubric)
        settings = replace(gate.load_policy(policy),
                           **{k: v for k, v in overrides.items() if v is not None})
        verdicts = gate.load_verdicts(report_dir, list(review_files), chosen,
                                      summary["identity"], set(pairs["prompt_id"].astype(str)))
        verdict = gate.evaluate(pairs, verdicts, set(chosen.blocking), settings,
                                summary.get("log_matches"))
        gate.write_gate_json(verdict, report_dir / "gate.json")
        (report_dir / "junit.xml").write_bytes(gate.junit_xml(verdict, pairs))
        return verdict, summary

    verdict, summary = run_guarded(work, "Nothing was written.")
    text = gate.markdown(verdict, summary)
    click.echo(text)
    gate.append_step_summary(text)
    click.echo(gate.one_line(verdict), err=True)
    sys.exit(0 if verdict.passed else 1)


@cli.command("approve")
@click.argument("report_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--approvals", type=click.Path(dir_okay=False, path_type=Path),
              help="Approvals file (default: approvals.json next to the prompt set).")
@click.option("--review", "review_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="An exported review file, besides REPORT_DIR/reviews/*.json.")
@click.option("--rubric", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def approve_command(report_dir: Path, approvals: Path | None, review_files: tuple[Path, ...],
                    rubric: Path | None) -> None:
    """Store reviewed non-blocking pairs as approved known differences.

    Later compares prefill the same pair (same prompt hash, same two texts) as
    approved, so it never needs a second review; any new difference still does.
    Commit the approvals file next to your prompt set.

    \b
    Example:
      quantcheck approve reports/fp8 --approvals prompts/approvals.json
    """
    from . import gate
    from .approvals import approve, default_approvals_path
    from .rubric import load_rubric

    def work() -> tuple[int, Path]:
        pairs, summary = gate.require_report(report_dir)
        chosen = load_rubric(rubric)
        verdicts = gate.load_verdicts(report_dir, list(review_files), chosen,
                                      summary["identity"], set(pairs["prompt_id"].astype(str)))
        path = approvals or default_approvals_path(report_dir)
        return approve(pairs, verdicts, set(chosen.blocking), path), path

    added, path = run_guarded(work, "Nothing was written.")
    click.echo(f"approved {added} reviewed pairs -> {path}")


@cli.group("lab")
def lab_group() -> None:
    """Built-in local endpoints for trying quantcheck without a GPU."""


@lab_group.command("scripted")
@click.option("--dialect", type=click.Choice(["vllm", "sglang", "llamacpp", "llama-cpp-python"]),
              default="vllm", show_default=True, help="Whose wire format to speak.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
def lab_scripted(dialect: str, host: str, port: int) -> None:
    """Serve scripted answers in a runtime's OpenAI-compatible dialect (no model).

    It is the loopback server the tests use: handy to try collect and compare.

    \b
    Example:
      quantcheck lab scripted --dialect sglang --port 8001
    """
    import asyncio

    from .lab.scripted import ScriptedServer

    server = ScriptedServer(dialect=dialect, host=host, port=port)

    async def serve() -> None:
        await server.start_async()
        click.echo(f"scripted {dialect} server on {server.url}/v1 (Ctrl-C stops)", err=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


@lab_group.command("serve")
@click.option("--precision", type=click.Choice(["bf16", "fp8", "int4"]), default="bf16",
              show_default=True, help="Weight format of the decoder's linear layers.")
@click.option("--fault", type=click.Choice(["none", "nondeterministic", "lmhead-noscale"]),
              default="none", show_default=True,
              help="nondeterministic: the head's reduction order changes per token; "
                   "lmhead-noscale: an FP8 head whose scales are never applied.")
@click.option("--dialect", type=click.Choice(["vllm", "sglang", "llamacpp", "llama-cpp-python"]),
              default="vllm", show_default=True, help="Whose wire format to speak.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--threads", type=click.IntRange(1), help="CPU threads for the model.")
def lab_serve(precision: str, fault: str, dialect: str, host: str, port: int,
              threads: int | None) -> None:
    """Serve the real Gemma 3 270M (CPU) at a chosen precision, OpenAI-compatible.

    One request is computed at a time (requests queue); greedy decoding with top-k
    logprobs from the model's own log-softmax. Needs the demo extra.

    \b
    Example:
      quantcheck lab serve --precision fp8 --port 8001
      quantcheck lab serve --fault lmhead-noscale --port 8002
    """
    import asyncio

    from .lab.model import DemoDependenciesMissing, ModelEngine
    from .lab.server import LabServer

    click.echo(f"loading gemma-3-270m at {precision} (fault: {fault})...", err=True)
    try:
        engine = ModelEngine(precision, fault, threads)
    except DemoDependenciesMissing as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    server = LabServer(engine, dialect=dialect, host=host, port=port,
                       server_info={"version": f"quantcheck-lab-{__version__}"})

    async def serve() -> None:
        await server.start_async()
        click.echo(f"{engine.name} ({dialect} wire format) on {server.url}/v1 (Ctrl-C stops)",
                   err=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        click.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        sys.exit(2)
