"""The package's shape: no import circles, and the offline stages never load the network."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "src" / "quantcheck"
# The offline stages (STYLE.md: Judge, Present, Gate, Store) and what they must not load.
OFFLINE = ["triage", "gate", "report", "records", "reportdir", "compare", "summary", "stats",
           "sides", "drift", "checks", "determinism", "reviews", "approvals", "runstore",
           "tokenstore", "cells", "runtimes", "reportrecords"]
NETWORK = ["aiohttp", "quantcheck.client", "quantcheck.dialects", "quantcheck.collect",
           "quantcheck.preflight", "quantcheck.forced", "quantcheck.servers"]


def module_imports() -> dict[str, set[str]]:
    """Every package module and the package modules it imports (anywhere in its body)."""
    files = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path
    edges: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{module}.{alias.name}" for alias in node.names] + (
                    [module] if node.module else [])
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target not in (name, "quantcheck"):
                    edges[name].add(target)
    return edges


def test_no_module_imports_itself_through_others() -> None:
    edges = module_imports()
    circles = []

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for following in edges[start]:
            if following == goal or (following not in seen and reaches(following, goal,
                                                                        seen | {following})):
                return True
        return False

    for module in edges:
        if reaches(module, module, {module}):
            circles.append(module)
    assert not circles, f"modules in an import circle: {sorted(circles)}"


@pytest.mark.parametrize("module", OFFLINE)
def test_offline_stages_never_load_the_network(module: str) -> None:
    probe = (f"import sys, json, quantcheck.{module}; "
             f"print(json.dumps([m for m in {NETWORK!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == []


def test_importing_the_package_loads_neither_pandas_nor_the_network() -> None:
    probe = ("import sys, json, quantcheck; quantcheck.__version__; "
             "print(json.dumps([m for m in ('pandas', 'aiohttp', 'quantcheck.client') "
             "if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == []
    import quantcheck

    assert quantcheck.load_run.__module__ == "quantcheck.runstore"  # loaded on first use
