"""The whole A/B (pipeline/ab.py): `quantcheck run` and `quantcheck.run_ab` against
loopback servers with the planted differences, both sides together or one at a time,
resumed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from quantcheck.lab.scripted import ScriptedModel

from .conftest import A_ANSWERS, B_ANSWERS, PROMPTS, RUNNER_UPS, Serve, WritePrompts, invoke


@pytest.mark.parametrize("one_side", [False, True], ids=["together", "one-side-at-a-time"])
def test_run_collects_both_sides_and_compares(serve: Serve,
                                              write_prompts: WritePrompts,
                                              tmp_path: Path, one_side: bool) -> None:
    a_server = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    b_server = serve(ScriptedModel(B_ANSWERS, RUNNER_UPS), "llama.cpp")
    prompts = write_prompts(PROMPTS)
    out = tmp_path / "report"
    args = ["run", "--a", a_server.url, "--b", b_server.url, "--a-label", "bf16",
            "--b-label", "fp8", "--prompts", str(prompts), "--out", str(out)]
    if one_side:
        args.append("--one-side-at-a-time")
    result = invoke(*args)
    assert result.exit_code == 1, result.output  # the planted flip fails the default gate
    assert "bf16 (A) vs fp8 (B): 3 of 12 identical" in result.output
    assert "collecting: 24/24 (100%)" in result.output  # progress lines in a log
    # one side at a time: the bar grows when B starts, and B's tenths are still told
    during_b = re.findall(r"collecting: (1[3-9]|2[0-3])/24", result.output)
    assert len(during_b) >= (3 if one_side else 0)
    assert (out / "a" / "completions.jsonl").exists() and (out / "pairs.csv").exists()
    assert "bf16: preflight pass" in result.output and "fp8: preflight pass" in result.output
    sent = len(a_server.requests), len(b_server.requests)
    assert min(sent) > 12  # the prompts, and the preflight's probes

    again = invoke(*args)  # resumes: nothing left to collect
    assert again.exit_code == 1
    assert "resuming, 12 of 12" in again.output
    assert (len(a_server.requests), len(b_server.requests)) == sent  # not even probes


def test_the_library_runs_the_whole_ab(serve: Serve,
                                       write_prompts: WritePrompts,
                                       tmp_path: Path) -> None:
    import quantcheck

    a = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    b = serve(ScriptedModel(B_ANSWERS, RUNNER_UPS))
    prompts = write_prompts(PROMPTS)
    summary = quantcheck.run_ab(quantcheck.ABRun(
        a=quantcheck.CollectSettings(endpoint=a.url, label="a", preflight=False),
        b=quantcheck.CollectSettings(endpoint=b.url, label="b", preflight=False),
        prompt_files=[prompts], out=tmp_path / "ab"))
    assert isinstance(summary, quantcheck.Summary)
    assert summary.counts.flips.regression == 1 and summary.counts.prompts == 12
    assert quantcheck.read_summary(tmp_path / "ab") == summary  # what it wrote, read back
    assert quantcheck.load_run(tmp_path / "ab" / "b").manifest.label == "b"


def test_the_throughput_and_forced_lines_name_each_endpoint_without_its_credentials(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """An endpoint's user and password are never shown, and the line names the server
    as an address one reads (not the redacted http://***@host)."""
    a_server = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    b_server = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    plain = b_server.url
    with_password = plain.replace("http://", "http://alice:s3cret@")
    prompts = write_prompts('prompts:\n  - {id: same, prompt: "Q: same"}\n')
    result = invoke("run", "--a", a_server.url, "--b", with_password, "--prompts", prompts,
                    "--out", tmp_path / "report", "--throughput", "--throughput-seconds",
                    "0.2", "--forced", "--no-preflight", "--top-logprobs", "3")
    assert "s3cret" not in result.output and "***" not in result.output, result.output
    assert f"measuring throughput on {plain} (b) ..." in result.output, result.output
    assert f"scoring A's tokens on {plain} (teacher forcing) ..." in result.output
