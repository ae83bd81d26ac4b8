"""pipeline/starter.py and `quantcheck init`: the starter kit is written whole or not at
all, and what it writes works as written: run and gate accept its prompts and policy,
its workflow's steps run against lab servers (GitHub's runner emulated), its install
steps included (pip installs what init ran from into fresh environments), and the
README's CI example is that workflow."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from quantcheck._version import __version__
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.pipeline.starter import InstallSource, source_of

from .conftest import (
    BASH,
    REPO,
    Ran,
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


# what a runner passes on to pip: its configuration and proxies
PIP_SETTINGS = ("PIP_", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
                "no_proxy", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")


def runner_env(bin_dir: Path, workspace: Path, sources: Path | None) -> dict[str, str]:
    """A step's environment before the workflow's own: `bin_dir` first on PATH."""
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(workspace.parent),
            "LC_ALL": "C.UTF-8", **({"PYTHONPATH": str(sources)} if sources else {}),
            **{key: value for key, value in os.environ.items() if key.startswith(PIP_SETTINGS)}}


def run_steps(job: dict[str, object], env: dict[str, str], workspace: Path, bin_dir: Path,
              skipped: set[str], sources: Path | None = REPO / "src") -> list[dict[str, object]]:
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
        done = subprocess.run([*BASH, "-c", str(step["run"])], cwd=workspace,
                              env={**runner_env(bin_dir, workspace, sources), **env},
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (step["name"], done.stdout, done.stderr)
    return played


def play_reference(workspace: Path, env: dict[str, str], cache: Path, bin_dir: Path,
                   sources: Path | None, skipped: set[str]) -> None:
    """The written workflow's reference job on its own runner (`bin_dir` first on PATH,
    `sources` first on PYTHONPATH): its steps, and the folder it caches copied to
    `cache`."""
    workflow = yaml.safe_load((workspace / ".github/workflows/quantcheck.yml").read_text())
    reference = run_steps(workflow["jobs"]["reference"], {**workflow["env"], **env},
                          workspace, bin_dir, skipped, sources)
    (saved,) = [step for step in reference if "cache/save" in str(step["uses"])]
    shutil.copytree(workspace / str(saved["with"]["path"]), cache)
    shutil.rmtree(workspace / "runs")  # the next job: a fresh checkout


def play_candidate(workspace: Path, env: dict[str, str], cache: Path, bin_dir: Path,
                   sources: Path | None, skipped: set[str], install: str | None = None) -> Ran:
    """The written workflow's candidate job on its own runner: its steps, the cache
    restored, and the kit's own copy of the Action run with the inputs the workflow gives
    it (`install` in place of the workflow's, when given)."""
    workflow = yaml.safe_load((workspace / ".github/workflows/quantcheck.yml").read_text())
    env = {**workflow["env"], **env}
    candidate = run_steps(workflow["jobs"]["candidate"], env, workspace, bin_dir, skipped,
                          sources)
    (restore,) = [step for step in candidate if "cache/restore" in str(step["uses"])]
    shutil.copytree(cache, workspace / str(restore["with"]["path"]))
    (action,) = [step for step in candidate if str(step["uses"]).startswith("./")]
    inputs = {name: evaluate(str(value), {"env": env})
              for name, value in action["with"].items()}
    if install is not None:
        inputs["install"] = install
    return run_action(inputs, workspace, bin_dir,
                      workspace / str(action["uses"]) / "action.yml", sources)


def test_the_written_workflow_runs_as_written_against_lab_servers(
        serve: Serve, tmp_path: Path, bin_dir: Path) -> None:
    """Both jobs, the servers' start and pip's install left out (the lab's servers and
    this checkout's quantcheck stand in; the next test installs): the cache kept in a
    folder; the A/B step is the kit's own copy of the Action."""
    workspace = tmp_path / "repository"
    invoke("init", workspace)
    workflow = yaml.safe_load((workspace / ".github/workflows/quantcheck.yml").read_text())
    assert workflow["env"]["QUANTCHECK"] == this_checkouts_requirement()
    a, b = serve(ScriptedModel({})), serve(ScriptedModel({}))
    serving = {"Serve the reference", "Serve the candidate", "Install quantcheck"}
    urls, cache = {"A_URL": f"{a.url}/v1", "B_URL": f"{b.url}/v1"}, tmp_path / "cache"
    play_reference(workspace, urls, cache, bin_dir, REPO / "src", serving)
    sent_to_a = a.hits
    ran = play_candidate(workspace, urls, cache, bin_dir, REPO / "src", serving, "none")
    assert set(ran.outcomes.values()) == {"0"}, ran.logs
    assert ran.action_outputs["verdict"] == "pass"
    assert a.hits == sent_to_a  # the reference came from the cache
    assert ran.summary.startswith("## quantcheck: PASS")


def source_tree(folder: Path) -> Path:
    """A copy of this checkout's sources (what a wheel is built from), outside any git
    repository: quantcheck run from it installs it by its path."""
    for name in ("pyproject.toml", "README.md", "action.yml"):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, folder / name)
    for name in ("src", "prompts", "rubrics"):
        shutil.copytree(REPO / name, folder / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return folder


def fresh_python(folder: Path) -> Path:
    """A new virtual environment, as setup-python leaves a runner (its own python3 and
    pip, no quantcheck); the test interpreter's packages are visible to it, so that
    quantcheck's dependencies are there and pip downloads at most a build backend. Its
    pip is the test interpreter's pip package run by its own python3 (what ensurepip
    would copy in: the same release, 3.4 s of the environment's 3.4 s here). Its bin
    folder."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(folder)], check=True, capture_output=True, timeout=300)
    site = sysconfig.get_paths(vars={"base": str(folder), "platbase": str(folder)})["purelib"]
    (Path(site) / "_test_interpreter.pth").write_text(
        "".join(f"{path}\n" for path in sysconfig_site_packages()))
    pip = folder / "bin" / "pip"  # the script pip's own installer writes
    pip.write_text(f"#!{folder / 'bin' / 'python'}\nimport sys\n"
                   "from pip._internal.cli.main import main\nsys.exit(main())\n")
    pip.chmod(0o755)
    return folder / "bin"


def sysconfig_site_packages() -> list[str]:
    """The test interpreter's own site-packages folders (a .pth line adds each as it is:
    the .pth files in them, such as an editable install's, are not run)."""
    paths = sysconfig.get_paths()
    return sorted({paths["purelib"], paths["platlib"]})


def assert_runs_from(bin_dir: Path, workspace: Path, installed: str) -> None:
    """The `quantcheck` a step runs is the one pip put in the environment of `bin_dir`,
    installed from `installed` (a path, as pip's direct_url.json records it)."""
    shown = subprocess.run(
        [*BASH, "-c", 'command -v quantcheck; quantcheck --version; python3 -c "import '
                      'quantcheck; print(quantcheck.__file__)"'],
        cwd=workspace, env=runner_env(bin_dir, workspace, None), capture_output=True,
        text=True, timeout=60, check=True).stdout.splitlines()
    venv = bin_dir.parent
    assert shown[0] == str(bin_dir / "quantcheck"), shown
    assert shown[1] == f"quantcheck, version {__version__}", shown
    assert Path(shown[2]).is_relative_to(venv), shown
    assert (bin_dir / "quantcheck").read_text().startswith(f"#!{bin_dir}/python")
    (info,) = Path(shown[2]).parent.parent.glob("quantcheck-*.dist-info")
    assert json.loads((info / "direct_url.json").read_text())["url"] == \
        Path(installed).as_uri()


@pytest.mark.slow  # fresh environments and pip builds: about 35 s each
@pytest.mark.parametrize("ran_from", ["checkout", "wheel"])
def test_the_written_workflow_installs_what_init_ran_from_and_runs_it(
        serve: Serve, tmp_path: Path, ran_from: str) -> None:
    """As written, its install steps included: `init` runs from a source tree (or from a
    wheel installed in an environment of its own); each job then runs on a fresh
    Python, where `pip install "$QUANTCHECK"` (the workflow's step, and the Action's
    install input) installs exactly what init wrote, and that quantcheck collects,
    compares and gates against lab servers."""
    workspace, tree = tmp_path / "repository", source_tree(tmp_path / "quantcheck-src")
    if ran_from == "checkout":
        ran = subprocess.run([sys.executable, "-m", "quantcheck", "init", str(workspace)],
                             env={**os.environ, "PYTHONPATH": str(tree / "src")},
                             capture_output=True, text=True, timeout=120)
        expected = str(tree)
    else:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        "--wheel-dir", str(tmp_path / "wheels"), str(tree)],
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                       check=True, capture_output=True, timeout=600)
        (wheel,) = (tmp_path / "wheels").glob("quantcheck-*.whl")
        mine = fresh_python(tmp_path / "mine")
        subprocess.run([mine / "pip", "install", "--quiet", str(wheel)], check=True,
                       capture_output=True, timeout=600,
                       env=runner_env(mine, tmp_path, None))
        ran = subprocess.run([mine / "quantcheck", "init", str(workspace)],
                             env=runner_env(mine, tmp_path, None), capture_output=True,
                             text=True, timeout=120)
        expected = str(wheel)
    assert ran.returncode == 0, ran.stderr
    assert f"The CI workflow installs QUANTCHECK={expected}: " in ran.stdout
    workflow = yaml.safe_load((workspace / ".github/workflows/quantcheck.yml").read_text())
    assert workflow["env"]["QUANTCHECK"] == expected

    a, b = serve(ScriptedModel({})), serve(ScriptedModel({}))
    runners = {job: fresh_python(tmp_path / job) for job in ("reference", "candidate")}
    urls, cache = {"A_URL": f"{a.url}/v1", "B_URL": f"{b.url}/v1"}, tmp_path / "cache"
    serving = {"Serve the reference", "Serve the candidate"}
    play_reference(workspace, urls, cache, runners["reference"], None, serving)
    sent_to_a = a.hits
    ran_action = play_candidate(workspace, urls, cache, runners["candidate"], None, serving)
    assert set(ran_action.outcomes.values()) == {"0"}, ran_action.logs
    assert f"quantcheck, version {__version__}" in ran_action.logs  # the Action's install
    assert ran_action.action_outputs["verdict"] == "pass"
    assert ran_action.summary.startswith("## quantcheck: PASS")
    assert sent_to_a and a.hits == sent_to_a and b.hits
    for bin_dir in runners.values():
        assert_runs_from(bin_dir, workspace, expected)


def test_the_readmes_ci_example_is_the_workflow_init_writes(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    shown = yaml.safe_load(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
    invoke("init", tmp_path)
    written = yaml.safe_load((tmp_path / ".github/workflows/quantcheck.yml").read_text())
    assert shown["env"].pop("QUANTCHECK").startswith("git+https://")  # a commit, shown
    written["env"].pop("QUANTCHECK")  # what init ran from, tested above
    assert shown == written


def path_a_team_follows() -> list[tuple[str, int]]:
    """docs/ci.md's path a team follows: each command (its continued lines joined), with
    the exit code its comment gives (`# exit N`; 0 when none)."""
    section = (REPO / "docs" / "ci.md").read_text().split("## The path a team follows", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands: list[tuple[str, int]] = []
    for line in block.replace("\\\n", " ").splitlines():
        command, _, comment = line.partition("  #")
        if command.strip() and not command.lstrip().startswith("#"):
            code = re.fullmatch(r"\s*exit (\d+)\s*", comment)
            commands.append((" ".join(command.split()), int(code.group(1)) if code else 0))
    return commands


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_path_a_team_follows_runs_as_docs_ci_md_writes_it(
        tmp_path: Path, bin_dir: Path) -> None:
    """Command by command from a fresh repository, the lab's scripted servers as the
    endpoints (on free ports, in place of 8000 and 8001): init, a first A/B and its gate,
    a stored reference, `run --print-config > ab.yaml`, `run --config ab.yaml`, the gate,
    the commit; each exits as the page says."""
    workspace = tmp_path / "repository"
    workspace.mkdir()
    git(workspace, "init", "-q")
    ports = {"8000": str(free_port()), "8001": str(free_port())}
    env = {**runner_env(bin_dir, workspace, REPO / "src"),
           **{f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
              for what, value in (("NAME", "t"), ("EMAIL", "t@example.com"))}}
    servers: list[subprocess.Popen[str]] = []
    outputs: dict[str, str] = {}
    try:
        for command, code in path_a_team_follows():
            for documented, port in ports.items():
                command = command.replace(f"127.0.0.1:{documented}/", f"127.0.0.1:{port}/")
                command = command.replace(f"--port {documented}", f"--port {port}")
            if command.endswith(" &"):
                servers.append(subprocess.Popen([*BASH, "-c", command[:-2]], cwd=workspace,
                                                env=env, text=True))
                wait_for(f"http://127.0.0.1:{command.split('--port ')[1].split()[0]}/health")
                continue
            done = subprocess.run([*BASH, "-c", command], cwd=workspace, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == code, (command, done.stdout, done.stderr)
            outputs[command] = done.stdout
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
    ran = {command: text for command, text in outputs.items()
           if command.startswith("quantcheck run") and "--print-config" not in command}
    assert len(ran) == 2 and all("gate (default policy): FAIL: 1 confident flip (capital)"
                                 in text for text in ran.values()), ran
    assert "a-label: null" in (workspace / "ab.yaml").read_text()
    assert (workspace / "runs" / "reference" / "manifest.json").is_file()
    (gated,) = [text for command, text in outputs.items()
                if command.startswith("quantcheck gate reports/pr")]
    assert "| `capital` | factual_flips |" in gated
    assert git(workspace, "ls-files", ".github") == "\n".join(sorted(
        name for name in KIT if name.startswith(".github")))


def wait_for(url: str) -> None:
    """Until a server answers `url` (a lab server started in the background)."""
    for _ in range(300):
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing answered {url} within 30 s")
