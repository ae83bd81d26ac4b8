"""`quantcheck compare` (pipeline/comparing.py): two runs, or two texts files and their
prompts, into a report; what it prints; what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from quantcheck.store.pair_records import PAIR_COLUMNS

from .conftest import WritePrompts, invoke


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
