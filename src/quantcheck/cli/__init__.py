"""The quantcheck command line: parse, call one library function, print."""

from __future__ import annotations

import click

from .. import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="quantcheck")
def cli() -> None:
    """Did this serving change make the model worse?

    Sends the same greedy prompts to two OpenAI-compatible endpoints, triages every
    pair, renders a review sheet and gates CI on factual flips.
    """


# The commands register themselves on `cli` when their modules are imported.
from . import _collecting, _reporting, _servers  # noqa: E402

__all__ = ["cli", "_collecting", "_reporting", "_servers"]
