"""`quantcheck compare` against its read floor, in one run.

The floor: reading both runs through quantcheck's own reader (`load_run`, every
record's text and token arrays) and scoring each pair once with rapidfuzz, which no
comparison can go below. Both run as processes of their own, in interleaved rounds
(the order alternates); the ratio is compare's wall time over the floor's, median of
rounds, printed beside its limit (<= 2x). Also `compare --jobs N` against `--jobs 1`
(the speedup; the report the same either way). The runs are triage_scale.py's
synthetic ones: 40% of B's answers fork at a random position, 5% of prompts vary
across B's repeats.

    python bench/compare_floor.py [--prompts 3000] [--repeats 2] [--tokens 128]
        [--rounds 3] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
from _common import Child, run_child, save
from triage_scale import generate

LIMIT = 2.0  # compare --jobs 1 within twice its read floor
REPORT_FILES = ("pairs.csv", "details.jsonl")  # summary.json names its folder


def floor(a: str, b: str) -> None:
    """`--floor A B`: read both runs whole, score repeat 0 of each prompt once."""
    from rapidfuzz.distance import Indel

    from quantcheck import load_run

    def first_texts(run_dir: str) -> dict[str, str]:
        texts: dict[str, str] = {}
        for record in load_run(run_dir).completions():
            texts.setdefault(record.prompt_id, record.text)
        return texts

    texts_a, texts_b = first_texts(a), first_texts(b)
    score = sum(Indel.normalized_similarity(text, texts_b.get(prompt_id, ""))
                for prompt_id, text in texts_a.items())
    print(orjson.dumps({"pairs": len(texts_a), "similarity": score}).decode())


class Rounds:
    """The floor and `compare` on the same runs, as processes of their own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.a, self.b = str(root / "a"), str(root / "b")

    def floor(self) -> Child:
        return run_child([sys.executable, __file__, "--floor", self.a, self.b])

    def compare(self, jobs: int) -> Child:
        out = self.root / f"report-{jobs}"
        shutil.rmtree(out, ignore_errors=True)
        # exit 1 is the gate failing the synthetic B (loops it holds): not an error here
        return run_child([sys.executable, "-m", "quantcheck", "compare", self.a, self.b,
                          "--out", str(out), "--jobs", str(jobs)], allowed=(0, 1))

    def same_report(self, jobs: int) -> bool:
        return all((self.root / "report-1" / name).read_bytes()
                   == (self.root / f"report-{jobs}" / name).read_bytes()
                   for name in REPORT_FILES)


def measure(rounds: Rounds, count: int, jobs: int) -> dict[str, Any]:
    found: list[dict[str, dict[str, float]]] = []
    for number in range(count):
        order = ("floor", "compare") if number % 2 == 0 else ("compare", "floor")
        children = {name: rounds.floor() if name == "floor" else rounds.compare(1)
                    for name in order}
        if jobs > 1:
            children["compare_jobs"] = rounds.compare(jobs)
        times = {name: {"wall_s": child.wall, "cpu_s": child.cpu}
                 for name, child in children.items()}
        found.append(times)
        print(f"round {number + 1}: {orjson.dumps(times).decode()}", flush=True)
    ratios = [r["compare"]["wall_s"] / r["floor"]["wall_s"] for r in found]
    cpu_ratios = [r["compare"]["cpu_s"] / r["floor"]["cpu_s"] for r in found]
    figures: dict[str, Any] = {"rounds": found, "ratio": statistics.median(ratios),
                               "ratios": ratios, "cpu_ratio": statistics.median(cpu_ratios)}
    if jobs > 1:
        speedups = [r["compare"]["wall_s"] / r["compare_jobs"]["wall_s"] for r in found]
        figures["jobs"] = {"jobs": jobs, "speedup": statistics.median(speedups),
                           "speedups": speedups, "same_report": rounds.same_report(jobs)}
    return figures


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--floor":
        floor(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="qc-compare-floor-"))
    try:
        generate(root, args.prompts, args.repeats, args.tokens, args.top)
        load_before = os.getloadavg()[0]
        figures = measure(Rounds(root), args.rounds, args.jobs)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures = {"prompts": args.prompts, "repeats": args.repeats, "tokens": args.tokens,
               "top_k": args.top, "load_before": load_before,
               "load_after": os.getloadavg()[0], **figures}
    ratio = figures["ratio"]
    print(f"load average (1 min) {load_before:.1f} before, {figures['load_after']:.1f} "
          f"after, on {os.cpu_count()} CPUs")
    print(f"compare --jobs 1: {ratio:.2f}x its read floor (limit <= {LIMIT}x: "
          f"{'met' if ratio <= LIMIT else 'MISSED'}; rounds "
          f"{' '.join(f'{r:.2f}' for r in figures['ratios'])}; CPU time "
          f"{figures['cpu_ratio']:.2f}x)")
    if "jobs" in figures:
        jobs = figures["jobs"]
        print(f"compare --jobs {jobs['jobs']}: {jobs['speedup']:.2f}x faster than --jobs 1 "
              f"(same report: {jobs['same_report']})")
    print(f"saved {save('compare_floor', figures)}")


if __name__ == "__main__":
    main()
