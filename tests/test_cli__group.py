"""The command group: a command with many options lists them in sections in --help."""

from __future__ import annotations

import click
import pytest

from quantcheck.cli import cli
from quantcheck.cli._group import MOST_UNSECTIONED, OTHER, section_of

from .conftest import invoke


def _options(command: click.Command) -> list[click.Parameter]:
    return [param for param in command.params if isinstance(param, click.Option)]


def _commands(group: click.Group = cli, prefix: str = "") -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= _commands(command, f"{prefix}{name} ")
        else:
            found[prefix + name] = command
    return found


LARGE = sorted(name for name, command in _commands().items()
               if len(_options(command)) > MOST_UNSECTIONED)


def test_the_large_commands_are_found() -> None:
    assert {"run", "collect", "compare", "gate", "determinism"} <= set(LARGE)


@pytest.mark.parametrize("name", LARGE)
def test_every_option_of_a_large_command_is_in_a_section(name: str) -> None:
    command = _commands()[name]
    loose = [param.name for param in _options(command) if not section_of(param)]
    assert not loose, f"{name}: options without a section: {loose}"
    shown = invoke(*name.split(), "--help").output
    assert f"{OTHER}:" not in shown and "\nOptions:" not in shown
    for param in _options(command):
        if not param.hidden:
            assert param.opts[0] in shown


def test_a_section_lists_its_options_under_its_title() -> None:
    shown = invoke("run", "--help").output
    compare, send = shown.index("What to compare:"), shown.index("What to send:")
    assert compare < shown.index("  --b-label") < send < shown.index("  --max-tokens")
    assert shown.index("Configuration:") < shown.index("  -h, --help")


def test_a_small_command_keeps_one_list() -> None:
    shown = invoke("plan", "--help").output
    assert "Options:\n" in shown and "What to" not in shown
