"""cli/options.py: an option that only tunes a switch left off is refused, not ignored
(before anything is read or sent); a --config file may still set it."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import invoke

NOWHERE = "http://127.0.0.1:9/v1"
RUN = ["run", "--a", NOWHERE, "--b", NOWHERE, "--suite", "facts", "--out", "unused"]


@pytest.mark.parametrize(("args", "message"), [
    ([*RUN, "--throughput-seconds", "5"], "--throughput-seconds needs --throughput"),
    ([*RUN, "--forced-mode", "echo"], "--forced-mode needs --forced"),
    ([*RUN, "--matrix", "m.csv"], "--matrix needs two or more --b"),
    ([*RUN, "--code-timeout", "3"], "--code-timeout needs --allow-code-exec"),
    ([*RUN, "--judge-timeout", "3"], "--judge-timeout needs --judge URL"),
    (["compare", "a", "b", "--out", "r", "--matrix", "m.csv"],
     "--matrix needs two or more B runs"),
    (["demo", "--engine", "scripted", "--fault", "lmhead-noscale"],
     "--fault needs --engine gemma"),
    (["prompts", "check", "p.yaml", "--seed", "3"], "give --sample N as well"),
    (["gate", "a", "--candidate", "fp8"], "--candidate picks one in a report of several"),
], ids=["throughput", "forced", "matrix", "code", "judge", "compare-matrix", "demo",
        "seed", "gate-candidate"])
def test_an_option_without_its_switch_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 args: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    (tmp_path / "p.yaml").write_text("prompts:\n  - {id: a, prompt: x}\n")
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "p.yaml"]  # nothing written


def test_a_config_file_may_set_a_tuning_option_for_runs_that_use_it(tmp_path: Path) -> None:
    config = tmp_path / "quantcheck.yaml"
    config.write_text("throughput-seconds: 5\nforced-mode: echo\n")
    result = invoke("run", "--config", config, "--a", NOWHERE, "--b", NOWHERE, "--suite",
                    "facts", "--out", tmp_path / "r")
    assert result.exit_code == 2  # the endpoint is unreachable: the options were taken
    assert "needs" not in result.output and "127.0.0.1:9" in result.output


def _float_options() -> list[tuple[tuple[str, ...], str]]:
    """Every option of every command that takes a number with a fraction."""
    import click

    from quantcheck.cli import cli

    from .conftest import COMMANDS

    found = []
    for words in COMMANDS:
        command: click.Command = cli
        for word in words:
            assert isinstance(command, click.Group)
            command = command.commands[word]
        found += [(words, param.opts[0]) for param in command.params
                  if isinstance(param, click.Option)
                  and isinstance(param.type, click.types.FloatParamType)]
    return found


FLOAT_OPTIONS = _float_options()


def test_the_float_options_are_all_found() -> None:
    names = {option for _, option in FLOAT_OPTIONS}
    assert {"--timeout", "--judge-timeout", "--code-timeout", "--throughput-seconds",
            "--min-identical-share", "--max-forced-kl", "--disagreement", "--power"} <= names


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
@pytest.mark.parametrize(("command", "option"), FLOAT_OPTIONS,
                         ids=[f"{' '.join(c)} {o}" for c, o in FLOAT_OPTIONS])
def test_nan_and_infinity_are_refused_by_every_number_option(
        command: tuple[str, ...], option: str, value: str) -> None:
    """click's FloatRange lets NaN through any bound: every number option refuses it,
    and infinity, naming the option, before anything is read or sent."""
    result = invoke(*command, option, value)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output, result.output
    assert "is not a finite number" in result.output, result.output


# --- a file an option writes is never one the command reads -----------------------------

def _sides(folder: Path) -> list[str]:
    for name in ("a", "b1", "b2"):
        (folder / f"{name}.texts.json").write_text('["Paris"]')
    (folder / "rows.jsonl").write_text('{"id": "capital", "prompt": "Q: capital"}\n')
    (folder / "run").mkdir()
    (folder / "run" / "manifest.json").write_text("{}")
    (folder / "ab.yaml").write_text("out: report\n")
    return ["a.texts.json", "b1.texts.json", "b2.texts.json", "--prompts", "rows.jsonl"]


@pytest.mark.parametrize(("args", "written"), [
    (["--matrix", "rows.jsonl"], "rows.jsonl"),
    (["--matrix", "b1.texts.json"], "b1.texts.json"),
    (["--matrix", "ab.yaml", "--config", "ab.yaml"], "ab.yaml"),
    (["--judge", NOWHERE, "--judge-cache", "rows.jsonl"], "rows.jsonl"),
], ids=["matrix-prompts", "matrix-side", "matrix-config", "judge-cache-prompts"])
def test_compare_never_writes_a_file_it_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              args: list[str], written: str) -> None:
    """--matrix and --judge-cache naming an input (a prompt data file, a side, the
    --config file) are refused before anything is read or written, the input intact."""
    monkeypatch.chdir(tmp_path)
    sides = _sides(tmp_path)
    before = (tmp_path / written).read_bytes()
    result = invoke("compare", *sides, "--out", "report", *args)
    assert result.exit_code == 2, result.output
    assert f"refusing to write {written}: it is the input {written}" in result.output
    assert (tmp_path / written).read_bytes() == before
    assert not (tmp_path / "report").exists()


def test_run_never_appends_its_matrix_to_a_file_inside_its_stored_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _sides(tmp_path)
    result = invoke("run", "--a-run", "run", "--b", NOWHERE, "--b", NOWHERE, "--prompts",
                    "rows.jsonl", "--out", "report", "--matrix", "run/manifest.json")
    assert result.exit_code == 2, result.output
    assert "refusing to write run/manifest.json: it lies inside the input run" in result.output
    assert (tmp_path / "run" / "manifest.json").read_text() == "{}"
