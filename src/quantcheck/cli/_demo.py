"""`quantcheck demo`: the whole A/B on the lab's local endpoints, and how to go on."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import click

from ..fetch.collect import CollectSettings
from ..pipeline.ab import ABRun
from ..pipeline.comparing import CompareOptions
from ..store.folders.folder_kinds import CANDIDATES_OVERVIEW, REPORT, held
from ..store.folders.run_dir import Cell
from ..store.inputs.prompt_sets import shipped_prompt_file
from ..store.records.report_records import Overview, Summary
from ._group import cli
from .guard import run_guarded
from .options import refuse_without
from .printing import echo_gate_verdict, invocation, print_result
from .progress import run_with_progress


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
    refuse_without("--engine gemma", engine == "gemma", "b_precision", "fault")
    precisions = [p.strip() for p in b_precision.split(",") if p.strip()]
    unknown = [p for p in precisions if p not in ("bf16", "fp8", "int4")]
    if unknown or not precisions or len(set(precisions)) != len(precisions):
        raise click.BadParameter("comma-separated, each once: bf16, fp8, int4",
                                 param_hint="--b-precision")
    out = out or Path("reports/demo-scripted" if engine == "scripted" else "reports/demo")
    _clear(out, several=engine != "scripted" and len(precisions) > 1)
    if engine == "scripted":
        result = _scripted_demo(out, repeats)
    else:
        result = _model_demo(out, repeats, precisions, fault)
    echo_gate_verdict(result, out, write=True)
    sheet = out
    if isinstance(result, Overview):
        sheet = out / "candidates" / result.candidates[0].label
        click.echo(f"\nOpen the overview: {(out / 'index.html').resolve().as_uri()}")
    me = invocation()
    click.echo(f"\nOpen the review sheet: {(sheet / 'index.html').resolve().as_uri()}\n"
               f"  or serve it and save reviews to disk: {me} review {shlex.quote(str(sheet))}\n"
               "Run the same A/B on your own endpoints:\n"
               f"  {me} run --a http://HOST_A:8000/v1 --b http://HOST_B:8000/v1 "
               f"--prompts {shlex.quote(_shown_path(shipped_prompt_file('default.yaml')))} "
               "--out reports/mine")


def _clear(out: Path, several: bool) -> None:
    """The demo's own runs go (new ports every time), and so does the other shape of its
    report (one candidate's, or the overview of several), so that it can be run again
    with another --b-precision; a folder holding any other output is left as it is, for
    the run to refuse."""
    if not set(held(out)) <= {REPORT, CANDIDATES_OVERVIEW}:
        return
    for side in ("a", "b", "candidates"):
        shutil.rmtree(out / side, ignore_errors=True)
    for name in (REPORT if several else CANDIDATES_OVERVIEW).files:
        (out / name).unlink(missing_ok=True)


def _shown_path(path: Path) -> str:
    """`path` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _demo_side(url: str, label: str, repeats: int, cell: Cell | None = None
               ) -> CollectSettings:
    # No context probe: the demo's small base model does not repeat a code even from a
    # short prompt, so the probe could only say "inconclusive" (and costs ~8 s a side).
    return CollectSettings(endpoint=url, label=label, repeats=repeats, top_logprobs=5,
                           concurrency=2, timeout=300.0, retries=2, context_tokens=0,
                           cell=cell or {})


def _scripted_demo(out: Path, repeats: int) -> Summary | Overview:
    from ..lab.demo import PRECISIONS, demo_servers

    prompt_file = run_guarded(lambda: shipped_prompt_file("spot-check.yaml"), "")
    reference, candidate = demo_servers()
    a, b = PRECISIONS
    with reference, candidate:
        click.echo(f"A (reference) on {reference.url}/v1, B (candidate) on {candidate.url}/v1 "
                   "[scripted: planted changes, no model]", err=True)
        return _run_and_print(ABRun(
            _demo_side(reference.url, f"{a}-demo", repeats, {"quantization": a}),
            _demo_side(candidate.url, f"{b}-demo", repeats, {"quantization": b}),
            [prompt_file], out))


def _model_demo(out: Path, repeats: int, precisions: list[str], fault: str
                ) -> Summary | Overview:
    from ..lab.launch import lab_servers, require_demo_dependencies, server_log

    run_guarded(require_demo_dependencies, "")
    from ..lab.model import prepare_model

    prompt_file = run_guarded(lambda: shipped_prompt_file("demo.yaml"), "")
    click.echo("preparing Gemma 3 270M (the first run converts the shipped GGUF once, about "
               "a minute)...", err=True)
    run_guarded(prepare_model, "")
    labels = [p + ("" if fault == "none" else f"-{fault}") for p in precisions]
    click.echo(f"starting the lab server: A = bf16, B = {', '.join(labels)} (the model loads "
               "once, ~10 s, and each side's weights after it)...", err=True)
    specs = [("bf16", "none")] + [(p, fault) for p in precisions]
    with run_guarded(lambda: lab_servers(specs, out / "logs"), "") as urls:
        click.echo(f"A on {urls[0]}/v1, B on {', '.join(u + '/v1' for u in urls[1:])}; "
                   "collecting...", err=True)
        log = server_log(out / "logs")  # one process serves every side
        bs = [_demo_side(url, label, repeats, {"quantization": precision})
              for url, label, precision in zip(urls[1:], labels, precisions, strict=True)]
        return _run_and_print(ABRun(
            _demo_side(urls[0], "bf16", repeats, {"quantization": "bf16"}), bs, [prompt_file], out,
            compare=CompareOptions(a_log=log, b_log=log),
            candidate_logs={b.label: log for b in bs}))


def _run_and_print(ab: ABRun) -> Summary | Overview:
    """The A/B while the lab servers run; its summary or overview printed."""
    result = run_with_progress(ab)
    print_result(result, ab.out)
    return result
