"""The quantcheck command line: parse, call one library function, print; nothing
imports it. What it may import: the layer map in docs/development.md."""

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
