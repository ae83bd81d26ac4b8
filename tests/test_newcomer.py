"""A newcomer's first hour: what the CLI prints must work as printed, and a rerun must
not leave a report that the gate refuses."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from quantcheck import compare_runs

from .conftest import invoke

QUANTCHECK = Path(sys.executable).parent / "quantcheck"  # the venv's console script


def run_printed(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(shlex.split(command), cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_demo_prints_commands_that_work_without_an_activated_venv(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C.UTF-8"}
    result = subprocess.run([str(QUANTCHECK), "demo", "--engine", "scripted"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "reports" / "demo-scripted" / "index.html").exists()
    assert not (tmp_path / "reports" / "demo").exists()  # the model demo's folder is its own
    lines = result.stdout.splitlines()
    review = next(line for line in lines if "save reviews to disk:" in line)
    command = review.split("save reviews to disk: ", 1)[1]
    assert command.startswith(str(QUANTCHECK))  # not a bare `quantcheck`: not on PATH
    assert run_printed(command + " --help", tmp_path, env).returncode == 0
    own = lines[lines.index("Run the same A/B on your own endpoints:") + 1].strip()
    attempt = run_printed(own.replace("HOST_A:8000", "127.0.0.1:9").replace(
        "HOST_B:8000", "127.0.0.1:9"), tmp_path, env)
    assert attempt.returncode == 2
    assert "cannot reach http://127.0.0.1:9" in attempt.stderr  # the options all parsed


def test_a_replaced_report_sets_its_old_reviews_aside(ab_runs: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    report = tmp_path / "report"
    (report / "reviews").mkdir(parents=True)
    stale = {"format": "quantcheck-review/1", "identity": "0123abcd", "reviewer": "dana",
             "verdicts": {"flip": {"label": "factual_flip"}}}
    (report / "reviews" / "dana.json").write_text(json.dumps(stale))
    result = invoke("compare", *ab_runs, "--out", report)
    assert result.exit_code == 1, result.output  # the planted flip fails the default gate
    assert "1 review file(s) made for the report this one replaces set aside in" in \
        result.output
    moved = report / "reviews" / "set-aside-0123abcd" / "dana.json"
    assert json.loads(moved.read_text()) == stale
    assert not (report / "reviews" / "dana.json").exists()
    summary: dict[str, Any] = json.loads((report / "summary.json").read_text())
    assert summary["reviews_set_aside"] == [str(moved)]
    gate = invoke("gate", report)
    assert "made for another run" not in gate.output  # not refused: it is out of the way
    # a review of this very report stays where it is
    identity = summary["identity"]
    (report / "reviews" / "li.json").write_text(json.dumps({**stale, "identity": identity}))
    compare_runs(*ab_runs, report)
    assert (report / "reviews" / "li.json").exists()
    assert os.listdir(report / "reviews" / "set-aside-0123abcd") == ["dana.json"]
