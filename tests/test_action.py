"""The GitHub Action (action.yml) run as GitHub runs a composite action, without GitHub:
each `run:` step with bash as the runner starts it, its `env:` expressions given the
inputs, the runner's files (GITHUB_OUTPUT, GITHUB_STEP_SUMMARY) and step outputs,
against scripted servers on loopback. The steps are read from the file, so they cannot
rot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from junitparser import JUnitXml

from quantcheck import CollectSettings, collect
from quantcheck.lab.scripted import ScriptedModel

from .conftest import (
    A_ANSWERS,
    B_ANSWERS,
    REPO,
    RUNNER_UPS,
    Serve,
    WritePrompts,
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
    assert ran.outcomes == {"Install quantcheck": "0", "A/B": "0", "Gate": "1",
                            "Upload the report": "0"}, ran.logs
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


def test_a_candidate_that_does_not_match_the_reference_stops_the_job(
        serve: Serve, workspace: Path, bin_dir: Path) -> None:
    a = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    collect([workspace / "prompts" / "ab.yaml"], workspace / "runs" / "bf16",
            CollectSettings(endpoint=a.url, label="bf16", repeats=2, preflight=False))
    b = serve(ScriptedModel(A_ANSWERS))
    ran = run_action({"a-run": "runs/bf16", "b": b.url, "prompts": "prompts/ab.yaml",
                      "install": "none"}, workspace, bin_dir)
    assert ran.outcomes == {"Install quantcheck": "0", "A/B": "2", "Gate": "skipped",
                            "Upload the report": "0"}, ran.logs
    assert "repeats: the reference 2, B 1" in ran.logs
    assert "::error title=quantcheck run::exit 2" in ran.logs
    assert b.hits == 0


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
