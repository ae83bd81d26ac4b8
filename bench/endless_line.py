"""A stream whose one line never ends: quantcheck's time and peak memory to refuse it,
against a baseline measured in the same run (a raw aiohttp client that only reads the
same bytes and keeps them).

Before the size cap and the linear event-stream reader, a 128 MB line without a newline
took 17 s and 617 MB (the pending bytes were copied on every network read). Each side
runs in its own process (peak RSS from os.wait4); the server runs in a third.

    .venv/bin/python bench/endless_line.py [--mb 128]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from _common import run_measured, save

SERVER = textwrap.dedent("""
    import socketserver, sys
    size = int(sys.argv[1]) << 20
    models = b'{"data": [{"id": "m", "owned_by": "vllm"}]}'
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            line = self.rfile.readline()
            while self.rfile.readline().strip():
                pass
            if line.startswith(b"GET /v1/models"):
                self.wfile.write(b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\n"
                                 b"Content-Length: %d\\r\\nConnection: close\\r\\n\\r\\n"
                                 % len(models) + models)
                return
            if line.startswith(b"GET"):
                self.wfile.write(b"HTTP/1.1 404 X\\r\\nContent-Length: 0\\r\\n"
                                 b"Connection: close\\r\\n\\r\\n")
                return
            self.rfile.read1(65536)
            self.wfile.write(b"HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\n"
                             b"Connection: close\\r\\n\\r\\ndata: ")
            block = b"x" * (1 << 20)
            for _ in range(size >> 20):
                self.wfile.write(block)
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[2])), Handler) as s:
        s.serve_forever()
""")

RAW_CLIENT = textwrap.dedent("""
    import asyncio, sys, aiohttp
    async def main():
        async with aiohttp.ClientSession() as session:
            async with session.post(sys.argv[1] + "/v1/chat/completions", json={}) as r:
                pieces = []
                async for piece in r.content.iter_any():
                    pieces.append(piece)
                print(sum(map(len, pieces)))
    asyncio.run(main())
""")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=128)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.mb), str(port)])
    time.sleep(1.0)
    try:
        with tempfile.TemporaryDirectory() as folder:
            prompts = Path(folder) / "p.yaml"
            prompts.write_text('prompts:\n  - {id: p, messages: [{role: user, content: "x"}]}\n')
            raw_wall, raw_rss, _ = run_measured([sys.executable, "-c", RAW_CLIENT, url])
            ours = [sys.executable, "-m", "quantcheck", "collect", "--endpoint", url,
                    "--prompts", str(prompts), "--out", str(Path(folder) / "run"),
                    "--no-preflight", "--retries", "0", "--top-logprobs", "0"]
            wall, rss = measure_failing(ours)
    finally:
        server.kill()
    figures = {"line_mb": args.mb, "quantcheck_s": round(wall, 2),
               "quantcheck_peak_rss_mib": round(rss), "raw_read_s": round(raw_wall, 2),
               "raw_read_peak_rss_mib": round(raw_rss),
               "time_ratio": round(wall / raw_wall, 2), "memory_ratio": round(rss / raw_rss, 2)}
    for key, value in figures.items():
        print(f"{key}: {value}")
    print(f"saved {save('endless_line', figures)}")


def measure_failing(command: list[str]) -> tuple[float, float]:
    """Like run_measured, for a command expected to exit 1 (one failed request)."""
    import os

    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    errors = process.stderr.read().decode()
    process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 1 or "failed:" not in errors:
        raise SystemExit(f"expected one refused answer, got:\n{errors}")
    return wall, usage.ru_maxrss / 1024


if __name__ == "__main__":
    main()
