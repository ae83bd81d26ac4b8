"""Several candidates against one reference: the reports, the overview and its
recommendation, the gate per candidate, the throughput rule and the serving matrix."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from junitparser import JUnitXml

from quantcheck.lab.launch import free_port
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.present.matrix import COLUMNS
from quantcheck.store.labels import is_label

from .conftest import (
    CANDIDATE_PROMPTS,
    RUNNER_UPS,
    Serve,
    WritePrompts,
    invoke,
    read_csv,
    run_candidates,
)


def test_the_overview_recommends_the_fastest_candidate_that_passes(
        candidate_endpoints: dict[str, str], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    out = tmp_path / "quants"
    result = run_candidates(candidate_endpoints, write_prompts(CANDIDATE_PROMPTS), out)
    assert result.exit_code == 1, result.output  # "flips" fails the gate, as `gate` says
    for label in ("flips", "clean", "slow", "verbose"):
        report = out / "candidates" / label
        assert (report / "index.html").exists() and (report / "b" / "manifest.json").exists()
        assert json.loads((report / "summary.json").read_text())["b"]["label"] == label
    assert not (out / "b").exists() and (out / "a" / "throughput.json").exists()

    overview = json.loads((out / "overview.json").read_text())
    rows = {row["label"]: row for row in overview["candidates"]}
    assert [row["label"] for row in overview["candidates"]] == ["flips", "clean", "slow",
                                                                 "verbose"]
    assert rows["flips"]["gate"] == "fail" and rows["flips"]["factual_flips"] == 1
    assert all(rows[label]["gate"] == "pass" for label in ("clean", "slow", "verbose"))
    assert rows["clean"]["throughput"]["comparable"]
    assert not rows["verbose"]["throughput"]["comparable"]
    decision = overview["recommendation"]
    assert decision["label"] == "clean"
    assert decision["reason"].startswith("the fastest candidate that passes the gate")
    assert decision["not_picked"]["flips"] == "1 factual flip (capital)"
    assert decision["not_picked"]["slow"].startswith("passes too, but slower")
    assert decision["not_picked"]["verbose"].startswith(
        "throughput not comparable, token counts differ")

    assert "recommended: clean, the fastest candidate that passes the gate" in result.output
    assert "not flips: 1 factual flip (capital)" in result.output
    page = (out / "index.html").read_text()
    assert 'href="candidates/clean/index.html"' in page and "Recommended: <b>clean</b>" in page


def test_the_throughput_rule_compares_only_matching_token_counts(
        candidate_endpoints: dict[str, str], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    prompts = write_prompts(CANDIDATE_PROMPTS)
    out = tmp_path / "ab"
    result = invoke("run", "--a", candidate_endpoints["bf16"], "--b", candidate_endpoints["slow"],
                    "--prompts", prompts, "--out", out, "--no-preflight", "--throughput",
                    "--throughput-seconds", "1", "--throughput-concurrency", "2")
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())["throughput"]
    assert summary["comparable"] and summary["ratio_b_over_a"] < 1
    assert summary["a"]["prompt_tokens"] == summary["b"]["prompt_tokens"]
    assert summary["note"].startswith("generated token counts match")

    verbose = tmp_path / "verbose"
    invoke("run", "--a", candidate_endpoints["bf16"], "--b", candidate_endpoints["verbose"],
           "--prompts", prompts, "--out", verbose, "--no-preflight", "--throughput",
           "--throughput-seconds", "1")
    note = json.loads((verbose / "summary.json").read_text())["throughput"]["note"]
    assert note.startswith("throughput not comparable, token counts differ")
    assert "per generated token only" in note


def test_the_gate_on_an_overview_gates_every_candidate(
        candidate_endpoints: dict[str, str], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    out = tmp_path / "quants"
    run_candidates(candidate_endpoints, write_prompts(CANDIDATE_PROMPTS), out)
    result = invoke("gate", out)
    assert result.exit_code == 1
    assert "| flips | fail | 1 factual flip (capital) |" in result.output
    assert "Recommended: **clean**" in result.output
    suite = next(iter(JUnitXml.fromfile(str(out / "junit.xml"))))
    cases = {case.name: case for case in suite}
    assert not cases["flips: factual_flips"].is_passed
    assert cases["clean: factual_flips"].is_passed
    assert len(cases) == 4 * len(json.loads((out / "candidates" / "clean" / "gate.json")
                                            .read_text())["rules"])
    assert invoke("gate", out, "--candidate", "clean").exit_code == 0
    assert "no candidate 'nvfp4'" in invoke("gate", out, "--candidate", "nvfp4").output


def test_runs_collected_one_at_a_time_compare_into_an_overview(
        candidate_endpoints: dict[str, str], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    prompts = write_prompts(CANDIDATE_PROMPTS)
    runs = tmp_path / "runs"
    for label in ("bf16", "flips", "clean"):
        collected = invoke("collect", "--endpoint", candidate_endpoints[label], "--label",
                           label, "--prompts", prompts, "--out", runs / label,
                           "--no-preflight")
        assert collected.exit_code == 0, collected.output
    throughput = invoke("throughput", candidate_endpoints["clean"], "--prompts", prompts,
                        "--out", runs / "clean", "--seconds", "1", "--concurrency", "2")
    assert throughput.exit_code == 0 and "output tokens/s" in throughput.output
    result = invoke("compare", runs / "bf16", runs / "flips", runs / "clean", "--out",
                    tmp_path / "report")
    assert result.exit_code == 1, result.output  # "flips" fails the gate
    overview = json.loads((tmp_path / "report" / "overview.json").read_text())
    assert [row["label"] for row in overview["candidates"]] == ["flips", "clean"]
    assert overview["recommendation"]["label"] == "clean"
    assert "throughput not measured" in overview["recommendation"]["reason"]
    none_pass = invoke("compare", runs / "bf16", runs / "flips", runs / "flips", "--out",
                       tmp_path / "none")
    assert none_pass.exit_code == 1
    assert "no candidate is recommended: no candidate passes the gate" in none_pass.output
    assert (tmp_path / "none" / "candidates" / "flips-2").is_dir()  # labels made distinct


def test_the_matrix_has_the_seeds_columns_and_appends_without_duplicates(
        candidate_endpoints: dict[str, str], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    mine = tmp_path / "matrix.csv"
    earlier = dict.fromkeys(COLUMNS, "")
    earlier.update(model_id="other-model", runtime="vllm", tested_at="2026-01-01",
                   note="an earlier test")
    with mine.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerow(earlier)
    prompts = write_prompts(CANDIDATE_PROMPTS)
    for attempt in range(2):  # the same cells on the same day: replaced, not added
        result = run_candidates(candidate_endpoints, prompts, tmp_path / f"quants-{attempt}",
                                "--matrix", mine)
        assert result.exit_code == 1, result.output  # written; "flips" fails the gate
    report_rows = read_csv(tmp_path / "quants-0" / "matrix.csv")
    assert list(report_rows[0]) == COLUMNS and len(report_rows) == 5
    assert report_rows[0]["correctness_status"] == "reference"
    by_note = {row["note"].split(";")[0]: row for row in report_rows[1:]}
    assert by_note["flips"]["correctness_status"] == "fail"
    assert by_note["clean"]["correctness_status"] == "pass"
    assert float(by_note["clean"]["agg_tokens_per_second"]) > 0
    assert by_note["clean"]["runtime"] == "vllm" and by_note["clean"]["concurrency"] == "2"
    kept = read_csv(mine)
    assert kept[0] == earlier and len(kept) == 1 + 5


def test_a_matrix_with_other_columns_is_refused(candidate_endpoints: dict[str, str],
                                                write_prompts: WritePrompts,
                                                tmp_path: Path) -> None:
    mine = tmp_path / "matrix.csv"
    mine.write_text("model,speed\nx,1\n")
    result = run_candidates(candidate_endpoints, write_prompts(CANDIDATE_PROMPTS),
                            tmp_path / "q", "--matrix", mine)
    assert result.exit_code == 2 and "not a serving matrix" in result.output
    assert mine.read_text() == "model,speed\nx,1\n"


def test_a_failed_throughput_phase_costs_only_its_figures(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """B answers collection, then every throughput request fails: the report is still
    written, and says why there is no throughput."""
    prompts = write_prompts(CANDIDATE_PROMPTS)
    a = serve(ScriptedModel({}, RUNNER_UPS))
    collected = 3  # B's collection: the prompts once, no preflight
    b = serve(ScriptedModel({}, RUNNER_UPS), faults=Faults(
        status={n: 503 for n in range(collected, collected + 50)}, retry_after_s=0.0))
    out = tmp_path / "ab"
    result = invoke("run", "--a", a.url, "--b", b.url, "--prompts", prompts, "--out", out,
                    "--no-preflight", "--throughput", "--throughput-seconds", "1",
                    "--throughput-concurrency", "1", "--retries", "1")
    assert result.exit_code == 0, result.output
    assert "throughput not measured on b: throughput request failed after 2 attempts" in \
        result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["pairs"] == collected
    throughput = summary["throughput"]
    assert throughput["a"]["tokens_per_s"] > 0 and throughput["b"]["error"]
    assert throughput["note"].startswith("throughput not measured on B (")
    assert (out / "index.html").exists()


BAD_LABELS = {"final-newline": "fp8\n", "5000-characters": "x" * 5000, "a-path": "../fp8",
              "a-space": "fp 8", "empty": "", "dot-first": ".fp8", "non-ascii": "fp8é",
              "65-characters": "x" * 65}


@pytest.mark.parametrize("label", list(BAD_LABELS.values()), ids=list(BAD_LABELS))
def test_a_label_that_breaks_the_rule_is_refused_before_anything_is_sent(
        write_prompts: WritePrompts, tmp_path: Path, label: str) -> None:
    # nothing listens there: a command that sent anything would fail another way
    nobody = f"http://127.0.0.1:{free_port()}/v1"
    prompts = write_prompts(CANDIDATE_PROMPTS)
    commands = {
        "collect": ["collect", "--endpoint", nobody, "--label", label, "--out",
                    tmp_path / "run"],
        "run --a-label": ["run", "--a", nobody, "--a-label", label, "--b", nobody, "--out",
                          tmp_path / "one"],
        "run --b-label": ["run", "--a", nobody, "--b", nobody, "--b-label", label, "--out",
                          tmp_path / "one"],
        "run, a candidate's --b-label": ["run", "--a", nobody, "--b", nobody, "--b-label",
                                         "fp8", "--b", nobody, "--b-label", label, "--out",
                                         tmp_path / "several"],
    }
    for name, args in commands.items():
        result = invoke(*args, "--prompts", prompts, "--no-preflight")
        assert result.exit_code == 2, (name, result.output)
        assert "breaks the rule for labels" in result.output, (name, result.output)
        assert "unreachable" not in result.output and "Traceback" not in result.output
    assert not (tmp_path / "several" / "candidates").exists()


def test_compare_refuses_a_candidate_whose_manifest_label_breaks_the_rule(
        candidate_endpoints: dict[str, str], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    prompts, runs = write_prompts(CANDIDATE_PROMPTS), tmp_path / "runs"
    for label in ("bf16", "flips", "clean"):
        collected = invoke("collect", "--endpoint", candidate_endpoints[label], "--prompts",
                           prompts, "--out", runs / label, "--no-preflight")
        assert collected.exit_code == 0, collected.output
    for bad in (BAD_LABELS["5000-characters"], BAD_LABELS["final-newline"]):
        manifest = runs / "clean" / "manifest.json"
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "label": bad}))
        result = invoke("compare", runs / "bf16", runs / "flips", runs / "clean", "--out",
                        tmp_path / "report")
        assert result.exit_code == 2, result.output
        assert f"{manifest}: label" in result.output and "breaks the rule" in result.output
        assert not (tmp_path / "report").exists()


def test_a_default_label_is_made_from_the_folder_name(
        candidate_endpoints: dict[str, str], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    out = tmp_path / ("fp8 run, take 2" + "x" * 80)
    result = invoke("collect", "--endpoint", candidate_endpoints["clean"], "--prompts",
                    write_prompts(CANDIDATE_PROMPTS), "--out", out, "--no-preflight")
    assert result.exit_code == 0, result.output
    label = json.loads((out / "manifest.json").read_text())["label"]
    assert label == ("fp8_run__take_2" + "x" * 80)[:64]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(max_size=80))
def test_a_label_the_rule_keeps_names_exactly_one_folder(label: str) -> None:
    if not is_label(label):
        return
    assert len(label) <= 64 and label == label.strip() and label[0].isalnum()
    assert Path("candidates", label).name == label and not label.startswith((".", "-"))
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in label)
