"""`quantcheck init`: a starter kit in the user's repository: a prompt set with one
example of each expect kind, a gate policy, a CI workflow with the GitHub Action it
uses (a copy of quantcheck's `action.yml` in `.github/actions/quantcheck/`), and a short
README section.

What the workflow installs (its `QUANTCHECK` variable, and the copied Action's
`install` default) is the quantcheck `init` runs from, as `installed_source` finds it:

- installed from a package index (no `direct_url.json`): `quantcheck==VERSION`;
- installed from a VCS URL (`direct_url.json` with `vcs_info`): that URL at its commit,
  `git+URL@COMMIT`;
- installed from an archive (`archive_info`): the wheel's path, or its URL;
- installed from a folder (`dir_info`, editable or not) or run from a source tree (a
  `src/quantcheck` beside a `pyproject.toml`): a git checkout with a network remote
  (`origin` first) gives `git+REMOTE@HEAD`; any other tree its path on this machine.

The kit is written whole or not at all, and only inside the repository: every target
is checked before anything is written (a file there needs `force`; a folder where a
file goes, a file where a folder goes, or a symbolic link on the way that leads
outside the repository are refused, naming the path); then every file is written to a
temporary beside its target and flushed (a full disk fails here, before any target
changes), and only then are the temporaries renamed over the targets. On a failure
every target is as it was and the folders made for the kit are removed."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from .._version import __version__
from ..errors import QuantcheckError
from ..store.files import AtomicFile, resolved, write_atomic

KIT = Path(__file__).parent / "starter"
# where each file of the kit goes in the user's repository
FILES = {"quantcheck/prompts.yaml": "prompts.yaml", "quantcheck/policy.yaml": "policy.yaml",
         "quantcheck/README.md": "README.md",
         ".github/workflows/quantcheck.yml": "workflow.yml"}
ACTION = ".github/actions/quantcheck/action.yml"
WORKFLOW = ".github/workflows/quantcheck.yml"
# the Action as the wheel ships it, or in a checkout
SHIPPED_ACTIONS = (Path(__file__).parents[1] / "_action.yml",
                   Path(__file__).parents[3] / "action.yml")
PACKAGE = Path(__file__).parents[1]
NETWORK_REMOTE = re.compile(r"^(?:(?:https?|ssh|git)://|[\w.-]+@[\w.-]+:)")


class KitInTheWay(QuantcheckError):
    """Files of the kit are already there, or something the kit cannot write over."""


class KitOutsideRepository(QuantcheckError):
    """A target of the kit leads outside the repository through a symbolic link."""


@dataclass(frozen=True)
class InstallSource:
    """What pip installs to get the quantcheck `init` runs from, and where it came from."""

    requirement: str
    origin: str


@dataclass
class StarterKit:
    """What `init` wrote, relative to the repository it wrote into."""

    root: Path
    written: list[str]
    install: InstallSource

    @property
    def prompts(self) -> str:
        return "quantcheck/prompts.yaml"

    @property
    def policy(self) -> str:
        return "quantcheck/policy.yaml"

    @property
    def workflow(self) -> str:
        return WORKFLOW


def write_starter_kit(root: Path, force: bool = False,
                      install: InstallSource | None = None) -> StarterKit:
    """Write the kit under `root`, all of it or nothing (see the module docstring)."""
    install = install or installed_source()
    contents = {name: (KIT / source).read_bytes() for name, source in FILES.items()}
    contents[WORKFLOW] = pin_workflow(contents[WORKFLOW].decode("utf-8"),
                                      install).encode("utf-8")
    contents[ACTION] = vendored_action(install.requirement)
    check_targets(root, list(contents), force)
    write_all(root, contents)
    return StarterKit(root, list(contents), install)


def check_targets(root: Path, names: list[str], force: bool) -> None:
    """Refuse, before anything is written, a kit that could not be written whole inside
    `root`."""
    if root.exists() and not root.is_dir():
        raise KitInTheWay(f"{root} is a file, not a folder: nothing written "
                          "(give the repository's folder)")
    inside = resolved(root)
    outside: dict[Path, Path] = {}
    blocked: list[str] = []
    there: list[str] = []
    for name in names:
        path = root
        parts = Path(name).parts
        for depth, part in enumerate(parts):
            path = path / part
            last = depth == len(parts) - 1
            if path.is_symlink():
                target = resolved(path)
                if target != inside and inside not in target.parents:
                    outside[path] = target
                    break
            if not os.path.lexists(path):
                break
            if last and path.is_dir():
                blocked.append(f"{path} is a folder where the kit writes a file")
            elif last:
                there.append(str(path))
            elif not path.is_dir():
                blocked.append(f"{path} is not a folder (the kit needs one there)")
                break
    if outside:
        links = "; ".join(f"{link} is a symbolic link to {target}"
                          for link, target in outside.items())
        raise KitOutsideRepository(
            f"refusing to write the kit: {links}, outside the repository {inside}: "
            "nothing written (remove the link, or point it inside the repository)")
    if blocked:
        raise KitInTheWay(f"{'; '.join(blocked)}: nothing written (move it away)")
    if there and not force:
        raise KitInTheWay(f"{', '.join(there)} already there: "
                          "nothing written (give --force to overwrite them)")


def write_all(root: Path, contents: dict[str, bytes]) -> None:
    """Every file to a flushed temporary first, then each renamed over its target; on
    any failure the targets are restored and the folders made here removed."""
    inside = resolved(root)
    made: list[Path] = []
    staged: list[tuple[Path, AtomicFile]] = []
    before: dict[Path, bytes | None] = {}
    replaced: list[Path] = []
    try:
        for name, data in contents.items():
            path = root / name
            make_folders(path.parent, made)
            before[path] = path.read_bytes() if path.is_file() else None
            staged.append((path, AtomicFile(path, within=inside)))
            staged[-1][1].write(data)
            staged[-1][1].flush()
        for path, file in staged:
            file.__exit__(None)
            replaced.append(path)
    except BaseException as error:
        for path, file in staged:
            if path not in replaced:
                file.__exit__(type(error))  # its temporary removed
        for path in reversed(replaced):
            restore(path, before[path])
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass
        raise


def make_folders(folder: Path, made: list[Path]) -> None:
    """`mkdir -p`, remembering each folder it made."""
    missing = [folder, *folder.parents]
    missing = [path for path in missing if not os.path.lexists(path)]
    for path in reversed(missing):
        try:
            path.mkdir()
        except OSError as error:
            raise KitInTheWay(f"cannot make the folder {path}: {error.strerror or error}: "
                              "nothing written") from None
        made.append(path)


def restore(path: Path, data: bytes | None) -> None:
    try:
        if data is None:
            path.unlink()
        else:
            write_atomic(path, data)
    except (OSError, QuantcheckError):
        pass  # the original error is the one to report


def pin_workflow(text: str, install: InstallSource) -> str:
    """The workflow with its `QUANTCHECK` variable set to what `init` ran from."""
    line = re.search(r"^  QUANTCHECK: .*$", text, re.MULTILINE)
    if line is None:
        raise QuantcheckError("this installation of quantcheck has a damaged starter "
                              "workflow (no QUANTCHECK line); reinstall quantcheck")
    pinned = f"  QUANTCHECK: {json.dumps(install.requirement)}  # {install.origin}"
    return text[:line.start()] + pinned + text[line.end():]


def vendored_action(requirement: str) -> bytes:
    """quantcheck's action.yml, installing `requirement` by default (a copy in the
    user's repository has no quantcheck source beside it)."""
    source = next((path for path in SHIPPED_ACTIONS if path.exists()), None)
    if source is None:
        raise QuantcheckError("this installation of quantcheck lacks its action.yml; "
                              "reinstall quantcheck")
    text = source.read_text(encoding="utf-8")
    install = re.search(r"(\n  install:\n(?:    [^\n]*\n)*?    default: )\"\"", text)
    if install is None:
        raise QuantcheckError(f"{source}: no install input to point at this version")
    start, end = install.span()
    return (text[:start] + install.group(1) + json.dumps(requirement)
            + text[end:]).encode("utf-8")


def installed_source() -> InstallSource:
    """What pip installs to get the quantcheck running now (see the module docstring)."""
    try:
        distribution: metadata.Distribution | None = metadata.distribution("quantcheck")
    except metadata.PackageNotFoundError:
        distribution = None
    return source_of(distribution, PACKAGE, __version__)


def source_of(distribution: metadata.Distribution | None, package: Path,
              version: str) -> InstallSource:
    """The install source of the quantcheck package in the folder `package`, given the
    installed distribution named quantcheck (which may describe another copy)."""
    direct = direct_url(distribution, package) if distribution is not None else None
    if distribution is not None and direct is None and describes(distribution, package):
        return InstallSource(f"quantcheck=={version}",
                             f"quantcheck {version} as installed from a package index")
    if direct is not None:
        url = str(direct.get("url", ""))
        vcs = direct.get("vcs_info")
        if isinstance(vcs, dict) and vcs.get("commit_id"):
            kind, commit = vcs.get("vcs", "git"), vcs["commit_id"]
            return InstallSource(f"{kind}+{url}@{commit}",
                                 f"the commit quantcheck was installed from, of {url}")
        if "archive_info" in direct:
            where = local_path(url)
            return InstallSource(str(where) if where else url,
                                 "the archive quantcheck was installed from"
                                 + (", a path on this machine" if where else ""))
        where = local_path(url)
        if where is not None:
            return tree_source(where, version)
    tree = package.parent.parent
    if package.parent.name == "src" and (tree / "pyproject.toml").is_file():
        return tree_source(tree, version)
    return InstallSource(f"quantcheck=={version}", f"quantcheck {version} from a package index")


def direct_url(distribution: metadata.Distribution,
               package: Path) -> dict[str, object] | None:
    """The distribution's direct_url.json (PEP 610) when it describes `package`."""
    try:
        text = distribution.read_text("direct_url.json")
        found = json.loads(text) if text else None
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    where = local_path(str(found.get("url", "")))
    if "dir_info" in found and where is not None and where.resolve() not in (
            package.resolve(), *package.resolve().parents):
        return None  # an editable install of another checkout
    if "dir_info" not in found and not describes(distribution, package):
        return None
    return found


def describes(distribution: metadata.Distribution, package: Path) -> bool:
    """Whether the distribution's files are the package in the folder `package`."""
    try:
        installed = Path(str(distribution.locate_file("quantcheck/__init__.py"))).resolve()
    except (OSError, NotImplementedError):
        return False
    return installed == (package / "__init__.py").resolve()


def local_path(url: str) -> Path | None:
    parsed = urlparse(url)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


def tree_source(tree: Path, version: str) -> InstallSource:
    """A source tree: its remote at its commit when git knows one, else its path."""
    commit = git(tree, "rev-parse", "HEAD")
    remotes = (git(tree, "remote") or "").split()
    remote = "origin" if "origin" in remotes else (remotes[0] if remotes else None)
    url = git(tree, "remote", "get-url", remote) if remote else None
    if commit and url and NETWORK_REMOTE.match(url):
        if "://" not in url:  # scp-like user@host:path, which pip cannot read
            user_host, path = url.split(":", 1)
            url = f"ssh://{user_host}/{path}"
        dirty = " (its uncommitted changes are not in it)" if git(
            tree, "status", "--porcelain", "--untracked-files=no") else ""
        return InstallSource(f"git+{url}@{commit}",
                             f"the commit of the checkout quantcheck ran from, which must be "
                             f"pushed{dirty}")
    return InstallSource(str(tree), f"the checkout quantcheck {version} ran from, a path on "
                                    "this machine")


def git(tree: Path, *arguments: str) -> str | None:
    """A git command's output in `tree`, or None when git cannot say."""
    try:
        done = subprocess.run(["git", "-C", str(tree), *arguments], capture_output=True,
                              text=True, timeout=10, stdin=subprocess.DEVNULL,
                              env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
