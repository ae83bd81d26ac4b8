"""`quantcheck prompts check` and `convert`: what a prompt file (and a mapping) makes
of a data file, before any request is sent."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import click

from ..store.inputs.prompt_sets import APIS, LoadedSource, load_sources
from ..store.inputs.prompt_writer import convert_prompt_files
from ..store.records.run_records import CHECKS, Prompt
from ._group import cli
from .guard import run_guarded
from .options import (
    PROMPT_SOURCE,
    apply_options,
    json_object_option,
    request_settings,
    source_options,
)

SHOWN_TEXT = 300  # characters of a long text shown by `check`


_OPTIONS = [
    *source_options(),
    click.option("--max-tokens", type=click.IntRange(1),
                 help="Cap for every prompt, as collect's --max-tokens."),
    click.option("--api", type=click.Choice(APIS), help="As collect's --api."),
    click.option("--extra-body", callback=json_object_option,
                 help="JSON merged into every request, as collect's --extra-body."),
]


@cli.group("prompts")
def prompts_group() -> None:
    """Check and convert prompt files: YAML prompt sets, JSONL request bodies and Batch
    API files, CSV, Parquet, datasets folders and YAML source files (docs/prompts.md)."""


@prompts_group.command("check")
@click.argument("files", nargs=-1, required=True, type=PROMPT_SOURCE)
@click.option("--show", default=3, show_default=True, type=click.IntRange(0), metavar="N",
              help="Print the request body and expect of the first N prompts.")
@apply_options(_OPTIONS)
def check_command(files: tuple[Path, ...], show: int, column_map: tuple[str, ...],
                  map_preset: str | None, sample: int | None, seed: int | None,
                  max_tokens: int | None, api: str | None,
                  extra_body: dict[str, object]) -> None:
    """Validate prompt files, count their prompts and show what the first requests
    will carry: the exact request bodies (without the model and logprob fields) and
    expects. Takes the mapping options --prompts takes; exit 2 names the file, line
    (or row) and field of the first problem.

    \b
    Example:
      quantcheck prompts check requests.jsonl
      quantcheck prompts check gsm8k/test.parquet --map-preset gsm8k --sample 200
      quantcheck prompts check mmlu.csv --map prompt=question --map choices=A,B,C,D \\
          --map expect.choice=answer:letter
    """
    options = request_settings(max_tokens, api, extra_body, column_map, map_preset, sample,
                               seed)
    sources = run_guarded(lambda: load_sources(files, options), "")
    for source in sources:
        _echo_source(source)
    prompts = [prompt for source in sources for prompt in source.prompts]
    click.echo(f"total: {len(prompts):,} {_plural('prompt', len(prompts))}, ids unique")
    for prompt in prompts[:show]:
        _echo_prompt(prompt)


@prompts_group.command("convert")
@click.argument("files", nargs=-1, required=True, type=PROMPT_SOURCE)
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The YAML prompt set to write.")
@click.option("--force", is_flag=True, help="Replace an existing --out file.")
@apply_options(_OPTIONS)
def convert_command(files: tuple[Path, ...], out: Path, force: bool,
                    column_map: tuple[str, ...], map_preset: str | None, sample: int | None,
                    seed: int | None, max_tokens: int | None, api: str | None,
                    extra_body: dict[str, object]) -> None:
    """Write prompt files as one YAML prompt set to read and edit by hand; it loads
    back to the same prompts and request bodies (--prompts takes it as any other).

    \b
    Example:
      quantcheck prompts convert mmlu/test.csv --map-preset mmlu --sample 100 \\
          --out prompts/mmlu-100.yaml
    """
    options = request_settings(max_tokens, api, extra_body, column_map, map_preset, sample,
                               seed)
    sources = run_guarded(lambda: convert_prompt_files(list(files), out, options, force),
                          "Nothing was written.")
    for source in sources:
        _echo_source(source)
    count = sum(len(source.prompts) for source in sources)
    click.echo(f"written: {out} ({count:,} prompts)")


def _echo_source(source: LoadedSource) -> None:
    shapes = ", ".join(f"{count:,} {_plural(shape, count)}"
                       for shape, count in source.shapes.items())
    unit = "prompt" if source.kind == "YAML prompt set" else "row"
    click.echo(f"{source.path}: {source.kind}, {source.rows:,} {unit}{'s' * (source.rows != 1)} "
               "read" +
               (f": {shapes}" if shapes else ""))
    apis = Counter(prompt.api for prompt in source.prompts)
    checks = Counter(check for prompt in source.prompts if prompt.expect
                     for check in prompt.expect.to_json() if check in CHECKS)
    with_expect = sum(1 for prompt in source.prompts if prompt.expect)
    click.echo(f"  {len(source.prompts):,} {_plural('prompt', len(source.prompts))} ("
               + ", ".join(f"{api} {n:,}" for api, n in sorted(apis.items()))
               + f"), {with_expect:,} with an expect"
               + (f" ({', '.join(f'{c} {n:,}' for c, n in sorted(checks.items()))})"
                  if checks else ""))
    if source.mapping:
        click.echo(f"  mapping: {source.mapping}")
    if source.hashed_ids:
        click.echo(f"  ids: {source.hashed_ids:,} made from a hash of the content (no id "
                   "column)")
    if source.total is not None:
        click.echo(f"  sample: {len(source.prompts):,} of {source.total:,} rows, seed "
                   f"{source.seed}")


def _plural(noun: str, count: int) -> str:
    if count == 1:
        return noun
    return noun[:-1] + "ies" if noun.endswith("body") else noun + "s"


def _echo_prompt(prompt: Prompt) -> None:
    click.echo(f"\n--- {prompt.id} ({prompt.source}), {prompt.api}, category "
               f"{prompt.category}")
    click.echo("request: " + json.dumps(_shortened(prompt.request), indent=2,
                                        ensure_ascii=False))
    click.echo("expect: " + (json.dumps(prompt.expect.to_json(), ensure_ascii=False)
                             if prompt.expect else "none"))


def _shortened(value: object) -> object:
    """Long texts cut for the terminal (a haystack is thousands of words)."""
    if isinstance(value, str) and len(value) > SHOWN_TEXT:
        return f"{value[:SHOWN_TEXT]}... ({len(value):,} characters)"
    if isinstance(value, dict):
        return {key: _shortened(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shortened(item) for item in value]
    return value
