"""The option groups of the commands, each reaching a command as one typed record: the
request options as `Parameters`, the compare options as `CompareOptions`, the gate's
limits as `PolicyOverrides`; and the checks and conversions of single option values."""

from __future__ import annotations

import functools
import inspect
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import click
import msgspec
from click.core import ParameterSource

from ..errors import EndpointError
from ..fetch.collect import REPEAT_MODES, CollectSettings
from ..fetch.forced_scoring import MODES
from ..fetch.judging import JudgeSettings
from ..fetch.replicas import SPREADS, check_distinct, split_endpoints
from ..gate.limits import LIMITS, Limit
from ..gate.verdict import Policy
from ..pipeline.comparing import CompareOptions, code_limits
from ..store.files import refuse_overwriting_inputs
from ..store.folders.run_dir import Parameters
from ..store.inputs.column_maps import PRESETS, ColumnMapError, parse_map
from ..store.inputs.prompt_entries import own_field_problem, unsendable
from ..store.inputs.prompt_sets import APIS, RequestOptions, SourceOptions
from ..store.records.run_records import DEFAULT_CONTEXT_TOKENS, DEFAULT_MAX_RESPONSE_MB
from ..triage.cells import parse_cell_options
from ..triage.sandbox import Limits
from ._group import FORCED, JUDGE, POLICY, PROMPTS, SEND, in_section
from .guard import run_guarded

F = TypeVar("F", bound=Callable[..., object])


class FiniteFloat(click.FloatRange):
    """A number option within its range that is finite: click's FloatRange lets NaN
    through every bound (a comparison with NaN is never false) and infinity through an
    open end, so `--timeout nan` would be taken; refused here naming the option."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        try:
            finite = math.isfinite(float(value))
        except (TypeError, ValueError, OverflowError):
            finite = True  # not a number at all: the range's own message says so
        if not finite:
            self.fail(f"{value!r} is not a finite number: give one in the range "
                      f"{self._describe_range()}", param, ctx)
        return super().convert(value, param, ctx)
EXISTING_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
EXISTING_DIR = click.Path(exists=True, file_okay=False, path_type=Path)
# A prompt set, a data file (JSONL, CSV, Parquet), a YAML source file, or a folder (a
# datasets save_to_disk folder, Parquet shards).
PROMPT_SOURCE = click.Path(exists=True, path_type=Path)


def gathered(name: str, make: Callable[..., object]) -> Callable[[F], F]:
    """The command gets the values of `make`'s parameters (options by those names) as
    one record, `make(...)`, passed as `name`."""
    taken = list(inspect.signature(make).parameters)

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def command(**values: object) -> object:
            given = {key: values.pop(key) for key in taken if key in values}
            return function(**values, **{name: make(**given)})

        return cast(F, command)

    return decorate


def _apply(options: Sequence[Callable[[F], F]], function: F) -> F:
    for option in reversed(options):
        function = option(function)
    return function


def _given(name: str) -> bool:
    """Whether option `name` was given on the command line or by its variable (not by
    --config, nor its default)."""
    return click.get_current_context().get_parameter_source(name) in (
        ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def refuse_without(switch: str, on: bool, *names: str) -> None:
    """A usage error for an option, given on the command line, that only tunes `switch`
    while `switch` is off: it would be ignored. (A --config file may set such options
    for the runs that turn the switch on.)"""
    given = [name for name in names if not on and _given(name)]
    if given:
        raise click.UsageError(f"--{given[0].replace('_', '-')} needs {switch}")


def refuse_with(switch: str, *names: str) -> None:
    """A usage error for an option, given on the command line, that `switch` (on) leaves
    unused: it would be ignored."""
    given = [name for name in names if _given(name)]
    if given:
        raise click.UsageError(f"--{given[0].replace('_', '-')} does not apply with {switch}")


def refuse_given_options(kept: Iterable[str], why: str) -> None:
    """A usage error naming every option given on the command line (or its variable)
    but those named in `kept` (and --config): `why` says why they would be ignored."""
    context = click.get_current_context()
    given = [max(parameter.opts, key=len) for parameter in context.command.params
             if isinstance(parameter, click.Option) and parameter.name is not None
             and parameter.name not in {*kept, "config", "print_config"}
             and _given(parameter.name)]
    if given:
        raise click.UsageError(f"{', '.join(given)}: {why}")


def refuse_writing_an_input(written: Iterable[Path | None], read: Iterable[Path | None]
                            ) -> None:
    """Each file an option writes or appends to (--matrix, --judge-cache) is none of the
    files the command reads, nor inside a folder it reads, nor its --config file: refused
    before anything is read or sent, --force or not (files.refuse_overwriting_inputs)."""
    context = click.get_current_context(silent=True)
    config = context.params.get("config") if context is not None else None
    inputs = [path for path in (*read, config) if isinstance(path, Path)]
    for path in written:
        if path is not None:
            refuse_overwriting_inputs(path, inputs)


def compare_inputs(compare: CompareOptions) -> list[Path | None]:
    """The files and folders the compare options name to be read."""
    return [compare.a_log, compare.b_log, *compare.signature_files, compare.approvals,
            compare.rubric, compare.forced]


def apply_options(options: Sequence[Callable[[F], F]]) -> Callable[[F], F]:
    """The options as one decorator."""
    return lambda function: _apply(options, function)


def json_object_option(ctx: click.Context, param: click.Parameter, value: str | None
                       ) -> dict[str, object]:
    """--extra-body: the user's JSON object, as given."""
    if not value:
        return {}
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise click.BadParameter('must be a JSON object, e.g. {"repeat_penalty": null}')
    if problem := unsendable(data) or own_field_problem(data):
        raise click.BadParameter(problem)
    return data


# --- what is requested: prompts and Parameters ---------------------------------------

def request_options(function: F) -> F:
    """Options shared by every command that sends prompts; --suite names join the
    --prompts files. The command gets `prompt_files`, `force` and `parameters`."""
    return _request_options(function, repeats=1, least_repeats=1, repeat_mode=True)


def determinism_request_options(function: F) -> F:
    """The same for `determinism`: six repeats by default (two at least: one request
    has nothing to differ from), the modes given by --modes."""
    return _request_options(function, repeats=6, least_repeats=2, repeat_mode=False)


def _parameters(repeats: int, top_logprobs: int, stream: bool, concurrency: int,
                timeout: float, max_response_mb: int, retries: int, preflight: bool,
                context_tokens: int, shard: str | None, routed_experts: bool,
                routed_experts_shape: list[int] | None, max_tokens: int | None,
                api: str | None, extra_body: dict[str, object], column_map: tuple[str, ...],
                map_preset: str | None, sample: int | None, seed: int | None,
                repeat_mode: str = "pool") -> Parameters:
    return Parameters(
        repeats=repeats, top_logprobs=top_logprobs, stream=stream, concurrency=concurrency,
        timeout=timeout, max_response_mb=max_response_mb, retries=retries,
        repeat_mode=repeat_mode, preflight=preflight, context_tokens=context_tokens,
        shard=shard, routed_experts=routed_experts,
        routed_experts_shape=routed_experts_shape,
        request=request_settings(max_tokens, api, extra_body, column_map, map_preset, sample,
                                 seed))


def request_settings(max_tokens: int | None, api: str | None, extra_body: dict[str, object],
                     column_map: tuple[str, ...], map_preset: str | None, sample: int | None,
                     seed: int | None) -> RequestOptions:
    """What every prompt is asked (--max-tokens, --api, --extra-body) and how data files
    become prompts (--map, --map-preset, --sample, --seed), as one record."""
    if seed is not None and sample is None:
        raise click.UsageError("--seed picks --sample's draw: give --sample N as well "
                               "(generation is always greedy)")
    return RequestOptions(max_tokens=max_tokens, api=api, extra_body=extra_body,
                          source=SourceOptions(map=list(column_map), preset=map_preset,
                                               sample=sample, seed=seed))


def _map_option(context: click.Context, parameter: click.Parameter, value: tuple[str, ...]
                ) -> tuple[str, ...]:
    try:
        parse_map(value)
    except ColumnMapError as exc:
        raise click.BadParameter(str(exc), context, parameter) from None
    return value


def source_options() -> list[Callable[[F], F]]:
    """--map, --map-preset, --sample and --seed: how data files become prompts."""
    return [
        click.option("--map", "column_map", multiple=True, metavar="TARGET=COLUMN[:RULE]",
                     callback=_map_option,
                     help="Which column of a data file is a prompt's id, prompt or expect, "
                          "e.g. prompt=question, expect.number=answer:after-hashes, "
                          "expect.choice=answer; repeat for each (docs/prompts.md)."),
        click.option("--map-preset", type=click.Choice(sorted(PRESETS)),
                     help="A ready mapping: gsm8k (question; answer ending '#### N'), mmlu "
                          "(question, choices, answer index); --map adds to it."),
        click.option("--sample", type=click.IntRange(1), metavar="N",
                     help="Draw N prompts from each data file, the same ones for the same "
                          "--seed."),
        click.option("--seed", type=int,
                     help="Seed of --sample's draw (default 0); generation stays greedy."),
    ]


def _with_suites(function: F) -> F:
    """--suite NAME's files after the --prompts files; one of them is needed."""

    @functools.wraps(function)
    def command(suite: tuple[str, ...], prompt_files: tuple[Path, ...],
                **values: object) -> object:
        from ..store.inputs.suites import suite_files

        files = prompt_files + tuple(run_guarded(lambda: suite_files(suite), ""))
        if not files:
            raise click.UsageError("give a prompt set with --prompts FILE or a built-in suite "
                                   "with --suite NAME (see `quantcheck suites`)")
        return function(prompt_files=files, **values)

    return cast(F, command)


PROMPTS_OPTION = click.option("--prompts", "prompt_files", multiple=True, type=PROMPT_SOURCE,
                              help="Prompt set (YAML), data file (.jsonl, .csv, .parquet), "
                                   "YAML source file or datasets folder; repeat for several.")
SUITE_OPTION = click.option("--suite", multiple=True, metavar="NAME[,NAME]",
                            help="A built-in suite (facts, math, json, tools, code, "
                                 "multilingual, long-context); with or instead of --prompts.")
API_OPTION = click.option("--api", type=click.Choice(APIS),
                          help="Send prompts through this API (default: from the prompt set).")
EXTRA_BODY_OPTION = click.option(
    "--extra-body", callback=json_object_option,
    help='JSON merged into every request; null drops a field, e.g. \'{"repeat_penalty": '
         'null}\'.')
RETRIES_OPTION = click.option("--retries", default=4, show_default=True,
                              type=click.IntRange(0),
                              help="Retries on connection errors, 429 and 5xx (with backoff).")


def prompt_options(function: F) -> F:
    """--prompts FILE and --suite NAME, joined into `prompt_files` (one is needed)."""
    return _apply([PROMPTS_OPTION, SUITE_OPTION], _with_suites(function))


def _request_options(function: F, repeats: int, least_repeats: int, repeat_mode: bool) -> F:
    options: list[Callable[[F], F]] = [
        in_section(PROMPTS, PROMPTS_OPTION, *source_options(), SUITE_OPTION),
        click.option("--repeats", default=repeats, show_default=True,
                     type=click.IntRange(least_repeats),
                     help="Identical requests per prompt, compared to tell whether the server "
                          "answers them alike (the determinism signature); a reference for "
                          "CI: 2 or more, so that the gate knows where A itself wavers."),
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
        API_OPTION,
        click.option("--stream/--no-stream", default=True, show_default=True,
                     help="Stream responses (measures time to first token)."),
        EXTRA_BODY_OPTION,
        click.option("--timeout", default=600.0, show_default=True, type=FiniteFloat(0.1),
                     help="Seconds a request may take as a whole, stream included."),
        click.option("--max-response-mb", default=DEFAULT_MAX_RESPONSE_MB, show_default=True,
                     type=click.IntRange(1),
                     help="Size cap of one answer; a larger one fails at once."),
        RETRIES_OPTION,
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
                     help="Record MoE expert routing per token and layer (vLLM or SGLang "
                          "started with --enable-return-routed-experts); vLLM sends it in "
                          "whole answers only, so there it collects without streaming."),
        click.option("--routed-experts-shape", callback=layers_and_k, metavar="LAYERS,K",
                     help="The model's num_hidden_layers and num_experts_per_tok: SGLang "
                          "sends routing without its shape."),
    ]
    command = _with_suites(gathered("parameters", _parameters)(function))
    return in_section(SEND, *options)(command)


def _shard_option(context: click.Context, parameter: click.Parameter, value: str | None
                  ) -> str | None:
    from ..store.folders.shards import ShardError, parse_shard

    if value is None:
        return None
    try:
        index, count = parse_shard(value)
    except ShardError as exc:
        raise click.BadParameter(str(exc), context, parameter) from None
    return f"{index}/{count}"


def layers_and_k(context: click.Context, parameter: click.Parameter, value: str | None
                  ) -> list[int] | None:
    if value is None:
        return None
    parts = value.replace(" ", "").split(",")
    if len(parts) != 2 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise click.BadParameter(f"{value!r}: expected LAYERS,K, e.g. 48,8", context,
                                 parameter)
    return [int(part) for part in parts]


def side_settings(parameters: Parameters, endpoint: str, label: str, model: str | None,
                  api_key_env: str | None, cell: tuple[str, ...] = (),
                  replica_spread: str = "prompt") -> CollectSettings:
    """One side's collection: the request options, where (an endpoint, or replicas
    joined by commas), and its --cell facts."""
    return run_guarded(lambda: CollectSettings(
        endpoint=endpoint, label=label, cell=parse_cell_options(cell),
        replica_spread=replica_spread,
        **msgspec.structs.asdict(msgspec.structs.replace(
            parameters, model=model, api_key_env=api_key_env))), "")


# --- where requests go: an endpoint, or replicas --------------------------------------

def endpoints_option(context: click.Context, parameter: click.Parameter,
                     value: str | tuple[str, ...] | None) -> str | tuple[str, ...] | None:
    """An endpoint, or replicas of one configuration joined by commas (each URL once);
    checked before anything is read or sent."""
    for given in (value,) if isinstance(value, str) else value or ():
        try:
            check_distinct(split_endpoints(given))
        except EndpointError as exc:
            raise click.BadParameter(str(exc), context, parameter) from None
    return value


def single_endpoint(context: click.Context, parameter: click.Parameter, value: str | None
                    ) -> str | None:
    """An endpoint of a command that measures one server: a list of replicas refused."""
    if value is not None and len(split_endpoints(value)) > 1:
        raise click.BadParameter("takes one server's URL; replicas joined by commas are "
                                 "for collect and run (measure each replica on its own)",
                                 context, parameter)
    return value


REPLICA_SPREAD_OPTION = click.option(
    "--replica-spread", type=click.Choice(SPREADS), default="prompt", show_default=True,
    help="With replicas (URLs joined by commas): prompt sends a prompt's repeats to one "
         "replica; repeat sends them to different replicas, so the repeats also tell "
         "whether the replicas agree.")


# --- what a comparison reads: CompareOptions -----------------------------------------

def _compare_options(sig_digits: int, a_log: Path | None, b_log: Path | None,
                     signature_files: tuple[Path, ...], approvals: Path | None,
                     allow_code_exec: bool, code_timeout: float, code_memory_mb: int,
                     jobs: int | None, rubric: Path | None, judge: JudgeSettings | None
                     ) -> CompareOptions:
    refuse_without("--allow-code-exec", allow_code_exec, "code_timeout", "code_memory_mb")
    return CompareOptions(sig_digits=sig_digits, approvals=approvals, jobs=jobs,
                          a_log=a_log, b_log=b_log, signature_files=signature_files,
                          code_exec=code_limits(code_timeout, code_memory_mb)
                          if allow_code_exec else None, judge=judge, rubric=rubric)


def _judge_settings(judge: str | None, judge_model: str | None,
                    judge_api_key_env: str | None, judge_concurrency: int,
                    judge_timeout: float, judge_max_tokens: int, judge_cache: Path | None
                    ) -> JudgeSettings | None:
    refuse_without("--judge URL", judge is not None, "judge_model", "judge_api_key_env",
                   "judge_concurrency", "judge_timeout", "judge_max_tokens", "judge_cache")
    if judge is None:
        return None
    return JudgeSettings(endpoint=judge, model=judge_model, api_key_env=judge_api_key_env,
                         concurrency=judge_concurrency, timeout=judge_timeout,
                         max_tokens=judge_max_tokens, cache=judge_cache)


JUDGE_OPTIONS: list[Callable[[F], F]] = [
    click.option("--judge", metavar="URL",
                 help="An OpenAI-compatible endpoint that gives a second opinion on every "
                      "pair that differs and no expect decided: a suggested label beside "
                      "quantcheck's own, never a reviewer's (docs/review.md#the-judge)."),
    click.option("--judge-model", help="Model name on the judge (default: the one it lists)."),
    click.option("--judge-api-key-env", metavar="VAR",
                 help="Environment variable holding the judge's API key."),
    click.option("--judge-concurrency", default=4, show_default=True, type=click.IntRange(1),
                 help="Judge requests in flight at once."),
    click.option("--judge-timeout", default=120.0, show_default=True,
                 type=FiniteFloat(0.1), help="Seconds a judge request may take."),
    click.option("--judge-max-tokens", default=200, show_default=True,
                 type=click.IntRange(8), help="Cap of a judge's reply."),
    click.option("--judge-cache", type=click.Path(dir_okay=False, path_type=Path),
                 help="The judge's replies, kept so a rerun asks only what is new "
                      "(default: REPORT_DIR/judge-cache.jsonl)."),
]


def compare_options(function: F) -> F:
    """Options of every command that compares: signature digits, logs to scan,
    approvals to apply, code checks, processes. The command gets `compare`."""
    options: list[Callable[[F], F]] = [
        sig_digits_option,
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
                     type=FiniteFloat(0.1), metavar="SECONDS",
                     help="Wall-clock and CPU limit of one code check."),
        click.option("--code-memory-mb", default=Limits.memory_mb, show_default=True,
                     type=click.IntRange(32), help="Memory limit of one code check."),
        click.option("--jobs", type=click.IntRange(1), metavar="N",
                     help="Processes that triage pairs (default: every core)."),
        click.option("--rubric", type=EXISTING_FILE,
                     help="Rubric YAML of the sheet and of the judge's labels (default: "
                          "rubrics/default.yaml)."),
        *JUDGE_OPTIONS,
    ]
    # --judge's options become one JudgeSettings first, then part of CompareOptions
    command = gathered("judge", _judge_settings)(gathered("compare", _compare_options)(function))
    return in_section(JUDGE, *options)(command)


def sig_digits_option(function: F) -> F:
    return click.option("--sig-digits", default=12, show_default=True, type=click.IntRange(1, 17),
                        help="Logprobs are rounded to this many significant digits "
                        "before repeats are compared.")(function)


def forced_options(function: F) -> F:
    """Options of the commands that score A's tokens on B (teacher forcing)."""
    options: list[Callable[[F], F]] = [
        click.option("--forced-mode", type=click.Choice(MODES), default="auto",
                     show_default=True,
                     help="prompt-logprobs: token ids with vLLM's prompt_logprobs (exact when "
                          "A's run holds its token ids, else A's text tokenized by B); "
                          "token-ids: token ids on llama-server's /completion, one "
                          "position per request (exact); echo: text with echo + logprobs "
                          "(approximate); auto: prompt-logprobs on vLLM, token-ids on "
                          "llama-server, else echo."),
        click.option("--forced-concurrency", default=4, show_default=True,
                     type=click.IntRange(1),
                     help="Scoring requests in flight at once (token-ids: at most "
                          "llama-server's slots)."),
    ]
    return in_section(FORCED, *options)(function)


FORCED_TOP_LOGPROBS_HELP = (
    "Alternatives B is asked for at each position (llama-server's n_probs, vLLM's "
    "prompt_logprobs, at most the server's --max-logprobs): more make the KL estimate "
    "tighter; the report shows it at K and at K/4.")


# --- the gate's limits from the command line -----------------------------------------

_LIMIT_TYPES: dict[str, Any] = {
    "count": click.IntRange(0), "share": FiniteFloat(0, 1), "points": FiniteFloat(0, 100),
    "number": FiniteFloat(0)}


def limit_option(limit: Limit, help: str | None = None) -> Callable[[F], F]:
    """A limit's option, from its row of the policy table (gate/limits.py); `help` where
    another command applies the limit in its own words (determinism --certify)."""
    if limit.kind == "switch":
        return click.option(limit.flag, limit.key, default=None, help=help or limit.help)
    return click.option(limit.flag, limit.key, type=_LIMIT_TYPES[limit.kind],
                         metavar=limit.metavar, help=help or limit.help)


@dataclass
class PolicyOverrides:
    """The gate's --max-*/--require-* options by policy key; None: as the policy file
    says."""

    given: dict[str, Any]

    def applied(self, policy: Policy) -> Policy:
        given = {key: value for key, value in self.given.items() if value is not None}
        return Policy(**{**vars(policy), **given})


def policy_options(function: F) -> F:
    """--policy FILE, then every limit of the policy table as an option; the command gets
    the limits as one `overrides` (PolicyOverrides)."""
    @functools.wraps(function)
    def command(**values: object) -> object:
        given = {limit.key: values.pop(limit.key) for limit in LIMITS}
        return function(**values, overrides=PolicyOverrides(given))

    options = [click.option("--policy", type=EXISTING_FILE,
                            help="Policy YAML; the options below override it."),
               *map(limit_option, LIMITS)]
    return in_section(POLICY, *options)(cast(F, command))
