"""quantcheck: did this serving change make the model worse?

The public Python API. Its names load on first use, so importing the package or one
of its record modules does not load the network client, aiohttp or pandas.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._version import __version__

_EXPORTS = {
    "errors": ["QuantcheckError"],
    "fetch.collect": ["CollectResult", "CollectSettings", "collect_async"],
    "fetch.judging": ["JudgeSettings"],
    "triage.pairs": ["compare"],
    "pipeline.ab": ["ABRun", "run_ab"],
    "pipeline.collecting": ["collect"],
    "pipeline.comparing": ["CompareOptions", "compare_runs"],
    "store.inputs.prompt_sets": ["RequestOptions", "SourceOptions", "load_prompts"],
    "store.folders.report_dir": ["read_pairs", "read_summary"],
    "store.records.report_records": ["Summary"],
    "store.folders.run_dir": ["Manifest", "Run", "load_run"],
    "store.records.run_records": ["Completion", "Expect", "Prompt", "Tokens"],
}
_HOMES = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = [
    "ABRun", "CollectResult", "CollectSettings", "CompareOptions", "Completion", "Expect",
    "JudgeSettings", "Manifest", "Prompt", "QuantcheckError", "RequestOptions", "Run",
    "SourceOptions", "Summary", "Tokens",
    "__version__", "collect", "collect_async", "compare", "compare_runs", "load_prompts",
    "load_run", "read_pairs", "read_summary", "run_ab",
]

if TYPE_CHECKING:
    from .errors import QuantcheckError
    from .fetch.collect import CollectResult, CollectSettings, collect_async
    from .fetch.judging import JudgeSettings
    from .pipeline.ab import ABRun, run_ab
    from .pipeline.collecting import collect
    from .pipeline.comparing import CompareOptions, compare_runs
    from .store.folders.report_dir import read_pairs, read_summary
    from .store.folders.run_dir import Manifest, Run, load_run
    from .store.inputs.prompt_sets import RequestOptions, SourceOptions, load_prompts
    from .store.records.report_records import Summary
    from .store.records.run_records import Completion, Expect, Prompt, Tokens
    from .triage.pairs import compare


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'quantcheck' has no attribute {name!r}")
    value = getattr(import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value
