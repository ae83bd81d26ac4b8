"""What `run`, `compare` and `demo` print: the gate's verdict whenever the exit code is
the gate's, and speed figures that say what they compare."""

from __future__ import annotations

from pathlib import Path

from .conftest import (
    CANDIDATE_PROMPTS,
    WritePrompts,
    copy_run,
    invoke,
)

GATE_LINE = "gate (default policy): "


def gate_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith(GATE_LINE)]
    assert len(lines) == 1, output
    return lines[0].removeprefix(GATE_LINE)


def test_run_says_why_it_exits_1(candidate_endpoints: dict[str, str],
                                 write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts(CANDIDATE_PROMPTS)
    failed = invoke("run", "--a", candidate_endpoints["bf16"], "--b",
                    candidate_endpoints["flips"], "--prompts", prompts, "--no-preflight",
                    "--out", tmp_path / "flips")
    assert failed.exit_code == 1, failed.output
    assert gate_line(failed.output) == ("FAIL: 1 confident flip (capital); reference: 1 "
                                         "answer a prompt, its own instability not measured "
                                         "(collect it with --repeats 2 or more)")
    passed = invoke("run", "--a", candidate_endpoints["bf16"], "--b",
                    candidate_endpoints["clean"], "--prompts", prompts, "--no-preflight",
                    "--out", tmp_path / "clean")
    assert passed.exit_code == 0, passed.output
    assert gate_line(passed.output).startswith("PASS: no rule broken; reference: 1 answer")


def test_compare_says_why_it_exits_1_for_one_candidate_or_several(
        ab_runs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = ab_runs
    one = invoke("compare", a, b, "--out", tmp_path / "one")
    assert one.exit_code == 1, one.output
    assert gate_line(one.output).startswith("FAIL: 1 confident flip (flip), ")
    other = copy_run(a, tmp_path / "runs" / "same", "same")
    several = invoke("compare", a, b, other, "--out", tmp_path / "several")
    assert several.exit_code == 1, several.output
    said = gate_line(several.output)
    assert said.startswith("FAIL: b: 1 confident flip (flip), ") and "same" not in said


def test_run_with_several_candidates_names_each_failing_one(
        candidate_endpoints: dict[str, str], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    result = invoke("run", "--a", candidate_endpoints["bf16"],
                    "--b", candidate_endpoints["flips"], "--b-label", "flips",
                    "--b", candidate_endpoints["clean"], "--b-label", "clean",
                    "--prompts", write_prompts(CANDIDATE_PROMPTS), "--no-preflight",
                    "--out", tmp_path / "quants")
    assert result.exit_code == 1, result.output
    assert gate_line(result.output) == "FAIL: flips: 1 confident flip (capital)"


def test_the_speed_line_says_what_it_compares_and_where_the_throughput_phase_is(
        candidate_endpoints: dict[str, str], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    prompts = write_prompts(CANDIDATE_PROMPTS)
    args = ["run", "--a", candidate_endpoints["bf16"], "--b", candidate_endpoints["slow"],
            "--prompts", prompts, "--no-preflight"]
    plain = invoke(*args, "--out", tmp_path / "plain")
    assert plain.exit_code == 0, plain.output
    speed = [line for line in plain.output.splitlines() if "B/A" in line]
    assert len(speed) == 1, plain.output
    assert speed[0].startswith("output tokens per second while collecting (logprobs on), "
                               "B/A = ") and "both generated" in speed[0]
    assert "throughput phase" not in plain.output
    measured = invoke(*args, "--throughput", "--throughput-seconds", 1,
                      "--out", tmp_path / "measured")
    assert measured.exit_code == 0, measured.output
    phase = [line for line in measured.output.splitlines()
             if line.startswith("throughput phase (without logprobs, one endpoint at a time): ")]
    assert len(phase) == 1 and "B/A = " in phase[0], measured.output
