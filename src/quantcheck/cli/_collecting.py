"""Commands that send prompts: collect, run, demo, determinism."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from ..fetch.collect import REPEAT_MODES, CollectSettings
from ..fetch.forced_scoring import ForcedSettings
from ..fetch.throughput import DEFAULT_CONCURRENCY, DEFAULT_MIN_SECONDS
from ..pipeline.ab import ABRun, ThroughputSettings
from ..pipeline.comparing import CompareOptions
from ..store.prompt_sets import shipped_prompt_file
from ..store.report_records import DeterminismReport, Overview, Summary
from ..store.run_dir import load_run
from ._common import (
    EXISTING_DIR,
    EXISTING_FILE,
    PlainProgress,
    collect_with_progress,
    compare_flags,
    compare_options,
    determinism_request_options,
    echo_forced,
    forced_options,
    invocation,
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
      quantcheck collect --endpoint http://127.0.0.1:8000/v1 --suite facts,json \\
          --out runs/bf16-suites
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
@click.option("--b", "b_urls", required=True, multiple=True,
              help="Candidate endpoint (e.g. FP8); repeat for several candidates.")
@click.option("--a-label", default="a", show_default=True)
@click.option("--b-label", "b_labels", multiple=True,
              help="Label of each --b, in order (default: b; with several, b1, b2, ...).")
@click.option("--a-model", help="Model name on A (default: the one it lists).")
@click.option("--b-model", help="Model name on every B (default: the one each lists).")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Report directory; runs go to OUT/a and OUT/b (several candidates: "
                   "OUT/candidates/LABEL/).")
@click.option("--one-side-at-a-time", is_flag=True,
              help="Collect A fully, then each B (when they cannot be served at once).")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@click.option("--a-cell", multiple=True, metavar="KEY=VALUE", help="Cell facts for A.")
@click.option("--b-cell", multiple=True, metavar="[LABEL:]KEY=VALUE",
              help="Cell facts for B (LABEL: for one candidate only).")
@click.option("--forced", "score_forced", is_flag=True,
              help="Also score A's tokens on each B (teacher-forced drift).")
@click.option("--throughput", "measure_throughput", is_flag=True,
              help="After collecting, measure each endpoint's throughput without logprobs "
                   "(one endpoint at a time).")
@click.option("--throughput-concurrency", default=DEFAULT_CONCURRENCY, show_default=True,
              type=click.IntRange(1), help="Requests in flight in the throughput phase.")
@click.option("--throughput-seconds", default=DEFAULT_MIN_SECONDS, show_default=True,
              type=click.FloatRange(0), help="Least duration of the throughput phase.")
@click.option("--matrix", type=click.Path(dir_okay=False, path_type=Path),
              help="Append the serving matrix's rows to this CSV (several candidates).")
@forced_options
@sig_digits_option
@compare_flags
@request_options
def run_command(a_url: str, b_urls: tuple[str, ...], a_label: str,
                b_labels: tuple[str, ...], a_model: str | None, b_model: str | None,
                out: Path, one_side_at_a_time: bool, api_key_env: str | None,
                a_cell: tuple[str, ...], b_cell: tuple[str, ...], sig_digits: int,
                prompt_files: tuple[Path, ...], force: bool, a_log: Path | None,
                b_log: Path | None, signature_files: tuple[Path, ...],
                approvals: Path | None, score_forced: bool, measure_throughput: bool,
                throughput_concurrency: int, throughput_seconds: float, matrix: Path | None,
                forced_mode: str, forced_concurrency: int, **options: Any) -> None:
    """The whole A/B in one command: collect the reference and each candidate, then
    compare. With several --b, one report per candidate and an overview that
    recommends the fastest candidate passing the gate.

    Resumable like collect: rerun the same command after an interruption.

    \b
    Example:
      quantcheck run --a http://127.0.0.1:8000/v1 --a-label bf16 \\
          --b http://127.0.0.1:8001/v1 --b-label fp8 \\
          --prompts prompts/default.yaml --repeats 3 --out reports/fp8
      quantcheck run --a http://gpu:8000/v1 --a-label bf16 \\
          --b http://gpu:8001/v1 --b-label fp8 --b http://gpu:8002/v1 --b-label int4 \\
          --prompts prompts/default.yaml --throughput --out reports/quants
      quantcheck run --a http://gpu:8000/v1 --b http://gpu:8001/v1 \\
          --suite code,tools --allow-code-exec --out reports/fp8-code
    """
    labels = _candidate_labels(b_urls, b_labels)
    a = settings_from(a_url, a_label, a_model, api_key_env, options, a_cell)
    bs = [settings_from(url, label, b_model, api_key_env, options,
                        _cell_for(label, b_cell)) for url, label in zip(b_urls, labels,
                                                                        strict=True)]
    forced = ForcedSettings(endpoint=b_urls[0], model=b_model,
                            top_k=options["top_logprobs"] or 20, mode=forced_mode,
                            concurrency=forced_concurrency, timeout=options["timeout"],
                            api_key_env=api_key_env)
    compare = compare_options(sig_digits, {"a_log": a_log, "b_log": b_log,
                                           "signature_files": signature_files,
                                           "approvals": approvals, **options})
    phase = ThroughputSettings(concurrency=throughput_concurrency,
                               min_seconds=throughput_seconds)
    result = run_ab_with_progress(ABRun(
        a, bs if len(bs) > 1 else bs[0], prompt_files, out, one_side_at_a_time, force,
        compare, forced if score_forced else None,
        phase if measure_throughput else None, matrix=matrix))
    _exit_like_the_gate(result)


def _candidate_labels(urls: tuple[str, ...], labels: tuple[str, ...]) -> list[str]:
    if len(labels) > len(urls):
        raise click.BadParameter(f"{len(labels)} labels for {len(urls)} candidates",
                                 param_hint="--b-label")
    defaults = ["b"] if len(urls) == 1 else [f"b{n}" for n in range(1, len(urls) + 1)]
    return list(labels) + defaults[len(labels):]


def _cell_for(label: str, cells: tuple[str, ...]) -> tuple[str, ...]:
    """The --b-cell facts for one candidate: unprefixed ones, and LABEL:KEY=VALUE ones."""
    chosen = []
    for value in cells:
        prefix, separator, rest = value.partition(":")
        if separator and "=" not in prefix:
            if prefix == label:
                chosen.append(rest)
        else:
            chosen.append(value)
    return tuple(chosen)


def _exit_like_the_gate(result: Summary | Overview) -> None:
    """Several candidates and none recommended: exit 1, as the gate would."""
    if isinstance(result, Overview) and result.recommendation.label is None:
        sys.exit(1)


@cli.command("throughput")
@click.argument("endpoint")
@click.option("--prompts", "prompt_files", multiple=True, required=True, type=EXISTING_FILE,
              help="Prompt set (YAML), cycled; repeat for several.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="A run directory of this endpoint: writes OUT/throughput.json, which "
                   "compare then shows next to the other side's.")
@click.option("--label", help="Name of this endpoint in the figures.")
@click.option("--model", help="Model name (default: the one it lists).")
@click.option("--concurrency", default=DEFAULT_CONCURRENCY, show_default=True,
              type=click.IntRange(1), help="Requests in flight.")
@click.option("--seconds", default=DEFAULT_MIN_SECONDS, show_default=True,
              type=click.FloatRange(0), help="Least duration of the measured window.")
@click.option("--max-tokens", type=click.IntRange(1),
              help="Cap for every prompt (use the run's own).")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(0.1),
              help="Seconds a request may take as a whole.")
def throughput_command(endpoint: str, prompt_files: tuple[Path, ...], out: Path | None,
                       label: str | None, model: str | None, concurrency: int, seconds: float,
                       max_tokens: int | None, api_key_env: str | None,
                       timeout: float) -> None:
    """Throughput as the seeds measure it: no logprobs, after a warm-up, the prompt set
    cycled at --concurrency for at least --seconds; aggregate output tokens/s, TTFT
    p50, end-to-end p99, and every prompt's generated token count (throughputs of two
    endpoints are compared only when those match).

    \b
    Example:
      quantcheck throughput http://127.0.0.1:8000/v1 --prompts prompts/default.yaml \\
          --out runs/bf16
    """
    from ..fetch.throughput import measure
    from ..store.prompt_sets import RequestOptions
    from ..store.run_dir import write_throughput

    bar = PlainProgress(max(int(seconds), 1), label or "throughput")

    def heard(requests: int, elapsed: float) -> None:
        bar.update(min(int(elapsed), bar.length) - bar.done)

    result = run_guarded(lambda: measure(
        endpoint, prompt_files, label=label or "", model=model, concurrency=concurrency,
        min_seconds=seconds, request=RequestOptions(max_tokens=max_tokens),
        api_key_env=api_key_env, timeout=timeout, progress=heard), "Nothing was written.")
    speed = f"{result.tokens_per_s:,.0f} output tokens/s" if result.tokens_per_s else \
        "no token counts (the server reports no usage)"
    ttft = f"{1000 * result.ttft_p50_s:.0f} ms" if result.ttft_p50_s is not None else "-"
    e2e = f"{result.e2e_p99_s:.2f} s" if result.e2e_p99_s is not None else "-"
    click.echo(f"{result.label}: {speed} at concurrency {concurrency}, {result.requests} "
               f"requests in {result.seconds:.1f} s; TTFT p50 {ttft}, end-to-end p99 {e2e}")
    if out is not None:
        run_guarded(lambda: write_throughput(out, result), "Nothing was written.")
        click.echo(f"written: {out / 'throughput.json'}")


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
    from ..fetch.forced_scoring import score_run

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
@click.option("--b-precision", default="fp8", show_default=True,
              help="The candidates' weight formats, comma-separated: bf16, fp8, int4 (A is "
                   "bf16); two or more give one report each and an overview.")
@click.option("--fault", type=click.Choice(["none", "nondeterministic", "lmhead-noscale"]),
              default="none", show_default=True, help="A fault planted in every B.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Report directory; the demo replaces its own previous runs there "
                   "(default: reports/demo, with --engine scripted reports/demo-scripted).")
@click.option("--repeats", default=2, show_default=True, type=click.IntRange(1),
              help="Identical requests per prompt and side (they feed the determinism "
                   "signature).")
def demo_command(engine: str, b_precision: str, fault: str, out: Path | None,
                 repeats: int) -> None:
    """The whole A/B on built-in local endpoints: no GPU, no endpoints of your own.

    Starts lab servers on 127.0.0.1 (A = bf16, a B per --b-precision, with --fault),
    runs prompts/demo.yaml, compares, writes the review sheet, prints the summary and
    the gate's verdict, stops the servers, and prints how to go on.

    \b
    Example:
      quantcheck demo
      quantcheck demo --b-precision int4
      quantcheck demo --b-precision fp8,int4
      quantcheck demo --fault lmhead-noscale
    """
    precisions = [p.strip() for p in b_precision.split(",") if p.strip()]
    unknown = [p for p in precisions if p not in ("bf16", "fp8", "int4")]
    if unknown or not precisions or len(set(precisions)) != len(precisions):
        raise click.BadParameter("comma-separated, each once: bf16, fp8, int4",
                                 param_hint="--b-precision")
    out = out or Path("reports/demo-scripted" if engine == "scripted" else "reports/demo")
    for side in ("a", "b", "candidates"):  # the demo's own runs: new ports every time
        shutil.rmtree(out / side, ignore_errors=True)
    if engine == "scripted":
        result = _scripted_demo(out, repeats)
    else:
        result = _model_demo(out, repeats, precisions, fault)
    sheet = out
    if isinstance(result, Summary):
        from ..gate import verdict as gate

        verdict, _ = gate.gate_report(out)
        click.echo(f"gate (default policy): {gate.one_line(verdict)}")
    else:
        sheet = out / "candidates" / result.candidates[0].label
        click.echo(f"\nOpen the overview: {(out / 'index.html').resolve().as_uri()}")
    me = invocation()
    click.echo(f"\nOpen the review sheet: {(sheet / 'index.html').resolve().as_uri()}\n"
               f"  or serve it and save reviews to disk: {me} review {shlex.quote(str(sheet))}\n"
               "Run the same A/B on your own endpoints:\n"
               f"  {me} run --a http://HOST_A:8000/v1 --b http://HOST_B:8000/v1 "
               f"--prompts {shlex.quote(_shown_path(shipped_prompt_file('default.yaml')))} "
               "--out reports/mine")


def _shown_path(path: Path) -> str:
    """`path` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _demo_side(url: str, label: str, repeats: int, cell: dict[str, Any] | None = None
               ) -> CollectSettings:
    # No context probe: the demo's small base model does not repeat a code even from a
    # short prompt, so the probe could only say "inconclusive" (and costs ~8 s a side).
    return CollectSettings(endpoint=url, label=label, repeats=repeats, top_logprobs=5,
                           concurrency=2, timeout=300.0, retries=2, context_tokens=0,
                           cell=cell or {})


def _scripted_demo(out: Path, repeats: int) -> Summary | Overview:
    from ..lab.demo import demo_servers

    prompt_file = run_guarded(lambda: shipped_prompt_file("spot-check.yaml"), "")
    reference, candidate = demo_servers()
    with reference, candidate:
        click.echo(f"A (reference) on {reference.url}/v1, B (candidate) on {candidate.url}/v1 "
                   "[scripted: planted changes, no model]", err=True)
        return run_ab_with_progress(ABRun(_demo_side(reference.url, "bf16-demo", repeats),
                                          _demo_side(candidate.url, "fp8-demo", repeats),
                                          [prompt_file], out))


def _model_demo(out: Path, repeats: int, precisions: list[str], fault: str
                ) -> Summary | Overview:
    from ..lab.launch import lab_servers, server_log
    from ..lab.model import prepare_model

    prompt_file = run_guarded(lambda: shipped_prompt_file("demo.yaml"), "")
    click.echo("preparing Gemma 3 270M (the first run converts the shipped GGUF once, about "
               "a minute)...", err=True)
    run_guarded(prepare_model, "")
    labels = [p + ("" if fault == "none" else f"+{fault}") for p in precisions]
    click.echo(f"starting lab servers: A = bf16, B = {', '.join(labels)} (loading takes "
               "~10 s each)...", err=True)
    specs = [("bf16", "none")] + [(p, fault) for p in precisions]
    with run_guarded(lambda: lab_servers(specs, out / "logs"), "") as urls:
        click.echo(f"A on {urls[0]}/v1, B on {', '.join(u + '/v1' for u in urls[1:])}; "
                   "collecting...", err=True)
        logs = [server_log(out / "logs", n) for n in range(len(urls))]
        bs = [_demo_side(url, label, repeats, {"quantization": precision})
              for url, label, precision in zip(urls[1:], labels, precisions, strict=True)]
        return run_ab_with_progress(ABRun(
            _demo_side(urls[0], "bf16", repeats, {"quantization": "bf16"}),
            bs if len(bs) > 1 else bs[0], [prompt_file], out,
            compare=CompareOptions(a_log=logs[0], b_log=logs[1]),
            candidate_logs={b.label: log for b, log in zip(bs, logs[1:], strict=True)}))


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
@determinism_request_options
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
    from ..pipeline.determinism import determinism_report

    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in REPEAT_MODES]
    if unknown or not chosen:
        raise click.BadParameter(f"unknown mode {unknown[0] if unknown else modes!r}; choose "
                                 f"from {', '.join(REPEAT_MODES)}", param_hint="--modes")
    runs = {}
    for number, mode in enumerate(chosen):
        # the endpoint is checked once, before the first mode: the same server answers all
        settings = settings_from(endpoint, mode, model, api_key_env, {
            **options, "repeat_mode": mode,
            "preflight": options["preflight"] and number == 0})
        collect_with_progress(prompt_files, out / mode, settings, force)
        runs[mode] = out / mode
    served = load_run(runs[chosen[0]]).manifest.model
    report, page = run_guarded(lambda: determinism_report(runs, out, endpoint,
                                                          model or served or "", sig_digits), "")
    for mode, counts in report.modes.items():
        click.echo(f"{mode}: {counts.prompts} prompts: {counts.deterministic} "
                   f"deterministic, {counts.logprobs_vary} with varying logprobs, "
                   f"{counts.text_varies} with varying text")
        echo_routing_verdicts(report, mode)
    click.echo(f"report: {out / 'determinism.csv'}, {page}")
    if fail_on_nondeterminism and report.varying:
        click.echo(f"FAIL: {report.varying} prompt/mode results are nondeterministic",
                   err=True)
        sys.exit(1)


def echo_routing_verdicts(report: DeterminismReport, mode: str) -> None:
    """One line per routing diagnosis of a mode, with an example prompt's sentence."""
    for kind, prompts in report.modes[mode].routing.items():
        example = next(row for row in report.prompts if row.mode == mode and row.routing == kind)
        click.echo(f"  routing: {prompts} prompt{'s' if prompts != 1 else ''}: "
                   f"{example.routing_sentence} (e.g. {example.prompt_id})")


@cli.command("merge")
@click.argument("runs", nargs=-1, required=True, type=EXISTING_DIR)
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="A new run directory for the merged run.")
def merge_command(runs: tuple[Path, ...], out: Path) -> None:
    """Join the shard runs of one endpoint (collected with --shard I/N) into one run.

    Refuses shards of other endpoints, models, settings or prompt sets, a shard given
    twice or missing, and a prompt in two shards. Records and token arrays are copied
    as stored; the merged run compares exactly like an unsharded one.

    \b
    Example:
      quantcheck collect --endpoint URL --prompts P.yaml --shard 1/2 --out runs/fp8-1
      quantcheck collect --endpoint URL --prompts P.yaml --shard 2/2 --out runs/fp8-2
      quantcheck merge runs/fp8-1 runs/fp8-2 --out runs/fp8
    """
    from ..store.shards import merge_runs

    result = run_guarded(lambda: merge_runs(list(runs), out), "Nothing was merged.")
    click.echo(f"merged {result.shards} shards: {result.prompts} prompts, "
               f"{result.records} records -> {result.out}")


@cli.command("suites")
def suites_command() -> None:
    """List the built-in prompt suites: name, prompts, the checks they use, what they test.

    \b
    Example:
      quantcheck suites
      quantcheck run --a URL_A --b URL_B --suite json,tools --out reports/structured
      quantcheck collect --endpoint http://127.0.0.1:8000/v1 --suite code --out runs/bf16
    """
    from ..store.suites import describe, suite_names

    suites = run_guarded(lambda: [describe(name) for name in suite_names()], "")
    width = max(len(s.name) for s in suites)
    for suite in suites:
        click.echo(f"{suite.name:<{width}}  {suite.prompts:>3} prompts  "
                   f"checks: {', '.join(suite.checks)}")
        click.echo(f"{'':<{width}}  {suite.description}")
    click.echo(f"\nFiles: {suites[0].path.parent}")
