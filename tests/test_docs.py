"""Every command documents itself with an example; README documents every command."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from quantcheck.cli import cli

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in group.commands.items():
        path = (*prefix, name)
        if isinstance(command, click.Group):
            found += all_commands(command, path)
        else:
            found.append(path)
    return found


COMMANDS = all_commands(cli)


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_every_command_has_help_with_an_example(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output
    assert f"quantcheck {' '.join(path)}" in result.output


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_readme_mentions_every_command(path: tuple[str, ...]) -> None:
    assert f"quantcheck {' '.join(path)}" in README


def test_readme_documents_every_expect_check_with_an_example_that_loads(
        tmp_path: Path) -> None:
    import re

    import yaml

    from quantcheck.expectations import CHECKS
    from quantcheck.prompts import load_prompts

    rows = re.findall(r"^\| `(\w+)`(?: \([^)]*\))? \| `(\{.*?\})` \|", README, re.MULTILINE)
    assert {name for name, _ in rows} == set(CHECKS)
    for n, (name, example) in enumerate(rows):
        expect = yaml.safe_load(example)
        assert name in expect
        path = tmp_path / f"{n}.yaml"
        path.write_text(yaml.safe_dump({"prompts": [{"id": "p", "prompt": "x",
                                                     "expect": expect}]}))
        load_prompts([path])  # the example is a valid expect
