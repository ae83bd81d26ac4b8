"""`quantcheck init`: a starter kit in the user's repository: a prompt set with one
example of each expect kind, a gate policy, a CI workflow with the GitHub Action it
uses (a copy of quantcheck's `action.yml` in `.github/actions/quantcheck/`, installing
this version of quantcheck from PyPI), and a short README section. A file already there
is never overwritten unless asked (`force`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .._version import __version__
from ..errors import QuantcheckError
from ..store.files import make_directory, write_atomic

KIT = Path(__file__).parent / "starter"
# where each file of the kit goes in the user's repository
FILES = {"quantcheck/prompts.yaml": "prompts.yaml", "quantcheck/policy.yaml": "policy.yaml",
         "quantcheck/README.md": "README.md",
         ".github/workflows/quantcheck.yml": "workflow.yml"}
ACTION = ".github/actions/quantcheck/action.yml"
# the Action as the wheel ships it, or in a checkout
SHIPPED_ACTIONS = (Path(__file__).parents[1] / "_action.yml",
                   Path(__file__).parents[3] / "action.yml")


class KitInTheWay(QuantcheckError):
    """Files of the kit are already there."""


@dataclass
class StarterKit:
    """What `init` wrote, relative to the repository it wrote into."""

    root: Path
    written: list[str]

    @property
    def prompts(self) -> str:
        return "quantcheck/prompts.yaml"

    @property
    def policy(self) -> str:
        return "quantcheck/policy.yaml"


def write_starter_kit(root: Path, force: bool = False) -> StarterKit:
    """Write the kit under `root`; refuse, naming them, when any of its files exist."""
    contents = {name: (KIT / source).read_bytes() for name, source in FILES.items()}
    contents[ACTION] = vendored_action()
    there = [name for name in contents if (root / name).exists()]
    if there and not force:
        raise KitInTheWay(f"{', '.join(str(root / n) for n in there)} already there: "
                          "nothing written (give --force to overwrite them)")
    for name, content in contents.items():
        make_directory((root / name).parent)
        write_atomic(root / name, content)
    return StarterKit(root, list(contents))


def vendored_action() -> bytes:
    """quantcheck's action.yml, installing this version from PyPI by default (a copy in
    the user's repository has no quantcheck source beside it)."""
    source = next((path for path in SHIPPED_ACTIONS if path.exists()), None)
    if source is None:
        raise QuantcheckError("this installation of quantcheck lacks its action.yml; "
                              "reinstall quantcheck")
    text = source.read_text(encoding="utf-8")
    install = re.search(r"(\n  install:\n(?:    [^\n]*\n)*?    default: )\"\"", text)
    if install is None:
        raise QuantcheckError(f"{source}: no install input to point at this version")
    start, end = install.span()
    return (text[:start] + install.group(1) + f'"quantcheck=={__version__}"'
            + text[end:]).encode("utf-8")
