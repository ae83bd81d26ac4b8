"""gate/overview.py, several candidates against one reference: the reports, the overview
and its recommendation, the gate per candidate, the throughput rule."""

from __future__ import annotations

import json
from pathlib import Path

from junitparser import JUnitXml

from quantcheck.lab.scripted import Faults, ScriptedModel

from .conftest import CANDIDATE_PROMPTS, RUNNER_UPS, Serve, WritePrompts, invoke, run_candidates


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
    assert decision["not_picked"]["flips"] == "1 confident flip (capital)"
    assert decision["not_picked"]["slow"].startswith("passes too, but slower")
    assert decision["not_picked"]["verbose"].startswith(
        "throughput not comparable, token counts differ")

    assert "recommended: clean, the fastest candidate that passes the gate" in result.output
    assert "not flips: 1 confident flip (capital)" in result.output
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
    assert "| flips | fail | 1 confident flip (capital) |" in result.output
    assert "Recommended: **clean**" in result.output
    suite = next(iter(JUnitXml.fromfile(str(out / "junit.xml"))))
    cases = {case.name: case for case in suite}
    assert not cases["flips: factual_flips"].is_passed
    assert cases["clean: factual_flips"].is_passed
    assert len(cases) == 4 * len(json.loads((out / "candidates" / "clean" / "gate.json")
                                            .read_text())["rules"])
    assert invoke("gate", out, "--candidate", "clean").exit_code == 0
    assert "no candidate 'nvfp4'" in invoke("gate", out, "--candidate", "nvfp4").output

    overview = json.loads((out / "overview.json").read_text())
    rows = overview["candidates"]
    overview["candidates"] = [row for row in rows if row["label"] != "flips"]
    (out / "overview.json").write_text(json.dumps(overview))  # the failing one left out
    result = invoke("gate", out)
    assert result.exit_code == 2 and "'candidates/flips' not listed, so its verdict would " \
        "not be checked" in result.output
    overview["candidates"] = [*rows, rows[1]]
    (out / "overview.json").write_text(json.dumps(overview))
    assert "listed twice" in invoke("gate", out).output


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
