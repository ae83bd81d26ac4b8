"""The built-in prompt suites: prompts/suites/NAME.yaml, shipped in the wheel.

Each suite is an ordinary prompt set (a top-level `description`, at least 30 prompts,
every one with an expect); `--suite NAME[,NAME]` on collect and run adds them to
`--prompts`, and `quantcheck suites` lists them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ...errors import PromptFileError
from ..records.run_records import CHECKS
from .prompt_sets import load_prompts, shipped_prompt_file


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    prompts: int
    description: str
    checks: tuple[str, ...]  # the expect check kinds its prompts use


def suites_folder() -> Path:
    return shipped_prompt_file("suites")


def suite_names() -> list[str]:
    return sorted(path.stem for path in suites_folder().glob("*.yaml"))


def suite_files(names: Iterable[str]) -> list[Path]:
    """The files of suites named one by one or comma-separated ("facts,math")."""
    wanted = [name.strip() for entry in names for name in entry.split(",") if name.strip()]
    known = suite_names()
    for name in wanted:
        if name not in known:
            raise PromptFileError(f"unknown suite {name!r}; the shipped suites are "
                                  f"{', '.join(known)} (see `quantcheck suites`)")
    return [suites_folder() / f"{name}.yaml" for name in dict.fromkeys(wanted)]


def describe(name: str) -> Suite:
    import yaml

    path = suites_folder() / f"{name}.yaml"
    prompts = load_prompts([path])
    used = {check for p in prompts if p.expect for check in p.expect.to_json()}
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    return Suite(name=name, path=path, prompts=len(prompts),
                 description=str(document.get("description", "")).strip(),
                 checks=tuple(check for check in CHECKS if check in used))
