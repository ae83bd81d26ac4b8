"""The worked examples of docs/development.md, done as the page shows them: its code
blocks applied to a copy of the package (so the page cannot go stale), the copy run in
a subprocess."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from quantcheck import load_run

REPO = Path(__file__).parents[1]
PACKAGE = REPO / "src" / "quantcheck"
DEVELOPMENT = (REPO / "docs" / "development.md").read_text(encoding="utf-8")

# --- a new engine ------------------------------------------------------------------------

ENGINE_SECTION = "## Worked example: a new engine"
_PATH = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|json|md))`")


def engine_blocks() -> dict[str, str]:
    """Each code block of the section by the file its numbered step names first."""
    section = DEVELOPMENT.split(ENGINE_SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = {}
    for step in re.split(r"\n(?=\d+\. )", section)[1:]:
        path = _PATH.search(step)
        code = re.search(r"```\w*\n(.*?)\n\s*```", step, re.DOTALL)
        assert path and code, f"a step of {ENGINE_SECTION!r} without its file or its block"
        lines = code.group(1).splitlines()
        indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
        blocks[path.group(1)] = "\n".join(line[indent:] for line in lines)
    return blocks


def with_engine(copy: Path, profile: str) -> str:
    """The copy's engines.py with `profile` above ENGINES and its name last in the
    tuple ENGINES is made from; the profile's variable."""
    name = re.match(r"(\w+) = EngineProfile\(", profile)
    assert name, "the profile block assigns one EngineProfile"
    engines = copy / "store" / "engines.py"
    text = engines.read_text(encoding="utf-8")
    head, tail = text.split("ENGINES: dict[str, EngineProfile] = ", 1)
    listed, rest = tail.split(")}", 1)
    engines.write_text(f"{head}{profile}\n\n\nENGINES: dict[str, EngineProfile] = "
                       f"{listed}, {name.group(1)})}}{rest}", encoding="utf-8")
    return name.group(1)


def literal_of(path: Path, name: str) -> object:
    """A module-level literal of a file, read without importing it."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path} has no {name}")


# Runs in the copy: a lab server in the new dialect replaying the recorded answer, then
# the command line's collect against it, once within the engine's limit and once above
# it with preflight; prints where quantcheck was imported from, the exit codes and what
# the server was sent.
RUNNER = """
import json, pathlib, sys
import quantcheck
from quantcheck.cli import cli
from quantcheck.lab.scripted import ScriptedServer

dialect, kind, fixture, prompts, out = sys.argv[1:6]
codes = []
with ScriptedServer(dialect=dialect, replay={kind: pathlib.Path(fixture).read_bytes()}) as server:
    for extra in (["--no-preflight", "--top-logprobs", "2"], ["--top-logprobs", "9"]):
        try:
            cli.main(["collect", "--endpoint", server.url, "--prompts", prompts, "--out",
                      out + str(len(codes)), "--label", dialect, "--no-stream", *extra])
        except SystemExit as exc:
            codes.append(exc.code)
print(json.dumps({"package": quantcheck.__file__, "codes": codes,
                  "sent": server.requests}))
"""


def test_a_new_engine_in_four_files_is_recognised_collected_and_limited(
        tmp_path: Path) -> None:
    blocks = engine_blocks()
    assert len(blocks) <= 5 and set(blocks) == {
        "src/quantcheck/store/engines.py", "tests/fixtures/wire/quill-chat.json",
        "tests/test_wire_formats.py", "docs/engines.md"}
    copy = tmp_path / "src" / "quantcheck"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for shipped in ("prompts", "rubrics"):  # read beside the package, as in a checkout
        (tmp_path / shipped).symlink_to(REPO / shipped)
    with_engine(copy, blocks["src/quantcheck/store/engines.py"])
    fixture = tmp_path / "quill-chat.json"
    fixture.write_text(blocks["tests/fixtures/wire/quill-chat.json"], encoding="utf-8")
    row = ast.literal_eval(blocks["tests/test_wire_formats.py"].replace(
        "CANBERRA", repr(literal_of(REPO / "tests" / "test_wire_formats.py", "CANBERRA"))))
    name, dialect, api, stream, text, finish, tokens, first_top = row[0]
    assert (name, api, stream) == (fixture.name, "chat", False)
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text("prompts:\n  - id: p\n    messages: [{role: user, content: hi}]\n")

    done = subprocess.run(
        [sys.executable, "-c", RUNNER, dialect, api, str(fixture), str(prompts),
         str(tmp_path / "run")], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(copy.parent)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["package"] == str(copy / "__init__.py")  # the copy ran, not the checkout
    assert result["codes"][0] in (0, None) and result["codes"][1] != 0
    assert "--top-logprobs 8" in done.stdout + done.stderr  # preflight's fix, from the profile

    run = load_run(tmp_path / "run0")
    assert run.manifest.server.runtime == dialect
    (record,) = list(run.completions())
    assert (record.text, record.finish_reason, record.error) == (text, finish, None)
    assert record.tokens is not None and record.tokens.text == tokens["text"]
    assert record.tokens.logprob == tokens["logprob"] and record.tokens.top(0) == first_top
    generations = [body for body in result["sent"] if "messages" in body]
    assert generations and not any("repeat_penalty" in body for body in generations)
    asked = [body.get("top_logprobs") for body in generations]
    assert 2 in asked and 9 not in asked  # above the limit, preflight fails without asking


def test_a_new_engine_row_fits_the_profile_table() -> None:
    """The docs row the example shows has the profile table's columns."""
    row = engine_blocks()["docs/engines.md"]
    table = (REPO / "docs" / "engines.md").read_text(encoding="utf-8").split(
        "## Engine profiles", 1)[1]
    header = next(line for line in table.splitlines() if line.startswith("| engine |"))
    assert row.count(" | ") == header.count(" | ")
