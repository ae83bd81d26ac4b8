"""Shared helpers for the benchmarks: machine description and result files."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
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


def run_measured(command: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall seconds and peak RSS (MiB) of a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{completed.stderr}")
    return wall, max(peak_kib, before) / 1024, completed
