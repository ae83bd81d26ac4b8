"""The test suite's pace: wall time and peak RSS of each test file run on its own, as
`/usr/bin/time` reports them (the largest process of the run: pytest, or a server it
starts), so a file that grows slow or heavy shows.

Baseline, measured in the same run: one warm `quantcheck demo` (the default A/B on
the lab model), the yardstick of the real-model tests (target: tests/test_lab_model.py
within 4x its time and 1.3x its peak memory).

    python bench/test_suite.py                      # every file
    python bench/test_suite.py tests/test_lab_model.py tests/test_llamacpp.py
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from _common import run_measured, save

ROOT = Path(__file__).parents[1]


def measure_file(path: Path) -> tuple[float, float]:
    wall, peak, _ = run_measured([sys.executable, "-m", "pytest", "-q", "-p",
                                  "no:cacheprovider", str(path)])
    return wall, peak


def warm_demo() -> tuple[float, float]:
    """A demo run to warm the model cache, then the measured one."""
    with tempfile.TemporaryDirectory(prefix="qc-demo-") as root:
        command = [sys.executable, "-m", "quantcheck", "demo", "--out"]
        run_measured([*command, f"{root}/warm-up"])
        wall, peak, _ = run_measured([*command, f"{root}/measured"])
    return wall, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("files", nargs="*", type=Path)
    files = parser.parse_args().files or sorted((ROOT / "tests").glob("test_*.py"))
    os.chdir(ROOT)
    demo_s, demo_mib = warm_demo()
    print(f"{'warm quantcheck demo':<34} {demo_s:7.1f} s {demo_mib:7.0f} MiB")
    rows = {}
    for path in files:
        wall, peak = measure_file(path)
        rows[path.name] = {"seconds": round(wall, 1), "peak_rss_mib": round(peak)}
        print(f"{path.name:<34} {wall:7.1f} s {peak:7.0f} MiB  "
              f"({wall / demo_s:.1f}x, {peak / demo_mib:.2f}x the demo)")
    total = sum(row["seconds"] for row in rows.values())
    print(f"{'all files, one at a time':<34} {total:7.1f} s")
    figures = {"demo_warm_s": round(demo_s, 1), "demo_peak_rss_mib": round(demo_mib),
               "files": rows, "total_s": round(total, 1)}
    name = "test_suite" if len(files) > 5 else "test_suite_" + "_".join(
        sorted(p.stem.removeprefix("test_") for p in files))
    print(f"saved {save(name, figures)}")


if __name__ == "__main__":
    main()
