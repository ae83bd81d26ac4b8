"""A stored reference: `run --a-run DIR` reuses a reference run collected earlier, sends
nothing to A, and gives the report a full run gives; a candidate not asked what the
reference was is refused before any request, every difference named."""

from __future__ import annotations

import json
from pathlib import Path

from quantcheck.lab.scripted import Faults, ScriptedModel

from .conftest import A_ANSWERS, B_ANSWERS, RUNNER_UPS, Serve, WritePrompts, invoke

PROMPTS = """
prompts:
  - {id: same, category: factual, prompt: "Q: same", expect: {contains: Paris}}
  - {id: wording, category: factual, prompt: "Q: wording", expect: {contains: Ottawa}}
  - {id: flip, category: factual, prompt: "Q: flip", expect: {contains: Canberra}}
  - {id: numbers, category: numeric, prompt: "Q: numbers"}
  - {id: loop, category: factual, prompt: "Q: loop", max_tokens: 64}
"""
# Settings of the reference and of every candidate (a run's own, not the defaults).
ASKED = ["--repeats", "2", "--top-logprobs", "3", "--concurrency", "2"]


def reports_alike(one: Path, other: Path) -> None:
    """The same pairs, details and summary, but for where the runs were, how fast the
    servers answered and the candidate's address (a new server of the same B)."""
    for name in ("pairs.csv", "details.jsonl"):
        assert (one / name).read_bytes() == (other / name).read_bytes(), name
    summaries = [json.loads((folder / "summary.json").read_text()) for folder in (one, other)]
    for summary in summaries:
        for varying in ("sources", "performance", "approvals_file"):
            summary.pop(varying)
        for side in "ab":
            summary["preflight"][side].pop("seconds")
        summary["b"].pop("endpoint")
        summary["preflight"]["b"].pop("endpoint")
    assert summaries[0] == summaries[1]


def test_a_stored_reference_sends_nothing_to_a_and_gives_the_full_runs_report(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    a = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    prompts = write_prompts(PROMPTS)
    full = tmp_path / "full"
    first = invoke("run", "--a", a.url, "--a-label", "bf16", "--b",
                   serve(ScriptedModel(B_ANSWERS, RUNNER_UPS)).url, "--b-label", "fp8",
                   "--prompts", prompts, "--out", full, *ASKED)
    assert first.exit_code == 1, first.output  # the planted flip
    sent_to_a = a.hits
    assert sent_to_a > 5  # models, the preflight's probes, 5 prompts x 2 repeats

    candidate = serve(ScriptedModel(B_ANSWERS, RUNNER_UPS))  # a new server of the same B
    reused = tmp_path / "reused"
    again = invoke("run", "--a-run", full / "a", "--b", candidate.url, "--b-label", "fp8",
                   "--prompts", prompts, "--out", reused, *ASKED)
    assert again.exit_code == 1, again.output
    assert a.hits == sent_to_a  # not one request to A
    assert candidate.hits > 5 and not (reused / "a").exists()
    reports_alike(full, reused)
    assert json.loads((reused / "summary.json").read_text())["sources"]["a"] == str(full / "a")
    assert invoke("gate", reused).exit_code == 1


def test_several_candidates_against_a_stored_reference(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    a = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    prompts = write_prompts(PROMPTS)
    stored = tmp_path / "main" / "bf16"
    collected = invoke("collect", "--endpoint", a.url, "--label", "bf16", "--prompts", prompts,
                       "--out", stored, *ASKED)
    assert collected.exit_code == 0, collected.output
    sent_to_a = a.hits
    out = tmp_path / "quants"
    result = invoke("run", "--a-run", stored, "--b", serve(ScriptedModel(A_ANSWERS,
                                                                         RUNNER_UPS)).url,
                    "--b-label", "clean", "--b", serve(ScriptedModel(B_ANSWERS)).url,
                    "--b-label", "flips", "--prompts", prompts, "--out", out, *ASKED)
    assert result.exit_code == 1, result.output  # "flips" fails the default gate
    assert a.hits == sent_to_a
    overview = json.loads((out / "overview.json").read_text())
    assert overview["reference"]["label"] == "bf16"
    assert overview["recommendation"]["label"] == "clean"
    assert not (out / "a").exists()


def test_a_candidate_not_asked_as_the_reference_is_refused_before_any_request(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    a = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    stored = tmp_path / "bf16"
    assert invoke("collect", "--endpoint", a.url, "--prompts", write_prompts(PROMPTS),
                  "--out", stored, *ASKED).exit_code == 0
    other = write_prompts(PROMPTS.replace('"Q: numbers"', '"Q: numbers, please"')
                          .replace("  - {id: loop", "  - {id: new, prompt: 'Q: new'}\n"
                                                    "  - {id: loop")
                          .replace("  - {id: same, category: factual, prompt: \"Q: same\", "
                                   "expect: {contains: Paris}}\n", ""))
    b = serve(ScriptedModel(B_ANSWERS, RUNNER_UPS))
    sent_to_a = a.hits
    result = invoke("run", "--a-run", stored, "--b", b.url, "--prompts", other, "--out",
                    tmp_path / "report", "--repeats", "1", "--top-logprobs", "5",
                    "--max-tokens", "32", "--no-stream", "--concurrency", "2")
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert line.count("\n") == 0 and "nothing was sent" in line
    for difference in ("repeats: the reference 2, B 1", "top_logprobs: the reference 3, B 5",
                       "stream: the reference True, B False",
                       "max_tokens: the reference None, B 32",
                       "1 prompt not in the reference: 'new'",
                       "1 prompt only in the reference: 'same'",
                       "4 prompts asked otherwise than in the reference (another prompt hash): "
                       "'wording', 'flip', 'numbers' and 1 more"):
        assert difference in line, difference
    assert b.hits == 0 and a.hits == sent_to_a  # refused before any request
    assert not (tmp_path / "report").exists()


def test_an_incomplete_reference_is_refused(serve: Serve, write_prompts: WritePrompts,
                                            tmp_path: Path) -> None:
    failing = serve(ScriptedModel(A_ANSWERS), faults=Faults(status={0: 500}))
    prompts = write_prompts(PROMPTS)
    stored = tmp_path / "bf16"
    collected = invoke("collect", "--endpoint", failing.url, "--prompts", prompts, "--out",
                       stored, "--retries", "0", "--no-preflight")
    assert collected.exit_code == 1
    b = serve(ScriptedModel(B_ANSWERS))
    result = invoke("run", "--a-run", stored, "--b", b.url, "--prompts", prompts, "--out",
                    tmp_path / "report", "--no-preflight")
    assert result.exit_code == 2
    assert f"the stored reference {stored} is incomplete, 1 requests failed" in result.output
    assert b.hits == 0


def test_the_reference_is_an_endpoint_or_a_stored_run(tmp_path: Path) -> None:
    neither = invoke("run", "--b", "http://127.0.0.1:9/v1", "--prompts", "x", "--out", tmp_path)
    assert neither.exit_code == 2
    (tmp_path / "ref").mkdir()
    both = invoke("run", "--a", "http://127.0.0.1:9/v1", "--a-run", tmp_path / "ref", "--b",
                  "http://127.0.0.1:9/v1", "--suite", "facts", "--out", tmp_path / "r")
    assert both.exit_code == 2 and "one of them" in both.output
    labelled = invoke("run", "--a-run", tmp_path / "ref", "--a-label", "bf16", "--b",
                      "http://127.0.0.1:9/v1", "--suite", "facts", "--out", tmp_path / "r")
    assert labelled.exit_code == 2 and "a stored reference keeps its own" in labelled.output
