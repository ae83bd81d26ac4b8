"""pipeline/starter.py and `quantcheck init`: the starter kit is written whole or not at
all, and what it writes works as written: run and gate accept its prompts and policy,
its workflow's steps run against lab servers (GitHub's runner emulated), and the
README's CI example is that workflow."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from quantcheck.lab.scripted import ScriptedModel
from quantcheck.pipeline.starter import InstallSource, source_of

from .conftest import (
    BASH,
    REPO,
    Serve,
    assert_one_clear_line,
    evaluate,
    invoke,
    run_action,
    run_with_file_limit,
)

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


def planted(tmp_path: Path, where: str) -> tuple[Path, Path, set[str]]:
    """A repository with a link planted where the kit writes; the folder elsewhere it
    leads to; the repository's entries before init."""
    repository, elsewhere = tmp_path / "repository", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repository / "quantcheck").mkdir(parents=True)
    if where == "dangling file":
        (repository / "quantcheck" / "README.md").symlink_to(tmp_path / "nowhere" / "x")
    elif where == "folder":
        (repository / ".github").symlink_to(elsewhere)
    elif where == "file":
        (elsewhere / "policy.yaml").write_text("theirs\n")
        (repository / "quantcheck" / "policy.yaml").symlink_to(elsewhere / "policy.yaml")
    else:  # a folder inside whose link leads out
        (repository / "quantcheck" / "ci").symlink_to(elsewhere)
        (repository / ".github").symlink_to("quantcheck/ci")
    return repository, elsewhere, entries(repository)


def entries(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("where", ["dangling file", "folder", "file", "link to a link"])
@pytest.mark.parametrize("force", [False, True])
def test_init_refuses_a_link_that_leads_out_of_the_repository_and_writes_nothing(
        tmp_path: Path, where: str, force: bool) -> None:
    """A dangling quantcheck/README.md once let two files be written before the refusal;
    a .github linked elsewhere received the workflow."""
    repository, elsewhere, before = planted(tmp_path, where)
    result = invoke("init", repository, *(["--force"] if force else []))
    assert result.exit_code == 2, result.output
    link = {"dangling file": "quantcheck/README.md", "folder": ".github",
            "file": "quantcheck/policy.yaml", "link to a link": ".github"}[where]
    (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert f"{repository / link} is a symbolic link to " in line, line
    assert f"outside the repository {repository.resolve()}: nothing written" in line
    assert entries(repository) == before
    assert [p.name for p in elsewhere.iterdir()] == (["policy.yaml"] if where == "file" else [])


def test_a_link_inside_the_repository_is_a_file_there(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    (repository / "docs").mkdir(parents=True)
    (repository / "quantcheck").symlink_to("docs")
    (repository / "docs" / "README.md").symlink_to("missing.md")  # dangling, inside
    refused = invoke("init", repository)
    assert refused.exit_code == 2 and "README.md already there" in refused.output
    assert entries(repository) == {"docs", "quantcheck", "docs/README.md"}
    assert invoke("init", repository, "--force").exit_code == 0
    assert written(repository / "docs") == {"prompts.yaml", "policy.yaml", "README.md"}
    assert not (repository / "docs" / "README.md").is_symlink()


@pytest.mark.parametrize(("make", "said"), [
    ("quantcheck/README.md/", "quantcheck/README.md is a folder where the kit writes a file"),
    (".github", ".github is not a folder (the kit needs one there)")])
def test_a_folder_where_a_file_goes_or_the_reverse_is_refused_before_anything_is_written(
        tmp_path: Path, make: str, said: str) -> None:
    repository = tmp_path / "repository"
    if make.endswith("/"):
        (repository / make).mkdir(parents=True)
    else:
        repository.mkdir()
        (repository / make).write_text("")
    before = entries(repository)
    result = invoke("init", repository, "--force")
    assert result.exit_code == 2 and said in result.output, result.output
    assert entries(repository) == before


@pytest.mark.parametrize("kit_there", [False, True])
def test_a_disk_that_fills_midway_leaves_every_file_as_it_was(
        tmp_path: Path, kit_there: bool) -> None:
    """The copied Action, the last and largest file, cannot be written: the four before
    it are not left behind, an old kit is left whole, and no temporary remains."""
    repository = tmp_path / "repository"
    if kit_there:
        assert invoke("init", repository).exit_code == 0
        for path in repository.rglob("*"):
            if path.is_file():
                path.write_text(f"mine: {path.name}\n")
    before = {p: p.read_bytes() for p in repository.rglob("*") if p.is_file()}
    limited = run_with_file_limit([sys.executable, "-m", "quantcheck", "init",
                                   str(repository), "--force"], 5_000)
    assert limited.returncode == 2, limited.stderr
    assert_one_clear_line(limited.stderr, "File too large")
    assert {p: p.read_bytes() for p in repository.rglob("*") if p.is_file()} == before
    assert repository.exists() == kit_there  # the folders init made are gone too


def git(tree: Path, *arguments: str) -> str:
    done = subprocess.run(["git", "-C", str(tree), *arguments], capture_output=True,
                          text=True, check=True)
    return done.stdout.strip()


def this_checkouts_requirement() -> str:
    """What installs the quantcheck these tests run (this checkout's sources): its
    remote at its commit when it has one on the network, else its path."""
    remote = subprocess.run(["git", "-C", str(REPO), "remote", "get-url", "origin"],
                            capture_output=True, text=True).stdout.strip()
    if remote.startswith(("https://", "http://", "ssh://", "git://")):
        return f"git+{remote}@{git(REPO, 'rev-parse', 'HEAD')}"
    return str(REPO)


def test_the_kit_installs_the_quantcheck_init_ran_from(tmp_path: Path) -> None:
    """Not a version no package index has: the checkout these tests run, in the
    workflow's QUANTCHECK and the copied Action's default, and the next steps say how
    to change it."""
    result = invoke("init", tmp_path)
    assert result.exit_code == 0, result.output
    requirement = this_checkouts_requirement()
    workflow = yaml.safe_load((tmp_path / ".github/workflows/quantcheck.yml").read_text())
    assert workflow["env"]["QUANTCHECK"] == requirement
    shipped = yaml.safe_load((REPO / "action.yml").read_text())
    copied = yaml.safe_load((tmp_path / ".github/actions/quantcheck/action.yml").read_text())
    assert copied["inputs"]["install"]["default"] == requirement
    copied["inputs"]["install"]["default"] = ""
    assert copied == shipped
    assert f"The CI workflow installs QUANTCHECK={requirement}: " in result.output
    assert (f"set QUANTCHECK in {tmp_path / '.github/workflows/quantcheck.yml'} to a "
            "release") in " ".join(result.output.split())


def installed(site: Path, direct_url: dict[str, object] | None) -> metadata.Distribution:
    """A quantcheck distribution as pip leaves it in `site`, with its direct_url.json."""
    (site / "quantcheck").mkdir(parents=True)
    (site / "quantcheck" / "__init__.py").write_text("")
    info = site / "quantcheck-9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: quantcheck\nVersion: 9.9\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return metadata.PathDistribution(info)


def checkout(tree: Path, remote: str | None) -> str:
    """A source tree of quantcheck under git; its commit."""
    (tree / "src" / "quantcheck").mkdir(parents=True)
    (tree / "src" / "quantcheck" / "__init__.py").write_text("")
    (tree / "pyproject.toml").write_text("[project]\nname = 'quantcheck'\n")
    git(tree, "init", "-q")
    git(tree, "add", ".")
    git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    if remote:
        git(tree, "remote", "add", "origin", remote)
    return git(tree, "rev-parse", "HEAD")


def test_an_install_from_a_package_index_installs_that_release(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    found = source_of(installed(site, None), site / "quantcheck", "9.9")
    assert found.requirement == "quantcheck==9.9"


def test_an_install_from_git_installs_that_commit(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    commit = "0123456789abcdef0123456789abcdef01234567"
    distribution = installed(site, {"url": "https://github.com/acme/quantcheck.git",
                                    "vcs_info": {"vcs": "git", "commit_id": commit,
                                                 "requested_revision": "main"}})
    found = source_of(distribution, site / "quantcheck", "9.9")
    assert found.requirement == f"git+https://github.com/acme/quantcheck.git@{commit}"


def test_an_install_from_a_wheel_installs_that_wheel(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    wheel = tmp_path / "my wheels" / "quantcheck-9.9-py3-none-any.whl"
    distribution = installed(site, {"url": wheel.as_uri(), "archive_info": {}})
    found = source_of(distribution, site / "quantcheck", "9.9")
    assert found.requirement == str(wheel) and "a path on this machine" in found.origin


@pytest.mark.parametrize(("remote", "wanted"), [
    ("https://github.com/acme/quantcheck.git", "git+https://github.com/acme/quantcheck.git"),
    ("git@github.com:acme/quantcheck.git", "git+ssh://git@github.com/acme/quantcheck.git"),
    (None, None), ("/srv/mirrors/quantcheck", None)])
def test_an_editable_checkout_installs_its_remote_at_its_commit_or_its_path(
        tmp_path: Path, remote: str | None, wanted: str | None) -> None:
    tree = tmp_path / "quantcheck"
    commit = checkout(tree, remote)
    distribution = installed(tmp_path / "site-packages",
                             {"url": tree.as_uri(), "dir_info": {"editable": True}})
    found = source_of(distribution, tree / "src" / "quantcheck", "9.9")
    assert found.requirement == (f"{wanted}@{commit}" if wanted else str(tree))
    if wanted:
        assert "must be pushed" in found.origin and "uncommitted" not in found.origin
        (tree / "pyproject.toml").write_text("# changed\n")
        assert "uncommitted changes" in source_of(distribution, tree / "src" / "quantcheck",
                                                  "9.9").origin


def test_sources_run_beside_another_install_install_the_sources(tmp_path: Path) -> None:
    """PYTHONPATH=checkout/src while the environment holds an editable install of
    another checkout: what runs is the first."""
    other, tree = tmp_path / "other", tmp_path / "running"
    checkout(other, "https://example.com/other.git")
    commit = checkout(tree, "https://example.com/running.git")
    distribution = installed(tmp_path / "site-packages",
                             {"url": other.as_uri(), "dir_info": {"editable": True}})
    found = source_of(distribution, tree / "src" / "quantcheck", "9.9")
    assert found == InstallSource(f"git+https://example.com/running.git@{commit}",
                                  found.origin)
    assert source_of(None, tree / "src" / "quantcheck", "9.9").requirement == \
        found.requirement


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
    assert workflow["env"]["QUANTCHECK"] == this_checkouts_requirement()
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
    written = yaml.safe_load((tmp_path / ".github/workflows/quantcheck.yml").read_text())
    assert shown["env"].pop("QUANTCHECK").startswith("git+https://")  # a commit, shown
    written["env"].pop("QUANTCHECK")  # what init ran from, tested above
    assert shown == written
