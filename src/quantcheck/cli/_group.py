"""The `quantcheck` command group; the command modules register on it."""

from __future__ import annotations

import click

from .._version import __version__
from .heap import return_freed_memory


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="quantcheck")
def cli() -> None:
    """Did this serving change make the model worse?

    Sends the same greedy prompts to two OpenAI-compatible endpoints, triages every
    pair, renders a review sheet and gates CI on factual flips.
    """
    return_freed_memory()
