"""Storage: bytes on disk per generated token with top-20 logprobs, on a real model.

Collects the spot-check prompts from the real Gemma 3 270M (lab server, bf16, top-20)
with `quantcheck collect`, then measures the run directory against the same records
as plain JSONL (token arrays inline) and that JSONL compressed whole with zstd. It
then asks the server again, raw (aiohttp + orjson, no quantcheck), and checks that
every token string and every logprob read back from tokens.bin is bit-identical to
what the server sent: nothing lost.

    python bench/storage.py [--max-tokens 192] [--prompts prompts/spot-check.yaml]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import zstandard
from _common import save

from quantcheck import CollectSettings, collect, load_run
from quantcheck.lab.launch import lab_servers
from quantcheck.store.inputs.prompt_sets import RequestOptions


async def server_tokens(url: str, bodies: list[dict[str, Any]]) -> list[list[Any]]:
    """Each response's (token, logprob, top alternatives) exactly as the server sent them."""
    answers = []
    async with aiohttp.ClientSession() as session:
        for body in bodies:
            async with session.post(url + "/v1/chat/completions", json=body) as reply:
                data = orjson.loads(await reply.read())
            answers.append([[e["token"], e["logprob"],
                             [[t["token"], t["logprob"]] for t in e["top_logprobs"]]]
                            for e in data["choices"][0]["logprobs"]["content"]])
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", default=str(Path(__file__).parents[1] / "prompts"
                                                 / "spot-check.yaml"))
    parser.add_argument("--max-tokens", type=int, default=192)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="qc-storage-"))
    try:
        with lab_servers([("bf16", "none")], root / "logs") as (url,):
            settings = CollectSettings(endpoint=url, label="bf16", top_logprobs=20,
                                       concurrency=1,
                                       request=RequestOptions(max_tokens=args.max_tokens))
            started = time.perf_counter()
            collect([args.prompts], root / "run", settings)
            collect_s = time.perf_counter() - started
            run = load_run(root / "run")
            records = list(run.completions())
            bodies = [{"model": run.manifest.model, **run.prompts[r.prompt_id].request,
                       "logprobs": True, "top_logprobs": 20} for r in records]
            sent = asyncio.run(server_tokens(url, bodies))
        figures = {**measure(root, records, sent), "collect_s": collect_s}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
    print(f"saved {save('storage', figures)}")


def measure(root: Path, records: list[Any], sent: list[list[Any]]) -> dict[str, Any]:
    tokens = sum(len(r.tokens) for r in records)
    run_bytes = sum(path.stat().st_size for path in (root / "run").iterdir()
                    if path.name in ("completions.jsonl", "tokens.bin"))
    plain = b"".join(orjson.dumps(r.to_json()) + b"\n" for r in records)
    stored = [[[t, v, [list(pair) for pair in r.tokens.top(n)]]
               for n, (t, v) in enumerate(zip(r.tokens.text, r.tokens.logprob, strict=True))]
              for r in records]
    return {
        "model": "gemma-3-270m bf16 (lab server, vLLM wire format)",
        "records": len(records), "tokens": tokens, "top_logprobs": 20,
        "quantcheck_bytes_per_token": run_bytes / tokens,
        "plain_jsonl_bytes_per_token": len(plain) / tokens,
        "plain_jsonl_zstd3_bytes_per_token":
            len(zstandard.ZstdCompressor(level=3).compress(plain)) / tokens,
        "ratio_plain_over_quantcheck": len(plain) / run_bytes,
        "lossless": orjson.dumps(stored) == orjson.dumps(sent),
    }


if __name__ == "__main__":
    main()
