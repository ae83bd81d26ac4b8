"""The GitHub Action (action.yml) run as GitHub runs a composite action, without GitHub:
each `run:` step with bash as the runner starts it, its `env:` expressions given the
inputs, the runner's files (GITHUB_OUTPUT, GITHUB_STEP_SUMMARY) and step outputs,
against scripted servers on loopback. The steps are read from the file, so they cannot
rot."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from junitparser import JUnitXml

from quantcheck import CollectSettings, collect
from quantcheck.lab.scripted import ScriptedModel

from .conftest import (
    A_ANSWERS,
    B_ANSWERS,
    FIXTURES,
    REPO,
    RUNNER_UPS,
    Serve,
    WritePrompts,
    invoke,
    run_action,
)

ACTION = yaml.safe_load((REPO / "action.yml").read_text())
PROMPTS = """
prompts:
  - {id: same, category: factual, prompt: "Q: same", expect: {contains: Paris}}
  - {id: flip, category: factual, prompt: "Q: flip", expect: {contains: Canberra}}
  - {id: wording, category: factual, prompt: "Q: wording"}
"""


@pytest.fixture
def workspace(tmp_path: Path, write_prompts: WritePrompts) -> Path:
    """A checkout: the prompt set and a policy, where the job's steps run."""
    folder = tmp_path / "workspace"
    (folder / "prompts").mkdir(parents=True)
    (folder / "prompts" / "ab.yaml").write_text(PROMPTS)
    (folder / "prompts" / "policy.yaml").write_text("max_factual_flips: 0\n")
    return folder


def test_the_action_collects_b_against_a_stored_reference_and_passes(
        serve: Serve, workspace: Path, bin_dir: Path) -> None:
    a = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    stored = workspace / "runs" / "bf16"  # restored from the main branch's cache
    collect([workspace / "prompts" / "ab.yaml"], stored, CollectSettings(
        endpoint=a.url, label="bf16", repeats=2, top_logprobs=3, context_tokens=0))
    sent_to_a = a.hits
    b = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    ran = run_action({"a-run": "runs/bf16", "b": f"{b.url}/v1", "b-label": "fp8",
                      "prompts": "prompts/ab.yaml", "policy": "prompts/policy.yaml",
                      "args": "--repeats 2 --top-logprobs 3 --context-tokens 0",
                      "install": "none"}, workspace, bin_dir)
    assert set(ran.outcomes.values()) == {"0"}, ran.logs
    assert a.hits == sent_to_a and b.hits > 6
    assert ran.action_outputs == {"verdict": "pass", "exit-code": "0",
                                  "report": "quantcheck-report",
                                  "junit": "quantcheck-report/junit.xml"}
    report = workspace / "quantcheck-report"
    suite = next(iter(JUnitXml.fromfile(str(report / "junit.xml"))))
    assert {case.name for case in suite} == {"same", "flip", "wording"}
    assert all(case.is_passed for case in suite)
    assert ran.summary.startswith("## quantcheck: PASS")
    (upload,) = ran.uploads
    assert upload["name"] == "quantcheck-report"
    paths = upload["path"].split()
    assert (workspace / paths[0]).is_dir() and paths[0] == "quantcheck-report"
    assert paths[1].endswith("runner-temp/quantcheck-crash-*.txt")


def test_a_flip_fails_the_gate_step_says_why_and_the_report_is_still_uploaded(
        serve: Serve, workspace: Path, bin_dir: Path) -> None:
    a, b = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS)), serve(ScriptedModel(B_ANSWERS))
    ran = run_action({"a": a.url, "a-label": "bf16", "b": f"{b.url}\n", "b-label": "fp8",
                      "prompts": "prompts/ab.yaml", "policy": "prompts/policy.yaml",
                      "args": "--no-preflight", "out": "reports/pr", "artifact-name": "ab",
                      "install": "none"}, workspace, bin_dir)
    assert ran.outcomes == {"Check the inputs": "0", "Install quantcheck": "0", "A/B": "0",
                            "Gate": "1", "Upload the report": "0"}, ran.logs
    assert ran.outputs["ab"]["exit-code"] == "1"  # the default gate fails; yours decides
    assert ran.action_outputs["verdict"] == "fail"
    (flip,) = [case for case in next(iter(JUnitXml.fromfile(
        str(workspace / "reports" / "pr" / "junit.xml")))) if case.name == "flip"]
    text = flip.result[0].text
    assert "why: check contains passes on A, fails on B" in text
    assert "A (bf16):  The capital of Australia is Canberra." in text
    assert "B (fp8):  The capital of Australia is Sydney." in text
    assert "review sheet: index.html#pair-flip" in text
    assert "## quantcheck: FAIL" in ran.summary and "| `flip` | factual_flips |" in ran.summary
    assert ran.uploads[0]["name"] == "ab" and ran.uploads[0]["path"].startswith("reports/pr")


def test_a_candidate_served_by_replicas_is_one_line_of_b(
        serve: Serve, workspace: Path, bin_dir: Path) -> None:
    """A candidate's replicas joined by commas on its line of `b`: one candidate, its
    requests spread over both."""
    a = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    b1, b2 = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS)), serve(ScriptedModel(A_ANSWERS,
                                                                             RUNNER_UPS))
    ran = run_action({"a": a.url, "b": f"{b1.url}/v1,{b2.url}/v1\n", "b-label": "fp8",
                      "prompts": "prompts/ab.yaml", "policy": "prompts/policy.yaml",
                      "args": "--no-preflight --repeats 2 --replica-spread repeat",
                      "install": "none"}, workspace, bin_dir)
    assert set(ran.outcomes.values()) == {"0"}, ran.logs
    assert b1.requests and b2.requests  # each replica answered
    summary = (workspace / "quantcheck-report" / "summary.json").read_text()
    assert '"spread":"repeat"' in summary.replace(" ", "").replace("\n", "")
    assert not (workspace / "quantcheck-report" / "candidates").exists()  # one candidate


def test_a_candidate_that_does_not_match_the_reference_stops_the_job(
        serve: Serve, workspace: Path, bin_dir: Path) -> None:
    a = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    collect([workspace / "prompts" / "ab.yaml"], workspace / "runs" / "bf16",
            CollectSettings(endpoint=a.url, label="bf16", repeats=2, preflight=False))
    b = serve(ScriptedModel(A_ANSWERS))
    ran = run_action({"a-run": "runs/bf16", "b": b.url, "prompts": "prompts/ab.yaml",
                      "install": "none"}, workspace, bin_dir)
    assert ran.outcomes == {"Check the inputs": "0", "Install quantcheck": "0", "A/B": "2",
                            "Gate": "skipped", "Upload the report": "0"}, ran.logs
    assert "repeats: the reference 2, B 1" in ran.logs
    assert "::error title=quantcheck run::exit 2" in ran.logs
    assert b.hits == 0


def test_a_report_folder_holding_a_certificate_stops_the_job_instead_of_passing_it(
        serve: Serve, workspace: Path, bin_dir: Path) -> None:
    """A passing determinism certificate left in `out` (an earlier step, a restored
    cache) once made the gate step check it instead of the A/B's flip: the A/B step
    refuses the folder, and no verdict is given."""
    certifier = serve(ScriptedModel(), dialect="llama.cpp")
    certified = invoke("determinism", "--certify", "--endpoint", certifier.url, "--prompts",
                       workspace / "prompts" / "ab.yaml", "--max-batch", "2", "--trials", "2",
                       "--out", workspace / "quantcheck-report")
    assert certified.exit_code == 0, certified.output
    a, b = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS)), serve(ScriptedModel(B_ANSWERS))
    ran = run_action({"a": a.url, "b": b.url, "prompts": "prompts/ab.yaml",
                      "args": "--no-preflight", "install": "none"}, workspace, bin_dir)
    assert ran.outcomes == {"Check the inputs": "0", "Install quantcheck": "0", "A/B": "2",
                            "Gate": "skipped", "Upload the report": "0"}, ran.logs
    assert "quantcheck-report already holds a determinism certificate" in ran.logs
    assert ran.action_outputs["verdict"] == "" and a.hits == b.hits == 0


def test_the_readme_workflow_uses_the_action_with_inputs_it_declares() -> None:
    readme = (REPO / "README.md").read_text()
    workflow = yaml.safe_load(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    (used,) = [step for step in steps if "actions/quantcheck" in step.get("uses", "")]
    assert set(used["with"]) <= set(ACTION["inputs"])
    assert "a-run" in used["with"]
    assert os.path.basename(ACTION["runs"]["steps"][-1]["uses"]).startswith("upload-artifact")


def test_docs_name_every_input_and_output_of_the_action() -> None:
    section = (REPO / "docs" / "ci.md").read_text().split("## The GitHub Action", 1)[1]
    section = section.split("\n## ", 1)[0]
    for name in [*ACTION["inputs"], *ACTION["outputs"]]:
        assert f"`{name}`" in section, name


def test_quoted_args_and_paths_with_spaces_reach_quantcheck_as_a_shell_splits_them(
        serve: Serve, workspace: Path, bin_dir: Path) -> None:
    """`args` and `gate-args` are split by the shell's rules (docs/engines.md writes
    `--extra-body '{"cache_prompt": false}'`); a prompt set's path may hold a space."""
    (workspace / "my prompts").mkdir()
    (workspace / "my prompts" / "a b.yaml").write_text(PROMPTS)
    (workspace / "gate settings").mkdir()
    (workspace / "gate settings" / "one flip.yaml").write_text("max-factual-flips: 1\n")
    a, b = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS)), serve(ScriptedModel(B_ANSWERS))
    ran = run_action({"a": a.url, "b": b.url, "prompts": "my prompts/a b.yaml\n",
                      "args": "--no-preflight --extra-body '{\"cache_prompt\": false}'\n"
                              "--max-tokens \"64\"",
                      "gate-args": "--config 'gate settings/one flip.yaml'",
                      "install": "none"}, workspace, bin_dir)
    assert set(ran.outcomes.values()) == {"0"}, ran.logs
    assert b.requests and all(r["cache_prompt"] is False and r["max_tokens"] == 64
                              for r in b.requests)
    assert ran.action_outputs["verdict"] == "pass"  # the config's one flip allowed


FORGED = "reports/pr\nverdict=pass\nexit-code=0\njunit=x"


@pytest.mark.parametrize(("name", "value"), [
    ("out", FORGED), ("out", "reports/pr\n/etc"), ("out", "!reports"), ("out", "reports/*"),
    ("out", "#reports"), ("out", " reports"), ("artifact-name", "ab\nx"),
    ("artifact-name", "a/b"), ("a-label", "bf16\x1b[2J"), ("b-label", "fp8\r"),
    ("b", "http://127.0.0.1:9/v1\x00"), ("prompts", "prompts/ab.yaml\x07"),
    ("policy", "prompts/policy.yaml\nverdict=pass"), ("a-run", "runs/a\tb"),
    ("install", "none\nx"), ("args", "--extra-body '{\"cache_prompt\": false}"),
    ("gate-args", "--config \"a")])
def test_an_input_that_could_forge_outputs_or_paths_stops_the_action_before_it_runs(
        serve: Serve, workspace: Path, bin_dir: Path, name: str, value: str) -> None:
    """A line break in `out` once forged `verdict=pass` and added upload paths: every
    input that becomes a path, an argument or an output line is checked first."""
    value = value.replace("\x00", "\x01")  # an environment variable cannot hold NUL
    a, b = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS)), serve(ScriptedModel(B_ANSWERS))
    inputs = {"a": a.url, "b": b.url, "prompts": "prompts/ab.yaml",
              "policy": "prompts/policy.yaml", "args": "--no-preflight", "install": "none"}
    ran = run_action({**inputs, name: value}, workspace, bin_dir)
    assert ran.outcomes == {"Check the inputs": "2", "Install quantcheck": "skipped",
                            "A/B": "skipped", "Gate": "skipped",
                            "Upload the report": "0"}, ran.logs
    (error,) = [line for line in ran.logs.splitlines() if line.startswith("::error")]
    assert error.startswith(f"::error title=quantcheck input::{name}: "), error
    assert a.hits == b.hits == 0
    assert ran.action_outputs["verdict"] == "" and ran.action_outputs["report"] == ""
    (upload,) = ran.uploads
    assert upload["path"].split() == [str(workspace.parent / "runner-temp"
                                          / "quantcheck-crash-*.txt")]


def test_outputs_are_written_in_the_delimiter_form(
        serve: Serve, workspace: Path, bin_dir: Path) -> None:
    """No value, whatever it holds, can add an output line: each is a NAME<<DELIMITER
    block with a delimiter drawn at random."""
    a, b = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS)), serve(ScriptedModel(B_ANSWERS))
    ran = run_action({"a": a.url, "b": b.url, "prompts": "prompts/ab.yaml",
                      "args": "--no-preflight", "out": "verdict=pass",
                      "install": "none"}, workspace, bin_dir)
    assert ran.outputs["gate"] == {"exit-code": "1", "verdict": "fail",
                                   "junit": "verdict=pass/junit.xml"}, ran.logs
    assert ran.action_outputs["report"] == "verdict=pass"
    written = [path.read_text() for path in workspace.parent.glob("output-*")]
    blocks = [line for text in written for line in text.splitlines() if "<<" in line]
    assert len(blocks) == 6  # report, artifact-name; exit-code; exit-code, verdict, junit
    delimiters = [line.split("<<", 1)[1] for line in blocks]
    assert len(set(delimiters)) == 6 and all(len(d) >= 32 for d in delimiters)


def test_two_eval_logs_are_compared_as_they_ran_and_gated(workspace: Path,
                                                          bin_dir: Path) -> None:
    """a-log and b-log: nothing is collected; the logs pair (here an lm-eval log with
    itself) and the gate passes."""
    logs = workspace / "evals"
    shutil.copytree(FIXTURES / "evals" / "lm-eval-0.4.5", logs / "a")
    shutil.copytree(FIXTURES / "evals" / "lm-eval-0.4.5", logs / "b")
    ran = run_action({"a-log": "evals/a", "b-log": "evals/b\n", "install": "none"},
                     workspace, bin_dir)
    assert set(ran.outcomes.values()) == {"0"}, ran.logs
    assert ran.action_outputs["verdict"] == "pass"
    assert (workspace / "quantcheck-report" / "runs" / "a" / "manifest.json").exists()
    assert ran.summary.startswith("## quantcheck: PASS")


@pytest.mark.parametrize("inputs", [
    {"b": "http://127.0.0.1:1/v1", "a-log": "evals/a", "b-log": "evals/b"},
    {"a-log": "evals/a"},
    {},
], ids=["both", "a-log alone", "neither"])
def test_endpoints_or_logs_one_of_the_two(workspace: Path, bin_dir: Path,
                                          inputs: dict[str, str]) -> None:
    ran = run_action({**inputs, "install": "none"}, workspace, bin_dir)
    assert ran.outcomes["Check the inputs"] == "2", ran.logs
    assert "b, a-log, b-log: give b (the candidate endpoints to collect), or a-log and " \
           "b-log" in ran.logs
