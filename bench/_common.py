"""Shared helpers for the benchmarks: machine description and result files."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "python": sys.version.split()[0],
            "platform": platform.platform()}


def save(name: str, figures: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                time.gmtime()),
               "machine": machine(), "figures": figures}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


# Children start as an installed package does: from compiled bytecode (written by the
# first start when missing), whatever the shell running the benchmark says.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


@dataclass
class Child:
    """What one child process took: wall and CPU seconds, peak RSS (MiB), its stdout."""

    wall: float
    cpu: float
    peak_mib: float
    out: str


def run_measured(command: list[str], allowed: tuple[int, ...] = (0,)
                 ) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and stdout of one child process."""
    child = run_child(command, allowed)
    return child.wall, child.peak_mib, child.out


def run_child(command: list[str], allowed: tuple[int, ...] = (0,)) -> Child:
    """One child process, measured (os.wait4 gives that child's own rusage, not the
    maximum over every child so far); an exit status other than `allowed` stops the
    benchmark with the child's stderr."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, env=CHILD_ENV)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode not in allowed:
            raise SystemExit(f"{' '.join(command)} failed:\n{err.read().decode()}")
        return Child(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
                     out.read().decode())


# Completion prompts a small base model continues sensibly (the first 8: bench/vs_quantdiff.py;
# all: bench/kld_ladder.py)
COMPLETION_TEXTS = (
    "The capital of France is",
    "Water boils at a temperature of",
    "The largest planet in the solar system is",
    "A haiku about the sea:\n",
    "def fibonacci(n):\n",
    "The three primary colours are",
    "Once upon a time, in a small village,",
    "To make a cup of tea, first",
    "The speed of light in a vacuum is about",
    "Photosynthesis is the process by which",
    "The French Revolution began in",
    "import json\n\ndef load(path):\n",
    "The human heart has four chambers:",
    "In mathematics, a prime number is",
    "Dear hiring manager,\n",
    "The recipe calls for two cups of flour,",
    "Mount Everest is located in",
    "The first person to walk on the Moon was",
    "SELECT name, email FROM users WHERE",
    "The main causes of the First World War were",
    "A good night's sleep helps the body",
    "The Pythagorean theorem states that",
    "Rain forms when water vapour",
    "The stock market fell sharply on Monday after",
)
