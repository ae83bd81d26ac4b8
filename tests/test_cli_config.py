"""cli/config.py: every option of run, collect, compare and gate from a YAML file by its
name, flags over the file, and --print-config's output read back as the same file."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
import yaml

from quantcheck.cli import cli
from quantcheck.cli.config import option_name

from .conftest import invoke

COMMANDS = ["run", "collect", "compare", "gate"]
# Options whose text has a form of its own (their callbacks read it).
FORMED = {"shard": "2/3", "routed-experts-shape": [48, 8], "extra-body": {"top_k": 1},
          "cell": ["gpu=H100"], "a-cell": ["gpu=H100"], "b-cell": ["fp8:gpu=L40S"],
          "map": ["prompt=question"]}


def a_value(option: click.Option, tmp_path: Path) -> object:
    """A value for the option other than its default, in the form a config file has."""
    name = option_name(option)
    if name in FORMED:
        return FORMED[name]
    kind = option.type
    default = option.default if isinstance(option.default, int | float) else None
    if option.is_flag:
        return not option.default
    if isinstance(kind, click.Choice):
        return [c for c in kind.choices if c != option.default][-1]
    if isinstance(kind, click.Path):
        target = tmp_path / f"{name}-path"
        if kind.exists:
            target.mkdir() if not kind.file_okay else target.write_text("x: 1\n")
        value: object = str(target)
    elif isinstance(kind, click.IntRange | click.types.IntParamType):
        low = getattr(kind, "min", None) or 0
        value = max(int(default or 0), int(low)) + 1
        high = getattr(kind, "max", None)
        value = min(int(value), int(high)) if high is not None else value
    elif isinstance(kind, click.FloatRange | click.types.FloatParamType):
        low, high = getattr(kind, "min", None), getattr(kind, "max", None)
        value = (low + high) / 2 if low is not None and high is not None else \
            float(default or 1.0) + 0.5
    else:
        value = f"{name}-value"
    return [value] if option.multiple else value


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_comes_from_the_config_file(command: str, tmp_path: Path) -> None:
    options = [p for p in cli.commands[command].params if isinstance(p, click.Option)
               and p.name not in ("config", "print_config", "help")]
    wanted = {option_name(o): a_value(o, tmp_path) for o in options}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(wanted))
    arguments = {"compare": [str(tmp_path), str(tmp_path)], "gate": [str(tmp_path)]}
    result = invoke(command, *arguments.get(command, []), "--config", config, "--print-config")
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.output)
    assert set(printed) == set(wanted)
    for name, value in wanted.items():
        assert printed[name] == value, name

    again = tmp_path / "again.yaml"
    again.write_text(result.output)
    round_trip = invoke(command, *arguments.get(command, []), "--config", again, "--print-config")
    assert round_trip.output == result.output


def test_flags_override_the_file_and_mistakes_are_named(tmp_path: Path) -> None:
    config = tmp_path / "ab.yaml"
    config.write_text("a: http://127.0.0.1:9/v1\nb: [http://127.0.0.1:10/v1]\n"
                      "out: reports/x\nprompts: [prompts/spot-check.yaml]\nrepeats: 3\n")
    result = invoke("run", "--config", config, "--repeats", "5", "--print-config")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.output)["repeats"] == 5

    config.write_text("repeats: 3\nrepeat: 4\n")
    wrong = invoke("collect", "--config", config, "--print-config")
    assert wrong.exit_code == 2
    assert f"{config}: 'repeat' is not an option of `quantcheck collect`" in wrong.output
    assert "repeats" in wrong.output  # the options it has

    config.write_text("- repeats\n")
    assert "is a mapping of option names" in invoke("collect", "--config", config).output
    config.write_text("prompts: one.yaml\n")
    assert "'prompts' is given as a list" in invoke("collect", "--config", config).output
