"""The worked examples of docs/development.md done on a scratch copy of the package: the
doc's own code block applied to the copy, the copy run in a child process, and each
place the doc says the change reaches checked there (so the doc cannot go stale)."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from quantcheck import load_run

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "src" / "quantcheck"
DEVELOPMENT = ROOT / "docs" / "development.md"


def code_block(heading: str) -> str:
    """The first ```python block of docs/development.md's section `heading`."""
    section = DEVELOPMENT.read_text(encoding="utf-8").split(f"\n## {heading}\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    found = re.search(r"^```python\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert found, f"docs/development.md, {heading}: no ```python block"
    return found.group(1)


def scratch_package(tmp_path: Path) -> Path:
    """A copy of src/quantcheck under tmp_path, with the repository's rubrics and prompt
    sets beside it as in a checkout; the copy's parent is the PYTHONPATH."""
    copy = tmp_path / "src" / "quantcheck"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "rubrics", tmp_path / "rubrics")
    shutil.copytree(ROOT / "prompts", tmp_path / "prompts")
    return copy


def run_child(source: Path, script: str, *args: str) -> Any:
    """`script` run on the copy (PYTHONPATH=source) in a child process; its JSON."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    ran = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                         text=True, env=env, timeout=120)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


# --- a new gate limit: one row of gate/limits.py ------------------------------------------

LIMIT_ROW_END = "\n)\nBY_KEY"  # the end of LIMITS, where a new row goes

# A, B: five prompts; B's answers to `short1` and `short2` are shorter, to `long` longer
ANSWERS = {"same": ("Paris.", "Paris."), "short1": ("It is 42, since 6*7=42.", "42."),
           "short2": ("Jane Austen wrote Emma.", "Austen."), "long": ("Yes.", "Yes, it is."),
           "reworded": ("Blue.", "Azure.")}

GATE_SCRIPT = """
import json, sys
from pathlib import Path
from click.testing import CliRunner
from quantcheck.cli import cli
from quantcheck.gate.limits import markdown_table
from quantcheck.gate.schemas import generated, write_shipped
from quantcheck.gate.verdict import Policy

folder = Path(sys.argv[1])
def invoke(*args):
    result = CliRunner().invoke(cli, [str(arg) for arg in args], terminal_width=200)
    return {"exit": result.exit_code, "output": result.output}
def gate(*args):
    ran = invoke("gate", folder / "report", *args)
    written = folder / "report" / "gate.json"
    ran["rules"] = {rule["name"]: rule for rule in json.loads(written.read_text())["rules"]
                    } if written.exists() else {}
    ran["junit"] = (folder / "report" / "junit.xml").read_text() if written.exists() else ""
    written.unlink(missing_ok=True)
    return ran
write_shipped()
shipped = Path(sys.modules["quantcheck"].__file__).parent / "store/schemas/policy.schema.json"
found = {
    "package": sys.modules["quantcheck"].__file__,
    "python": [Policy().max_shorter_share, Policy(max_shorter_share=0.2).max_shorter_share],
    "help": {name: invoke(name, "--help")["output"] for name in ("gate", "compare", "run")},
    "config": invoke("gate", folder, "--print-config")["output"],
    "schema": json.loads(generated("policy"))["properties"].get("max_shorter_share"),
    "shipped": "max_shorter_share" in json.loads(shipped.read_text())["properties"],
    "table": [line for line in markdown_table() if "max_shorter_share" in line],
    "compare": invoke("compare", folder / "a.texts.json", folder / "b.texts.json",
                      "--prompts", folder / "prompts.jsonl", "--out", folder / "report"),
    "default": gate(),
    "over": gate("--max-shorter-share", "0.3"),
    "file": gate("--policy", folder / "policy.yaml"),
    "refused": invoke("gate", folder / "report", "--policy", folder / "bad.yaml"),
}
print(json.dumps(found))
"""


def small_report_inputs(folder: Path) -> None:
    """Two texts files and their prompts; policy files allowing 0.4 and out of range."""
    (folder / "prompts.jsonl").write_text("".join(
        json.dumps({"id": prompt_id, "prompt": f"Q: {prompt_id}"}) + "\n"
        for prompt_id in ANSWERS), encoding="utf-8")
    for index, side in enumerate(("a", "b")):
        texts = [pair[index] for pair in ANSWERS.values()]
        (folder / f"{side}.texts.json").write_text(json.dumps(texts), encoding="utf-8")
    (folder / "policy.yaml").write_text("max_shorter_share: 0.4\n", encoding="utf-8")
    (folder / "bad.yaml").write_text("max_shorter_share: 2\n", encoding="utf-8")


@pytest.fixture(scope="module")
def new_limit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The doc's row added at the end of LIMITS in a copy of the package, and what the
    copy then does: its help, --print-config, schema, docs table, and the gate on a small
    report of five pairs, two of them shorter on B (40%)."""
    tmp_path = tmp_path_factory.mktemp("gatelimit")
    copy = scratch_package(tmp_path)
    table = copy / "gate" / "limits.py"
    text = table.read_text(encoding="utf-8")
    assert text.count(LIMIT_ROW_END) == 1, "gate/limits.py: LIMITS no longer ends as it did"
    row = code_block("Worked example: a new gate limit")
    table.write_text(text.replace(LIMIT_ROW_END, "\n" + row.rstrip("\n") + LIMIT_ROW_END),
                     encoding="utf-8")
    small_report_inputs(tmp_path)
    found: dict[str, Any] = run_child(copy.parent, GATE_SCRIPT, str(tmp_path))
    assert Path(found["package"]).is_relative_to(copy), "the child ran another quantcheck"
    return found


def test_a_new_gate_limit_is_one_row_and_nothing_else_in_the_doc() -> None:
    """The doc's block is one `Limit(...)` row, whole: the edit the example claims."""
    row = code_block("Worked example: a new gate limit")
    assert row.lstrip().startswith('Limit("max_shorter_share", "share"')
    assert row.rstrip().endswith("),")
    assert row.count("Limit(") == 1


def test_a_new_gate_limit_is_a_policy_field(new_limit: dict[str, Any]) -> None:
    assert new_limit["python"] == [None, 0.2]


def test_a_new_gate_limit_is_an_option_of_the_gate(new_limit: dict[str, Any]) -> None:
    limits = " ".join(new_limit["help"]["gate"].split("Gate limits:")[1].split())
    assert ("--max-shorter-share FLOAT Maximum share of compared prompts whose answer on B "
            "is shorter than A's, in characters (default off).") in limits, limits
    assert "max_shorter_share" in new_limit["config"].replace("-", "_")
    assert "max-shorter-share: null" in new_limit["config"]


def test_a_new_gate_limit_is_not_an_option_of_compare_or_run(new_limit: dict[str, Any]
                                                             ) -> None:
    """compare and run end as the gate would under the default policy: they take no
    limit, so the new one is not theirs either (its default applies)."""
    for command in ("compare", "run"):
        assert "--max-shorter-share" not in new_limit["help"][command]
    assert new_limit["compare"]["exit"] == 0, new_limit["compare"]["output"]


def test_a_new_gate_limit_is_in_the_schema_and_the_docs_table(new_limit: dict[str, Any]
                                                              ) -> None:
    assert new_limit["schema"]["type"] == ["number", "null"]
    assert (new_limit["schema"]["minimum"], new_limit["schema"]["maximum"]) == (0, 1)
    assert new_limit["shipped"]
    assert new_limit["table"] == [
        "| `max_shorter_share` | `--max-shorter-share` | off | Maximum share of compared "
        "prompts whose answer on B is shorter than A's, in characters (default off). | "
        "`shorter_on_b` |"]


def test_a_new_gate_limit_is_a_key_of_the_policy_file(new_limit: dict[str, Any]) -> None:
    refused = new_limit["refused"]
    assert refused["exit"] == 2
    assert "bad.yaml: field 'max_shorter_share': a share from 0 to 1, or null" in \
        refused["output"]
    assert new_limit["file"]["exit"] == 0, new_limit["file"]["output"]
    assert new_limit["file"]["rules"]["shorter_on_b"]["limit"] == 0.4


def test_a_new_gate_limit_fails_a_report_above_it_and_passes_under_it(
        new_limit: dict[str, Any]) -> None:
    over = new_limit["over"]
    assert over["exit"] == 1, over["output"]
    rule = over["rules"]["shorter_on_b"]
    assert rule == {"name": "shorter_on_b", "description": "40% of compared prompts whose "
                    "answer on B is shorter than A's (2 of 5)", "count": 0.4, "limit": 0.3,
                    "passed": False, "prompts": ["short1", "short2"]}
    assert "| shorter_on_b | 40% | 0.3 | **fail** |" in over["output"]
    failing = {case.get("name"): failure.get("message", "") for case in
               ElementTree.fromstring(over["junit"]).iter("testcase")
               for failure in case.iter("failure") if failure.get("type") == "shorter_on_b"}
    assert set(failing) == {"short1", "short2"}
    assert all("a prompt whose answer on B is shorter than A's" in message
               for message in failing.values()), failing
    default = new_limit["default"]
    assert default["exit"] == 0, default["output"]
    assert default["rules"]["shorter_on_b"]["passed"] is True
    assert default["rules"]["shorter_on_b"]["limit"] is None


# --- a new engine ------------------------------------------------------------------------

ENGINE_SECTION = "## Worked example: a new engine"
_PATH = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|json|md))`")


def engine_blocks() -> dict[str, str]:
    """Each code block of the section by the file its numbered step names first."""
    text = DEVELOPMENT.read_text(encoding="utf-8")
    section = text.split(ENGINE_SECTION, 1)[1].split("\n## ", 1)[0]
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
    copy = scratch_package(tmp_path)
    with_engine(copy, blocks["src/quantcheck/store/engines.py"])
    fixture = tmp_path / "quill-chat.json"
    fixture.write_text(blocks["tests/fixtures/wire/quill-chat.json"], encoding="utf-8")
    row = ast.literal_eval(blocks["tests/test_wire_formats.py"].replace(
        "CANBERRA", repr(literal_of(ROOT / "tests" / "test_wire_formats.py", "CANBERRA"))))
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
    table = (ROOT / "docs" / "engines.md").read_text(encoding="utf-8").split(
        "## Engine profiles", 1)[1]
    header = next(line for line in table.splitlines() if line.startswith("| engine |"))
    assert row.count(" | ") == header.count(" | ")
