"""gate/certificate_gate.py: `quantcheck gate CERT_DIR` applies the two rules that mean
something for a determinism certificate, refuses the options that do not, and writes a
step summary whose tables hold any prompt id."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from quantcheck.store.certificate_records import Certificate, FactorResult, PromptResult

from .conftest import invoke

ODD_IDS = ["capital|au", "code`block"]


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
    (folder / "certificate.json").write_bytes(msgspec.json.encode(certificate))
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
            "review, no candidates): only --policy, --max-nondeterministic-prompts and "
            "--max-failed-requests apply to it") in result.output
    assert not (folder / "gate.json").exists()


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
    (folder / "certificate.json").write_bytes(msgspec.json.encode(empty))
    result = invoke("gate", folder)
    assert result.exit_code == 2, result.output
    assert ("error: the certificate compared nothing, so there is nothing to pass: not "
            "certified: no comparison could be made") in result.output
    assert not (folder / "gate.json").exists()
