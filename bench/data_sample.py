"""`--sample 1000` from a JSONL file of 1,000,000 chat request bodies: time and peak
memory, against a baseline measured in the same run (reading the same file line by line
and doing nothing with the lines). The file is generated here (about 330 MB; request
bodies like production logs: a system and a user message, max_tokens, some with tools).

Each measurement runs in its own process (peak RSS from os.wait4): the baseline; the
library (`load_prompts` with a sample); the whole command (`quantcheck prompts check
--sample 1000`); and importing the loader alone, its fixed cost.

    .venv/bin/python bench/data_sample.py [--lines 1000000] [--sample 1000]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import orjson
from _common import run_measured, save

BASELINE = textwrap.dedent("""
    import sys
    count = 0
    with open(sys.argv[1], "rb") as stream:
        for line in stream:
            count += 1
    print(count)
""")
LIBRARY = textwrap.dedent("""
    import hashlib, sys, time
    from quantcheck.store.inputs.prompt_sets import RequestOptions, SourceOptions, load_prompts
    options = RequestOptions(source=SourceOptions(sample=int(sys.argv[2]), seed=0))
    started = time.perf_counter()
    prompts = load_prompts([sys.argv[1]], options)
    seconds = time.perf_counter() - started
    ids = "\\n".join(p.id for p in prompts).encode()
    print(len(prompts), hashlib.sha256(ids).hexdigest()[:16], seconds)
""")
IMPORT_ONLY = textwrap.dedent("""
    from quantcheck.store.inputs.prompt_sets import load_prompts
    print("imported")
""")
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
WORDS = ("order account refund shipping invoice password weather city price plan "
         "update cancel address delivery warranty battery screen").split()


def generate(path: Path, lines: int) -> None:
    rng = random.Random(7)
    with path.open("wb") as stream:
        for number in range(lines):
            question = " ".join(rng.choices(WORDS, k=rng.randint(8, 30)))
            body: dict[str, object] = {
                "model": "prod-model",
                "messages": [{"role": "system", "content": "You are a support assistant."},
                             {"role": "user", "content": f"#{number}: {question}?"}],
                "max_tokens": rng.choice((128, 256, 512)), "temperature": 0.7,
                "user": f"u-{rng.randrange(10**6)}"}
            if number % 10 == 0:
                body["tools"] = [TOOL]
            stream.write(orjson.dumps(body) + b"\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "requests.jsonl"
        started = time.perf_counter()
        generate(path, args.lines)
        generated = time.perf_counter() - started
        size_mb = path.stat().st_size / 1e6
        base_wall, base_rss, counted = run_measured([sys.executable, "-c", BASELINE, str(path)])
        assert int(counted) == args.lines
        import_wall, import_rss, _ = run_measured([sys.executable, "-c", IMPORT_ONLY])
        lib_wall, lib_rss, drawn = run_measured(
            [sys.executable, "-c", LIBRARY, str(path), str(args.sample)])
        again = run_measured([sys.executable, "-c", LIBRARY, str(path), str(args.sample)])[2]
        cli_wall, cli_rss, _ = run_measured(
            [sys.executable, "-m", "quantcheck", "prompts", "check", str(path), "--sample",
             str(args.sample), "--show", "0"])
    count, digest, seconds = drawn.split()
    assert int(count) == args.sample and drawn.split()[:2] == again.split()[:2]
    figures = {
        "lines": args.lines, "file_mb": round(size_mb), "sample": args.sample,
        "generated_s": round(generated, 1),
        "baseline_read_s": round(base_wall, 2), "baseline_peak_rss_mib": round(base_rss),
        "import_only_s": round(import_wall, 2), "import_only_peak_rss_mib": round(import_rss),
        "load_prompts_sample_s": round(lib_wall, 2),
        "sampling_in_process_s": round(float(seconds), 2),
        "load_prompts_sample_peak_rss_mib": round(lib_rss),
        "prompts_check_sample_s": round(cli_wall, 2),
        "prompts_check_sample_peak_rss_mib": round(cli_rss),
        "time_ratio": round(lib_wall / base_wall, 2),
        "sampling_time_ratio": round(float(seconds) / base_wall, 2),
        "memory_over_import_mib": round(lib_rss - import_rss),
        "same_sample_twice": drawn.split()[:2] == again.split()[:2], "ids_digest": digest,
    }
    for key, value in figures.items():
        print(f"{key}: {value}")
    print(f"saved {save('data_sample', figures)}")


if __name__ == "__main__":
    main()
