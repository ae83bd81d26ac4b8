"""pipeline/starter.py and `quantcheck init`: the starter kit is written whole or not at
all, and what it writes works as written: run and gate accept its prompts and policy,
its workflow's steps run against lab servers (GitHub's runner emulated), and the
README's CI example is that workflow."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from quantcheck import __version__
from quantcheck.lab.scripted import ScriptedModel

from .conftest import BASH, REPO, Serve, evaluate, invoke, run_action

KIT = {"quantcheck/prompts.yaml", "quantcheck/policy.yaml", "quantcheck/README.md",
       ".github/workflows/quantcheck.yml", ".github/actions/quantcheck/action.yml"}


def written(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_init_writes_the_kit_and_never_over_a_file_that_is_there(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    result = invoke("init", repository)
    assert result.exit_code == 0, result.output
    assert written(repository) == KIT
    assert "prompts check" in result.output and "gate reports/first --policy" in result.output

    (repository / "quantcheck" / "policy.yaml").write_text("max_factual_flips: 3\n")
    again = invoke("init", repository)
    assert again.exit_code == 2
    assert "already there: nothing written (give --force" in again.output
    assert (repository / "quantcheck" / "policy.yaml").read_text() == "max_factual_flips: 3\n"
    assert invoke("init", repository, "--force").exit_code == 0
    assert "max_factual_flips: 0" in (repository / "quantcheck" / "policy.yaml").read_text()


def test_the_kits_action_is_this_repositorys_pinned_to_this_version(tmp_path: Path) -> None:

    invoke("init", tmp_path)
    shipped = yaml.safe_load((REPO / "action.yml").read_text())
    copied = yaml.safe_load((tmp_path / ".github/actions/quantcheck/action.yml").read_text())
    assert copied["inputs"]["install"]["default"] == f"quantcheck=={__version__}"
    copied["inputs"]["install"]["default"] = ""
    assert copied == shipped


def test_run_and_gate_take_the_kits_prompts_and_policy_as_they_are(
        serve: Serve, tmp_path: Path) -> None:
    invoke("init", tmp_path)
    kit = tmp_path / "quantcheck"
    a, b = serve(ScriptedModel({})), serve(ScriptedModel({}))
    ran = invoke("run", "--a", a.url, "--b", b.url, "--prompts", kit / "prompts.yaml",
                 "--allow-code-exec", "--context-tokens", "0", "--out", tmp_path / "ab")
    assert ran.exit_code == 0, ran.output
    assert "0 factual flips" in ran.output
    gate = invoke("gate", tmp_path / "ab", "--policy", kit / "policy.yaml")
    assert gate.exit_code == 0, gate.output
    tools = [r for r in b.requests if r.get("tools")]
    assert tools and tools[0]["tools"][0]["function"]["name"] == "get_weather"


def run_steps(job: dict[str, object], env: dict[str, str], workspace: Path, bin_dir: Path,
              skipped: set[str]) -> list[dict[str, object]]:
    """A workflow job's `run:` steps in order, as the runner runs them (bash, the job's
    environment); the `uses:` steps are returned for the caller to play."""
    played: list[dict[str, object]] = []
    steps = job["steps"]
    assert isinstance(steps, list)
    for step in steps:
        if "uses" in step:
            played.append(step)
            continue
        if step["name"] in skipped:
            continue
        done = subprocess.run([*BASH, "-c", str(step["run"])], cwd=workspace, env={
            "PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(workspace.parent),
            "LC_ALL": "C.UTF-8", **env}, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (step["name"], done.stdout, done.stderr)
    return played


def test_the_written_workflow_runs_as_written_against_lab_servers(
        serve: Serve, tmp_path: Path, bin_dir: Path) -> None:
    """Both jobs, the servers' start and pip's install left out (the lab's servers and
    this checkout's quantcheck stand in: no GPU, no network); the cache kept in a
    folder; the A/B step is the kit's own copy of the Action."""
    workspace = tmp_path / "repository"
    invoke("init", workspace)
    workflow = yaml.safe_load((workspace / ".github/workflows/quantcheck.yml").read_text())
    assert workflow["env"]["QUANTCHECK"] == f"quantcheck=={__version__}"
    a, b = serve(ScriptedModel({})), serve(ScriptedModel({}))
    env = {**workflow["env"], "A_URL": f"{a.url}/v1", "B_URL": f"{b.url}/v1"}
    serving = {"Serve the reference", "Serve the candidate", "Install quantcheck"}
    cache = tmp_path / "cache"

    reference = run_steps(workflow["jobs"]["reference"], env, workspace, bin_dir, serving)
    (saved,) = [step for step in reference if "cache/save" in str(step["uses"])]
    shutil.copytree(workspace / str(saved["with"]["path"]), cache)

    shutil.rmtree(workspace / "runs")  # a new job: a fresh checkout, the cache restored
    candidate = run_steps(workflow["jobs"]["candidate"], env, workspace, bin_dir, serving)
    (restore,) = [step for step in candidate if "cache/restore" in str(step["uses"])]
    shutil.copytree(cache, workspace / str(restore["with"]["path"]))
    (action,) = [step for step in candidate if str(step["uses"]).startswith("./")]
    inputs = {name: evaluate(str(value), {"env": env})
              for name, value in action["with"].items()}
    sent_to_a = a.hits
    ran = run_action({**inputs, "install": "none"}, workspace, bin_dir,
                     workspace / str(action["uses"]) / "action.yml")
    assert set(ran.outcomes.values()) == {"0"}, ran.logs
    assert ran.action_outputs["verdict"] == "pass"
    assert a.hits == sent_to_a  # the reference came from the cache
    assert ran.summary.startswith("## quantcheck: PASS")


def test_the_readmes_ci_example_is_the_workflow_init_writes(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    shown = yaml.safe_load(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
    invoke("init", tmp_path)
    assert shown == yaml.safe_load((tmp_path / ".github/workflows/quantcheck.yml").read_text())
