"""store/engines.py: one profile per engine, and no engine's name compared as a string
anywhere else in the package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from quantcheck.store.engines import ENGINE_NAMES, ENGINES, UNKNOWN, profile_of
from quantcheck.store.folders.run_dir import ServerInfo
from quantcheck.store.runtimes import identify_runtime, runtime_version

PACKAGE = Path(__file__).parents[1] / "src" / "quantcheck"
PROFILES = PACKAGE / "store" / "engines.py"
NAMES = {*ENGINE_NAMES, UNKNOWN, *(owner for p in ENGINES.values() for owner in p.owned_by)}


def _engine_strings(node: ast.AST | None) -> list[str]:
    """Engine names among a node's string constants (itself, or a tuple, list or set of
    them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in NAMES else []
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [name for element in node.elts for name in _engine_strings(element)]
    return []


def engine_name_comparisons(source: str) -> list[str]:
    """Where a module compares with an engine's name, keys a dict by one, or looks one up
    by subscript: `runtime == "vllm"`, `in ("vllm", "sglang")`, `{"vllm": ...}`,
    `TABLE["vllm"]`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Compare):
            for part in (node.left, *node.comparators):
                names += _engine_strings(part)
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                names += _engine_strings(key)
        elif isinstance(node, ast.Subscript):
            names += _engine_strings(node.slice)
        found += [f"line {node.lineno}: {name!r}" for name in names
                  if isinstance(node, ast.expr | ast.stmt)]
    return found


def test_no_engine_name_is_compared_outside_the_profiles() -> None:
    wrong = {str(path.relative_to(PACKAGE)): hits for path in sorted(PACKAGE.rglob("*.py"))
             if path != PROFILES
             and (hits := engine_name_comparisons(path.read_text(encoding="utf-8")))}
    assert not wrong, f"engine names compared outside store/engines.py: {wrong}"


@pytest.mark.parametrize("planted", [
    'if runtime == "sglang":\n    pass\n',
    'ok = server.runtime in ("vllm", "unknown")\n',
    'PATHS = {"llama.cpp": "/props"}\n',
    'path = TABLE["llama-cpp-python"]\n',
    'ok = "me" != owner\n',
])
def test_a_planted_engine_name_comparison_is_found(planted: str) -> None:
    assert engine_name_comparisons(planted)


def test_a_name_passed_as_an_argument_is_no_comparison() -> None:
    assert not engine_name_comparisons('server = ScriptedServer(model, "vllm")\n')


def test_each_profile_is_named_by_its_key_and_knows_its_owners() -> None:
    owners = [owner for p in ENGINES.values() for owner in p.owned_by]
    assert len(owners) == len(set(owners))
    for name, profile in ENGINES.items():
        assert profile.name == name and profile_of(name) is profile
        info = ServerInfo(models=[{"id": "m", "owned_by": o} for o in profile.owned_by[:1]])
        if profile.owned_by:
            assert identify_runtime(info) == name
    assert profile_of(UNKNOWN) is None and profile_of(None) is None


@pytest.mark.parametrize(("info", "runtime", "version"), [
    (ServerInfo(props={"build_info": "b6000-abc"}), "llama.cpp", "b6000-abc"),
    (ServerInfo(server_info={"version": "0.5.9"}, version={"version": "x"}), "sglang", "0.5.9"),
    (ServerInfo(version={"version": "0.11.0"}), "vllm", "0.11.0"),
    (ServerInfo(models=[{"id": "m", "owned_by": "someone"}]), UNKNOWN, None),
    # no owner and no info endpoint: mlx_lm.server, the one engine that lists none (a guess)
    (ServerInfo(models=[{"id": "mlx-community/Llama-3.2-1B-Instruct-4bit"}]), "mlx", None),
    (ServerInfo(models=[{"id": "m"}], version={"version": "0.11.0"}), "vllm", "0.11.0"),
    # TGI: its models are owned by their own id; its GET /info names its router
    (ServerInfo(models=[{"id": "m", "owned_by": "m"}], answers={"/info": {
        "router": "text-generation-router", "version": "3.3.6-dev0"}}), "tgi", "3.3.6-dev0"),
    # trtllm-serve: by its owner alone (its GET /version is vLLM's too)
    (ServerInfo(models=[{"id": "m", "owned_by": "tensorrt_llm"}], version={
        "version": "main-0076e93"}), "tensorrt-llm", "main-0076e93"),
])
def test_a_server_is_recognised_by_the_info_endpoints_it_answers(
    info: ServerInfo, runtime: str, version: str | None,
) -> None:
    info.runtime = identify_runtime(info)
    assert (info.runtime, runtime_version(info)) == (runtime, version)
