"""Collection throughput: `quantcheck collect` vs a minimal raw client, same server.

A loopback server (its own process) answers instantly with one stored vLLM-format
chat response: 256 tokens with top-20 logprobs, streamed or not. Both clients send
the same requests at the same concurrency; the reference is raw aiohttp + orjson
that parses every logprob and does nothing else.

    python bench/collect_throughput.py [--requests 300] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson
from _common import save

from quantcheck import CollectSettings, collect
from quantcheck.fetch.collect import rare_full_collections
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
        logprobs = np.sort(-rng.exponential(2.0, TOP).astype(np.float32) * np.arange(1, TOP + 1))
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


async def reference_client(url: str, requests: int, concurrency: int, stream: bool) -> int:
    """Raw aiohttp + orjson; touches every logprob; returns tokens received."""
    semaphore = asyncio.Semaphore(concurrency)
    counted = 0

    async def one(session: aiohttp.ClientSession, n: int) -> None:
        nonlocal counted
        body = {"model": "m", "messages": [{"role": "user", "content": f"p{n}"}],
                "max_tokens": TOKENS, "temperature": 0, "logprobs": True, "top_logprobs": TOP,
                "stream": stream}
        async with semaphore, session.post(url + "/v1/chat/completions", json=body) as reply:
            if stream:
                async for line in reply.content:
                    if line.startswith(b"data: {"):
                        chunk = orjson.loads(line[6:])
                        for choice in chunk["choices"]:
                            for entry in (choice.get("logprobs") or {}).get("content") or []:
                                counted += 1
                                sum(t["logprob"] for t in entry["top_logprobs"])
            else:
                data = orjson.loads(await reply.read())
                for entry in data["choices"][0]["logprobs"]["content"]:
                    counted += 1
                    sum(t["logprob"] for t in entry["top_logprobs"])

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(one(session, n) for n in range(requests)))
    return counted


def measure(work: Any) -> tuple[float, float]:
    started = time.perf_counter()
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    work()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter() - started, (after.ru_utime - cpu.ru_utime) + (
        after.ru_stime - cpu.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="qc-collect-"))
    whole, stream = stored_bodies()
    (root / "whole.json").write_bytes(whole)
    (root / "stream.sse").write_bytes(stream)
    prompts = root / "prompts.yaml"
    prompts.write_text("prompts:\n" + "".join(
        f"  - {{id: p{n}, messages: [{{role: user, content: 'p{n}'}}], max_tokens: {TOKENS}}}\n"
        for n in range(args.requests)))
    port = free_port()
    log = root / "server.log"
    with log.open("wb") as handle:
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(port),
                                   str(root / "whole.json"), str(root / "stream.sse")],
                                  stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    figures: dict[str, Any] = {"requests": args.requests, "concurrency": args.concurrency,
                               "tokens_per_response": TOKENS, "top_logprobs": TOP,
                               "response_bytes": {"whole": len(whole), "stream": len(stream)}}
    try:
        wait_until_healthy(url, server, log, 30)
        for mode, streamed in (("whole", False), ("stream", True)):
            tokens = args.requests * TOKENS
            wall, cpu = measure(lambda s=streamed: asyncio.run(
                reference_client(url, args.requests, args.concurrency, s)))
            # The same client under quantcheck's collector settings: how much of the
            # difference is CPython's garbage collector rather than parsing.
            with rare_full_collections():
                tuned_wall, _ = measure(lambda s=streamed: asyncio.run(
                    reference_client(url, args.requests, args.concurrency, s)))
            run_dir = root / f"run-{mode}"
            settings = CollectSettings(endpoint=url, label=mode, stream=streamed,
                                       concurrency=args.concurrency, top_logprobs=TOP,
                                       preflight=False)  # canned answers; measured apart
            ours_wall, ours_cpu = measure(lambda s=settings, d=run_dir: collect([prompts], d, s))
            figures[mode] = {
                "reference_tokens_per_s": tokens / wall,
                "quantcheck_tokens_per_s": tokens / ours_wall,
                "ratio": wall / ours_wall,
                "reference_gc_tuned_tokens_per_s": tokens / tuned_wall,
                "ratio_to_gc_tuned_reference": tuned_wall / ours_wall,
                "reference_cpu_s_per_1000_tokens": cpu / tokens * 1000,
                "quantcheck_cpu_s_per_1000_tokens": ours_cpu / tokens * 1000,
                "stored_bytes_per_token": sum(
                    (run_dir / name).stat().st_size
                    for name in ("completions.jsonl", "tokens.bin")) / tokens}
            print(mode, json.dumps(figures[mode]), flush=True)
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    print(f"saved {save('collect_throughput', figures)}")


if __name__ == "__main__":
    main()
