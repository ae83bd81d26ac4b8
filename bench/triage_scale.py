"""Triage at scale: wall time and peak RSS of `quantcheck compare` on synthetic runs.

Default scale is the target: 10,000 prompts x 6 repeats x 256 tokens x top-20 per
side, with realistic divergence (40% of B's answers fork at a random position, 5% of
prompts are nondeterministic on B). Also times quantcheck's text triage against the
seeds' difflib loop on a 1,000-pair subset.

    python bench/triage_scale.py [--prompts 10000] [--repeats 6] [--tokens 256] [--top 20]
        [--jobs N]

With `--jobs N` (N above 1) compare also runs on N processes and the speedup against
one process is reported (the same report either way). `--runs DIR` measures runs an
earlier `--generate-into DIR` wrote (kept: 100,000 prompts take 11 GB and 5 minutes to
generate), and `--only-jobs` skips the one-process compare.
"""

from __future__ import annotations

import argparse
import difflib
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from _common import run_measured, save

from quantcheck.store.folders.token_columns import pack
from quantcheck.store.records.run_records import Tokens
from quantcheck.triage.signals import degenerate_reason, numbers_changed, similarity

WORDS = ("the of and to in is that for it as with was on be by this are from at or an "
         "which not have has but were one all their there been if more when will would "
         "capital river 12 3.5 1,200 Paris Canberra model answer because").split()


def make_tokens(rng: random.Random, length: int, top: int) -> dict[str, Any]:
    text = [" " + rng.choice(WORDS) for _ in range(length)]
    logprob = [-rng.random() * 0.5 for _ in range(length)]
    top_text = [[token] + [f" w{rng.randrange(50000)}" for _ in range(top - 1)]
                for token in text]
    top_logprob = [[lp] + sorted((lp - 0.1 - rng.random() * 8 for _ in range(top - 1)),
                                 reverse=True) for lp in logprob]
    return {"text": text, "logprob": logprob, "top_text": top_text, "top_logprob": top_logprob}


def fork(tokens: dict[str, Any], rng: random.Random, top: int) -> dict[str, Any]:
    position = rng.randrange(len(tokens["text"]))
    tail = make_tokens(rng, len(tokens["text"]) - position, top)
    return {key: tokens[key][:position] + tail[key] for key in tokens}


def jitter(tokens: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    scale = 1 + rng.uniform(-1e-7, 1e-7)
    return {**tokens, "top_logprob": [[v * scale for v in row] for row in tokens["top_logprob"]]}


class SideWriter:
    """One synthetic run directory, written prompt by prompt (memory stays flat: 100,000
    prompts would not fit in memory at once)."""

    def __init__(self, folder: Path, label: str, ids: list[str], repeats: int) -> None:
        folder.mkdir(parents=True)
        self.repeats = repeats
        manifest = {"label": label, "endpoint": "synthetic", "model": "synthetic",
                    "prompt_hashes": {pid: "h" + pid for pid in ids}, "server": {}}
        (folder / "manifest.json").write_bytes(orjson.dumps(manifest))
        with (folder / "prompts.jsonl").open("wb") as handle:
            for pid in ids:
                handle.write(orjson.dumps({"id": pid, "category": "synthetic",
                                           "api": "completions", "hash": "h" + pid,
                                           "request": {"prompt": pid}}) + b"\n")
        self.lines = (folder / "completions.jsonl").open("wb")
        self.blobs = (folder / "tokens.bin").open("wb")

    def add(self, pid: str, versions: list[dict[str, Any]]) -> None:
        blobs_of = [pack(Tokens.from_json(version)) for version in versions]
        texts = ["".join(v["text"]) for v in versions]
        for repeat in range(self.repeats):
            which = repeat % len(versions)
            reference = {"file": "tokens.bin", "offset": self.blobs.tell(),
                         "length": len(blobs_of[which]),
                         "n_tokens": len(versions[which]["text"])}
            self.blobs.write(blobs_of[which])  # each repeat its own blob, as collect writes
            self.lines.write(orjson.dumps({
                "prompt_id": pid, "prompt_hash": "h" + pid, "repeat": repeat,
                "text": texts[which], "finish_reason": "length", "error": None,
                "e2e_s": 1.0, "ttft_s": 0.05, "tokens": reference}) + b"\n")

    def close(self) -> None:
        self.lines.close()
        self.blobs.close()


def generate(root: Path, prompts: int, repeats: int, length: int, top: int) -> None:
    rng = random.Random(7)
    ids = [f"p{n}" for n in range(prompts)]
    a, b = (SideWriter(root / name, name, ids, repeats) for name in ("a", "b"))
    try:
        for pid in ids:
            base = make_tokens(rng, length, top)
            candidate = fork(base, rng, top) if rng.random() < 0.4 else base
            a.add(pid, [base])
            b.add(pid, [candidate, jitter(candidate, rng)] if rng.random() < 0.05
                  else [candidate])
    finally:
        a.close()
        b.close()


def text_triage_ratio(root: Path, pairs: int) -> dict[str, float]:
    def texts(side: str) -> list[str]:
        found = []
        with (root / side / "completions.jsonl").open("rb") as handle:
            for line in handle:
                record = orjson.loads(line)
                if record["repeat"] == 0:
                    found.append(record["text"])
                    if len(found) == pairs:
                        break
        return found

    a_texts, b_texts = texts("a"), texts("b")
    started = time.perf_counter()
    for a, b in zip(a_texts, b_texts, strict=True):
        if a != b:
            difflib.SequenceMatcher(None, a, b).ratio()
    seeds = time.perf_counter() - started
    started = time.perf_counter()
    for a, b in zip(a_texts, b_texts, strict=True):
        if a != b:
            similarity(a, b)
    ours = time.perf_counter() - started
    started = time.perf_counter()
    for a, b in zip(a_texts, b_texts, strict=True):
        if a != b:
            similarity(a, b)
            numbers_changed(a, b)
            degenerate_reason(a, "stop", "stop")
            degenerate_reason(b, "stop", "stop")
    full = time.perf_counter() - started
    return {"pairs": len(a_texts), "difflib_loop_s": seeds, "quantcheck_similarity_s": ours,
            "speedup_similarity": seeds / ours, "quantcheck_full_text_triage_s": full,
            "speedup_full_text_triage": seeds / full}


def compare_measured(root: Path, jobs: int) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of `quantcheck compare` A vs B on `jobs`."""
    out = root / f"report-{jobs}"
    shutil.rmtree(out, ignore_errors=True)
    wall, peak, _ = run_measured([sys.executable, "-m", "quantcheck", "compare",
                                  str(root / "a"), str(root / "b"), "--out", str(out),
                                  "--jobs", str(jobs)])
    print(f"compare --jobs {jobs}: {wall:.1f} s, peak RSS {peak:.0f} MiB", flush=True)
    return wall, peak


def measure(root: Path, jobs: int, only_jobs: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {"parallel": {}}
    if not only_jobs:
        figures["compare_wall_s"], figures["compare_peak_rss_mib"] = compare_measured(root, 1)
    if jobs > 1:
        wall_n, peak_n = compare_measured(root, jobs)
        parallel = figures["parallel"] = {"jobs": jobs, "wall_s": wall_n,
                                          "peak_rss_mib": peak_n}
        if not only_jobs:
            wall = figures["compare_wall_s"]
            parallel.update(speedup=wall / wall_n, share_of_linear=wall / wall_n / jobs,
                            same_report=all((root / "report-1" / name).read_bytes()
                                            == (root / f"report-{jobs}" / name).read_bytes()
                                            for name in ("pairs.csv", "details.jsonl")))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--generate-into", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=Path)
    parser.add_argument("--only-jobs", action="store_true")
    args = parser.parse_args()
    if args.generate_into:
        generate(args.generate_into, args.prompts, args.repeats, args.tokens, args.top)
        return
    root = args.runs or Path(tempfile.mkdtemp(prefix="qc-triage-"))
    try:
        if not args.runs:
            # Generate in a child: a forked child starts with its parent's resident
            # memory, which would inflate the peak RSS measured for compare.
            generated, _, _ = run_measured([
                sys.executable, __file__, "--prompts", str(args.prompts), "--repeats",
                str(args.repeats), "--tokens", str(args.tokens), "--top", str(args.top),
                "--generate-into", str(root)])
            print(f"generated runs in {generated:.0f} s", flush=True)
        size = sum(p.stat().st_size for name in ("completions.jsonl", "tokens.bin")
                   for side in ("a", "b") for p in [root / side / name])
        figures = measure(root, args.jobs, args.only_jobs)
        ratio = text_triage_ratio(root, min(1000, args.prompts))
    finally:
        if not args.runs:
            shutil.rmtree(root, ignore_errors=True)
    figures = {"prompts": args.prompts, "repeats": args.repeats, "tokens": args.tokens,
               "top_k": args.top, "runs_bytes": size, **figures, "text_triage": ratio}
    print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
    scale = (args.prompts, args.repeats, args.tokens, args.top)
    name = "triage_scale" if scale == (10_000, 6, 256, 20) else \
        f"triage_scale_{args.prompts}x{args.repeats}x{args.tokens}"
    print(f"saved {save(name, figures)}")


if __name__ == "__main__":
    main()
