"""`quantcheck init`: the starter kit in the user's repository, and what to run next."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from ..pipeline.starter import write_starter_kit
from ._group import cli
from .guard import run_guarded
from .printing import invocation


@cli.command("init")
@click.argument("folder", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite files of the kit that are there.")
def init_command(folder: Path, force: bool) -> None:
    """Write a starter kit into a repository: a prompt set with one example of each
    expect kind (quantcheck/prompts.yaml), the gate's policy (quantcheck/policy.yaml),
    a CI workflow (.github/workflows/quantcheck.yml) and a short README section
    (quantcheck/README.md). The workflow installs the quantcheck this command
    runs from (a release, a git commit, or a path; the last lines say which).
    The kit is written whole or not at all: if a file of it is there, nothing is
    written unless --force (which overwrites them); a path that leads outside the
    repository through a symbolic link is refused.

    \b
    Example:
      quantcheck init
      quantcheck init path/to/repo
    """
    kit = run_guarded(lambda: write_starter_kit(folder, force), "Nothing was written.")
    for name in kit.written:
        click.echo(f"wrote {folder / name}")
    me = invocation()
    prompts, policy = (shlex.quote(str(folder / name)) for name in (kit.prompts, kit.policy))
    click.echo("\nNext:\n"
               f"  {me} prompts check {prompts}\n"
               f"  {me} run --a http://HOST_A:8000/v1 --b http://HOST_B:8000/v1 "
               f"--prompts {prompts} --allow-code-exec --out reports/first\n"
               f"  {me} gate reports/first --policy {policy}\n"
               f"(no endpoints yet? `{me} demo` runs an A/B on built-in ones)\n"
               f"\nThe CI workflow installs QUANTCHECK={kit.install.requirement}: "
               f"{kit.install.origin}.\n"
               "If your runners cannot install that, set QUANTCHECK in "
               f"{folder / kit.workflow} to a release (quantcheck==VERSION), a "
               "wheel's path or git+https://github.com/OWNER/quantcheck@COMMIT.")
