"""`--config FILE` and `--print-config`: a command's options from a reviewed YAML file.

The file is a mapping of the command's option names, without the dashes, to values
as YAML writes them; flags given on the command line override it:

    # ab.yaml: quantcheck run --config ab.yaml
    a: http://gpu:8000/v1
    a-label: bf16
    b: [http://gpu:8001/v1]
    b-label: [fp8]
    prompts: [prompts/default.yaml]
    repeats: 3
    extra-body: {repeat_penalty: null}
    out: reports/fp8

An option given several times takes a list; a flag `true` or `false` (`stream: false`
for --no-stream); null leaves the option at its default. `--print-config` prints the
effective options (file, flags and defaults together) in this form and stops: its
output given back as --config gives the same settings.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import click
import yaml

from ..errors import ConfigFileError
from ..store.yamlfile import read_yaml

F = TypeVar("F", bound=Callable[..., object])
OWN = ("config", "print_config")


def config_options(function: F) -> F:
    """Add --config FILE and --print-config to a command."""

    @functools.wraps(function)
    def command(config: Path | None, print_config: bool, **values: object) -> object:
        if print_config:
            click.echo(effective_config(click.get_current_context()), nl=False)
            return None
        return function(**values)

    with_print = click.option(
        "--print-config", is_flag=True,
        help="Print the effective options (the --config file, flags and defaults) as a "
             "--config file, and stop.")(command)
    return cast(F, click.option(
        "--config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
        is_eager=True, expose_value=True, callback=_load,
        help="A YAML file of this command's options, by name (e.g. `repeats: 3`); flags "
             "given override it.")(with_print))


def option_name(parameter: click.Parameter) -> str:
    """The option's long name without dashes: --top-logprobs -> top-logprobs."""
    return max(parameter.opts, key=len).lstrip("-")


def _options(command: click.Command) -> dict[str, click.Option]:
    return {option_name(p): p for p in command.params
            if isinstance(p, click.Option) and p.name not in OWN and p.name != "help"}


def _load(context: click.Context, parameter: click.Parameter, value: Path | None
          ) -> Path | None:
    """Put the file's options where click looks for defaults (flags still win)."""
    if value is None:
        return None
    try:
        context.default_map = {**(context.default_map or {}), **_defaults(context, value)}
    except ConfigFileError as exc:
        raise click.BadParameter(str(exc), context, parameter) from None
    return value


def _defaults(context: click.Context, value: Path) -> dict[str, object]:
    """The file's options by their parameter names, in their command-line form."""
    data = read_yaml(value, "config file")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigFileError(f"{value}: a config file is a mapping of option names to "
                              "values, e.g. `repeats: 3`")
    options = _options(context.command)
    defaults: dict[str, object] = {}
    for key, given in data.items():
        option = options.get(str(key).replace("_", "-"))
        if option is None or option.name is None:
            raise ConfigFileError(
                f"{value}: '{key}' is not an option of `quantcheck {context.info_name}` "
                f"(its options: {', '.join(sorted(options))})")
        if given is not None:
            defaults[option.name] = _as_given(value, key, option, given)
    return defaults


def _as_given(path: Path, key: object, option: click.Option, value: object) -> object:
    """A YAML value in the form the option takes on the command line."""
    if option.multiple:
        if not isinstance(value, list):
            raise ConfigFileError(f"{path}: '{key}' is given as a list (it can be repeated)")
        return [_scalar(path, key, item) for item in value]
    if isinstance(value, dict):
        return json.dumps(value)  # --extra-body and the like: a JSON object
    if isinstance(value, list):
        return ",".join(str(_scalar(path, key, item)) for item in value)  # LAYERS,K
    return _scalar(path, key, value)


def _scalar(path: Path, key: object, value: object) -> object:
    if isinstance(value, dict | list):
        raise ConfigFileError(f"{path}: '{key}': a list of plain values is expected here")
    return value


def effective_config(context: click.Context) -> str:
    """The command's options as they stand, as a --config file."""
    values: dict[str, object] = {}
    for name, option in _options(context.command).items():
        value = context.params.get(option.name or "")
        values[name] = _plain(value)
    header = f"# quantcheck {context.info_name} --config FILE: the effective options\n"
    return header + yaml.safe_dump(values, sort_keys=False, allow_unicode=True)


def _plain(value: object) -> object:
    """A value YAML writes plainly: paths as text, tuples as lists, records as mappings."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise ConfigFileError(f"cannot print an option's value of type {type(value).__name__}")
