"""The quantcheck command line: parse, call one library function, print. Imports the
pipeline and any layer below it (the lab too); nothing imports it."""

from __future__ import annotations

# The commands register themselves on `cli` when their modules are imported.
from . import (  # noqa: F401
    _collecting,
    _demo,
    _evals,
    _ladder,
    _planning,
    _probing,
    _prompts,
    _reporting,
    _repro,
    _starter,
)
from ._group import cli

__all__ = ["cli"]
