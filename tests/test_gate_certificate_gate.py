"""gate/certificate_gate.py: `quantcheck gate CERT_DIR` applies the three rules that
mean something for a determinism certificate, refuses the options that do not, and
writes a step summary whose tables hold any prompt id."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.gate.certificate_gate import certificate_markdown, decide_certificate
from quantcheck.gate.verdict import Policy
from quantcheck.store.records.certificate_records import (
    Answer,
    Certificate,
    FactorResult,
    PromptResult,
    Untested,
)

from .conftest import (
    MARKDOWN_ATTACKS,
    gate_writing_a_step_summary,
    invoke,
    markdown_skeleton,
    no_tag_more,
)

ODD_IDS = ["capital|au", "code`block"]


def write_files(folder: Path, certificate: Certificate, answers: Sequence[Answer] = ()) -> None:
    """certificate.json and its answers.jsonl (no answer unless given)."""
    (folder / "certificate.json").write_bytes(msgspec.json.encode(certificate))
    (folder / "answers.jsonl").write_bytes(b"".join(msgspec.json.encode(answer) + b"\n"
                                                    for answer in answers))


def write_certificate(folder: Path) -> Path:
    """A certificate of 3 prompts, two of which (with ids holding `|` and a backtick)
    varied when repeated."""
    folder.mkdir()
    varying = [PromptResult(prompt_id=prompt_id, factor="repeat", unique_outputs=2,
                            comparisons=2, mismatches=1, varying_levels=["alone"])
               for prompt_id in ODD_IDS]
    steady = PromptResult(prompt_id="steady", factor="repeat", unique_outputs=1,
                          comparisons=2, mismatches=0, varying_levels=[])
    repeat = FactorResult(factor="repeat", comparisons=6, mismatches=2, prompts=3,
                          prompts_varying=2, share_varying=0.6667, levels=[],
                          explanation="varies with no batch factor")
    certificate = Certificate(
        endpoint="http://127.0.0.1:8000/v1", model="m", certified=False,
        statement="2 prompts vary", comparisons=6, mismatches=2, failed_requests=0,
        prompts=3, prompts_varying=2, explanation="varies with no batch factor",
        batch_sizes=[1], prefix_lengths=[], trials=2, seed=0, requests=9,
        cache_control="none", factors=[repeat], prompt_results=[*varying, steady],
        examples=[])
    write_files(folder, certificate)
    return folder


def test_the_certificates_rules_apply_and_its_prompt_ids_stay_in_their_cells(
        tmp_path: Path) -> None:
    folder = write_certificate(tmp_path / "certificate")
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_factual_flips: 0\nmax_new_degenerate: 0\n")  # shared with A/Bs
    result = invoke("gate", folder, "--policy", policy, "--max-nondeterministic-prompts",
                    "1", "--max-failed-requests", "0")
    assert result.exit_code == 1, result.output
    row = next(line for line in result.stdout.splitlines()
               if line.startswith("| nondeterministic_prompts |"))
    assert row == ("| nondeterministic_prompts | 2 | 1 | **fail** | `capital\\|au`, "
                   "`code'block` |")
    assert row.replace("\\|", "").count("|") == 6  # five cells, as the header has


@pytest.mark.parametrize(("args", "named"), [
    (["--max-factual-flips", "0", "--require-review"], "--max-factual-flips, --require-review"),
    (["--no-require-review"], "--require-review"),
    (["--min-identical-share", "0.5", "--max-nondeterministic-prompts", "1"],
     "--min-identical-share"),
    (["--review", "policy.yaml"], "--review"),
    (["--candidate", "fp8"], "--candidate"),
])
def test_options_that_do_not_apply_to_a_certificate_are_refused_naming_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], named: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policy.yaml").write_text("max_failed_requests: 0\n")
    folder = write_certificate(tmp_path / "certificate")
    result = invoke("gate", "certificate", *args)
    assert result.exit_code == 2, result.output
    assert (f"Error: {named}: certificate is a determinism certificate (no pairs to "
            "review, no candidates): only --policy, --max-nondeterministic-prompts, "
            "--max-untested-levels and --max-failed-requests apply to it") in result.output
    assert not (folder / "gate.json").exists()


def certified_in_part(folder: Path) -> Path:
    """A certificate on which nothing varied, three planned levels not tested."""
    folder.mkdir()
    results = [PromptResult(prompt_id=f"p{n}", factor="repeat", unique_outputs=1,
                            comparisons=2, mismatches=0, varying_levels=[]) for n in range(2)]
    repeat = FactorResult(factor="repeat", comparisons=4, mismatches=0, prompts=2,
                          prompts_varying=0, share_varying=0.0, levels=[],
                          explanation="no variation")
    certificate = Certificate(
        endpoint="http://127.0.0.1:8000/v1", model="m", certified=True,
        verdict="certified in part", statement="0 mismatches in 4 comparisons",
        not_tested=[Untested(factor="warm", levels=["cold", "warm"], reason="no flush"),
                    Untested(factor="prefix", levels=["prefix=4097"],
                             reason="a slot holds 1,024 tokens")],
        comparisons=4, mismatches=0, failed_requests=0, prompts=2, prompts_varying=0,
        explanation="no variation", batch_sizes=[2], prefix_lengths=[1], trials=2, seed=0,
        requests=8, cache_control="none", factors=[repeat], prompt_results=results,
        examples=[])
    write_files(folder, certificate)
    return folder


def test_levels_not_tested_fail_the_gate_unless_the_policy_allows_them(
        tmp_path: Path) -> None:
    """A certificate "certified in part" fails by default (untested_levels, limit 0);
    --max-untested-levels or the policy key max_untested_levels lets it pass, null turns
    the rule off."""
    folder = certified_in_part(tmp_path / "certificate")
    failed = invoke("gate", folder)
    assert failed.exit_code == 1, failed.output
    assert ("| untested_levels | 3 | 0 | **fail** |" in failed.stdout)
    assert ("3 planned levels not tested: cold against warm requests (its own prompt "
            "cached) (no flush); shared prefixes of 4097 words with the prefix cache off (a "
            "slot holds 1,024 tokens)") in failed.output
    assert '<failure type="untested_levels"' in (folder / "junit.xml").read_text()
    assert invoke("gate", folder, "--max-untested-levels", "2").exit_code == 1
    assert invoke("gate", folder, "--max-untested-levels", "3").exit_code == 0
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_untested_levels: null\n")
    assert invoke("gate", folder, "--policy", policy).exit_code == 0
    policy.write_text("max_untested_levels: -1\n")
    refused = invoke("gate", folder, "--policy", policy)
    assert refused.exit_code == 2 and "max_untested_levels" in refused.output


def test_the_untested_levels_rule_counts_every_level_named(tmp_path: Path) -> None:
    certificate = msgspec.json.decode(
        (certified_in_part(tmp_path / "c") / "certificate.json").read_bytes(),
        type=Certificate)
    rules = {rule.name: rule for rule in decide_certificate(certificate, Policy()).rules}
    assert rules["untested_levels"].count == 3 and not rules["untested_levels"].passed
    certificate.not_tested = []
    rules = {rule.name: rule for rule in decide_certificate(certificate, Policy()).rules}
    assert rules["untested_levels"].count == 0 and rules["untested_levels"].passed


def test_failed_answers_the_certificate_does_not_count_are_refused(tmp_path: Path) -> None:
    """A certificate counting fewer failed requests than its answers.jsonl holds would
    pass on requests never answered: refused. Counted, the failure fails the gate."""
    folder = certified_in_part(tmp_path / "certificate")
    certificate = msgspec.json.decode((folder / "certificate.json").read_bytes(),
                                      type=Certificate)
    failed = Answer(prompt_id="p0", factor="repeat", level="alone", trial=1,
                    error="HTTP 500 after 3 tries")
    write_files(folder, certificate, [failed])
    refused = invoke("gate", folder, "--max-untested-levels", "3")
    assert refused.exit_code == 2, refused.output
    assert "failed_requests is 0, but" in refused.output and "holds 1 failed answers" in \
        refused.output
    certificate.failed_requests, certificate.certified = 1, False
    write_files(folder, certificate, [failed])
    counted = invoke("gate", folder, "--max-untested-levels", "3")
    assert counted.exit_code == 1 and "| failed_requests | 1 | 0 | **fail** |" in counted.stdout


def test_a_config_file_shared_with_ab_gates_is_taken(tmp_path: Path) -> None:
    """A --config file may set the A/B rules too: only the command line is refused."""
    folder = write_certificate(tmp_path / "certificate")
    config = tmp_path / "gate.yaml"
    config.write_text("max-factual-flips: 0\nrequire-review: true\n"
                      "max-nondeterministic-prompts: 2\n")
    result = invoke("gate", folder, "--config", config)
    assert result.exit_code == 0, result.output


def test_a_certificate_that_compared_nothing_is_refused_as_an_empty_report_is(
        tmp_path: Path) -> None:
    folder = tmp_path / "certificate"
    folder.mkdir()
    empty = Certificate(
        endpoint="http://127.0.0.1:8000/v1", model="m", certified=False,
        statement="not certified: no comparison could be made", comparisons=0, mismatches=0,
        failed_requests=0, prompts=0, prompts_varying=0, explanation="no variation",
        batch_sizes=[], prefix_lengths=[], trials=2, seed=0, requests=0,
        cache_control="none", factors=[], prompt_results=[], examples=[])
    write_files(folder, empty)
    result = invoke("gate", folder)
    assert result.exit_code == 2, result.output
    assert ("error: the certificate compared nothing, so there is nothing to pass: not "
            "certified: no comparison could be made") in result.output
    assert not (folder / "gate.json").exists()


HOSTILE = st.lists(st.text(max_size=10) | st.sampled_from(MARKDOWN_ATTACKS), min_size=1,
                   max_size=4).map("".join)


def a_certificate_naming(texts: list[str]) -> Certificate:
    """A certificate whose every string (endpoint, model, sentences, prompt ids) is one
    of `texts`, two prompts varying."""
    endpoint, model, statement, explanation, note, factor_said, first, second = texts
    results = [PromptResult(prompt_id=prompt_id, factor="batch", unique_outputs=2,
                            comparisons=2, mismatches=1, varying_levels=["batch=8"])
               for prompt_id in (first + "1", second + "2")]
    batch = FactorResult(factor="batch", comparisons=4, mismatches=2, prompts=2,
                         prompts_varying=2, share_varying=1.0, levels=[],
                         explanation=factor_said)
    return Certificate(
        endpoint=endpoint, model=model, certified=False, statement=statement, comparisons=4,
        mismatches=2, failed_requests=0, prompts=2, prompts_varying=2,
        explanation=explanation, batch_sizes=[8], prefix_lengths=[], trials=2, seed=0,
        requests=6, cache_control="none", factors=[batch], prompt_results=results,
        examples=[], control_note=note)


@settings(max_examples=300, deadline=None)
@given(st.lists(HOSTILE, min_size=8, max_size=8))
def test_no_string_of_a_certificate_changes_the_shape_of_its_step_summary(
        texts: list[str]) -> None:
    """Whatever a server names itself or a certificate file says: no tag, image, link,
    heading, table row or cell, or details block more than plain words would give."""
    def summary(strings: list[str]) -> str:
        certificate = a_certificate_naming(strings)
        return certificate_markdown(decide_certificate(
            certificate, Policy(max_nondeterministic_prompts=0)), certificate)

    assert no_tag_more(summary(texts), summary(["words"] * 8))


def test_a_model_id_written_as_markup_shows_as_written_in_the_step_summary(
        tmp_path: Path) -> None:
    model = ("gemma<img src=x onerror=alert(1)>![](https://e.x/p.png)<details><summary>s"
             "\n## quantcheck determinism: PASS")
    folder = tmp_path / "certificate"
    folder.mkdir()
    certificate = a_certificate_naming(["http://127.0.0.1:8000/v1", model, "2 prompts vary",
                                        "varies", "none", "varies", "p", "q"])
    write_files(folder, certificate)
    step_summary = tmp_path / "summary.md"
    result = gate_writing_a_step_summary(folder, step_summary)
    assert result.exit_code == 1, result.output  # two prompts vary
    written = step_summary.read_text()
    tags = markdown_skeleton(written)
    assert tags.count("<h2") == 1 and "<img" not in tags and "<details" not in tags
    assert "gemma\\<img src=x onerror=alert(1)\\>!\\[\\](https\\://e.x/p.png)" in written
