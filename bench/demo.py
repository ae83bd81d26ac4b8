"""Wall time of `quantcheck demo`: first run (empty model cache) and warm run.

Baseline, measured in the same run: loading the model once in-process and generating
the demo's prompts on every precision without any HTTP, collection or triage.

    python bench/demo.py                          # A = bf16 against fp8
    python bench/demo.py --b-precision fp8,int4   # two candidates: the overview
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from _common import run_measured, save


def demo(cache: Path, out: Path, candidates: str) -> tuple[float, float]:
    os.environ["QUANTCHECK_CACHE"] = str(cache)
    wall, peak, _ = run_measured([sys.executable, "-m", "quantcheck", "demo", "--out",
                                  str(out), "--b-precision", candidates])
    return wall, peak


def bare_generation(cache: Path, candidates: str) -> float:
    precisions = ("bf16", *candidates.split(","))
    code = ("import time; t=time.perf_counter()\n"
            "from quantcheck.lab.model import ModelEngine\n"
            "from quantcheck.store.inputs.prompt_sets import load_prompts, shipped_prompt_file\n"
            "prompts = load_prompts([shipped_prompt_file('demo.yaml')])\n"
            f"for precision in {precisions!r}:\n"
            "    engine = ModelEngine(precision, threads=2)\n"
            "    for _ in range(2):\n"
            "        for p in prompts: engine.generate(p.request, False, 5)\n"
            "print(time.perf_counter() - t)\n")
    os.environ["QUANTCHECK_CACHE"] = str(cache)
    _, _, output = run_measured([sys.executable, "-c", code])
    return float(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--b-precision", default="fp8")
    candidates = parser.parse_args().b_precision
    root = Path(tempfile.mkdtemp(prefix="qc-demo-"))
    try:
        first, first_peak = demo(root / "cache", root / "first", candidates)
        warm, warm_peak = demo(root / "cache", root / "warm", candidates)
        baseline = bare_generation(root / "cache", candidates)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures = {"candidates": candidates, "first_run_s": first, "warm_run_s": warm,
               "peak_rss_mib": max(first_peak, warm_peak),
               "baseline_bare_generation_s": baseline, "ratio_warm_over_baseline":
               warm / baseline}
    print(figures)
    name = "demo" if "," not in candidates else "demo_candidates"
    print(f"saved {save(name, figures)}")


if __name__ == "__main__":
    main()
