"""Commands that send prompts: collect, run, throughput, forced, determinism; and the
two about runs and suites: merge, suites."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import msgspec

from ..errors import ExitCode
from ..fetch.collect import REPEAT_MODES, CollectSettings
from ..fetch.forced_scoring import ForcedSettings
from ..fetch.throughput import DEFAULT_CONCURRENCY, DEFAULT_MIN_SECONDS
from ..gate.limits import BY_KEY
from ..pipeline.ab import ABRun, ThroughputSettings
from ..pipeline.certify import DEFAULT_MAX_REQUESTS, MAX_REQUESTS, MAX_TRIALS
from ..pipeline.comparing import CompareOptions
from ..pipeline.determinism import DeterminismRun
from ..store.folders.run_dir import Parameters
from ..store.labels import label_from_name
from ._group import (
    CERTIFY,
    COMPARE,
    FORCED,
    JUDGE,
    OUTPUT,
    POLICY,
    PROMPTS,
    SEND,
    THROUGHPUT,
    cli,
    section,
)
from .config import config_options
from .guard import run_guarded
from .options import (
    API_OPTION,
    EXISTING_DIR,
    EXTRA_BODY_OPTION,
    FORCED_TOP_LOGPROBS_HELP,
    REPLICA_SPREAD_OPTION,
    RETRIES_OPTION,
    FiniteFloat,
    apply_options,
    compare_inputs,
    compare_options,
    determinism_request_options,
    endpoints_option,
    forced_options,
    limit_option,
    prompt_options,
    refuse_with,
    refuse_without,
    refuse_writing_an_input,
    request_options,
    request_settings,
    side_settings,
    sig_digits_option,
    single_endpoint,
    source_options,
)
from .printing import (
    echo_determinism,
    echo_forced,
    echo_suites,
    echo_throughput,
    exit_like_the_gate,
    print_result,
)
from .progress import (
    PlainProgress,
    collect_with_progress,
    determinism_with_progress,
    run_with_progress,
)

REPLICAS = "replicas (URLs joined by commas)"


@cli.command("collect")
@config_options
@section(COMPARE)
@click.option("--endpoint", required=True, callback=endpoints_option,
              help="Base URL, e.g. http://127.0.0.1:8000/v1; replicas of one configuration "
                   "joined by commas (URL1,URL2): checked alike, requests spread over them.")
@click.option("--label", help="Name of this side, e.g. bf16: 1 to 64 letters, digits, '.', "
              "'_' or '-' (default: the --out folder's name, other characters as '_').")
@section(OUTPUT)
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Run directory (created; an existing one is resumed).")
@section(COMPARE)
@click.option("--model", help="Model name (default: the one model /v1/models lists).")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@click.option("--cell", multiple=True, metavar="KEY=VALUE",
              help="Serving-cell facts the server cannot tell, e.g. gpu=H100 vram_gb=80.")
@section(SEND)
@REPLICA_SPREAD_OPTION
@request_options
def collect_command(endpoint: str, label: str | None, out: Path, model: str | None,
                    api_key_env: str | None, cell: tuple[str, ...], replica_spread: str,
                    prompt_files: tuple[Path, ...], force: bool, parameters: Parameters) -> None:
    """Collect greedy generations with top-k logprobs from one endpoint.

    Writes RUN_DIR/manifest.json, prompts.jsonl and completions.jsonl. Running the
    same command again resumes: finished requests are skipped, never duplicated.

    \b
    Example:
      quantcheck collect --endpoint http://127.0.0.1:8000/v1 --label bf16 \\
          --prompts prompts/default.yaml --repeats 3 --out runs/bf16
      quantcheck collect --endpoint http://127.0.0.1:8000/v1 --suite facts,json \\
          --out runs/bf16-suites
      quantcheck collect --endpoint http://127.0.0.1:8000/v1 --prompts traffic.jsonl \\
          --sample 500 --out runs/bf16-traffic
      quantcheck collect --endpoint http://gpu1:8000/v1,http://gpu2:8000/v1 \\
          --prompts prompts/default.yaml --out runs/fp8-fleet
    """
    label = label if label is not None else label_from_name(out.name)
    settings = side_settings(parameters, endpoint, label, model, api_key_env, cell,
                             replica_spread)
    refuse_without(REPLICAS, len(settings.urls) > 1, "replica_spread")
    result = collect_with_progress(prompt_files, out, settings, force)
    click.echo(f"{settings.label}: {result.collected} collected, {result.skipped} already there, "
               f"{result.failed} failed -> {out}", err=True)
    if result.failed:
        click.echo(f"{result.failed} requests failed after retries; rerun the same command to "
                   "retry them.", err=True)
        sys.exit(ExitCode.FAIL)


@cli.command("run")
@config_options
@section(COMPARE)
@click.option("--a", "a_url", callback=endpoints_option,
              help="Reference endpoint (e.g. BF16); replicas of one configuration joined by "
                   "commas.")
@click.option("--a-run", type=EXISTING_DIR,
              help="A reference run collected earlier (e.g. on the main branch): reused, "
                   "A is not collected again; B must be asked as it was (instead of --a).")
@click.option("--b", "b_urls", required=True, multiple=True, callback=endpoints_option,
              help="Candidate endpoint (e.g. FP8); repeat for several candidates; one "
                   "candidate's replicas joined by commas (URL1,URL2).")
@click.option("--a-label", help="Label of A (default: a; a stored reference keeps its own).")
@click.option("--b-label", "b_labels", multiple=True,
              help="Label of each --b, in order (default: b; with several, b1, b2, ...).")
@click.option("--a-model", help="Model name on A (default: the one it lists).")
@click.option("--b-model", help="Model name on every B (default: the one each lists).")
@section(OUTPUT)
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Report directory; runs go to OUT/a and OUT/b (several candidates: "
                   "OUT/candidates/LABEL/).")
@section(SEND)
@click.option("--one-side-at-a-time", is_flag=True,
              help="Collect A fully, then each B (when they cannot be served at once).")
@section(COMPARE)
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@click.option("--a-cell", multiple=True, metavar="KEY=VALUE", help="Cell facts for A.")
@click.option("--b-cell", multiple=True, metavar="[LABEL:]KEY=VALUE",
              help="Cell facts for B (LABEL: for one candidate only).")
@section(FORCED)
@click.option("--forced", "score_forced", is_flag=True,
              help="Also score A's tokens on each B (teacher-forced drift).")
@click.option("--forced-top-logprobs", type=click.IntRange(1), metavar="K",
              help=FORCED_TOP_LOGPROBS_HELP + " Default: B's --top-logprobs.")
@section(THROUGHPUT)
@click.option("--throughput", "measure_throughput", is_flag=True,
              help="After collecting, measure each endpoint's throughput without logprobs "
                   "(one endpoint at a time).")
@click.option("--throughput-concurrency", default=DEFAULT_CONCURRENCY, show_default=True,
              type=click.IntRange(1), help="Requests in flight in the throughput phase.")
@click.option("--throughput-seconds", default=DEFAULT_MIN_SECONDS, show_default=True,
              type=FiniteFloat(0), help="Least duration of the throughput phase.")
@section(OUTPUT)
@click.option("--matrix", type=click.Path(dir_okay=False, path_type=Path),
              help="Append the serving matrix's rows to this CSV (several candidates).")
@section(SEND)
@REPLICA_SPREAD_OPTION
@forced_options
@compare_options
@request_options
def run_command(a_url: str | None, a_run: Path | None, b_urls: tuple[str, ...],
                a_label: str | None,
                b_labels: tuple[str, ...], a_model: str | None, b_model: str | None,
                out: Path, one_side_at_a_time: bool, api_key_env: str | None,
                a_cell: tuple[str, ...], b_cell: tuple[str, ...], score_forced: bool,
                measure_throughput: bool, throughput_concurrency: int,
                throughput_seconds: float, matrix: Path | None, replica_spread: str,
                forced_top_logprobs: int | None, forced_mode: str,
                forced_concurrency: int, compare: CompareOptions,
                prompt_files: tuple[Path, ...], force: bool, parameters: Parameters) -> None:
    """The whole A/B in one command: collect the reference and each candidate, then
    compare. With several --b, one report per candidate and an overview that
    recommends the fastest candidate passing the gate.

    Resumable like collect: rerun the same command after an interruption. With
    --a-run, the reference is a run collected earlier: only B is collected, and a B not
    asked what the reference was (settings, prompt set) is refused before any request.

    \b
    Example:
      quantcheck run --a http://127.0.0.1:8000/v1 --a-label bf16 \\
          --b http://127.0.0.1:8001/v1 --b-label fp8 \\
          --prompts prompts/default.yaml --repeats 3 --out reports/fp8
      quantcheck run --a-run runs/bf16 --b http://127.0.0.1:8001/v1 --b-label fp8 \\
          --prompts prompts/default.yaml --repeats 3 --out reports/fp8
      quantcheck run --a http://gpu:8000/v1 --a-label bf16 \\
          --b http://gpu:8001/v1 --b-label fp8 --b http://gpu:8002/v1 --b-label int4 \\
          --prompts prompts/default.yaml --throughput --out reports/quants
      quantcheck run --a http://gpu:8000/v1 --b http://gpu:8001/v1 \\
          --suite code,tools --allow-code-exec --out reports/fp8-code
      quantcheck run --a http://gpu:8000/v1 --b http://gpu:8001/v1 \\
          --prompts gsm8k/test.parquet --map-preset gsm8k --sample 300 --out reports/gsm8k
      quantcheck run --a http://gpu:8000/v1 --b http://gpu:8001/v1 \\
          --prompts prompts/default.yaml --judge http://gpu:8009/v1 --out reports/fp8
      quantcheck run --a http://gpu1:8000/v1,http://gpu2:8000/v1 \\
          --b http://gpu3:8000/v1,http://gpu4:8000/v1 --prompts prompts/default.yaml \\
          --out reports/fp8-fleet
    """
    refuse_without("--throughput", measure_throughput, "throughput_concurrency",
                   "throughput_seconds")
    refuse_without("--forced", score_forced, "forced_mode", "forced_concurrency",
                   "forced_top_logprobs")
    refuse_without("two or more --b", len(b_urls) > 1, "matrix")
    refuse_writing_an_input([matrix, compare.judge.cache if compare.judge else None],
                            [*prompt_files, a_run, *compare_inputs(compare)])
    labels = _candidate_labels(b_urls, b_labels)
    a = _reference(a_url, a_run, a_label, a_model, a_cell) or side_settings(
        parameters, a_url or "", "a" if a_label is None else a_label, a_model, api_key_env,
        a_cell, replica_spread)
    bs = [side_settings(parameters, url, label, b_model, api_key_env, _cell_for(label, b_cell),
                        replica_spread)
          for url, label in zip(b_urls, labels, strict=True)]
    refuse_without(REPLICAS, any(len(side.urls) > 1 for side in [*bs, a]
                                 if isinstance(side, CollectSettings)), "replica_spread")
    forced = ForcedSettings(endpoint=bs[0].endpoint, mode=forced_mode,
                            concurrency=forced_concurrency,
                            top_k=forced_top_logprobs or 20,
                            top_k_fixed=forced_top_logprobs is not None)
    throughput = ThroughputSettings(concurrency=throughput_concurrency,
                                    min_seconds=throughput_seconds)
    ab = ABRun(a, bs, prompt_files, out, one_side_at_a_time, force, compare,
               forced if score_forced else None,
               throughput if measure_throughput else None, matrix=matrix)
    result = run_with_progress(ab)
    print_result(result, out)
    exit_like_the_gate(result, out, compare.rubric)


def _reference(url: str | None, stored: Path | None, label: str | None,
               model: str | None, cell: tuple[str, ...]) -> Path | None:
    """The stored reference run (--a-run), or None when A is collected (--a)."""
    if (url is None) == (stored is None):
        raise click.UsageError("give the reference as an endpoint to collect (--a URL) or "
                               "as a run collected earlier (--a-run DIR), one of them")
    if stored is not None and (model or cell or label is not None):
        raise click.BadParameter("describes an A to collect; a stored reference keeps its "
                                 "own", param_hint="--a-label/--a-model/--a-cell")
    return stored


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


@cli.command("throughput")
@click.argument("endpoint", callback=single_endpoint)
@section(PROMPTS)
@prompt_options
@apply_options(source_options())
@section(OUTPUT)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="A run directory of this endpoint: writes OUT/throughput.json, which "
                   "compare then shows next to the other side's.")
@section(COMPARE)
@click.option("--label", help="Name of this endpoint in the figures.")
@click.option("--model", help="Model name (default: the one it lists).")
@section(SEND)
@click.option("--concurrency", default=DEFAULT_CONCURRENCY, show_default=True,
              type=click.IntRange(1), help="Requests in flight.")
@click.option("--seconds", default=DEFAULT_MIN_SECONDS, show_default=True,
              type=FiniteFloat(0), help="Least duration of the measured window.")
@click.option("--max-tokens", type=click.IntRange(1),
              help="Cap for every prompt (use the run's own).")
@API_OPTION
@EXTRA_BODY_OPTION
@section(COMPARE)
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@section(SEND)
@click.option("--timeout", default=600.0, show_default=True, type=FiniteFloat(0.1),
              help="Seconds a request may take as a whole.")
@RETRIES_OPTION
def throughput_command(endpoint: str, prompt_files: tuple[Path, ...], out: Path | None,
                       label: str | None, model: str | None, concurrency: int, seconds: float,
                       max_tokens: int | None, api: str | None,
                       extra_body: dict[str, object], api_key_env: str | None,
                       timeout: float, retries: int, column_map: tuple[str, ...],
                       map_preset: str | None, sample: int | None, seed: int | None) -> None:
    """Throughput without logprobs (they cost the server and the client more than the
    generation does): after a warm-up, the prompt set cycled at --concurrency for at
    least --seconds; aggregate output tokens/s, TTFT p50, end-to-end p99, and every
    prompt's generated token count (throughputs of two endpoints are compared only when
    those match).

    \b
    Example:
      quantcheck throughput http://127.0.0.1:8000/v1 --prompts prompts/default.yaml \\
          --out runs/bf16
    """
    from ..pipeline.collecting import measure_throughput

    bar = PlainProgress(max(int(seconds), 1), label or "throughput")

    def heard(requests: int, elapsed: float) -> None:
        bar.update(min(int(elapsed), bar.length) - bar.done)

    result = run_guarded(lambda: measure_throughput(
        endpoint, prompt_files, label=label or "", model=model, concurrency=concurrency,
        min_seconds=seconds, request=request_settings(
            max_tokens, api, extra_body, column_map, map_preset, sample, seed),
        api_key_env=api_key_env, timeout=timeout, retries=retries, progress=heard, out=out),
        "Nothing was written.")
    echo_throughput(result, concurrency)
    if out is not None:
        click.echo(f"written: {out / 'throughput.json'}")


@cli.command("forced")
@click.argument("a_run", type=EXISTING_DIR)
@click.option("--endpoint", required=True, callback=single_endpoint,
              help="B's endpoint, which scores A's tokens.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for forced.jsonl and forced.json (give it to compare --forced).")
@click.option("--model", help="Model name on B (default: the one it lists).")
@click.option("--top-logprobs", "--forced-top-logprobs", "top_logprobs", default=20,
              show_default=True, type=click.IntRange(1), metavar="K",
              help=FORCED_TOP_LOGPROBS_HELP)
@click.option("--b-run", type=EXISTING_DIR,
              help="B's own collected run: B's noise floors too (its repeats, and B scoring "
                   "its own tokens as it scores A's).")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@click.option("--timeout", default=600.0, show_default=True, type=FiniteFloat(0.1))
@EXTRA_BODY_OPTION
@RETRIES_OPTION
@forced_options
def forced_command(a_run: Path, endpoint: str, out: Path, model: str | None, top_logprobs: int,
                   b_run: Path | None, api_key_env: str | None, timeout: float,
                   extra_body: dict[str, object], retries: int, forced_mode: str,
                   forced_concurrency: int) -> None:
    """Teacher-forced drift: B scores A's own greedy tokens, position by position.

    Per position: whether B's top-1 is A's token, delta p, and a KL lower bound over
    the shared top-k; per prompt and overall, with A against its own repeats as the
    noise floor. Then: quantcheck compare A_RUN B_RUN --forced OUT --out REPORT.

    \b
    Example:
      quantcheck forced runs/bf16 --endpoint http://127.0.0.1:8001/v1 --out runs/forced-fp8
    """
    from ..pipeline.collecting import score_run

    settings = ForcedSettings(endpoint=endpoint, model=model, top_k=top_logprobs,
                              mode=forced_mode, concurrency=forced_concurrency,
                              timeout=timeout, api_key_env=api_key_env, retries=retries,
                              extra_body=extra_body, b_run=b_run)
    summary = run_guarded(lambda: score_run(a_run, out, settings), "Nothing was written.")
    echo_forced(summary)
    click.echo(f"written: {out / 'forced.json'}, {out / 'forced.jsonl'}")


@cli.command("determinism")
@section(COMPARE)
@click.option("--endpoint", required=True, callback=single_endpoint,
              help="Base URL, e.g. http://127.0.0.1:8000/v1.")
@section(OUTPUT)
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder: one run per mode, determinism.csv/.json, index.html.")
@section(SEND)
@click.option("--modes", default="sequential,burst,loaded", show_default=True,
              help="Comma-separated repeat modes: sequential, burst, loaded, pool.")
@section(COMPARE)
@click.option("--model", help="Model name (default: the one model /v1/models lists).")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@section(POLICY)
@click.option("--fail-on-nondeterminism", is_flag=True,
              help="Exit 1 when any prompt gives more than one signature (or text).")
@section(CERTIFY)
@click.option("--certify", is_flag=True,
              help="Instead of --modes: a certificate (batch-size sweep, prefix ladder with "
                   "the prefix cache off and on, cold against warm, cache blocks, co-batched "
                   "and reordered requests, streamed vs whole, seeded sampling) in "
                   "OUT/certificate.json.")
@click.option("--max-batch", default=32, show_default=True, type=click.IntRange(2),
              help="--certify: the largest concurrent batch (sizes 2, 4, 8, ... up to it).")
@click.option("--trials", default=3, show_default=True, type=click.IntRange(2, MAX_TRIALS),
              help="--certify: trials per prompt and level, fresh fillers and positions each.")
@click.option("--plan-seed", default=0, show_default=True, type=int,
              help="--certify: the seed of the plan's fillers and positions.")
@click.option("--max-requests", default=DEFAULT_MAX_REQUESTS, show_default=True,
              type=click.IntRange(1, MAX_REQUESTS),
              help="--certify: refuse a plan with more requests than this.")
@click.option("--control", metavar="URL", callback=single_endpoint,
              help="--certify: run the same plan against a configuration expected to vary "
                   "and report whether the test detected it.")
@limit_option(BY_KEY["max_nondeterministic_prompts"],
              help="--certify: exit 0 when no more prompts than this vary (default 0: exit 1 "
                   "unless CERTIFIED; the gate's policy key of the same name, also "
                   "`quantcheck gate OUT`).")
@limit_option(BY_KEY["max_untested_levels"],
              help="--certify: exit 0 with no more levels planned and not tested than this "
                   "(default 0: CERTIFIED IN PART exits 1; the gate's policy key "
                   "max_untested_levels, also `quantcheck gate OUT`).")
@section(JUDGE)
@sig_digits_option
@determinism_request_options
def determinism_command(endpoint: str, out: Path, modes: str, model: str | None,
                        api_key_env: str | None, fail_on_nondeterminism: bool,
                        sig_digits: int, prompt_files: tuple[Path, ...], force: bool,
                        parameters: Parameters, certify: bool = False, max_batch: int = 32,
                        trials: int = 3, plan_seed: int = 0,
                        max_requests: int = DEFAULT_MAX_REQUESTS, control: str | None = None,
                        max_nondeterministic_prompts: int | None = None,
                        max_untested_levels: int | None = None) -> None:
    """Is this endpoint deterministic? Repeated identical greedy requests, per mode.

    Reports per prompt and mode "k distinct of n" for texts and logprob signatures,
    the first position where repeats differ and the largest logprob spread.

    \b
    With --certify: a determinism certificate (docs/collecting.md): each prompt alone,
    inside concurrent batches, after shared prefixes with the prefix cache off and on,
    cold against warm, after a cached prefix of one cache block, sent at once with a
    sibling writing its prefix, in other orders, streamed, and sampled with a seed; the
    statement with its bound, the factor that explains any variation. It exits 1
    unless CERTIFIED (--max-nondeterministic-prompts, --max-untested-levels relax it).

    \b
    Example:
      quantcheck determinism --endpoint http://127.0.0.1:8000/v1 \\
          --prompts prompts/spot-check.yaml --repeats 6 --out reports/determinism
      quantcheck determinism --certify --endpoint http://127.0.0.1:8000/v1 \\
          --prompts prompts/spot-check.yaml --max-batch 16 --out reports/certificate
    """
    refuse_without("--certify", certify, "max_batch", "trials", "plan_seed", "max_requests",
                   "control", "max_nondeterministic_prompts", "max_untested_levels")
    if certify:
        refuse_with("--certify", "modes", "repeats", "force")
        from ..pipeline.certify import CertifyRun
        from .certifying import certify_command, certify_settings

        certify_command(CertifyRun(
            certify_settings(endpoint, model, api_key_env, parameters), prompt_files, out,
            parameters.request, trials, max_batch, plan_seed, max_requests, control,
            0 if fail_on_nondeterminism or max_nondeterministic_prompts is None
            else max_nondeterministic_prompts, max_untested_levels or 0))
        return
    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in REPEAT_MODES]
    if unknown or not chosen:
        raise click.BadParameter(f"unknown mode {unknown[0] if unknown else modes!r}; choose "
                                 f"from {', '.join(REPEAT_MODES)}", param_hint="--modes")
    asked = msgspec.structs.replace(parameters, model=model, api_key_env=api_key_env)
    job = DeterminismRun(endpoint, chosen, prompt_files, out, asked, force, sig_digits)
    report, page, failed = determinism_with_progress(job)
    echo_determinism(report, out, page)
    if failed:
        click.echo(f"{failed} requests failed after retries; rerun the same command to "
                   "retry them.", err=True)
        sys.exit(ExitCode.FAIL)
    if fail_on_nondeterminism and report.varying:
        click.echo(f"FAIL: {report.varying} prompt/mode results are nondeterministic",
                   err=True)
        sys.exit(ExitCode.FAIL)


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
    from ..store.folders.merging import merge_runs

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
    from ..store.inputs.suites import describe, suite_names

    echo_suites(run_guarded(lambda: [describe(name) for name in suite_names()], ""))
