"""Every command documents itself with an example; README documents every command."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from quantcheck.cli import cli

from .conftest import COMMANDS, invoke

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
DOCS = {path.name: path.read_text(encoding="utf-8")
        for path in sorted((Path(__file__).parent.parent / "docs").glob("*.md"))}


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_every_command_has_help_with_an_example(path: tuple[str, ...]) -> None:
    result = invoke(*path, "--help")
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

    from quantcheck.store.inputs.prompt_sets import load_prompts
    from quantcheck.store.records.run_records import CHECKS, IMPORTED_CHECKS

    rows = re.findall(r"^\| `(\w+)`(?: \([^)]*\))? \| `(\{.*?\})` \|", DOCS["prompts.md"],
                      re.MULTILINE)
    assert {name for name, _ in rows} == set(CHECKS) - set(IMPORTED_CHECKS)
    assert all(f"| `{name}` | set by `quantcheck import`" in DOCS["prompts.md"]
               for name in IMPORTED_CHECKS)
    for n, (name, example) in enumerate(rows):
        expect = yaml.safe_load(example)
        assert name in expect
        path = tmp_path / f"{n}.yaml"
        path.write_text(yaml.safe_dump({"prompts": [{"id": "p", "prompt": "x",
                                                     "expect": expect}]}))
        load_prompts([path])  # the example is a valid expect


# --- every documented command line parses as printed --------------------------------

REPO = Path(__file__).parent.parent


def documented_commands() -> list[tuple[str, str]]:
    """(where, command line) for each `quantcheck ...` line of the code blocks of README
    and docs/, and of every command's --help examples."""
    found: list[tuple[str, str]] = []
    for name, text in [("README.md", README), *((f"docs/{n}", t) for n, t in DOCS.items())]:
        found += _commands_in(name, text)
    for path in COMMANDS:
        text = invoke(*path, "--help").output
        example = text.split("Example:", 1)[1].split("Options:", 1)[0]
        for line in example.replace("\\\n", " ").splitlines():
            if line.strip().startswith("quantcheck "):
                found.append((f"quantcheck {' '.join(path)} --help", line.strip()))
    return [(where, command) for where, command in found
            if command.split()[1] in cli.commands]


def _commands_in(name: str, text: str) -> list[tuple[str, str]]:
    import re

    found = []
    fenced = False
    logical = ""
    printed: set[str] = set()  # --print-config > FILE: a --config FILE after it is that run's
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced, logical = not fenced, ""
            continue
        if not fenced:
            continue
        logical += line.rstrip("\\").strip() + " "
        if line.endswith("\\"):
            continue
        match = re.search(r"(?:^|\s|/|run: )quantcheck ([a-z].*)", logical.split("&&")[-1])
        if match:  # the command without its comment, output redirect or trailing `&`
            command = re.split(r"\s(?:#|>|&$)", match.group(1).rstrip())[0]
            written = re.search(r"--print-config > (\S+)", match.group(1))
            printed |= {written.group(1)} if written else set()
            config = re.search(r"--config (\S+)", command)
            if not (config and config.group(1) in printed):
                found.append((f"{name}:{number}", "quantcheck " + command))
        logical = ""
    return found


def test_the_readme_stays_a_newcomers_page_and_links_the_reference() -> None:
    assert len(README.splitlines()) < 350
    for name, text in DOCS.items():
        assert f"(docs/{name})" in README, name
        assert "(../README.md)" in text, name


DOCUMENTED = documented_commands()


@pytest.mark.parametrize(("where", "command"), DOCUMENTED, ids=[w for w, _ in DOCUMENTED])
def test_every_documented_command_parses_as_printed(where: str, command: str,
                                                    tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Options, arguments and their types as click reads them, in a checkout-like folder
    (prompts/, rubrics/); the runs and reports a command names are made empty first."""
    import re
    import shlex
    import shutil

    for folder in ("prompts", "rubrics"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    # a shell variable stands for a value the job sets (a Slurm array task's index)
    words = shlex.split(re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", "1", command))[1:]
    group: click.Group = cli
    while isinstance(group.commands.get(words[0]), click.Group):
        group, words = group.commands[words[0]], words[1:]  # type: ignore[assignment]
    name, args = words[0], words[1:]
    for _ in range(10):
        try:
            group.commands[name].make_context(name, list(args))
            return
        except click.BadParameter as exc:
            missing = re.search(r"'([^']+)' does not exist", exc.format_message())
            assert missing, f"{where}: {command}: {exc.format_message()}"
            target = tmp_path / missing.group(1)
            kind = getattr(exc.param, "type", None)
            if isinstance(kind, click.Path) and kind.dir_okay and not kind.file_okay:
                target.mkdir(parents=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text("{}" if target.suffix in (".yaml", ".yml") else "[]")
        except click.UsageError as exc:
            raise AssertionError(f"{where}: {command}: {exc.format_message()}") from None
    raise AssertionError(f"{where}: {command}: too many missing paths")


REQUEST = {"--api", "--extra-body", "--api-key-env", "--timeout", "--retries"}
SHARED = {  # an option means the same on every command that sends what it shapes
    "collect": {"--prompts", "--suite", "--model", *REQUEST},
    "run": {"--prompts", "--suite", "--a-model", "--b-model", *REQUEST},
    "determinism": {"--prompts", "--suite", "--model", *REQUEST},
    "throughput": {"--prompts", "--suite", "--model", *REQUEST},
    "forced": {"--model", "--extra-body", "--api-key-env", "--timeout", "--retries"},
}


@pytest.mark.parametrize("name", sorted(SHARED))
def test_options_are_the_same_wherever_they_apply(name: str) -> None:
    command = cli.commands[name]
    given = {flag for parameter in command.params for flag in parameter.opts}
    assert SHARED[name] <= given, f"{name} lacks {sorted(SHARED[name] - given)}"


def test_throughput_takes_a_suite(serve: object, tmp_path: Path) -> None:
    from quantcheck.lab.scripted import ScriptedServer

    assert callable(serve)
    server: ScriptedServer = serve()
    result = invoke("throughput", server.url, "--suite", "facts", "--seconds", "0", "--concurrency",
                    "2", "--max-tokens", "4", "--api", "completions", "--extra-body",
                    '{"top_k": 1}')
    assert result.exit_code == 0, result.output
    assert "output tokens/s" in result.output
    assert all(r.get("top_k") == 1 and "prompt" in r for r in server.requests)


def test_every_public_name_is_documented_in_the_python_paragraph() -> None:
    """docs/development.md's Python paragraph says what each name of `quantcheck.__all__`
    is for (one name per job); every name there loads, and nothing else is exported."""
    import re

    import quantcheck

    paragraph = re.split(r"\n- ", DOCS["development.md"].split("\n- Python:", 1)[1], maxsplit=1)[0]
    undocumented = [name for name in quantcheck.__all__
                    if not re.search(rf"`[^`]*\b{re.escape(name)}\b", paragraph)]
    assert undocumented == []
    for name in quantcheck.__all__:
        getattr(quantcheck, name)
    exported = {name for names in quantcheck._EXPORTS.values() for name in names}
    assert exported | {"__version__"} == set(quantcheck.__all__)
