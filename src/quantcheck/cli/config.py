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

Each value has its option's type, never converted: a whole number for a count
(`repeats: 2.7`, `repeats: true` and `repeats: '3'` are refused), a number for a
duration, `true` or `false` for a flag (`stream: false` for --no-stream), text for a
name, URL or path (a name YAML reads as a number is quoted: `label: '2024'`), a
mapping for --extra-body, [LAYERS, K] for --routed-experts-shape. An option given
several times takes a list, or one value for a list of one (`b: http://...`). A side
served by replicas takes their URLs as a list (`a: [http://r1/v1, http://r2/v1]`; a
candidate's, in the list of candidates: `b: [[http://r3/v1, http://r4/v1]]`), or
joined by commas as on the command line. null
leaves the option at its default. A value that does not fit is an error naming the
file, the key, the value given and what is wanted. `--print-config` prints the
effective options (file, flags and defaults together) in this form and stops: its
output given back as --config gives the same settings.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import click
import yaml

from ..errors import ConfigFileError
from ..store.inputs.yamlfile import read_yaml
from ._group import CONFIG, in_section
from .options import endpoints_option, json_object_option, layers_and_k

F = TypeVar("F", bound=Callable[..., object])
OWN = ("config", "print_config")
SHOWN_CHARACTERS = 60  # of a value quoted in an error


def config_options(function: F) -> F:
    """Add --config FILE and --print-config to a command."""

    @functools.wraps(function)
    def command(config: Path | None, print_config: bool, **values: object) -> object:
        if print_config:
            click.echo(effective_config(click.get_current_context()), nl=False)
            return None
        return function(**values)

    return in_section(
        CONFIG,
        click.option("--config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     is_eager=True, expose_value=True, callback=_load,
                     help="A YAML file of this command's options, by name (e.g. `repeats: "
                          "3`); flags given override it."),
        click.option("--print-config", is_flag=True,
                     help="Print the effective options (the --config file, flags and "
                          "defaults) as a --config file, and stop."),
    )(cast(F, command))


def option_name(parameter: click.Parameter) -> str:
    """The option's long name without dashes: --top-logprobs -> top-logprobs."""
    return max(parameter.opts, key=len).lstrip("-")


def config_keys(command: click.Command) -> dict[str, click.Option]:
    """The options a --config file of this command may set, by their names in it."""
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
                              f"values, e.g. `repeats: 3`; it holds {_kind(data)}")
    options = config_keys(context.command)
    defaults: dict[str, object] = {}
    for key, given in data.items():
        option = options.get(str(key).replace("_", "-"))
        if option is None or option.name is None:
            raise ConfigFileError(
                f"{value}: '{key}' is not an option of `quantcheck {context.info_name}` "
                f"(its options: {', '.join(sorted(options))})")
        if given is not None:
            defaults[option.name] = _as_given(
                ConfigKey(value, option_name(option), option, context), given)
    return defaults


class ConfigKey:
    """One key of a config file: where it is, its option, and the errors about it."""

    def __init__(self, path: Path, name: str, option: click.Option,
                 context: click.Context) -> None:
        self.path, self.name, self.option, self.context = path, name, option, context

    def error(self, given: object, wanted: str, item: int | None = None) -> ConfigFileError:
        which = f"'{self.name}'" if item is None else f"'{self.name}' item {item + 1}"
        return ConfigFileError(f"{self.path}: {which} is {_shown(given)} ({_kind(given)}); "
                               f"wanted {wanted}")


def _as_given(key: ConfigKey, value: object) -> object:
    """A YAML value in the form the option takes on the command line, or an error."""
    if key.option.multiple:
        items = value if isinstance(value, list) else [value]  # one value: a list of one
        return [_one(key, item, n if isinstance(value, list) else None)
                for n, item in enumerate(items)]
    return _one(key, value, None)


def _one(key: ConfigKey, value: object, item: int | None) -> object:
    option, kind = key.option, key.option.type
    if option.callback is endpoints_option and isinstance(value, list):  # replicas
        if not value or not all(isinstance(url, str) for url in value):
            raise key.error(value, "a URL, or a list of replicas' URLs (text each)", item)
        value = ",".join(value)
    if option.callback is json_object_option:  # --extra-body: a mapping (or its JSON)
        if isinstance(value, dict):
            try:
                return json.dumps(value, allow_nan=False)
            except (ValueError, TypeError, RecursionError):  # a date, NaN, a loop
                raise key.error(value, "a mapping of JSON values (text, numbers, true, "
                                       "false, null, lists, mappings)", item) from None
        if not isinstance(value, str):
            raise key.error(value, 'a mapping, e.g. {"repeat_penalty": null}', item)
        return value
    if option.callback is layers_and_k:  # LAYERS,K
        if isinstance(value, list) and len(value) == 2 and all(_whole(v) for v in value):
            return ",".join(str(v) for v in value)
        if not isinstance(value, str):
            raise key.error(value, "[LAYERS, K], two whole numbers, e.g. [48, 8]", item)
        return value
    if option.is_flag and isinstance(kind, click.types.BoolParamType):
        if not isinstance(value, bool):
            raise key.error(value, f"true or false, e.g. {key.name}: true", item)
        return value
    if isinstance(kind, click.types.IntParamType):
        if not _whole(value):
            raise key.error(value, f"a whole number, e.g. {key.name}: "
                                   f"{_example(option, 3)}", item)
    elif isinstance(kind, click.types.FloatParamType):
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not _finite(value):
            raise key.error(value, f"a number, e.g. {key.name}: {_example(option, 30)}", item)
    elif not isinstance(value, str):
        raise key.error(value, _text_wanted(key, value), item)
    elif "\0" in value:
        raise key.error(value, "text without a NUL character", item)
    _convert(key, value, item)
    return value


def _convert(key: ConfigKey, value: object, item: int | None) -> None:
    """The option type's own check (a range, a choice, a file that must exist), said
    as an error about the key."""
    try:
        key.option.type.convert(value, key.option, key.context)
    except click.BadParameter as exc:
        which = f"'{key.name}'" if item is None else f"'{key.name}' item {item + 1}"
        raise ConfigFileError(f"{key.path}: {which}: {exc.message}") from None


def _text_wanted(key: ConfigKey, given: object) -> str:
    kind = key.option.type
    if isinstance(kind, click.Choice):
        return f"one of {', '.join(map(str, kind.choices))}"
    what = "a path" if isinstance(kind, click.Path) else "text"
    if isinstance(given, list | dict) or given is None:
        return what
    shown = json.dumps(given) if isinstance(given, bool) else str(given)
    return f"{what}, quoted where YAML reads another type: {key.name}: '{shown}'"


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer beyond a float
        return False


def _example(option: click.Option, fallback: object) -> object:
    default = option.default
    return default if isinstance(default, int | float) and not isinstance(default, bool) \
        else fallback


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number with a fraction" if math.isfinite(value) else "not a finite number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _shown(value: object) -> str:
    """The value as YAML would write it, shortened."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:  # a mapping or list that holds itself (a YAML alias loop)
        text = repr(value)
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS - 3] + "..."


def effective_config(context: click.Context) -> str:
    """The command's options as they stand, as a --config file."""
    values: dict[str, object] = {}
    for name, option in config_keys(context.command).items():
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
