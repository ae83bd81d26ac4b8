"""compare and run end to end against loopback servers with planted differences."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pandas as pd
import pytest

from quantcheck.judge.pairs import compare
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.store.pair_records import PAIR_COLUMNS

from .conftest import A_ANSWERS, B_ANSWERS, PROMPTS, RUNNER_UPS, Serve, WritePrompts, invoke


def test_every_planted_difference_is_triaged(ab_runs: tuple[Path, Path]) -> None:
    frame = compare(*ab_runs).set_index("prompt_id")
    assert list(frame.reset_index().columns) == PAIR_COLUMNS

    def row(prompt_id: str) -> pd.Series:
        return frame.loc[prompt_id]

    assert row("same")["identical"] and row("same")["suggested_label"] == "identical"
    assert row("same")["divergence_kind"] == "none"
    assert pd.isna(row("same")["first_divergence"])

    wording = row("wording")
    assert not wording["identical"] and wording["similarity"] > 0.9
    assert wording["suggested_label"] == "wording" and wording["a_expect"] == "pass"
    assert wording["divergence_kind"] == "confident" and wording["first_divergence"] == 5

    near = row("near-tie")
    assert (near["first_divergence"], near["divergence_kind"]) == (0, "near_tie")
    assert (near["divergence_a_token"], near["divergence_b_token"]) == (" The", " Yes,")
    assert near["divergence_gap"] == pytest.approx(0.05)

    flipped = row("flip")
    assert (flipped["a_expect"], flipped["b_expect"], flipped["flip"]) == (
        "pass", "fail", "regression")
    assert flipped["suggested_label"] == "factual_flip"
    assert 'missing "Canberra"' in flipped["b_expect_failures"]

    assert row("better")["flip"] == "improvement"
    assert row("better")["numbers_changed"] and row("numbers")["numbers_changed"]
    assert row("numbers")["suggested_label"] != "wording"

    assert row("loop")["b_degenerate"] == "repetition" and not row("loop")["a_degenerate"]
    assert row("empty")["b_degenerate"] == "empty"
    assert row("capped")["b_degenerate"] == "length"
    assert row("capped")["b_finish_reason"] == "length"

    noisy = row("noisy")
    assert not noisy["identical"] and noisy["noise"]
    assert (noisy["a_texts"], noisy["b_texts"]) == (2, 1)
    assert not row("near-tie")["noise"]

    assert row("changed")["status"] == "not_comparable"
    assert pd.isna(row("changed")["identical"])
    assert row("only-a")["status"] == "only_a" and row("only-b")["status"] == "only_b"

    compared = frame[frame["status"] == "compared"].drop(["noisy", "empty"])
    assert (compared["a_signatures"] == 1).all()  # the reference is deterministic
    assert (compared["b_signatures"] == 2).all()  # B's reduction order changes per request
    assert frame.loc["noisy", "a_signatures"] == 2
    assert (compared.loc["same", "kl_topk_mean"]) < 1e-6


def test_compare_command_writes_report_files(ab_runs: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = invoke("compare", ab_runs[0], ab_runs[1], "--out", out)
    assert result.exit_code == 1, result.output  # the planted flip fails the default gate
    assert "a (A) vs b (B): 1 of 10 identical" in result.output
    assert "1 factual flip by expect (A pass, B fail)" in result.output
    assert "Only 10 of 13 prompts were compared: 1 prompt not comparable: B was collected " \
           'with prompt "Q: changed!", A with "Q: changed"; 1 prompt only in A, 1 prompt ' \
           "only in B." in result.output
    assert f"report: {out}" in result.output

    pairs = pd.read_csv(out / "pairs.csv")
    assert list(pairs.columns) == PAIR_COLUMNS and len(pairs) == 13
    summary = json.loads((out / "summary.json").read_text())
    counts = summary["counts"]
    assert counts["pairs"] == 10 and counts["identical"] == 1
    assert counts["flips"] == {"regression": 1, "improvement": 1}
    assert counts["degenerate"]["b"] == {"repetition": 1, "empty": 1, "length": 1}
    # one definition everywhere: loops and empty answers; capped answers beside it
    assert counts["degenerate_new_on_b"] == 2 and counts["length_capped_new_on_b"] == 1
    assert counts["nondeterministic"] == {"a": 1, "b": 11}  # all but the empty answer
    assert counts["status"] == {"compared": 10, "not_comparable": 1, "only_a": 1, "only_b": 1}
    assert summary["performance"]["throughput_comparable"] is False
    assert "token counts differ" in summary["performance"]["throughput_note"]
    assert summary["a"]["runtime"] == "vllm" and summary["b"]["runtime"] == "sglang"


def test_sig_digits_decide_what_counts_as_the_same_signature(ab_runs: tuple[Path, Path]) -> None:
    # The scripted logprobs have three decimals and B's jitter is 1e-7: at 5 significant
    # digits no value sits on a rounding boundary, so B's repeats agree.
    loose = compare(*ab_runs, sig_digits=5)
    compared = loose[loose["status"] == "compared"].set_index("prompt_id").drop(["noisy", "empty"])
    assert (compared["b_signatures"] == 1).all()


def test_texts_files_are_triaged_text_only(write_prompts: WritePrompts,
                                           tmp_path: Path) -> None:
    (tmp_path / "bf16.texts.json").write_text(json.dumps(["Canberra.", "It is 9.9", "same"]))
    (tmp_path / "fp8.texts.json").write_text(json.dumps(["Sydney.", "It is 9.11", "same"]))
    prompts = write_prompts("""
        prompts:
          - {id: capital, prompt: x, expect: {contains: Canberra}}
          - {id: larger, prompt: y, expect: {number: 9.9}}
          - {id: echo, prompt: z}
    """)
    out = tmp_path / "report"
    result = invoke("compare", tmp_path / "bf16.texts.json", tmp_path / "fp8.texts.json",
                    "--prompts", prompts, "--out", out)
    assert result.exit_code == 1, result.output  # two flips: the default gate fails
    assert "bf16 (A) vs fp8 (B): 1 of 3 identical" in result.output
    pairs = pd.read_csv(out / "pairs.csv").set_index("prompt_id")
    assert list(pairs["flip"].fillna("")) == ["regression", "regression", ""]
    assert pairs.loc["larger", "numbers_changed"]
    assert pairs["divergence_kind"].isna().all()


def test_texts_file_with_wrong_length_is_a_clear_error(write_prompts: WritePrompts,
                                                       tmp_path: Path) -> None:
    (tmp_path / "a.texts.json").write_text(json.dumps(["x"]))
    (tmp_path / "b.texts.json").write_text(json.dumps(["x"]))
    prompts = write_prompts("prompts:\n  - {id: a, prompt: x}\n  - {id: b, prompt: y}\n")
    result = invoke("compare", tmp_path / "a.texts.json", tmp_path / "b.texts.json", "--prompts",
                    prompts, "--out", tmp_path / "r")
    assert result.exit_code == 2
    assert "1 texts for 2 prompts" in result.output


def test_compare_refuses_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = invoke("compare", tmp_path / "empty", tmp_path / "empty", "--out", tmp_path / "r")
    assert result.exit_code == 2
    assert "manifest.json: missing" in result.output


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


def test_the_summary_gathered_chunk_by_chunk_is_the_summary_of_all_pairs(
        ab_runs: tuple[Path, Path]) -> None:
    """compare forgets each chunk of pairs once written (summary.PairTotals keeps counts,
    the ids not compared and the drift values): totals gathered a few pairs at a time
    give the summary of the whole frame, every status, flip and percentile included."""
    from quantcheck.judge.sides import load_side
    from quantcheck.judge.summary import PairTotals

    whole = compare(*ab_runs)
    with load_side(ab_runs[0]) as a, load_side(ab_runs[1]) as b:
        at_once = msgspec.json.encode(PairTotals().add(whole).summary(a, b))
        for size in (1, 3, 5):
            totals = PairTotals()
            for start in range(0, len(whole), size):
                totals.add(whole.iloc[start:start + size])
            assert msgspec.json.encode(totals.summary(a, b)) == at_once
    summary = msgspec.json.decode(at_once)
    assert summary["counts"]["flips"]["regression"] and summary["counts"]["nondeterministic"]["b"]
    assert {"not_comparable", "only_a", "only_b"} <= set(summary["counts"]["status"])
    assert summary["drift"]["kl_topk_mean"] and summary["stats"]["drift"]
    assert summary["comparison"]["notes"]
