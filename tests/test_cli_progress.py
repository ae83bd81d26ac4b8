"""cli/progress.py: what a long command says on stderr while it works: failures said
once then counted on every side of `run`, and a clock that ends at 100% once."""

from __future__ import annotations

from pathlib import Path

from quantcheck.lab.scripted import Faults, ScriptedModel

from .conftest import Serve, WritePrompts, invoke

MODEL = ScriptedModel(responses={})


def twelve_prompts(write_prompts: WritePrompts) -> Path:
    return write_prompts("prompts:\n" + "".join(
        f"  - {{id: p{n}, prompt: 'Q{n}'}}\n" for n in range(12)))


def test_run_counts_each_sides_failures_by_cause(serve: Serve, write_prompts: WritePrompts,
                                                 tmp_path: Path) -> None:
    reference = serve(MODEL)
    failing = serve(MODEL, faults=Faults(status={n: 500 for n in range(2, 40)},
                                         status_message="CUDA error: an illegal memory access"))
    ran = invoke("run", "--a", reference.url, "--b", failing.url, "--b-label", "fp8",
                 "--prompts", twelve_prompts(write_prompts), "--out", tmp_path / "ab",
                 "--retries", "0", "--concurrency", "1", "--no-preflight")
    assert ran.exit_code == 1
    assert sum("repeat 0 failed: HTTP 500" in line for line in ran.output.splitlines()) == 1
    assert "fp8: 10 requests failed: HTTP 500" in ran.output


def test_throughputs_clock_reaches_100_percent_once(serve: Serve,
                                                    write_prompts: WritePrompts) -> None:
    """Past its window, throughput waits for every prompt's first answer: no new line
    for each of them."""
    slow = serve(MODEL, faults=Faults(latency_s=0.15))
    result = invoke("throughput", slow.url, "--prompts", twelve_prompts(write_prompts),
                    "--seconds", "1", "--concurrency", "1")
    assert result.exit_code == 0, result.output
    assert result.output.count("(100%)") == 1
