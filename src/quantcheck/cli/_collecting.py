"""Commands that send prompts: collect, run, demo, determinism."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import click

from ..collect import REPEAT_MODES, CollectSettings
from ..forced import ForcedSettings
from ..pipeline import ABRun, CompareOptions
from ..reportdir import Summary
from ._common import (
    EXISTING_DIR,
    collect_with_progress,
    compare_flags,
    compare_options,
    echo_forced,
    forced_options,
    request_options,
    run_ab_with_progress,
    run_guarded,
    settings_from,
    sig_digits_option,
)
from ._group import cli


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
    result = collect_with_progress(prompt_files, out, settings, force)
    click.echo(f"{settings.label}: {result.collected} collected, {result.skipped} already there, "
               f"{result.failed} failed -> {out}", err=True)
    if result.failed:
        click.echo(f"{result.failed} requests failed after retries; rerun the same command to "
                   "retry them.", err=True)
        sys.exit(1)


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
@click.option("--forced", "score_forced", is_flag=True,
              help="Also score A's tokens on B (teacher-forced drift, into OUT/forced).")
@forced_options
@sig_digits_option
@compare_flags
@request_options
def run_command(a_url: str, b_url: str, a_label: str, b_label: str, a_model: str | None,
                b_model: str | None, out: Path, one_side_at_a_time: bool,
                api_key_env: str | None, a_cell: tuple[str, ...], b_cell: tuple[str, ...],
                sig_digits: int, prompt_files: tuple[Path, ...], force: bool,
                a_log: Path | None, b_log: Path | None, signature_files: tuple[Path, ...],
                approvals: Path | None, score_forced: bool, forced_mode: str,
                forced_concurrency: int, **options: Any) -> None:
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
    forced = ForcedSettings(endpoint=b_url, model=b_model, top_k=options["top_logprobs"] or 20,
                            mode=forced_mode, concurrency=forced_concurrency,
                            timeout=options["timeout"], api_key_env=api_key_env)
    compare = compare_options(sig_digits, {"a_log": a_log, "b_log": b_log,
                                           "signature_files": signature_files,
                                           "approvals": approvals})
    run_ab_with_progress(ABRun(a, b, prompt_files, out, one_side_at_a_time, force, compare,
                               forced if score_forced else None))


@cli.command("forced")
@click.argument("a_run", type=EXISTING_DIR)
@click.option("--endpoint", required=True, help="B's endpoint, which scores A's tokens.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for forced.jsonl and forced.json (give it to compare --forced).")
@click.option("--model", help="Model name on B (default: the one it lists).")
@click.option("--top-logprobs", default=20, show_default=True, type=click.IntRange(1))
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(0.1))
@forced_options
def forced_command(a_run: Path, endpoint: str, out: Path, model: str | None, top_logprobs: int,
                   api_key_env: str | None, timeout: float, forced_mode: str,
                   forced_concurrency: int) -> None:
    """Teacher-forced drift: B scores A's own greedy tokens, position by position.

    Per position: whether B's top-1 is A's token, delta p, and a KL lower bound over
    the shared top-k; per prompt and overall, with A against its own repeats as the
    noise floor. Then: quantcheck compare A_RUN B_RUN --forced OUT --out REPORT.

    \b
    Example:
      quantcheck forced runs/bf16 --endpoint http://127.0.0.1:8001/v1 --out runs/forced-fp8
    """
    from ..forced import score_run

    settings = ForcedSettings(endpoint=endpoint, model=model, top_k=top_logprobs,
                              mode=forced_mode, concurrency=forced_concurrency,
                              timeout=timeout, api_key_env=api_key_env)
    summary = run_guarded(lambda: score_run(a_run, out, settings), "Nothing was written.")
    echo_forced(summary)
    click.echo(f"written: {out / 'forced.json'}, {out / 'forced.jsonl'}")


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
    if engine == "scripted":
        summary = _scripted_demo(out, repeats)
    else:
        summary = _model_demo(out, repeats, b_precision, fault)
    from .. import gate
    from ..reportdir import require_report
    from ..rubric import load_rubric

    pairs, _ = require_report(out)
    verdict = gate.evaluate(pairs, {}, set(load_rubric().blocking), gate.Policy(), summary)
    click.echo(f"gate (default policy): {gate.one_line(verdict)}")
    click.echo(f"\nOpen the review sheet: {(out / 'index.html').resolve().as_uri()}\n"
               f"  or serve it and save reviews to disk: quantcheck review {out}\n"
               "Run the same A/B on your own endpoints:\n"
               "  quantcheck run --a http://HOST_A:8000/v1 --b http://HOST_B:8000/v1 "
               "--prompts prompts/default.yaml --out reports/mine")


def _demo_side(url: str, label: str, repeats: int, cell: dict[str, Any] | None = None
               ) -> CollectSettings:
    # a 6,000-token context probe costs ~25 s per side on a CPU: 2,000 here
    return CollectSettings(endpoint=url, label=label, repeats=repeats, top_logprobs=5,
                           concurrency=2, timeout=300.0, retries=2, context_tokens=2000,
                           cell=cell or {})


def _scripted_demo(out: Path, repeats: int) -> Summary:
    from ..lab.demo import demo_servers
    from ..prompts import shipped_prompt_file

    prompt_file = run_guarded(lambda: shipped_prompt_file("spot-check.yaml"), "")
    reference, candidate = demo_servers()
    with reference, candidate:
        click.echo(f"A (reference) on {reference.url}/v1, B (candidate) on {candidate.url}/v1 "
                   "[scripted: planted changes, no model]", err=True)
        return run_ab_with_progress(ABRun(_demo_side(reference.url, "bf16-demo", repeats),
                                          _demo_side(candidate.url, "fp8-demo", repeats),
                                          [prompt_file], out))


def _model_demo(out: Path, repeats: int, b_precision: str, fault: str) -> Summary:
    from ..lab.launch import lab_servers
    from ..lab.model import prepare_model
    from ..prompts import shipped_prompt_file

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
        logs = CompareOptions(a_log=out / "logs" / "server-a.log",
                              b_log=out / "logs" / "server-b.log")
        return run_ab_with_progress(ABRun(
            _demo_side(a_url, "bf16", repeats, {"quantization": "bf16"}),
            _demo_side(b_url, b_label, repeats, {"quantization": b_precision}),
            [prompt_file], out, compare=logs))


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
@sig_digits_option
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
    from ..determinism import determinism_report, render_determinism

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
        collect_with_progress(prompt_files, out / mode, settings, force)
        runs[mode] = out / mode
    report = run_guarded(lambda: determinism_report(runs, out, sig_digits), "")
    page = render_determinism(out, report, endpoint, model or "")
    for mode, counts in report.modes.items():
        click.echo(f"{mode}: {counts.prompts} prompts: {counts.deterministic} "
                   f"deterministic, {counts.logprobs_vary} with varying logprobs, "
                   f"{counts.text_varies} with varying text")
    click.echo(f"report: {out / 'determinism.csv'}, {page}")
    if fail_on_nondeterminism and report.varying:
        click.echo(f"FAIL: {report.varying} prompt/mode results are nondeterministic",
                   err=True)
        sys.exit(1)


