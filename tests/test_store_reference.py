"""A stored reference: `run --a-run DIR` reuses a reference run collected earlier, sends
nothing to A, and gives the report a full run gives; a candidate not asked what the
reference was is refused before any request, every difference named."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from quantcheck.lab.scripted import Faults, ScriptedModel, ScriptedServer
from quantcheck.store.folders.reference import open_reference
from quantcheck.store.folders.run_dir import COMPLETIONS
from quantcheck.store.folders.token_columns import TOKENS_FILE

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


# --- a damaged reference: refused, what is wrong named, before any request to B --------

def _lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / COMPLETIONS).read_text().splitlines()]


def _write_lines(run: Path, lines: list[dict[str, Any]]) -> None:
    (run / COMPLETIONS).write_text("".join(json.dumps(line) + "\n" for line in lines))


def _drop_a_record(run: Path) -> None:
    _write_lines(run, _lines(run)[1:])


def _fail_a_record(run: Path) -> None:
    lines = _lines(run)
    lines[2] = {**lines[2], "text": None, "tokens": None, "error": "HTTP 500 (after 5 attempts)"}
    _write_lines(run, lines)


def _tear_the_last_line(run: Path) -> None:
    data = (run / COMPLETIONS).read_bytes()
    (run / COMPLETIONS).write_bytes(data[:-20])


def _empty_completions(run: Path) -> None:
    (run / COMPLETIONS).write_bytes(b"")


def _no_completions(run: Path) -> None:
    (run / COMPLETIONS).unlink()


def _another_prompts_record(run: Path) -> None:
    lines = _lines(run)
    _write_lines(run, [*lines, {**lines[0], "prompt_id": "elsewhere"}])


def _truncate_tokens(run: Path) -> None:
    data = (run / TOKENS_FILE).read_bytes()
    (run / TOKENS_FILE).write_bytes(data[:len(data) // 2])


def _no_tokens(run: Path) -> None:
    (run / TOKENS_FILE).unlink()


def _token_reference_outside(run: Path) -> None:
    lines = _lines(run)
    lines[1]["tokens"] = {**lines[1]["tokens"], "file": "../elsewhere.bin"}
    _write_lines(run, lines)


def _completions_from_dev_zero(run: Path) -> None:
    (run / COMPLETIONS).unlink()
    (run / COMPLETIONS).symlink_to("/dev/zero")


DAMAGES = {
    "dropped record": (_drop_a_record, "completions.jsonl lacks 1 of its 10 requests: "
                                       "'same' repeat 0"),
    "failed record": (_fail_a_record, "completions.jsonl:3: a failed request"),
    "torn last line": (_tear_the_last_line, "completions.jsonl:10: the last line is cut short"),
    "empty completions": (_empty_completions, "completions.jsonl is empty"),
    "missing completions": (_no_completions, "completions.jsonl is missing"),
    "another prompt's record": (_another_prompts_record, "completions.jsonl:11: a record of "
                                                         "'elsewhere', a prompt not in its "
                                                         "prompt set"),
    "truncated tokens.bin": (_truncate_tokens, "tokens.bin: truncated"),
    "missing tokens.bin": (_no_tokens, "tokens.bin: missing"),
    "token reference outside tokens.bin": (_token_reference_outside,
                                           "that does not point into tokens.bin"),
    "completions a link to /dev/zero": (_completions_from_dev_zero,
                                        "completions.jsonl is not a regular file"),
}


@pytest.fixture(scope="module")
def stored_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A reference collected once for every damage: its run and its prompt set."""
    folder = tmp_path_factory.mktemp("stored")
    prompts = folder / "prompts.yaml"
    prompts.write_text(textwrap.dedent(PROMPTS))
    with ScriptedServer(ScriptedModel(A_ANSWERS, RUNNER_UPS)) as a:
        assert invoke("collect", "--endpoint", a.url, "--prompts", prompts, "--out",
                      folder / "bf16", *ASKED).exit_code == 0
    return folder / "bf16", prompts


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_reference_is_refused_before_any_request_to_b(
        damage: str, stored_reference: tuple[Path, Path], serve: Serve,
        tmp_path: Path) -> None:
    reference, prompts = stored_reference
    damaged = tmp_path / "bf16"
    shutil.copytree(reference, damaged)
    make_damage, said = DAMAGES[damage]
    make_damage(damaged)
    b = serve(ScriptedModel(B_ANSWERS, RUNNER_UPS))
    result = invoke("run", "--a-run", damaged, "--b", b.url, "--prompts", prompts, "--out",
                    tmp_path / "report", *ASKED)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert line.startswith(f"error: the stored reference {damaged} is damaged (nothing was "
                           "sent): "), line
    assert said in line and line.count("\n") == 0, line
    assert b.hits == 0  # refused before any request to B
    assert not (tmp_path / "report").exists()


def test_an_intact_reference_is_read_whole_and_accepted(
        stored_reference: tuple[Path, Path]) -> None:
    reference, _ = stored_reference
    assert open_reference(reference).manifest.label == "bf16"
