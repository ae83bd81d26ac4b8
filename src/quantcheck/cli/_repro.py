"""`quantcheck repro`: one prompt's requests and answers as a folder an engine team can
replay with curl."""

from __future__ import annotations

from pathlib import Path

import click

from ._group import cli
from .guard import run_guarded
from .options import EXISTING_DIR


@cli.command("repro")
@click.argument("source", type=EXISTING_DIR)
@click.argument("prompt_id")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder to write: the request bodies, the answers, replay.sh, "
                   "repro.json and a README.")
@click.option("--force", is_flag=True, help="Write into OUT even if it holds files.")
def repro_command(source: Path, prompt_id: str, out: Path, force: bool) -> None:
    """Write what an engine team needs to replay one prompt of a report (SOURCE, a
    report folder of `run` or `compare`): the exact request bodies both sides were sent
    (rebuilt by collect's own code from the runs), a replay.sh that sends them with curl
    and compares the answers byte for byte with the recorded ones, both answers, where
    they part, the serving cells, and a five-line README. No key, password or
    credential is written (docs/review.md, "A repro an engine team can run").

    SOURCE may be a determinism certificate (`determinism --certify`): then the
    prompt's baseline and the first of its answers that differed (alone and batched,
    cold and warm, ...), as recorded in requests.jsonl, with what was sent beside and
    before each.

    \b
    Example:
      quantcheck repro reports/fp8 facts-capital-australia --out repro/capital
      bash repro/capital/replay.sh
      quantcheck repro reports/certificate capital --out repro/certificate
    """
    from ..pipeline.repro import write_repro

    if out.exists() and any(out.iterdir()) and not force:
        raise click.UsageError(f"{out} holds files already: choose another --out, or "
                               "--force to write into it")
    repro = run_guarded(lambda: write_repro(source, prompt_id, out), "Nothing was written.")
    click.echo(f"Recorded: {repro.divergence.sentence}.")
    click.echo(f"wrote {out}: {', '.join(r.body for r in repro.requests)}, replay.sh, "
               "README.md, repro.json (run: bash "
               f"{out / 'replay.sh'})")
