"""quantcheck: did this serving change make the model worse?

The public Python API. Its names load on first use, so importing the package or one
of its record modules does not load the network client, aiohttp or pandas.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._version import __version__

_HOMES = {
    "CollectResult": "collect", "CollectSettings": "collect", "collect": "collect",
    "collect_async": "collect", "compare": "compare", "compare_to_dir": "compare",
    "QuantcheckError": "errors", "RequestOptions": "prompts", "load_prompts": "prompts",
    "Completion": "records", "Expect": "records", "Prompt": "records", "Tokens": "records",
    "Run": "runstore", "load_run": "runstore", "Manifest": "runstore",
    "ABRun": "pipeline", "CompareOptions": "pipeline", "compare_runs": "pipeline",
    "run_ab": "pipeline", "Summary": "reportrecords", "read_summary": "reportdir",
}
__all__ = [
    "ABRun", "CollectResult", "CollectSettings", "CompareOptions", "Completion", "Expect",
    "Manifest", "Prompt", "QuantcheckError", "RequestOptions", "Run", "Summary", "Tokens",
    "__version__", "collect", "collect_async", "compare", "compare_runs", "compare_to_dir",
    "load_prompts", "load_run", "read_summary", "run_ab",
]

if TYPE_CHECKING:
    from .collect import CollectResult, CollectSettings, collect, collect_async
    from .compare import compare, compare_to_dir
    from .errors import QuantcheckError
    from .pipeline import ABRun, CompareOptions, compare_runs, run_ab
    from .prompts import RequestOptions, load_prompts
    from .records import Completion, Expect, Prompt, Tokens
    from .reportdir import read_summary
    from .reportrecords import Summary
    from .runstore import Manifest, Run, load_run


class _Package(types.ModuleType):
    """`quantcheck.collect` and `quantcheck.compare` are the functions, as they always
    were: importing the modules of those names must not put the modules in their place."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("collect", "compare") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'quantcheck' has no attribute {name!r}")
    value = getattr(import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value
