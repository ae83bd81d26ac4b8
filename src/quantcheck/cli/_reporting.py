"""Commands that read reports: compare, report, review, gate, approve; and schema, the
formats of what they read."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click

from ..errors import ExitCode
from ..gate.explain import Failure, report_failures
from ..gate.limits import BY_KEY, CERTIFICATE_LIMITS
from ..gate.verdict import Policy
from ..pipeline.comparing import CompareOptions, Written, compare_all
from ..present.sentences import agreement_sentence
from ..store.folders.folder_kinds import CANDIDATES_OVERVIEW, CERTIFICATE, REPORT, kind_of
from ..store.folders.report_dir import require_report
from ..store.folders.reviews import load_verdicts, review_path
from ..store.records.report_records import Overview, Summary
from ._group import (
    COMPARE,
    FORCED,
    JUDGE,
    OUTPUT,
    PROMPTS,
    cli,
    section,
)
from .config import config_options
from .guard import run_guarded
from .options import (
    EXISTING_DIR,
    EXISTING_FILE,
    PROMPT_SOURCE,
    PolicyOverrides,
    apply_options,
    compare_inputs,
    compare_options,
    policy_options,
    refuse_given_options,
    refuse_without,
    refuse_writing_an_input,
    request_settings,
    source_options,
)
from .printing import candidates_markdown, exit_like_the_gate, print_result
from .serving import serve_until_stopped, url_of

# The gate's options that apply to a determinism certificate
CERTIFICATE_RULES = ("policy", *CERTIFICATE_LIMITS)
GATED = (REPORT, CANDIDATES_OVERVIEW, CERTIFICATE)  # the kinds of folder the gate reads


@cli.command("compare")
@config_options
@click.argument("a_run", type=click.Path(exists=True, path_type=Path))
@click.argument("b_runs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@section(OUTPUT)
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Report directory (pairs.csv, summary.json); with several B runs, the "
                   "overview and OUT/candidates/LABEL/ for each.")
@section(PROMPTS)
@click.option("--prompts", "prompt_files", multiple=True,
              type=PROMPT_SOURCE,
              help="Prompt set naming the texts of a *.texts.json side (and its expects); "
                   "a data file or folder is read as --map, --map-preset, --sample and "
                   "--seed say, as it was when collected.")
@apply_options(source_options())
@section(FORCED)
@click.option("--forced", type=EXISTING_DIR,
              help="Teacher-forced scores of A on B, from `quantcheck forced` (one B).")
@section(OUTPUT)
@click.option("--matrix", type=click.Path(dir_okay=False, path_type=Path),
              help="Append the serving matrix's rows to this CSV (several B runs).")
@compare_options
def compare_command(a_run: Path, b_runs: tuple[Path, ...], out: Path,
                    prompt_files: tuple[Path, ...], column_map: tuple[str, ...],
                    map_preset: str | None, sample: int | None, seed: int | None,
                    forced: Path | None, matrix: Path | None, compare: CompareOptions) -> None:
    """Triage every pair of A (the reference) and B (a candidate); with several B runs,
    one report each and an overview that recommends one.

    A side is a run directory from collect, a JSON list of texts in prompt order
    (`*.texts.json`) for text-only triage, or an eval harness's log (lm-evaluation-
    harness output, an Inspect log, an Every Eval Ever record: docs/evals.md),
    imported into OUT/runs/ first.

    With --judge, a model suggests a label for every pair that differs and no expect
    decided (docs/review.md, The judge).

    \b
    Example:
      quantcheck compare runs/bf16 runs/fp8 --out reports/fp8
      quantcheck compare runs/bf16 runs/fp8 --out reports/fp8 \\
          --judge http://127.0.0.1:8009/v1 --judge-model qwen3-32b
      quantcheck compare runs/bf16 runs/fp8 runs/int4 runs/nvfp4 --out reports/quants
      quantcheck compare bf16.texts.json fp8.texts.json --prompts prompts/default.yaml \\
          --out reports/texts
      quantcheck compare bf16.texts.json fp8.texts.json --prompts qa.csv \\
          --map prompt=question --map expect.contains=answer --out reports/texts
      quantcheck compare lm-eval/bf16 lm-eval/fp8 --out reports/fp8-evals
    """
    source = request_settings(None, None, {}, column_map, map_preset, sample, seed).source
    refuse_without("two or more B runs", len(b_runs) > 1, "matrix")
    refuse_writing_an_input([matrix, compare.judge.cache if compare.judge else None],
                            [a_run, *b_runs, *prompt_files, forced, *compare_inputs(compare)])
    if len(b_runs) > 1 and forced:
        raise click.BadParameter("with several B runs, score each with `quantcheck "
                                 "forced` and compare them one at a time",
                                 param_hint="--forced")
    written = Written()
    result = run_guarded(lambda: compare_all(a_run, list(b_runs), out,
                                             replace(compare, forced=forced), prompt_files,
                                             matrix, written, source),
                         lambda: _left(written, compare.judge is not None, len(b_runs) > 1),
                         lambda: _written(written, compare.judge is not None))
    print_result(result, out)
    exit_like_the_gate(result, out, compare.rubric)


def _left(written: Written, judged: bool, several: bool) -> str:
    """What Ctrl-C left of the reports of a compare."""
    said = _written(written, judged)
    if said or not judged:
        return said or "Nothing was written."
    return (("The reports are as they were; the judge's replies so far are in their caches"
             if several else "The report is as it was; the judge's replies so far are in "
             "its cache") + ": rerun to ask only the rest.")


def _written(written: Written, judged: bool) -> str:
    """Which reports were replaced before the compare stopped ("" when none was)."""
    if not written.whole and written.writing is None:
        return ""
    said = [f"Written whole: {', '.join(map(str, written.whole))}."] if written.whole else []
    if written.writing is not None:
        said.append(f"{written.writing} was being written: some of its files may be new, "
                    "others as they were.")
    cache = ("; the judge's replies so far are in each report's cache" if judged else "")
    return " ".join([*said, f"Everything else is as it was{cache}. Rerun the same command "
                             "to write every report whole."])


@cli.command("report")
@click.argument("report_dir", type=EXISTING_DIR)
@click.option("--rubric", type=EXISTING_FILE,
              help="Rubric YAML (default: rubrics/default.yaml).")
def report_command(report_dir: Path, rubric: Path | None) -> None:
    """Re-render the review sheet REPORT_DIR/index.html (e.g. with another rubric,
    or to show every reviewer's file from REPORT_DIR/reviews/). In a report made with
    --judge, the judge's agreement with those reviews is recomputed into summary.json.

    \b
    Example:
      quantcheck report reports/fp8 --rubric rubrics/default.yaml
    """
    from ..pipeline.judging import refresh_report

    path, judge = run_guarded(lambda: refresh_report(report_dir, rubric),
                              "Nothing was written.")
    click.echo(f"wrote {path}")
    if judge is not None:
        click.echo(f"Judge: {agreement_sentence(judge.agreement, sum(judge.labels.values()))}.")


@cli.command("review")
@click.argument("report_dir", type=EXISTING_DIR)
@click.option("--reviewer", default="reviewer", show_default=True,
              help="Your name: every change is written to REPORT_DIR/reviews/NAME.json.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="Port to serve the sheet on (0: any free port).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (only this machine by default).")
@click.option("--rubric", type=EXISTING_FILE,
              help="Rubric YAML (default: rubrics/default.yaml).")
def review_command(report_dir: Path, reviewer: str, port: int, host: str,
                   rubric: Path | None) -> None:
    """Serve the review sheet and save every change to REPORT_DIR/reviews/NAME.json.

    \b
    Example:
      quantcheck review reports/fp8 --reviewer dana
      # then open http://127.0.0.1:8765/ in a browser
    """
    from aiohttp import web

    from ..present.review_server import review_app

    app = run_guarded(lambda: review_app(report_dir, reviewer, rubric), "Nothing was written.")
    saved_to = review_path(report_dir, reviewer)

    async def start() -> str:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        return url_of(host, runner.addresses[0][1]) + "/"

    serve_until_stopped(
        start, lambda url: f"review sheet for {report_dir} on {url} ; saving to {saved_to} "
                           "(Ctrl-C stops)",
        host, port, stopped="stopped; the review file is saved after every change.")


@cli.command("gate")
@config_options
@click.argument("report_dir", type=EXISTING_DIR)
@policy_options
@section(JUDGE)
@click.option("--review", "review_files", multiple=True,
              type=EXISTING_FILE,
              help="An exported review file, besides REPORT_DIR/reviews/*.json.")
@click.option("--rubric", type=EXISTING_FILE,
              help="Rubric YAML naming the blocking labels (default: rubrics/default.yaml).")
@section(COMPARE)
@click.option("--candidate", metavar="LABEL",
              help="With an overview of several candidates: gate this one only.")
def gate_command(report_dir: Path, policy: Path | None, review_files: tuple[Path, ...],
                 rubric: Path | None, candidate: str | None,
                 overrides: PolicyOverrides) -> None:
    """Fail the build on any factual flip: exit 0 pass, 1 fail, 2 input error.

    REPORT_DIR may also be a determinism certificate (`determinism --certify`, with
    certificate.json): then only --policy, --max-nondeterministic-prompts,
    --max-untested-levels and --max-failed-requests apply (any other option given is
    refused).

    Writes REPORT_DIR/gate.json and junit.xml, prints a Markdown summary (also
    appended to $GITHUB_STEP_SUMMARY) and a one-line verdict on stderr. On an overview
    of several candidates it gates every one (or --candidate LABEL) and fails when any
    fails, with one JUnit test case per candidate and rule.

    \b
    Example:
      quantcheck gate reports/fp8 --require-review
      quantcheck gate reports/fp8 --policy prompts/policy.yaml
      quantcheck gate reports/quants --candidate fp8
      quantcheck gate reports/fp8 --max-judge-flips 0
      quantcheck gate reports/certificate --max-nondeterministic-prompts 0
    """
    from ..gate import verdict as gate
    from ..store.inputs.rubric import load_rubric

    def settings() -> Policy:
        return overrides.applied(gate.load_policy(policy))

    kind = run_guarded(lambda: kind_of(report_dir, GATED, "the gate"), "Nothing was written.")
    if kind == CERTIFICATE:
        refuse_given_options(CERTIFICATE_RULES, (
            f"{report_dir} is a determinism certificate (no pairs to review, no candidates): "
            f"only {_listed(['--policy', *(BY_KEY[key].flag for key in CERTIFICATE_LIMITS)])} "
            "apply to it"))
        _gate_certificate(report_dir, settings)
        return

    if kind == CANDIDATES_OVERVIEW:
        if review_files:
            raise click.BadParameter("give a candidate's own report directory "
                                     "(REPORT_DIR/candidates/LABEL) to gate it with exported "
                                     "reviews", param_hint="--review")
        _gate_candidates(report_dir, settings, rubric, candidate)
        return
    if candidate is not None:
        raise click.BadParameter(f"{report_dir} is one candidate's report; --candidate picks "
                                 "one in a report of several (with an overview.json)",
                                 param_hint="--candidate")

    def work() -> tuple[gate.GateResult, Summary, list[Failure]]:
        result, summary = gate.gate_report(report_dir, settings(), load_rubric(rubric),
                                           review_files)
        return result, summary, report_failures(report_dir, result.rules,
                                                listed=result.flips_to_review)

    verdict, summary, failures = run_guarded(work, "Nothing was written.")
    text = gate.markdown(verdict, summary, failures)
    click.echo(text)
    gate.append_step_summary(text)
    click.echo(gate.one_line(verdict), err=True)
    sys.exit(ExitCode.PASS if verdict.passed else ExitCode.FAIL)


def _listed(names: list[str]) -> str:
    """'a, b and c'."""
    return ", ".join(names[:-1]) + " and " + names[-1]


def _gate_certificate(folder: Path, policy: Callable[[], Policy]) -> None:
    from ..gate import verdict as gate
    from ..gate.certificate_gate import certificate_markdown, gate_certificate

    verdict, certificate = run_guarded(lambda: gate_certificate(folder, policy()),
                                       "Nothing was written.")
    text = certificate_markdown(verdict, certificate)
    click.echo(text)
    gate.append_step_summary(text)
    click.echo(gate.one_line(verdict), err=True)
    sys.exit(ExitCode.PASS if verdict.passed else ExitCode.FAIL)


def _gate_candidates(folder: Path, policy: Callable[[], Policy], rubric: Path | None,
                     only: str | None) -> None:
    from ..gate import verdict as gate
    from ..gate.overview import CandidatesGate, gate_candidates
    from ..store.inputs.rubric import load_rubric

    def work() -> tuple[CandidatesGate, Overview, dict[str, list[Failure]]]:
        decision, overview = gate_candidates(folder, policy(), load_rubric(rubric), only)
        reports = {row.label: row.report for row in overview.candidates}
        return decision, overview, {
            label: report_failures(folder / reports[label], result.rules, reports[label])
            for label, result in decision.candidates.items() if not result.passed}

    decision, overview, failures = run_guarded(work, "Nothing was written.")
    text = candidates_markdown(decision, overview, failures)
    click.echo(text)
    gate.append_step_summary(text)
    failing = [label for label, r in decision.candidates.items() if not r.passed]
    click.echo(f"FAIL: {', '.join(failing)}" if failing else "PASS: every candidate passes",
               err=True)
    sys.exit(ExitCode.FAIL if failing else ExitCode.PASS)


@cli.command("approve")
@click.argument("report_dir", type=EXISTING_DIR)
@click.option("--approvals", type=click.Path(dir_okay=False, path_type=Path),
              help="Approvals file (default: REPORT_DIR/approvals.json).")
@click.option("--review", "review_files", multiple=True,
              type=EXISTING_FILE,
              help="An exported review file, besides REPORT_DIR/reviews/*.json.")
@click.option("--rubric", type=EXISTING_FILE,
              help="Rubric YAML naming the approvable labels (default: rubrics/default.yaml).")
def approve_command(report_dir: Path, approvals: Path | None, review_files: tuple[Path, ...],
                    rubric: Path | None) -> None:
    """Store reviewed pairs whose labels the rubric marks approvable (wording only,
    ambiguous; never a regression) as approved known differences.

    A later compare into the same report directory (or with --approvals FILE) marks
    the same pair (same prompt hash, same two texts) as approved, so it never needs a
    second review; any new difference still does. The default file is
    REPORT_DIR/approvals.json; keep a shared one with --approvals (commit it).

    \b
    Example:
      quantcheck approve reports/fp8 --approvals prompts/approvals.json
    """
    from ..store.inputs.rubric import load_rubric
    from ..triage.approvals import approve, default_approvals_path

    def work() -> tuple[int, Path]:
        pairs, summary = require_report(report_dir)
        chosen = load_rubric(rubric)
        verdicts = load_verdicts(report_dir, list(review_files), chosen,
                                      summary.identity, {row.prompt_id for row in pairs})
        path = approvals or default_approvals_path(report_dir)
        return approve(pairs, verdicts, set(chosen.approvable), path), path

    added, path = run_guarded(work, "Nothing was written.")
    click.echo(f"approved {added} reviewed pairs -> {path}")




@cli.command("schema")
@click.argument("name", required=False)
@click.option("--list", "listed", is_flag=True, help="List the schemas and what each describes.")
def schema_command(name: str | None, listed: bool) -> None:
    """Print the JSON Schema of a file quantcheck writes (pairs: pairs.csv's columns).

    Every JSON file names its format and version in `format` (e.g.
    quantcheck-summary/1); these schemas ship with quantcheck and are made from the
    records that write the files.

    \b
    Example:
      quantcheck schema --list
      quantcheck schema summary
      quantcheck schema pairs
    """
    from ..store.records.formats import SCHEMAS, shipped_schema

    if listed or name is None:
        if name is None and not listed:
            raise click.UsageError("name a schema, or --list them")
        for known, describes in SCHEMAS.items():
            click.echo(f"{known:<16} {describes}")
        return
    click.echo(run_guarded(lambda: shipped_schema(name), ""), nl=False)
