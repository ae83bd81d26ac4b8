"""A fleet from one client: how far one `quantcheck` process drives replicas.

Every server is a scripted lab server in a process of its own, answering with one
answer a scripted server rendered (`--tokens` tokens, top-`--top` logprobs), recorded
once and replayed: the servers cost little CPU, as engines cost the client none, and
what they cannot hide is the time an engine takes, `--latency` seconds a request.
Four measurements, in one run:

1. The client's own limit: `collect` of one side spread over `--limit-replicas`
   servers answering at once (no latency): requests/s and tokens/s.
2. Scaling: `collect` spread over 1, 2, 4, 8 servers of `--latency` seconds a request
   (`--concurrency` in flight on each): requests/s against the ideal (replicas x
   concurrency / latency) and against the client's limit. Throughput grows with the
   replicas until the client's limit.
3. The same 8 replicas rendering every answer in Python (the scripted engine, not a
   replay): on a small machine their CPU, not the client, sets the pace.
4. The fleet: one `quantcheck run` process, A and B each spread over 8 servers,
   `--prompts` prompts (100,000 with `--prompts 100000`): wall time, requests/s, and
   the peak RSS of the run process at that size and at a tenth of it (memory flat: the
   ratio).

The machine is shared (2 cores here, the servers included): figures move with its
load; the ratios measured in one run are what to compare.

    python bench/fleet.py [--prompts 2000] [--latency 0.05] [--concurrency 8]
    python bench/fleet.py --prompts 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from _common import run_measured, save

from quantcheck import CollectSettings, collect
from quantcheck.lab.launch import free_port, wait_until_healthy

SERVER = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from quantcheck.lab.scripted import Faults, ScriptedServer
    port, latency, replay = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    recorded = {"completions-stream": Path(replay).read_bytes()} if replay else None
    server = ScriptedServer(port=port, faults=Faults(latency_s=latency), replay=recorded)

    async def serve():
        await server.start_async()
        await asyncio.Event().wait()

    asyncio.run(serve())
""")
LADDER = (1, 2, 4, 8)


class Servers:
    """Scripted lab servers, each in its own process; stopped on exit."""

    def __init__(self, count: int, latency: float, replay: Path | None, logs: Path) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.urls: list[str] = []
        for _ in range(count):
            port = free_port()
            log = logs / f"server-{port}.log"
            with log.open("wb") as handle:
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-c", SERVER, str(port), str(latency),
                     str(replay or "")], stdout=handle, stderr=subprocess.STDOUT))
            self.urls.append(f"http://127.0.0.1:{port}")
            wait_until_healthy(self.urls[-1], self.processes[-1], log, timeout=60)

    @property
    def endpoint(self) -> str:
        return ",".join(f"{url}/v1" for url in self.urls)

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(30)


def write_prompts(path: Path, count: int, tokens: int) -> Path:
    """A JSONL file of completion request bodies, one per prompt."""
    with path.open("w") as stream:
        for number in range(count):
            stream.write(json.dumps({"prompt": f"Question {number}: what follows?",
                                     "max_tokens": tokens}) + "\n")
    return path


def recorded_answer(folder: Path, top: int) -> Path:
    """One streamed answer of a scripted server, as the replay servers send it."""
    import aiohttp

    async def fetch(url: str) -> bytes:
        body = {"model": "scripted-model", "prompt": "Question 0: what follows?",
                "max_tokens": 64, "temperature": 0, "logprobs": top, "stream": True,
                "stream_options": {"include_usage": True}}
        async with aiohttp.ClientSession() as session, \
                session.post(url + "/v1/completions", json=body) as response:
            return await response.read()

    with Servers(1, 0.0, None, folder) as one:
        answer = asyncio.run(fetch(one.urls[0]))
    path = folder / "answer.sse"
    path.write_bytes(answer)
    return path


def collect_rate(endpoint: str, prompts: Path, out: Path, concurrency: int, top: int
                 ) -> dict[str, Any]:
    """One side collected over `endpoint`'s replicas: requests/s and tokens/s."""
    started = time.perf_counter()
    result = collect([prompts], out, CollectSettings(
        endpoint=endpoint, label="b", concurrency=concurrency, top_logprobs=top,
        preflight=False, retries=0))
    seconds = time.perf_counter() - started
    tokens = 0
    with (out / "completions.jsonl").open("rb") as lines:
        for line in lines:
            usage = json.loads(line).get("usage") or {}
            tokens += int(usage.get("completion_tokens") or 0)
    assert result.failed == 0, f"{result.failed} requests failed"
    return {"requests": result.collected, "seconds": round(seconds, 2),
            "requests_per_s": round(result.collected / seconds, 1),
            "tokens_per_s": round(tokens / seconds, 1)}


def fleet_run(prompts: Path, folder: Path, replicas: int, latency: float, concurrency: int,
              top: int, replay: Path, logs: Path) -> dict[str, Any]:
    """`quantcheck run` in a process of its own, A and B each over `replicas` servers."""
    with Servers(replicas, latency, replay, logs) as a, Servers(replicas, latency, replay,
                                                                 logs) as b:
        wall, peak, _ = run_measured([
            sys.executable, "-m", "quantcheck", "run", "--a", a.endpoint, "--b", b.endpoint,
            "--prompts", str(prompts), "--out", str(folder), "--no-preflight",
            "--concurrency", str(concurrency), "--top-logprobs", str(top)])
    summary = json.loads((folder / "summary.json").read_text())
    requests = summary["performance"]["a"]["requests"] + summary["performance"]["b"]["requests"]
    return {"prompts": summary["counts"]["prompts"], "requests": requests,
            "wall_s": round(wall, 1), "requests_per_s": round(requests / wall, 1),
            "peak_rss_mib": round(peak, 1),
            "identical": summary["counts"]["identical"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.05,
                        help="Seconds each scripted server takes a request.")
    parser.add_argument("--concurrency", type=int, default=8, help="In flight per replica.")
    parser.add_argument("--tokens", type=int, default=16, help="max_tokens of a prompt.")
    parser.add_argument("--top", type=int, default=5, help="--top-logprobs.")
    parser.add_argument("--limit-replicas", type=int, default=8)
    args = parser.parse_args()
    figures: dict[str, Any] = {"prompts": args.prompts, "latency_s": args.latency,
                               "concurrency_per_replica": args.concurrency,
                               "max_tokens": args.tokens, "top_logprobs": args.top,
                               "load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        prompts = write_prompts(folder / "prompts.jsonl", args.prompts, args.tokens)
        replay = recorded_answer(folder, args.top)
        with Servers(args.limit_replicas, 0.0, replay, folder) as instant:
            limit = collect_rate(instant.endpoint, prompts, folder / "limit", args.concurrency,
                                 args.top)
        figures["client_limit"] = limit
        print(f"client limit ({args.limit_replicas} instant replay servers): "
              f"{limit['requests_per_s']:,.0f} requests/s, {limit['tokens_per_s']:,.0f} "
              "tokens/s", flush=True)
        scaling = []
        for count in LADDER:
            with Servers(count, args.latency, replay, folder) as servers:
                rate = collect_rate(servers.endpoint, prompts, folder / f"scale-{count}",
                                    args.concurrency, args.top)
            ideal = count * args.concurrency / args.latency
            rate.update(replicas=count, ideal_requests_per_s=round(ideal, 1),
                        of_ideal=round(rate["requests_per_s"] / ideal, 2),
                        of_client_limit=round(rate["requests_per_s"]
                                              / limit["requests_per_s"], 2))
            scaling.append(rate)
            print(f"{count} replica{'s' * (count > 1)}: {rate['requests_per_s']:,.0f} "
                  f"requests/s ({rate['of_ideal']:.2f} of the {ideal:,.0f} the replicas "
                  f"allow, {rate['of_client_limit']:.2f} of the client's limit), "
                  f"{rate['tokens_per_s']:,.0f} tokens/s", flush=True)
        figures["scaling"] = scaling
        with Servers(LADDER[-1], args.latency, None, folder) as rendering:
            rendered = collect_rate(rendering.endpoint, prompts, folder / "rendered",
                                    args.concurrency, args.top)
        figures["rendering_8"] = rendered
        print(f"{LADDER[-1]} replicas rendering each answer: {rendered['requests_per_s']:,.0f} "
              f"requests/s, {rendered['tokens_per_s']:,.0f} tokens/s", flush=True)
        small = write_prompts(folder / "small.jsonl", max(args.prompts // 10, 1), args.tokens)
        runs = {}
        for name, source in (("tenth", small), ("full", prompts)):
            runs[name] = fleet_run(source, folder / f"run-{name}", 8, args.latency,
                                   args.concurrency, args.top, replay, folder)
            print(f"run, 8 replicas a side, {runs[name]['prompts']:,} prompts: "
                  f"{runs[name]['wall_s']:,.1f} s, {runs[name]['requests_per_s']:,.0f} "
                  f"requests/s, peak RSS {runs[name]['peak_rss_mib']:,.0f} MiB", flush=True)
        runs["peak_rss_ratio_full_over_tenth"] = round(
            runs["full"]["peak_rss_mib"] / runs["tenth"]["peak_rss_mib"], 2)
        print(f"memory: {runs['peak_rss_ratio_full_over_tenth']:.2f}x the peak RSS for 10x "
              "the prompts")
        figures["fleet_run"] = runs
    figures["load_after"] = os.getloadavg()[0]
    name = "fleet" if args.prompts == 2000 else f"fleet_{args.prompts}"
    print(f"written: {save(name, figures)}")


if __name__ == "__main__":
    main()
