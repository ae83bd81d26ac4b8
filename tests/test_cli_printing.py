"""What `run`, `compare` and `demo` print: the gate's verdict whenever the exit code is
the gate's, and speed figures that say what they compare."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.cli.printing import candidates_markdown

from .conftest import (
    CANDIDATE_PROMPTS,
    MARKDOWN_ATTACKS,
    WritePrompts,
    copy_run,
    invoke,
    no_tag_more,
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


HOSTILE = st.lists(st.text(max_size=10) | st.sampled_from(MARKDOWN_ATTACKS), min_size=1,
                   max_size=4).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(HOSTILE, min_size=6, max_size=6))
def test_no_string_of_an_overview_changes_the_shape_of_its_step_summary(
        texts: list[str]) -> None:
    """The reference's and candidates' labels, the reasons and the recommendation, as an
    overview.json (or a review file's prompt ids) may hold them: no tag more than plain
    words give."""
    from quantcheck.gate.explain import Failure
    from quantcheck.gate.overview import CandidatesGate
    from quantcheck.gate.verdict import GateResult, Rule
    from quantcheck.store.records.report_records import Overview, Recommendation, SideIdentity

    def summary_of(strings: list[str]) -> str:
        reference, first, second, why, prompt_id, answer = strings
        labels = [first + "1", second + "2"]
        failing = GateResult(verdict="fail", rules=[Rule("factual_flips", why, 1, 0, False,
                                                         [prompt_id])])
        decision = CandidatesGate(
            verdict="fail", candidates={labels[0]: failing,
                                        labels[1]: GateResult(verdict="pass", rules=[])},
            recommendation=Recommendation(label=labels[1], reason=why))
        overview = Overview(quantcheck_version="1", reference=SideIdentity(label=reference),
                            candidates=[], recommendation=decision.recommendation)
        found = {labels[0]: [Failure(prompt_id, "factual_flips", 0, why, answer, answer,
                                     f"candidates/{labels[0]}/index.html")]}
        return candidates_markdown(decision, overview, found)

    assert no_tag_more(summary_of(texts), summary_of(["words"] * 6))
