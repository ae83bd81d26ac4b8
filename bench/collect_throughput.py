"""Collection throughput: quantcheck against a minimal raw client, same server, one run.

A loopback server (its own process) answers instantly with one stored vLLM-format
chat response: 256 tokens with top-20 logprobs, streamed or not. The limit is
bench/raw_client.py (aiohttp + orjson, every logprob read; for the whole process, each
answer written as a JSONL line of columns). Every client runs as a process of its own,
in interleaved rounds (the order alternates), and two ratios are taken per mode, median
of rounds:

- first request to last answer: the raw client's window (parsing every answer, writing
  nothing) over quantcheck's (the library's `collect`, timed from the first request to
  the last record stored);
- whole process: the raw script's wall time over `quantcheck collect --no-preflight`'s
  (start-up, reading the prompt set, writing the run, finishing it).

    python bench/collect_throughput.py [--requests 1000] [--concurrency 64] [--rounds 3]

Prints each ratio beside its limit (>= 0.95x and >= 0.9x); the figures go to
bench/results/collect_throughput.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from _common import run_child, save

from quantcheck.lab.launch import free_port, wait_until_healthy

TOKENS = 256
TOP = 20


def stored_bodies() -> tuple[bytes, bytes]:
    """One realistic vLLM chat response, whole and as an SSE stream.

    Alternatives come from a 400-word vocabulary with a Zipf-like skew (a response then
    holds about as many distinct strings as the real Gemma 3 270M's: bench/storage.py);
    logprobs are float32 values, as vLLM computes them and sends their exact decimals.
    """
    rng = np.random.default_rng(0)
    vocabulary = [f" w{n}" if n % 3 else f"w{n}" for n in range(400)]
    entries = []
    for _ in range(TOKENS):
        words = rng.choice(len(vocabulary), size=TOP, replace=False,
                           p=_zipf(len(vocabulary)))
        logprobs = np.sort((-rng.exponential(2.0, TOP) * np.arange(1, TOP + 1))
                           .astype(np.float32))
        top = [{"token": vocabulary[w], "logprob": float(logprobs[::-1][k]),
                "bytes": list(vocabulary[w].encode())} for k, w in enumerate(words)]
        entries.append({"token": top[0]["token"], "logprob": top[0]["logprob"],
                        "bytes": top[0]["bytes"], "top_logprobs": top})
    text = "".join(e["token"] for e in entries)
    usage = {"prompt_tokens": 12, "completion_tokens": TOKENS, "total_tokens": TOKENS + 12}
    whole = {"id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": "m",
             "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                          "logprobs": {"content": entries}, "finish_reason": "length"}],
             "usage": usage}
    chunks = [b"data: " + orjson.dumps({"id": "c", "object": "chat.completion.chunk",
                                        "created": 1, "model": "m", "choices": [{
                                            "index": 0, "delta": {"content": e["token"]},
                                            "logprobs": {"content": [e]},
                                            "finish_reason": "length" if n == TOKENS - 1
                                            else None}]}) + b"\n\n"
              for n, e in enumerate(entries)]
    chunks.append(b"data: " + orjson.dumps({"id": "c", "object": "chat.completion.chunk",
                                            "choices": [], "usage": usage}) + b"\n\n")
    chunks.append(b"data: [DONE]\n\n")
    return orjson.dumps(whole), b"".join(chunks)


def _zipf(size: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, size + 1)
    return np.asarray(weights / weights.sum())


SERVER = """
import sys
from pathlib import Path
from aiohttp import web
whole, stream = Path(sys.argv[2]).read_bytes(), Path(sys.argv[3]).read_bytes()
async def models(request):
    return web.json_response({"data": [{"id": "m", "owned_by": "vllm"}]})
async def chat(request):
    body = await request.json()
    if body.get("stream"):
        return web.Response(body=stream, content_type="text/event-stream")
    return web.Response(body=whole, content_type="application/json")
async def health(request):
    return web.Response(text="ok")
app = web.Application()
app.router.add_get("/v1/models", models)
app.router.add_get("/health", health)
app.router.add_post("/v1/chat/completions", chat)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


WINDOW_LIMIT = 0.95  # first request to last answer, against the raw client
PROCESS_LIMIT = 0.90  # the whole process, against the raw script
RAW_CLIENT = Path(__file__).with_name("raw_client.py")


def child_collect(mode: str, url: str, prompts: str, out: str, concurrency: str) -> None:
    """`--child`: quantcheck's collection through the library, timed from the first
    request (the reporter's `started`) to the last record stored (`completed`)."""
    from quantcheck import CollectSettings, collect

    class Clock:
        first = last = 0.0
        failed = 0

        def checking(self, endpoint: str) -> None: ...
        def checked(self, report: object) -> None: ...
        def warn(self, message: str) -> None: ...

        def started(self, total: int, already_done: int) -> None:
            self.first = time.perf_counter()

        def completed(self, record: Any) -> None:
            self.last = time.perf_counter()
            self.failed += bool(record.error)

    clock = Clock()
    settings = CollectSettings(endpoint=url, label=mode, stream=mode == "stream",
                               concurrency=int(concurrency), top_logprobs=TOP,
                               preflight=False)
    collect([prompts], out, settings, clock)  # type: ignore[arg-type]
    print(orjson.dumps({"window_s": clock.last - clock.first, "failed": clock.failed}).decode())


class Round:
    """One mode's four processes: the raw client with and without writing, quantcheck's
    library and its command."""

    def __init__(self, root: Path, url: str, prompts: Path, requests: int, concurrency: int,
                 mode: str) -> None:
        self.root, self.url, self.prompts, self.mode = root, url, prompts, mode
        self.requests, self.concurrency = requests, str(concurrency)

    def raw(self) -> dict[str, float]:
        """The raw client parsing every answer, writing nothing: the window's limit."""
        child = run_child(self._raw_command())
        found = orjson.loads(child.out)
        assert found["tokens"] == self.requests * TOKENS, found
        return {"window_s": found["window_s"], "wall_s": child.wall, "cpu_s": child.cpu}

    def raw_script(self) -> dict[str, float]:
        """The raw client writing its answers as JSONL: the whole process's limit."""
        out = self.root / "raw.jsonl"
        child = run_child([*self._raw_command(), "--out", str(out)])
        assert orjson.loads(child.out)["tokens"] == self.requests * TOKENS, child.out
        out.unlink()
        return {"wall_s": child.wall, "cpu_s": child.cpu}

    def _raw_command(self) -> list[str]:
        return [sys.executable, str(RAW_CLIENT), self.url, "--requests", str(self.requests),
                "--concurrency", self.concurrency, "--tokens", str(TOKENS), "--top", str(TOP),
                *(["--stream"] if self.mode == "stream" else [])]

    def library(self) -> dict[str, float]:
        run_dir = self.root / "run-library"
        child = run_child([sys.executable, __file__, "--child", self.mode, self.url,
                           str(self.prompts), str(run_dir), self.concurrency])
        found = orjson.loads(child.out)
        assert found["failed"] == 0, found
        shutil.rmtree(run_dir)
        return {"window_s": found["window_s"], "cpu_s": child.cpu}

    def command(self) -> dict[str, float]:
        run_dir = self.root / "run-cli"
        child = run_child([
            sys.executable, "-m", "quantcheck", "collect", "--endpoint", self.url,
            "--prompts", str(self.prompts), "--out", str(run_dir), "--label", self.mode,
            "--no-preflight", "--concurrency", self.concurrency, "--top-logprobs", str(TOP),
            "--stream" if self.mode == "stream" else "--no-stream"])
        stored = sum((run_dir / name).stat().st_size
                     for name in ("completions.jsonl", "tokens.bin"))
        shutil.rmtree(run_dir)
        return {"wall_s": child.wall, "cpu_s": child.cpu,
                "stored_bytes_per_token": stored / (self.requests * TOKENS)}

    def measure(self, raw_first: bool) -> dict[str, dict[str, float]]:
        order = ("raw", "library", "raw_script", "command") if raw_first \
            else ("library", "raw", "command", "raw_script")
        return {name: getattr(self, name)() for name in order}


def prompt_set(path: Path, requests: int) -> Path:
    path.write_text("prompts:\n" + "".join(
        f"  - {{id: p{n}, messages: [{{role: user, content: 'p{n}'}}], max_tokens: {TOKENS}}}\n"
        for n in range(requests)))
    return path


def warm_up(root: Path, url: str) -> None:
    """One small run of each, untimed: bytecode written (children start from it, as an
    installed package does), files in the page cache."""
    prompts = prompt_set(root / "warm-up.yaml", 8)
    for mode in ("stream", "whole"):
        warm = Round(root, url, prompts, 8, 8, mode)
        warm.raw()
        warm.library()
        warm.command()


def ratios(rounds: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Throughput ratios (the raw client's time over quantcheck's: above 1, quantcheck
    is faster), median of rounds; the CPU ratio of the whole processes beside them: on
    a loaded machine the CPU share each process gets moves the wall times."""
    window = [r["raw"]["window_s"] / r["library"]["window_s"] for r in rounds]
    process = [r["raw_script"]["wall_s"] / r["command"]["wall_s"] for r in rounds]
    cpu = [r["raw_script"]["cpu_s"] / r["command"]["cpu_s"] for r in rounds]
    return {"window_ratio": statistics.median(window), "window_ratios": window,
            "process_ratio": statistics.median(process), "process_ratios": process,
            "process_cpu_ratio": statistics.median(cpu)}


def verdict(mode: str, figures: dict[str, Any]) -> str:
    window, process = figures["window_ratio"], figures["process_ratio"]
    return (f"{mode:6} first request to last answer: {window:.3f}x the raw client "
            f"(limit >= {WINDOW_LIMIT}x: {'met' if window >= WINDOW_LIMIT else 'MISSED'}; "
            f"rounds {' '.join(f'{r:.3f}' for r in figures['window_ratios'])})\n"
            f"{mode:6} whole process:                {process:.3f}x the raw script "
            f"(limit >= {PROCESS_LIMIT}x: {'met' if process >= PROCESS_LIMIT else 'MISSED'}; "
            f"rounds {' '.join(f'{r:.3f}' for r in figures['process_ratios'])}; CPU time "
            f"{figures['process_cpu_ratio']:.3f}x)")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_collect(*sys.argv[2:7])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="stream,whole")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="qc-collect-"))
    whole, stream = stored_bodies()
    (root / "whole.json").write_bytes(whole)
    (root / "stream.sse").write_bytes(stream)
    prompts = prompt_set(root / "prompts.yaml", args.requests)
    port = free_port()
    log = root / "server.log"
    with log.open("wb") as handle:
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(port),
                                   str(root / "whole.json"), str(root / "stream.sse")],
                                  stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    modes = args.modes.split(",")
    figures: dict[str, Any] = {"requests": args.requests, "concurrency": args.concurrency,
                               "tokens_per_response": TOKENS, "top_logprobs": TOP,
                               "rounds": args.rounds, "load_before": os.getloadavg()[0],
                               "response_bytes": {"whole": len(whole), "stream": len(stream)}}
    measured: dict[str, list[dict[str, dict[str, float]]]] = {mode: [] for mode in modes}
    try:
        wait_until_healthy(url, server, log, 30)
        warm_up(root, url)
        for number in range(args.rounds):
            for mode in modes:
                found = Round(root, url, prompts, args.requests, args.concurrency,
                              mode).measure(number % 2 == 0)
                measured[mode].append(found)
                print(f"round {number + 1} {mode}: {orjson.dumps(found).decode()}", flush=True)
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    figures["load_after"] = os.getloadavg()[0]
    for mode in modes:
        figures[mode] = {**ratios(measured[mode]), "rounds": measured[mode]}
    print(f"load average (1 min) {figures['load_before']:.1f} before, "
          f"{figures['load_after']:.1f} after, on {os.cpu_count()} CPUs")
    for mode in modes:
        print(verdict(mode, figures[mode]))
    print(f"saved {save('collect_throughput', figures)}")


if __name__ == "__main__":
    main()
