"""The whole A/B (pipeline/ab.py): `quantcheck run` and `quantcheck.run_ab` against
loopback servers with the planted differences, both sides together or one at a time,
resumed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from quantcheck.lab.scripted import ScriptedModel

from .conftest import (
    A_ANSWERS,
    B_ANSWERS,
    PROMPTS,
    RUNNER_UPS,
    Serve,
    WritePrompts,
    invoke,
    read_csv,
)


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


CACHE_PROMPTS = """
prompts:
  - {id: capital, prompt: "Q: capital", expect: {contains: Canberra}}
  - {id: larger, prompt: "Q: larger"}
  - {id: colour, prompt: "Q: colour"}
"""
CACHE_ANSWERS = {"Q: capital": " Canberra.", "Q: larger": " 9.9 is larger.",
                 "Q: colour": " The sky is blue."}


def test_a_warm_prompt_cache_is_named_and_its_logprobs_not_counted_as_texts(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A on llama.cpp's prompt cache (asked on): each repeat finds its prompt cached and
    only its logprobs move, which usage's cached tokens explain; B's reduction order moves
    its logprobs too, which two repeats cannot tell from anything else."""
    from quantcheck.lab.scripted import Faults

    a = serve(ScriptedModel(CACHE_ANSWERS), "llama.cpp", faults=Faults(prompt_cache=True))
    b = serve(ScriptedModel(CACHE_ANSWERS), "sglang", faults=Faults(nondeterministic=True))
    out = tmp_path / "on"
    result = invoke("run", "--a", a.url, "--b", b.url, "--prompts", write_prompts(CACHE_PROMPTS),
                    "--repeats", "2", "--out", out, "--extra-body", '{"cache_prompt": true}')
    assert result.exit_code == 0, result.output
    assert "repeats' texts vary: A 0, B 0 (logprobs only: A 3, B 3), A: only each prompt's " \
           "first request differs: the prefix cache." in result.output
    assert "B: only each" not in result.output and "nondeterministic prompts" not in result.output
    assert "Repeats and the prefix cache: A: llama.cpp: cache_prompt true, as the requests " \
           "themselves ask; B: left on: SGLang cannot turn its prefix cache off per request" \
           in result.output
    summary = json.loads((out / "summary.json").read_text())
    counts = summary["counts"]
    assert counts["nondeterministic"] == {"a": 3, "b": 3}  # both kinds, as before
    assert counts["text_varies"] == {"a": 0, "b": 0}
    assert counts["logprobs_only"] == {"a": 3, "b": 3}
    assert counts["only_first_differs"] == {"a": 3, "b": 0}
    assert summary["determinism"]["a"]["first_request_pattern"] is True
    assert summary["determinism"]["b"]["first_request_pattern"] is False
    assert summary["determinism"]["a"]["cache_off"] is False
    pairs = read_csv(out / "pairs.csv")
    assert [row["a_only_first_differs"] for row in pairs] == ["True"] * 3
    assert [row["b_only_first_differs"] for row in pairs] == ["False"] * 3
    assert "first request differs: the prefix cache" in (out / "index.html").read_text()

    default = invoke("run", "--a", a.url, "--b", b.url, "--prompts",
                     write_prompts(CACHE_PROMPTS), "--repeats", "2", "--out", tmp_path / "off")
    assert default.exit_code == 0, default.output
    assert "repeats' texts vary: A 0, B 0 (logprobs only: A 0, B 3)" in default.output
    assert "A: llama.cpp: cache_prompt false in every request" in default.output
    off = json.loads((tmp_path / "off" / "summary.json").read_text())["determinism"]["a"]
    assert off["cache_off"] is True and off["first_request_pattern"] is False
