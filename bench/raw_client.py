"""The limit bench/collect_throughput.py measures quantcheck's collection against.

A minimal raw client: aiohttp + orjson, the same requests at the same concurrency,
every answer parsed and each of its logprobs read. With `--out`, the answers are read
into columns (tokens, logprobs, top tokens, top logprobs) and each written as one JSONL
line as it finishes. Nothing else: no retries, no size cap, no validation, no
resumability. It runs under the garbage-collector settings quantcheck
collects under (fewer full passes), so the ratio measures the clients' own work.
Imports nothing of quantcheck: its start-up is a raw script's.

    python bench/raw_client.py URL --requests N --concurrency C --tokens T --top K
        [--stream] [--out OUT.jsonl]

Prints one JSON line: the seconds from the first request sent to the last answer
parsed (or written, with `--out`): `window_s`; and the tokens received.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import time
from typing import Any, BinaryIO

import aiohttp
import orjson


def columns(entries: list[dict[str, Any]], keep: bool) -> dict[str, Any]:
    """The answer's columns; without `keep`, each logprob only read (summed)."""
    if not keep:
        return {"tokens": len(entries),
                "sum": sum(sum(t["logprob"] for t in e["top_logprobs"]) for e in entries)}
    tops = [entry["top_logprobs"] for entry in entries]
    return {"tokens": [entry["token"] for entry in entries],
            "logprobs": [entry["logprob"] for entry in entries],
            "top_tokens": [[t["token"] for t in top] for top in tops],
            "top_logprobs": [[t["logprob"] for t in top] for top in tops]}


async def one(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
              stream: bool, keep: bool) -> dict[str, Any]:
    async with session.post(url, json=body) as reply:
        if not stream:
            choice = orjson.loads(await reply.read())["choices"][0]
            return {"text": choice["message"]["content"],
                    "finish_reason": choice["finish_reason"],
                    **columns(choice["logprobs"]["content"], keep)}
        text, entries, finish = [], [], None
        async for line in reply.content:
            if line.startswith(b"data: {"):
                for choice in orjson.loads(line[6:])["choices"]:
                    text.append(choice["delta"].get("content") or "")
                    entries += (choice.get("logprobs") or {}).get("content") or []
                    finish = choice.get("finish_reason") or finish
        return {"text": "".join(text), "finish_reason": finish, **columns(entries, keep)}


async def collect(url: str, out: BinaryIO | None, requests: int, concurrency: int, tokens: int,
                  top: int, stream: bool) -> tuple[int, float]:
    """Tokens received, and the seconds from the first request to the last answer."""
    semaphore = asyncio.Semaphore(concurrency)
    received = 0
    first: float | None = None

    async def worker(session: aiohttp.ClientSession, n: int) -> None:
        nonlocal received, first
        body = {"model": "m", "messages": [{"role": "user", "content": f"p{n}"}],
                "max_tokens": tokens, "temperature": 0, "logprobs": True,
                "top_logprobs": top, "stream": stream}
        async with semaphore:
            first = first or time.perf_counter()
            answer = await one(session, url + "/v1/chat/completions", body, stream,
                               out is not None)
        if out is None:
            received += answer["tokens"]
            return
        received += len(answer["tokens"])
        out.write(orjson.dumps({"id": f"p{n}", **answer}) + b"\n")
        out.flush()  # each answer reaches the file as it finishes, as quantcheck's do

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session, n) for n in range(requests)))
    return received, time.perf_counter() - (first or time.perf_counter())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--top", type=int, required=True)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    gc.freeze()
    gc.set_threshold(200_000, 20, 100)  # quantcheck's (fetch.collect.rare_full_collections)
    with open(args.out or os.devnull, "wb") as out:
        received, window = asyncio.run(collect(args.url, out if args.out else None,
                                               args.requests, args.concurrency,
                                               args.tokens, args.top, args.stream))
    print(orjson.dumps({"window_s": window, "tokens": received}).decode())


if __name__ == "__main__":
    main()
