"""Exit codes mean one thing in every command: docs/ci.md's table, walked row by row
against scripted servers on loopback, and a crash planted in every command (exit 3,
one line on stderr, the traceback saved)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from quantcheck import CollectSettings, collect, compare_runs
from quantcheck.lab.scripted import Faults, ScriptedModel, ScriptedServer

from .conftest import COMMANDS, FIXTURES, RUNNER_UPS, interruptible, invoke

DOCS = Path(__file__).parent.parent / "docs" / "ci.md"
PROMPTS = """
prompts:
  - {id: capital, prompt: "Q: capital", expect: {contains: Canberra}}
  - {id: planet, prompt: "Q: planet"}
"""
ANSWERS: dict[str, str | list[str]] = {"Q: capital": " Canberra is the capital.",
                                       "Q: planet": " Mars is red."}
FLIPPED: dict[str, str | list[str]] = {**ANSWERS, "Q: capital": " Sydney is the capital."}
NOWHERE = "http://127.0.0.1:9/v1"  # nothing listens on the discard port


def table() -> dict[str, dict[int, str]]:
    """docs/ci.md's command table: command -> code -> what it means ("never": none)."""
    rows = re.findall(r"^\| `([a-z ]+)` \| (.*?) \| (.*?) \| (.*?) \|$", DOCS.read_text(),
                      re.MULTILINE)
    return {name: {0: zero, 1: one, 2: two} for name, zero, one, two in rows}


TABLE = table()
CASES = [(name, code) for name, codes in TABLE.items() for code, said in codes.items()
         if said != "never"]


@dataclass
class World:
    """Scripted servers, a prompt set, runs and reports the scenarios share."""

    root: Path
    prompts: Path
    same: ScriptedServer  # answers like the reference
    flipped: ScriptedServer  # flips the capital
    failing: ScriptedServer  # every generation is an HTTP 500
    varying: ScriptedServer  # nondeterministic
    runs: dict[str, Path]
    reports: dict[str, Path]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("exit-codes")
    servers = [ScriptedServer(ScriptedModel(ANSWERS, RUNNER_UPS)).start(),
               ScriptedServer(ScriptedModel(FLIPPED, RUNNER_UPS)).start(),
               ScriptedServer(ScriptedModel(ANSWERS), faults=Faults(
                   status={n: 500 for n in range(10_000)}, retry_after_s=0.0)).start(),
               ScriptedServer(ScriptedModel(ANSWERS), faults=Faults(nondeterministic=True))
               .start()]
    prompts = root / "prompts.yaml"
    prompts.write_text(PROMPTS)
    runs = {}
    for name, server in (("a", servers[0]), ("same", servers[0]), ("flipped", servers[1])):
        runs[name] = root / "runs" / name
        collect([prompts], runs[name], CollectSettings(
            endpoint=server.url, label=name, preflight=False, concurrency=1, top_logprobs=3))
    reports = {name: root / "reports" / name for name in ("same", "flipped")}
    for name, report in reports.items():
        compare_runs(runs["a"], runs[name], report)
    try:
        yield World(root, prompts, *servers, runs=runs, reports=reports)
    finally:
        for server in servers:
            server.stop()


def a_port_in_use() -> tuple[socket.socket, int]:
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    return held, held.getsockname()[1]


def stopped_with_ctrl_c(*args: str, ready: str) -> int:
    """A serving command in its own process, stopped with Ctrl-C once it says `ready`."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    with interruptible([sys.executable, "-m", "quantcheck", *args], env=env,
                       stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                       text=True) as process:
        assert process.stderr is not None
        for line in process.stderr:
            if ready in line:
                break
        process.send_signal(signal.SIGINT)
        try:
            return process.wait(60)
        finally:
            process.kill()


def lab_serve_stopped(w: World, tmp: Path) -> int:
    pytest.importorskip("torch", reason="lab serve needs the demo extra")
    return stopped_with_ctrl_c("lab", "serve", "--port", "0", ready="Ctrl-C stops")


def in_use(*args: str) -> Callable[[World, Path], int]:
    """A server command on a port another socket holds, in its own process (the
    command runs its own event loop, which a browser test's loop would refuse here)."""
    def scenario(w: World, tmp: Path) -> int:
        held, port = a_port_in_use()
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
        with held:
            return subprocess.run([sys.executable, "-m", "quantcheck", *args, "--port",
                                   str(port)], env=env, capture_output=True,
                                  timeout=300).returncode
    return scenario


def ladder_args(a: str, b: str, out: Path) -> list[object]:
    return ["ladder", "--a", a, "--b", b, "--out", out, "--lengths", "512", "--depths", "0",
            "--no-absent"]


def ladder_that_departs(w: World, tmp: Path) -> Result:
    """B sees only the last 100 words of a prompt: the code at its start is lost."""
    with ScriptedServer(ScriptedModel(ANSWERS), faults=Faults(sliding_window=100)) as forgets:
        return invoke(*ladder_args(w.same.url, forgets.url, tmp / "l"))


def shards(w: World, tmp: Path) -> Result:
    for index in (1, 2):
        collect([w.prompts], tmp / f"s{index}", CollectSettings(
            endpoint=w.same.url, label="s", preflight=False, shard=f"{index}/2"))
    return invoke("merge", tmp / "s1", tmp / "s2", "--out", tmp / "merged")


def collect_args(w: World, endpoint: str, out: Path, *extra: object) -> list[object]:
    return ["collect", "--endpoint", endpoint, "--prompts", w.prompts, "--out", out,
            "--no-preflight", *extra]


def run_args(w: World, b: str, out: Path, a: str | None = None) -> list[object]:
    return ["run", "--a", a or w.same.url, "--b", b, "--prompts", w.prompts, "--out", out,
            "--no-preflight"]


Scenario = Callable[[World, Path], "Result | int"]
SCENARIOS: dict[tuple[str, int], Scenario] = {
    ("collect", 0): lambda w, t: invoke(*collect_args(w, w.same.url, t / "r")),
    ("collect", 1): lambda w, t: invoke(*collect_args(w, w.failing.url, t / "r", "--retries",
                                                      "0")),
    ("collect", 2): lambda w, t: invoke(*collect_args(w, NOWHERE, t / "r")),
    ("merge", 0): shards,
    ("merge", 2): lambda w, t: invoke("merge", w.runs["a"], w.runs["same"], "--out", t / "m"),
    ("suites", 0): lambda w, t: invoke("suites"),
    ("suites", 2): lambda w, t: invoke("suites", "--no-such-option"),
    ("compare", 0): lambda w, t: invoke("compare", w.runs["a"], w.runs["same"], "--out", t),
    ("compare", 1): lambda w, t: invoke("compare", w.runs["a"], w.runs["flipped"], "--out", t),
    ("compare", 2): lambda w, t: invoke("compare", w.runs["a"], w.root, "--out", t / "r"),
    ("run", 0): lambda w, t: invoke(*run_args(w, w.same.url, t)),
    ("run", 1): lambda w, t: invoke(*run_args(w, w.flipped.url, t)),
    ("run", 2): lambda w, t: invoke(*run_args(w, w.same.url, t, a=NOWHERE)),
    ("throughput", 0): lambda w, t: invoke("throughput", w.same.url, "--prompts", w.prompts,
                                           "--seconds", "0"),
    ("throughput", 1): lambda w, t: invoke("throughput", w.failing.url, "--prompts",
                                           w.prompts, "--seconds", "0"),
    ("throughput", 2): lambda w, t: invoke("throughput", NOWHERE, "--prompts", w.prompts),
    ("forced", 0): lambda w, t: invoke("forced", w.runs["a"], "--endpoint", w.flipped.url,
                                       "--out", t),
    ("forced", 2): lambda w, t: invoke("forced", w.runs["a"], "--endpoint", NOWHERE,
                                       "--out", t),
    ("report", 0): lambda w, t: invoke("report", w.reports["flipped"]),
    ("report", 2): lambda w, t: invoke("report", w.runs["a"]),
    ("review", 0): lambda w, t: stopped_with_ctrl_c(
        "review", str(w.reports["same"]), "--port", "0", ready="Ctrl-C stops"),
    ("review", 2): lambda w, t: invoke("review", w.runs["a"]),
    ("preflight", 0): lambda w, t: invoke("preflight", w.same.url, "--context-tokens", "0"),
    ("preflight", 2): lambda w, t: invoke("preflight", NOWHERE),
    ("probe", 0): lambda w, t: invoke("probe", w.same.url),
    ("probe", 2): lambda w, t: invoke("probe", NOWHERE),
    ("determinism", 0): lambda w, t: invoke(
        "determinism", "--endpoint", w.same.url, "--prompts", w.prompts, "--repeats", "2",
        "--modes", "sequential", "--out", t, "--no-preflight", "--fail-on-nondeterminism"),
    ("determinism", 1): lambda w, t: invoke(
        "determinism", "--endpoint", w.varying.url, "--prompts", w.prompts, "--repeats", "2",
        "--modes", "sequential", "--out", t, "--no-preflight", "--fail-on-nondeterminism"),
    ("determinism", 2): lambda w, t: invoke("determinism", "--endpoint", w.same.url,
                                            "--prompts", w.prompts, "--modes", "sideways",
                                            "--out", t),
    ("ladder", 0): lambda w, t: invoke(*ladder_args(w.same.url, w.same.url, t / "l")),
    ("ladder", 1): ladder_that_departs,
    ("ladder", 2): lambda w, t: invoke(*ladder_args(NOWHERE, w.same.url, t / "l")),
    ("logscan", 0): lambda w, t: invoke("logscan", FIXTURES / "logs" / "clean.log"),
    ("logscan", 1): lambda w, t: invoke("logscan",
                                        FIXTURES / "logs" / "sglang-lmhead-prefix.log"),
    ("logscan", 2): lambda w, t: invoke("logscan", FIXTURES / "logs" / "clean.log",
                                        "--signatures", w.prompts),
    ("gate", 0): lambda w, t: invoke("gate", w.reports["same"]),
    ("gate", 1): lambda w, t: invoke("gate", w.reports["flipped"]),
    ("gate", 2): lambda w, t: invoke("gate", w.runs["a"]),
    ("approve", 0): lambda w, t: invoke("approve", w.reports["same"], "--approvals",
                                        t / "approvals.json"),
    ("approve", 2): lambda w, t: invoke("approve", w.runs["a"]),
    ("repro", 0): lambda w, t: invoke("repro", w.reports["flipped"], "capital", "--out",
                                      t / "repro"),
    ("repro", 2): lambda w, t: invoke("repro", w.runs["a"], "capital", "--out", t / "repro"),
    ("demo", 0): lambda w, t: invoke("demo", "--engine", "scripted", "--out", t),
    ("demo", 2): lambda w, t: invoke("demo", "--b-precision", "fp16", "--out", t),
    ("lab scripted", 0): lambda w, t: stopped_with_ctrl_c(
        "lab", "scripted", "--port", "0", ready="Ctrl-C stops"),
    ("lab scripted", 2): in_use("lab", "scripted"),
    ("lab serve", 0): lab_serve_stopped,
    ("lab serve", 2): in_use("lab", "serve"),
    ("prompts check", 0): lambda w, t: invoke("prompts", "check", w.prompts),
    ("prompts check", 2): lambda w, t: invoke("prompts", "check", w.runs["a"] / "manifest.json"),
    ("prompts convert", 0): lambda w, t: invoke("prompts", "convert", w.prompts, "--out",
                                                t / "p.yaml"),
    ("prompts convert", 2): lambda w, t: invoke("prompts", "convert", w.prompts, "--out",
                                                w.prompts),
    ("init", 0): lambda w, t: invoke("init", t / "repository"),
    ("init", 2): lambda w, t: [invoke("init", t / "repository") for _ in range(2)][-1],
    ("schema", 0): lambda w, t: invoke("schema", "gate"),
    ("schema", 2): lambda w, t: invoke("schema", "gates"),
    ("import", 0): lambda w, t: invoke("import", FIXTURES / "evals" / "lm-eval-0.4.5",
                                       "--out", t / "run"),
    ("import", 2): lambda w, t: invoke("import", w.prompts, "--out", t / "run"),
    ("export", 0): lambda w, t: invoke("export", w.reports["flipped"], "--model-card",
                                       t / "card.md"),
    ("export", 2): lambda w, t: invoke("export", w.runs["a"], "--model-card", t / "card.md"),
    ("plan", 0): lambda w, t: invoke("plan", "--detect", "2", "--disagreement", "10"),
    ("plan", 2): lambda w, t: invoke("plan", "--detect", "20", "--disagreement", "10"),
}

# Where a bug is planted in each command: a function on its path made to raise.
CRASH_SITES = {
    "collect": "quantcheck.pipeline.collecting.collect_async",
    "merge": "quantcheck.store.folders.merging.merge_runs",
    "suites": "quantcheck.store.inputs.suites.describe",
    "compare": "quantcheck.pipeline.comparing.write_pairs",
    "run": "quantcheck.pipeline.ab.collect_async",
    "throughput": "quantcheck.pipeline.collecting.measure",
    "forced": "quantcheck.pipeline.collecting.score_run_async",
    "report": "quantcheck.pipeline.judging.refresh_report",
    "review": "quantcheck.present.review_server.review_app",
    "preflight": "quantcheck.pipeline.checking.check_endpoint",
    "probe": "quantcheck.pipeline.checking.ask_server",
    "determinism": "quantcheck.pipeline.determinism.analyze_side",
    "ladder": "quantcheck.pipeline.ladder.compare_runs",
    "logscan": "quantcheck.triage.log_signatures.scan_log",
    "gate": "quantcheck.gate.verdict.decide",
    "approve": "quantcheck.triage.approvals.approve",
    "repro": "quantcheck.pipeline.repro.collect_body",
    "demo": "quantcheck.lab.demo.demo_servers",
    "lab scripted": "quantcheck.lab.scripted.Faults",
    "lab serve": "quantcheck.lab.model.ModelEngine",
    "schema": "quantcheck.store.records.formats.shipped_schema",
    "init": "quantcheck.cli._starter.write_starter_kit",
    "plan": "quantcheck.cli._planning.paired_prompts_needed",
    "import": "quantcheck.pipeline.evals.write_eval_run",
    "export": "quantcheck.pipeline.evals.model_card",
    "prompts check": "quantcheck.cli._prompts.load_sources",
    "prompts convert": "quantcheck.cli._prompts.convert_prompt_files",
}


def test_the_table_names_every_command_and_each_case_has_a_scenario() -> None:
    assert set(TABLE) == {" ".join(path) for path in COMMANDS}
    assert set(SCENARIOS) == set(CASES)
    assert set(CRASH_SITES) == set(TABLE)


@pytest.mark.parametrize(("command", "code"), CASES, ids=[f"{c}-{n}" for c, n in CASES])
def test_each_command_exits_as_the_table_says(world: World, tmp_path: Path, command: str,
                                              code: int) -> None:
    outcome = SCENARIOS[(command, code)](world, tmp_path)
    exit_code = outcome if isinstance(outcome, int) else outcome.exit_code
    shown = "" if isinstance(outcome, int) else outcome.output
    assert exit_code == code, f"{command}: {TABLE[command][code]}\n{shown}"
    if isinstance(outcome, Result) and code == 2:
        assert "Traceback" not in outcome.output


def planted_arguments(w: World, command: str, tmp: Path) -> list[object]:
    """A command line that reaches the command's crash site."""
    return {
        "collect": collect_args(w, w.same.url, tmp / "r"),
        "merge": ["merge", w.runs["a"], w.runs["same"], "--out", tmp / "m"],
        "suites": ["suites"],
        "compare": ["compare", w.runs["a"], w.runs["same"], "--out", tmp / "r"],
        "run": run_args(w, w.same.url, tmp / "r"),
        "throughput": ["throughput", w.same.url, "--prompts", w.prompts, "--seconds", "0"],
        "forced": ["forced", w.runs["a"], "--endpoint", w.same.url, "--out", tmp / "f"],
        "report": ["report", w.reports["same"]],
        "review": ["review", w.reports["same"], "--port", "0"],
        "preflight": ["preflight", w.same.url, "--context-tokens", "0"],
        "probe": ["probe", w.same.url],
        "determinism": ["determinism", "--endpoint", w.same.url, "--prompts", w.prompts,
                        "--repeats", "2", "--modes", "sequential", "--out", tmp / "d",
                        "--no-preflight"],
        "ladder": ladder_args(w.same.url, w.same.url, tmp / "l"),
        "logscan": ["logscan", FIXTURES / "logs" / "clean.log"],
        "gate": ["gate", w.reports["same"]],
        "approve": ["approve", w.reports["same"], "--approvals", tmp / "approvals.json"],
        "repro": ["repro", w.reports["same"], "capital", "--out", tmp / "repro"],
        "demo": ["demo", "--engine", "scripted", "--out", tmp / "demo"],
        "lab scripted": ["lab", "scripted", "--port", "0"],
        "lab serve": ["lab", "serve", "--port", "0"],
        "schema": ["schema", "gate"],
        "prompts check": ["prompts", "check", w.prompts],
        "prompts convert": ["prompts", "convert", w.prompts, "--out", tmp / "p.yaml"],
        "init": ["init", tmp / "repository"],
        "plan": ["plan", "--detect", "2", "--disagreement", "10"],
        "import": ["import", FIXTURES / "evals" / "lm-eval-0.4.5", "--out", tmp / "run"],
        "export": ["export", w.reports["same"], "--model-card", tmp / "card.md"],
    }[command]


@pytest.mark.parametrize("command", sorted(CRASH_SITES))
def test_a_crash_in_any_command_exits_3_with_one_line_and_the_traceback_saved(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    if command == "lab serve":
        pytest.importorskip("torch", reason="without the demo extra lab serve stops first")

    def planted_bug(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError(f"planted in {command}")

    monkeypatch.setattr(CRASH_SITES[command], planted_bug)
    crashes = tmp_path / "tmp"
    crashes.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(crashes))
    result = invoke(*planted_arguments(world, command, tmp_path))
    assert result.exit_code == 3, result.output
    said = [line for line in result.stderr.splitlines() if "unexpected error" in line]
    assert len(said) == 1 and "Traceback" not in result.stderr
    assert said[0] == result.stderr.splitlines()[-1]
    assert f"ZeroDivisionError: planted in {command}" in said[0]
    (saved,) = crashes.glob("quantcheck-crash-*.txt")
    assert str(saved) in said[0]
    text = saved.read_text()
    assert text.startswith("quantcheck ") and "Traceback (most recent call last)" in text
    assert "planted_bug" in text and f"ZeroDivisionError: planted in {command}" in text

