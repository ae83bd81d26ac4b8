"""cli/config.py: every option of run, collect, compare and gate from a YAML file by its
name, flags over the file, and --print-config's output read back as the same file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantcheck.cli import cli
from quantcheck.cli.config import config_keys, option_name
from quantcheck.lab.scripted import ScriptedModel

from .conftest import A_ANSWERS, B_ANSWERS, RUNNER_UPS, Serve, WritePrompts, invoke

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


@pytest.mark.parametrize(("line", "said"), [
    ("repeats: 2.7", "'repeats' is 2.7 (a number with a fraction); wanted a whole number"),
    ("top-logprobs: 3.9", "'top-logprobs' is 3.9 (a number with a fraction); wanted a whole"),
    ("repeats: true", "'repeats' is true (true or false); wanted a whole number"),
    ("repeats: '3'", "'repeats' is \"3\" (text); wanted a whole number"),
    ("repeats: 0", "'repeats': 0 is not in the range x>=1"),
    ("stream: 2", "'stream' is 2 (a whole number); wanted true or false"),
    ("stream: 'no'", "'stream' is \"no\" (text); wanted true or false"),
    ("timeout: .nan", "'timeout' is NaN (not a finite number); wanted a number"),
    ("timeout: '5'", "'timeout' is \"5\" (text); wanted a number"),
    ("label: 2024", "'label' is 2024 (a whole number); wanted text, quoted where YAML reads "
                    "another type: label: '2024'"),
    ("out: true", "'out' is true (true or false); wanted a path"),
    ("seed: 2024-01-01", "'seed' is \"2024-01-01\" (a date); wanted a whole number"),
    ("repeat-mode: 3", "'repeat-mode' is 3 (a whole number); wanted one of pool, sequential"),
    ("repeat-mode: fast", "'repeat-mode': 'fast' is not one of 'pool'"),
    ("extra-body: [1, 2]", "'extra-body' is [1, 2] (a list); wanted a mapping"),
    ("extra-body: {when: 2024-01-01}", "'extra-body' is {\"when\": \"2024-01-01\"} (a mapping); "
                                       "wanted a mapping of JSON values"),
    ("routed-experts-shape: [48, 8.5]", "'routed-experts-shape' is [48, 8.5] (a list); "
                                        "wanted [LAYERS, K]"),
    ("cell: [{gpu: H100}]", "'cell' item 1 is {\"gpu\": \"H100\"} (a mapping); wanted text"),
    ("prompts: [nowhere.yaml]", "'prompts' item 1: Path 'nowhere.yaml' does not exist"),
])
def test_a_value_of_the_wrong_type_is_refused_naming_key_value_and_type(
        line: str, said: str, tmp_path: Path) -> None:
    config = tmp_path / "collect.yaml"
    config.write_text(f"endpoint: http://127.0.0.1:9/v1\nout: {tmp_path / 'run'}\n{line}\n")
    result = invoke("collect", "--config", config, "--print-config")
    assert result.exit_code == 2, result.output
    assert f"{config}: {said}" in result.output


def test_one_value_for_a_repeatable_option_is_a_list_of_one(tmp_path: Path) -> None:
    prompts = tmp_path / "one.yaml"
    prompts.write_text("prompts: [{id: x, prompt: x}]\n")
    config = tmp_path / "ab.yaml"
    config.write_text(f"a: http://127.0.0.1:9/v1\nb: http://127.0.0.1:10/v1\nb-label: fp8\n"
                      f"prompts: {prompts}\nout: {tmp_path / 'r'}\n")
    result = invoke("run", "--config", config, "--print-config")
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.output)
    assert (printed["b"], printed["b-label"], printed["prompts"]) == (
        ["http://127.0.0.1:10/v1"], ["fp8"], [str(prompts)])


def test_replicas_are_a_list_of_urls_or_urls_joined_by_commas(tmp_path: Path) -> None:
    """A side's replicas: a list for A (`a`, `endpoint`), a list in the list of
    candidates for one candidate (`b`); printed back joined, as the command line has them."""
    config = tmp_path / "ab.yaml"
    config.write_text("a: [http://r1:8000/v1, http://r2:8000/v1]\n"
                      "b: [[http://r3:8000/v1, http://r4:8000/v1], http://r5:8000/v1]\n"
                      "suite: [facts]\nout: reports/x\nreplica-spread: repeat\n")
    result = invoke("run", "--config", config, "--print-config")
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.output)
    assert printed["a"] == "http://r1:8000/v1,http://r2:8000/v1"
    assert printed["b"] == ["http://r3:8000/v1,http://r4:8000/v1", "http://r5:8000/v1"]
    assert printed["replica-spread"] == "repeat"
    again = tmp_path / "again.yaml"
    again.write_text(result.output)
    assert invoke("run", "--config", again, "--print-config").output == result.output

    config.write_text("endpoint: [http://r1:8000/v1, http://r1:8000/v1]\nout: run\n")
    twice = invoke("collect", "--config", config, "--print-config")
    assert twice.exit_code == 2 and "named twice" in twice.output
    config.write_text("endpoint: [http://r1:8000/v1, 3]\nout: run\n")
    wrong = invoke("collect", "--config", config, "--print-config")
    assert wrong.exit_code == 2
    assert "'endpoint' is [\"http://r1:8000/v1\", 3] (a list); wanted a URL, or a list of " \
           "replicas' URLs" in wrong.output


# --- any YAML value for any key: applied, or an error naming the key -------------------

PRINTABLE = sorted(name for name, command in cli.commands.items()
                   if any(p.name == "print_config" for p in command.params))
YAML_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(-2**80, 2**80)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
    | st.dates() | st.sampled_from(["http://127.0.0.1:9/v1", "1/2", "48,8", "pool", "x=1",
                                     '{"top_k": 1}', "", "\0", "prompts"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6)
REQUIRED = {"collect": {"endpoint": "http://127.0.0.1:9/v1", "out": "run"},
            "run": {"a": "http://127.0.0.1:9/v1", "b": ["http://127.0.0.1:10/v1"],
                    "out": "report", "suite": ["facts"]},
            "compare": {"out": "report"}, "gate": {}}


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(data=st.data())
def test_any_yaml_value_for_any_key_is_applied_or_refused_by_name(
        data: st.DataObject, tmp_path: Path) -> None:
    command = data.draw(st.sampled_from(PRINTABLE))
    key = data.draw(st.sampled_from(sorted(config_keys(cli.commands[command]))))
    value = data.draw(YAML_VALUES)
    config = tmp_path / f"{command}.yaml"
    config.write_text(yaml.safe_dump({**REQUIRED[command], key: value}))
    arguments = {"compare": [tmp_path, tmp_path], "gate": [tmp_path]}.get(command, [])
    result = invoke(command, *arguments, "--config", config, "--print-config")
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 0:  # applied: printed back as it was given, or its default
        printed = yaml.safe_load(result.output)
        assert key in printed
        again = tmp_path / "again.yaml"
        again.write_text(result.output)
        assert invoke(command, *arguments, "--config", again,
                      "--print-config").output == result.output
    else:
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert f"'{key}'" in result.output or f"--{key}" in result.output, result.output


# --- --print-config's output given back as --config: the same settings ---------------

ROUND_TRIP_PROMPTS = """
prompts:
  - {id: same, category: factual, prompt: "Q: same", expect: {contains: Paris}}
  - {id: flip, category: factual, prompt: "Q: flip", expect: {contains: Canberra}}
"""
ASKED = ["--repeats", "2", "--top-logprobs", "3", "--concurrency", "2"]


def settings_of(out: Path) -> list[object]:
    """What a command's output folder says of the settings that made it: each run's
    request settings, label and cell facts; the pairs; the gate's rules."""
    found: list[object] = []
    for manifest in sorted(out.rglob("manifest.json")):
        data = json.loads(manifest.read_text())
        found.append([str(manifest.relative_to(out)), data["parameters"], data["label"],
                      data["cell"]])
    found += [(path.name, path.read_text()) for path in sorted(out.rglob("pairs.csv"))]
    for gate in sorted(out.rglob("gate.json")):
        found.append(json.loads(gate.read_text())["rules"])
    return found


def test_print_config_is_read_back_as_the_same_settings_by_every_command(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    a = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS)).url
    b = serve(ScriptedModel(B_ANSWERS, RUNNER_UPS)).url
    prompts = write_prompts(ROUND_TRIP_PROMPTS)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(f'{{"question": "Q: {n}"}}\n' for n in range(4)))
    reference = tmp_path / "reference"
    assert invoke("collect", "--endpoint", a, "--label", "bf16", "--prompts", prompts,
                  "--out", reference, *ASKED).exit_code == 0
    candidate = tmp_path / "candidate"
    assert invoke("collect", "--endpoint", b, "--prompts", prompts, "--out", candidate,
                  *ASKED).exit_code == 0
    report = tmp_path / "report"
    assert invoke("compare", reference, candidate, "--out", report).exit_code == 1
    out = tmp_path / "out"
    combinations: list[tuple[str, list[object], list[object]]] = [
        ("collect", [], ["--endpoint", b, "--prompts", prompts, "--out", out]),
        ("collect", [], ["--endpoint", b, "--prompts", rows, "--map", "prompt=question",
                         "--out", out, "--label", "fp8",
                         "--no-stream", "--extra-body", '{"top_k": 1}', "--cell", "gpu=H100",
                         "--no-preflight", "--sample", "2", "--seed", "3", *ASKED]),
        ("run", [], ["--a", a, "--a-label", "bf16", "--b", b, "--b-label", "fp8",
                     "--prompts", prompts, "--out", out, "--a-cell", "gpu=H100"]),
        ("run", [], ["--a-run", reference, "--b", b, "--prompts", prompts, "--out", out,
                     *ASKED]),
        ("run", [], ["--a-run", reference, "--b", b, "--b-label", "one", "--b", a,
                     "--b-label", "two", "--prompts", prompts, "--out", out,
                     "--matrix", tmp_path / "matrix.csv", "--no-preflight", *ASKED]),
        ("compare", [reference, candidate], ["--out", out]),
        ("compare", [reference, candidate], ["--out", out, "--sig-digits", "6",
                                             "--allow-code-exec", "--code-timeout", "5"]),
        ("gate", [report], []),
        ("gate", [report], ["--max-factual-flips", "1", "--no-require-review",
                            "--min-identical-share", "0.1"]),
    ]
    assert {command for command, _, _ in combinations} == set(PRINTABLE)
    for n, (command, positional, flags) in enumerate(combinations):
        printed = invoke(command, *positional, *flags, "--print-config")
        assert printed.exit_code == 0, (n, printed.output)
        config = tmp_path / f"{n}-{command}.yaml"
        config.write_text(printed.output)
        assert invoke(command, *positional, "--config", config, "--print-config"
                      ).output == printed.output, n
        written = out if command != "gate" else report
        by_flags = invoke(command, *positional, *flags)
        flags_settings = settings_of(written)
        shutil.rmtree(out, ignore_errors=True)
        by_file = invoke(command, *positional, "--config", config)
        assert (n, by_file.exit_code) == (n, by_flags.exit_code), (by_flags.output,
                                                                   by_file.output)
        assert by_flags.exit_code in (0, 1), by_flags.output
        assert settings_of(written) == flags_settings and flags_settings, n
        shutil.rmtree(out, ignore_errors=True)
