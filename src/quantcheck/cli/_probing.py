"""Commands about servers: probe, preflight, logscan and the lab endpoints."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from .._version import __version__
from ..errors import ExitCode
from ..pipeline.checking import PreflightOptions, preflight, probe
from ..store.engines import ENGINE_NAMES
from ..store.inputs.prompt_sets import APIS
from ..store.records.report_records import LogMatch
from ..store.records.run_records import DEFAULT_CONTEXT_TOKENS
from ..triage.cells import parse_cell_options
from ._group import cli
from .guard import run_guarded
from .options import EXISTING_FILE, PROMPT_SOURCE, json_object_option
from .printing import echo_log_matches, echo_preflights, echo_probe
from .serving import refuse_a_port_in_use, serve_until_stopped

if TYPE_CHECKING:
    from ..lab.endpoint import LabServer

Command = TypeVar("Command", bound=Callable[..., None])


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
    overrides = run_guarded(lambda: parse_cell_options(cell), "")
    echo_probe(run_guarded(lambda: probe(endpoint, model, overrides, api_key_env), ""), as_json)


@cli.command("preflight")
@click.argument("endpoints", nargs=-1, required=True, metavar="URL [URL_B]")
@click.option("--model", help="Model name (default: the one model /v1/models lists).")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@click.option("--prompts", "prompt_file", type=PROMPT_SOURCE,
              help="Shape probes like this prompt set's requests (API, fields).")
@click.option("--api", type=click.Choice(APIS), default="chat",
              show_default=True, help="API of the probes (without --prompts).")
@click.option("--extra-body", callback=json_object_option,
              help="JSON merged into every probe, as in collect.")
@click.option("--top-logprobs", default=20, show_default=True, type=click.IntRange(0))
@click.option("--context-tokens", default=DEFAULT_CONTEXT_TOKENS, show_default=True,
              type=click.IntRange(0), help="Length of the context-truncation probe; 0 skips.")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
def preflight_command(endpoints: tuple[str, ...], model: str | None, api_key_env: str | None,
                      prompt_file: Path | None, api: str, extra_body: dict[str, object],
                      top_logprobs: int, context_tokens: int, as_json: bool) -> None:
    """Check endpoints before an A/B; exit 2 when a hard check fails.

    Checks that the model is listed, logprobs come back with K alternatives, greedy
    decoding really picks the top-1 token, a long prompt is not silently truncated,
    a reasoning model does not leak or eat its answer, and (given two URLs) that A
    and B tokenize alike. `collect` and `run` do this by themselves.

    \b
    Example:
      quantcheck preflight http://127.0.0.1:8000/v1
      quantcheck preflight http://gpu1:8000/v1 http://gpu2:8000/v1 --prompts prompts/default.yaml
    """
    if len(endpoints) > 2:
        raise click.UsageError("give one endpoint, or two (A and B)")
    result = run_guarded(lambda: preflight(PreflightOptions(
        list(endpoints), model, api_key_env, prompt_file, api, extra_body, top_logprobs,
        context_tokens)), "")
    echo_preflights(result, as_json)
    if any(report.failures() for report in result.reports):
        sys.exit(ExitCode.INPUT)


@cli.command("logscan")
@click.argument("logs", nargs=-1, required=True,
                type=EXISTING_FILE)
@click.option("--signatures", "signature_files", multiple=True,
              type=EXISTING_FILE,
              help="Your own signatures YAML, besides the shipped one.")
@click.option("--json", "as_json", is_flag=True, help="Print the matches as JSON.")
def logscan_command(logs: tuple[Path, ...], signature_files: tuple[Path, ...],
                    as_json: bool) -> None:
    """Scan server logs for known failure signatures; exit 1 on a blocking one.

    \b
    Example:
      quantcheck logscan sglang-server.log
    """
    from ..triage.log_signatures import load_signatures, scan_log

    def work() -> list[LogMatch]:
        signatures = load_signatures(signature_files)
        return [match for log in logs for match in scan_log(log, signatures)]

    matches = run_guarded(work, "")
    echo_log_matches(matches, len(logs), as_json)
    sys.exit(ExitCode.FAIL if any(m.blocking for m in matches) else ExitCode.PASS)


@cli.group("lab")
def lab_group() -> None:
    """Built-in local endpoints for trying quantcheck without a GPU."""


ROUTING_FAULTS: dict[str, tuple[str, ...]] = {  # lab.scripted.Faults flags set
    "none": (), "stable": ("routing",), "finalize": ("routing", "nondeterministic"),
    "gating": ("routing", "gating_nondeterministic")}
OUTPUT_FAULTS: dict[str, dict[str, object]] = {  # lab.scripted.Faults fields set
    "none": {}, "late-loop": {"late_loop_after": 3000}, "bang-run": {"bang_run": True},
    "collapse": {"collapse": True}}


def _served_options(command: Command) -> Command:
    """--dialect, --host and --port, as every lab server takes them."""
    options = [
        click.option("--dialect", type=click.Choice(ENGINE_NAMES), default="vllm",
                     show_default=True, help="Whose wire format to speak."),
        click.option("--host", default="127.0.0.1", show_default=True,
                     help="Address to bind (the lab is for this machine: keep 127.0.0.1)."),
        click.option("--port", default=8000, show_default=True,
                     type=click.IntRange(0, 65535), help="Port to serve on."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@lab_group.command("scripted")
@_served_options
@click.option("--routing", type=click.Choice(list(ROUTING_FAULTS)), default="none",
              show_default=True,
              help="Return MoE routing (vllm and sglang dialects; collect with "
                   "--routed-experts, and for sglang --routed-experts-shape 4,2): stable, "
                   "stable with moving logprobs (finalize), or moving (gating).")
@click.option("--answers", "answers_file", type=EXISTING_FILE,
              help="YAML or JSON mapping each prompt (its id, or text found in it) to its "
                   "answer (docs/engines.md, Scripted answers); other prompts get the "
                   "default answer.")
@click.option("--prompts", "prompt_files", multiple=True, type=PROMPT_SOURCE,
              help="The prompt set whose ids --answers may name.")
@click.option("--fault", type=click.Choice(list(OUTPUT_FAULTS)), default="none",
              show_default=True,
              help="Long answers gone wrong, with HTTP 200: late-loop (after 3,000 tokens, "
                   "or at the answer's end, its last 8 tokens repeat to the length limit), "
                   "bang-run (every answer `!` to the length limit), collapse (one answer "
                   "to every prompt).")
def lab_scripted(dialect: str, host: str, port: int, routing: str, answers_file: Path | None,
                 prompt_files: tuple[Path, ...], fault: str) -> None:
    """Serve scripted answers in a runtime's OpenAI-compatible dialect (no model).

    It is the loopback server the tests use: handy to try collect and compare, and,
    with --answers, a fixture for your own CI (one server per side, each with its
    answers file).

    \b
    Example:
      quantcheck lab scripted --dialect sglang --port 8001
      quantcheck lab scripted --routing gating --port 8002
      quantcheck lab scripted --fault bang-run --port 8003
      quantcheck lab scripted --answers answers-a.yaml --prompts prompts/default.yaml \\
          --port 8000
    """
    from ..lab.answers import load_answers, split_by_prompt
    from ..lab.scripted import Faults, ScriptedModel, ScriptedServer

    if prompt_files and answers_file is None:
        raise click.BadParameter("names the ids an answers file may use: give --answers "
                                 "FILE too", param_hint="--prompts")
    model = ScriptedModel()
    if answers_file is not None:
        def read() -> ScriptedModel:
            answers = load_answers(answers_file)
            exact, found_in = split_by_prompt(answers_file, answers, list(prompt_files))
            return ScriptedModel(responses=found_in, exact=exact)

        model = run_guarded(read, "")
    faults = Faults()
    for flag in ROUTING_FAULTS[routing]:
        setattr(faults, flag, True)
    for flag, value in OUTPUT_FAULTS[fault].items():
        setattr(faults, flag, value)
    server = ScriptedServer(model, dialect=dialect, host=host, port=port, faults=faults)

    _serve_all([(server, f"scripted {dialect} server")], host, port)


# lab/numerics.py's PRECISIONS and lab/model.py's FAULTS, named here without importing torch
PRECISIONS = ("bf16", "fp8", "int4")
FAULTS = ("none", "nondeterministic", "lmhead-noscale")


@lab_group.command("serve")
@click.option("--precision", type=click.Choice(PRECISIONS), default="bf16",
              show_default=True, help="Weight format of the decoder's linear layers.")
@click.option("--fault", type=click.Choice(FAULTS), default="none", show_default=True,
              help="nondeterministic: the head's reduction order changes per token; "
                   "lmhead-noscale: an FP8 head whose scales are never applied.")
@_served_options
@click.option("--threads", type=click.IntRange(1), help="CPU threads for the model.")
@click.option("--also", "also", multiple=True, metavar="PRECISION[:FAULT]@PORT",
              callback=lambda _, __, specs: [_side_spec(spec) for spec in specs],
              help="Serve another side from this process, on its own port: the model is "
                   "loaded once for every side (repeatable).")
def lab_serve(precision: str, fault: str, dialect: str, host: str, port: int,
              threads: int | None, also: list[tuple[str, str, int]]) -> None:
    """Serve the real Gemma 3 270M (CPU) at a chosen precision, OpenAI-compatible.

    One request is computed at a time per side (requests queue); greedy decoding with
    top-k logprobs from the model's own log-softmax. Needs the demo extra.

    \b
    Example:
      quantcheck lab serve --precision fp8 --port 8001
      quantcheck lab serve --fault lmhead-noscale --port 8002
      quantcheck lab serve --port 8000 --also fp8@8001 --also int4:nondeterministic@8002
    """
    from ..lab.endpoint import LabServer
    from ..lab.launch import require_demo_dependencies

    sides = [(precision, fault, port), *also]
    ports = [side_port for _, _, side_port in sides if side_port]  # 0: any free port
    if len(set(ports)) < len(ports):
        raise click.BadParameter(f"two sides on one port ({', '.join(map(str, ports))})",
                                 param_hint="--port/--also")
    for side_port in ports:  # before torch and the model, which take a while
        refuse_a_port_in_use(host, side_port)
    run_guarded(require_demo_dependencies, "")
    from ..lab.model import ModelEngine

    servers = []
    for side_precision, side_fault, side_port in sides:
        click.echo(f"loading gemma-3-270m at {side_precision} (fault: {side_fault})...",
                   err=True)
        engine = run_guarded(partial(ModelEngine, side_precision, side_fault, threads), "")
        servers.append((LabServer(engine, dialect=dialect, host=host, port=side_port,
                                  server_info={"version": f"quantcheck-lab-{__version__}"}),
                        f"{engine.name} ({dialect} wire format)"))
    _serve_all(servers, host, port)


def _side_spec(spec: str) -> tuple[str, str, int]:
    """PRECISION[:FAULT]@PORT of --also, or a usage error naming what is wrong."""
    match = re.fullmatch(
        rf"({'|'.join(PRECISIONS)})(?::({'|'.join(FAULTS)}))?@([0-9]{{1,5}})", spec)
    if match is None or int(match[3]) > 65535:
        raise click.BadParameter(f"{spec!r} is not PRECISION[:FAULT]@PORT (precision "
                                 f"{', '.join(PRECISIONS)}; fault {', '.join(FAULTS)}), "
                                 "e.g. fp8@8001", param_hint="--also")
    return match[1], match[2] or "none", int(match[3])


def _serve_all(servers: list[tuple[LabServer, str]], host: str, port: int) -> None:
    async def start() -> str:
        for server, _ in servers:
            await server.start_async()
        return servers[0][0].url

    def announce(_: str) -> str:
        lines = [f"{what} on {server.url}/v1" for server, what in servers]
        return "\n".join(lines) + " (Ctrl-C stops)"

    serve_until_stopped(start, announce, host, port)
