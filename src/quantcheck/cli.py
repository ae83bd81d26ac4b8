"""The quantcheck command line: parse, call one library function, print."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from . import __version__
from .collect import CollectSettings, collect
from .errors import QuantcheckError
from .prompts import APIS, RequestOptions
from .records import Completion

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
        raise click.BadParameter('must be a JSON object, e.g. {"top_k": null}')
    return data


def request_options(function: F) -> F:
    """Options shared by every command that sends prompts."""
    options = [
        click.option("--prompts", "prompt_files", multiple=True, required=True,
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="Prompt set (YAML); repeat for several."),
        click.option("--repeats", default=1, show_default=True, type=click.IntRange(1),
                     help="Identical requests per prompt (feeds the determinism signature)."),
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
                          '\'{"top_k": null}\'.'),
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
                  options: dict[str, Any]) -> CollectSettings:
    return CollectSettings(
        endpoint=endpoint, label=label, model=model, repeats=options["repeats"],
        top_logprobs=options["top_logprobs"], stream=options["stream"],
        concurrency=options["concurrency"], timeout=options["timeout"],
        retries=options["retries"], api_key_env=api_key_env,
        request=RequestOptions(max_tokens=options["max_tokens"], api=options["api"],
                               extra_body=options["extra_body"]))


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
@request_options
def collect_command(endpoint: str, label: str | None, out: Path, model: str | None,
                    api_key_env: str | None, prompt_files: tuple[Path, ...], force: bool,
                    **options: Any) -> None:
    """Collect greedy generations with top-k logprobs from one endpoint.

    Writes RUN_DIR/manifest.json, prompts.jsonl and completions.jsonl. Running the
    same command again resumes: finished requests are skipped, never duplicated.

    \b
    Example:
      quantcheck collect --endpoint http://127.0.0.1:8000/v1 --label bf16 \\
          --prompts prompts/default.yaml --repeats 3 --out runs/bf16
    """
    settings = settings_from(endpoint, label or out.name, model, api_key_env, options)
    reporter = ProgressReporter(settings.label)
    try:
        result = run_guarded(
            lambda: collect(prompt_files, out, settings, reporter, force),
            f"Records so far are kept in {out}; rerun the same command to resume.")
    finally:
        reporter.close()
    click.echo(f"{settings.label}: {result.collected} collected, {result.skipped} already there, "
               f"{result.failed} failed -> {out}", err=True)
    if result.failed:
        click.echo(f"{result.failed} requests failed after retries; rerun the same command to "
                   "retry them.", err=True)
        sys.exit(1)


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
