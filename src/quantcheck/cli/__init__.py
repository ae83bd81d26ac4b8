"""The quantcheck command line: parse, call one library function, print."""

from __future__ import annotations

# The commands register themselves on `cli` when their modules are imported.
from . import _collecting, _reporting, _servers  # noqa: F401
from ._group import cli

__all__ = ["cli"]
