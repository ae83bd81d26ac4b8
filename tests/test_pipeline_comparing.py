"""`quantcheck compare` (pipeline/comparing.py): two runs, or two texts files and their
prompts, into a report; what it prints; what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from quantcheck.store.records.pair_records import PAIR_COLUMNS

from .conftest import (
    WritePrompts,
    assert_one_clear_line,
    copy_run,
    invoke,
    read_csv,
    report_files,
    report_identity,
)


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


# --- what is written, and when: each report whole, bad input refused first ------------

def test_each_candidate_is_written_whole_before_the_next_is_begun(
        ab_runs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = ab_runs
    out = tmp_path / "report"
    first = invoke("compare", a, b, copy_run(b, tmp_path / "two", "two"), "--out", out)
    assert first.exit_code == 1, first.output
    kept = {folder: report_files(out / folder) for folder in (".", "candidates/two")}
    # again: candidate b is now A against a copy of itself; candidate two cannot be read
    broken = copy_run(b, tmp_path / "broken", "two")
    with (broken / "completions.jsonl").open("a") as completions:
        completions.write("not a record\n")
    again = invoke("compare", a, copy_run(a, tmp_path / "same", "b"), broken, "--out", out)
    assert again.exit_code == 2, again.output
    assert_one_clear_line(again.output, "completions.jsonl")
    written = out / "candidates" / "b"
    fresh = tmp_path / "fresh"
    assert invoke("compare", a, tmp_path / "same", "--out", fresh).exit_code == 0
    assert read_csv(written / "pairs.csv") == read_csv(fresh / "pairs.csv")
    assert report_identity(written) == report_identity(fresh)  # its summary, and its sheet
    assert report_identity(fresh) in (written / "index.html").read_text()
    assert {folder: report_files(out / folder) for folder in kept} == kept
    assert f"Written whole: {written}. Everything else is as it was" in again.output


@pytest.mark.parametrize(("option", "text", "cause"), [
    ("--signatures", "signatures: none\n", "field 'signatures': required, a list"),
    ("--rubric", "question: Same?\nlabels: []\n", "field 'labels': required"),
])
def test_bad_input_is_refused_before_the_report_is_touched(
        planted_report: Path, ab_runs: tuple[Path, Path], tmp_path: Path, option: str,
        text: str, cause: str) -> None:
    before = report_files(planted_report)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    result = invoke("compare", ab_runs[1], ab_runs[0], "--out", planted_report, option, bad)
    assert result.exit_code == 2, result.output
    assert_one_clear_line(result.output, cause)
    assert "Written" not in result.output
    assert report_files(planted_report) == before


def test_a_texts_reference_against_several_runs_is_named_by_the_prompts(
        ab_runs: tuple[Path, Path], write_prompts: WritePrompts, tmp_path: Path) -> None:
    b = ab_runs[1]
    texts = tmp_path / "bf16.texts.json"
    texts.write_text(json.dumps([" The capital of France is Paris.",
                                 " The capital of Australia is Canberra."]))
    prompts = write_prompts("""
        prompts:
          - {id: same, prompt: "Q: same", expect: {contains: Paris}}
          - {id: flip, prompt: "Q: flip", expect: {contains: Canberra}}
    """)
    out = tmp_path / "report"
    result = invoke("compare", texts, b, copy_run(b, tmp_path / "two", "two"), "--prompts",
                    prompts, "--out", out)
    assert result.exit_code == 1, result.output  # the flip fails the gate of both
    for label in ("b", "two"):
        pairs = {row["prompt_id"]: row for row in read_csv(out / "candidates" / label /
                                                           "pairs.csv")}
        assert pairs["same"]["status"] == pairs["flip"]["status"] == "compared"
        assert pairs["flip"]["flip"] == "regression"
