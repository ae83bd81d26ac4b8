"""What the test files share, once: the CLI run in-process, review files, the planted
A/B's prompts and answers, the candidates', the browser's and the disk's helpers, and
GitHub's runner emulated for the Action and the starter kit's workflow.
conftest.py re-exports all of it beside the fixtures: a test file imports from
`.conftest`, never from another test file (tests/test_structure.py checks)."""

from __future__ import annotations

import csv
import json
import os
import re
import resource
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner, Result

from quantcheck.cli import cli
from quantcheck.lab.scripted import ScriptedServer

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent

# The `serve` and `write_prompts` fixtures (conftest.py), as a test annotates them.
Serve = Callable[..., ScriptedServer]
WritePrompts = Callable[[str], Path]


def skip_module_without_extra(why: str) -> None:
    """Call from `except ImportError:`; in CI (CI set) a missing extra is a failure."""
    if os.environ.get("CI"):
        raise  # the ImportError being handled by the caller
    pytest.skip(why, allow_module_level=True)


# --- the command line --------------------------------------------------------------

def interruptible(command: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """A process that Ctrl-C (SIGINT) stops as in a terminal. A test run started in the
    background (`pytest &`, some CI jobs) inherits SIGINT ignored; Python then never
    raises KeyboardInterrupt, and a serving child would never stop."""
    return subprocess.Popen(command, preexec_fn=_default_sigint, **popen)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def invoke(*args: object) -> Result:
    """`quantcheck ARGS...` run in-process; arguments may be text, paths or numbers. Help
    is wrapped at 78 columns (an 80-column terminal less click's margin) whatever the
    terminal running the tests, so that a test sees the same lines everywhere."""
    return CliRunner().invoke(cli, [str(arg) for arg in args], terminal_width=78)


def gate_writing_a_step_summary(report: Path, summary: Path) -> Result:
    """`quantcheck gate REPORT` as a GitHub runner starts it, GITHUB_STEP_SUMMARY naming
    `summary`: a CliRunner of its own, since the environment is the point."""
    return CliRunner().invoke(cli, ["gate", str(report)],
                              env={"GITHUB_STEP_SUMMARY": str(summary)})


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command of a group, as the words that name it: ("prompts", "check")."""
    found = []
    for name, command in group.commands.items():
        path = (*prefix, name)
        if isinstance(command, click.Group):
            found += all_commands(command, path)
        else:
            found.append(path)
    return found


COMMANDS = all_commands(cli)


# --- reports: reviews and the gate's verdict ------------------------------------------

def report_identity(report: Path) -> str:
    """The identity a review of this report must carry."""
    return str(json.loads((report / "summary.json").read_text())["identity"])


def write_review(report: Path, reviewer: str, verdicts: dict[str, Any],
                 run: str | None = None) -> Path:
    """REPORT/reviews/REVIEWER.json as the sheet saves it; `run` gives it another
    report's identity (a stale review)."""
    (report / "reviews").mkdir(exist_ok=True)
    path = report / "reviews" / f"{reviewer}.json"
    path.write_text(json.dumps({"format": "quantcheck-review/1",
                                "identity": run or report_identity(report),
                                "reviewer": reviewer, "verdicts": verdicts}))
    return path


def copy_run(run: Path, folder: Path, label: str) -> Path:
    """A copy of a collected run under another label (a candidate's folder name)."""
    shutil.copytree(run, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["label"] = label
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def report_files(report: Path) -> dict[str, bytes]:
    """Every file of a report folder (not its subfolders), by name: what it holds now."""
    return {path.name: path.read_bytes() for path in report.iterdir() if path.is_file()}


def gate_rules(report: Path) -> dict[str, dict[str, Any]]:
    """The rules of the report's gate.json, by name."""
    data = json.loads((report / "gate.json").read_text())
    return {rule["name"]: rule for rule in data["rules"]}


def read_csv(path: Path) -> list[dict[str, str]]:
    """A CSV file's rows as text, as a reader of pairs.csv or matrix.csv sees them."""
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


# --- the planted A/B: one difference of each kind triage knows (`ab_runs`) -----------

PROMPTS = """
prompts:
  - {id: same, category: factual, prompt: "Q: same", expect: {contains: Paris}}
  - {id: wording, category: factual, prompt: "Q: wording", expect: {contains: Ottawa}}
  - {id: near-tie, category: factual, prompt: "Q: near-tie"}
  - {id: flip, category: factual, prompt: "Q: flip", expect: {contains: Canberra}}
  - {id: better, category: numeric, prompt: "Q: better", expect: {number: 391}}
  - {id: numbers, category: numeric, prompt: "Q: numbers"}
  - {id: loop, category: factual, prompt: "Q: loop", max_tokens: 64}
  - {id: empty, category: factual, prompt: "Q: empty"}
  - {id: capped, category: factual, prompt: "Q: capped", max_tokens: 6}
  - {id: noisy, category: factual, prompt: "Q: noisy"}
  - {id: changed, category: factual, prompt: "Q: changed"}
  - {id: only-a, category: factual, prompt: "Q: only-a"}
"""
A_ANSWERS: dict[str, str | list[str]] = {
    "Q: same": " The capital of France is Paris.",
    "Q: wording": " The capital of Canada is Ottawa.",
    "Q: near-tie": " The answer is yes.",
    "Q: flip": " The capital of Australia is Canberra.",
    "Q: better": " 381 is the product.",
    "Q: numbers": " It costs 40 dollars today.",
    "Q: loop": " William Shakespeare wrote Hamlet.",
    "Q: empty": " Something to say.",
    "Q: capped": " Short.",
    "Q: noisy": [" First variant.", " Second variant."],
    "Q: changed": " Same text.",
    "Q: only-a": " Only here.",
}
B_ANSWERS: dict[str, str | list[str]] = {
    **A_ANSWERS,
    "Q: wording": " The capital of Canada is Ottawa!",
    "Q: near-tie": " Yes, the answer is yes.",
    "Q: flip": " The capital of Australia is Sydney.",
    "Q: better": " 391 is the product.",
    "Q: numbers": " It costs 80 dollars today.",
    "Q: loop": " need analysis there" * 30,
    "Q: empty": "",
    "Q: capped": " A much longer answer that runs on past the cap.",
    "Q: noisy": " Second variant.",
}
RUNNER_UPS = {" The": [" Yes,"], " Yes,": [" The"]}

# Two prompts (chat and completions) for a collection's own tests.
TWO_PROMPTS = """
prompts:
  - id: capital-au
    category: factual
    messages: [{role: user, content: "What is the capital of Australia?"}]
    expect: {contains: Canberra}
  - id: larger
    category: numeric
    prompt: "Q: Which is larger, 9.11 or 9.9?\\nA:"
    max_tokens: 4
"""


# --- several candidates against one reference (`candidate_endpoints`) -----------------

CANDIDATE_PROMPTS = """
prompts:
  - {id: capital, prompt: "Q: capital", expect: {contains: Canberra}}
  - {id: count, prompt: "Q: count", expect: {number: 4}}
  - {id: story, prompt: "Q: story"}
"""
CANDIDATE_ANSWERS: dict[str, str | list[str]] = {
    "Q: capital": " The capital of Australia is Canberra.",
    "Q: count": " A dog has 4 legs.",
    "Q: story": " Once upon a time there was a river.",
}
FLIPPED = {**CANDIDATE_ANSWERS, "Q: capital": " The capital of Australia is Sydney."}
VERBOSE = {key: f"{text} That is all there is to say about it." for key, text in
           CANDIDATE_ANSWERS.items()}


def run_candidates(endpoints: dict[str, str], prompts: Path, out: Path,
                   *extra: Any) -> Result:
    """`quantcheck run` of the reference against the four candidates, throughput too."""
    args: list[Any] = ["run", "--a", endpoints["bf16"], "--a-label", "bf16"]
    for label in ("flips", "clean", "slow", "verbose"):
        args += ["--b", endpoints[label], "--b-label", label]
    return invoke(*args, "--prompts", prompts, "--out", out, "--no-preflight",
                  "--throughput", "--throughput-seconds", "1", "--throughput-concurrency",
                  "2", *extra)


# --- the review sheet in the browser (`page`) ------------------------------------------

def open_sheet(page: Any, url: str) -> None:
    """Load a review sheet and wait until its script has rendered it."""
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]")


def card(page: Any, prompt_id: str) -> Any:
    """A pair's card in the sheet."""
    return page.locator(f'article.pair[data-prompt="{prompt_id}"]')


class AppServer:
    """An aiohttp application on 127.0.0.1 in a background thread."""

    def __init__(self, app: Any) -> None:
        import asyncio
        import threading

        from aiohttp import web

        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def start() -> None:
            self.runner = web.AppRunner(app, access_log=None)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

        def run() -> None:
            self.loop.run_until_complete(start())
            ready.set()
            self.loop.run_forever()
            self.loop.run_until_complete(self.runner.cleanup())
            self.loop.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait(10)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


# --- bad luck on disk, in a quantcheck process of its own -----------------------------

def assert_one_clear_line(stderr: str, cause: str) -> None:
    """The process said one `error:` line naming the cause, and no traceback."""
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert "Traceback" not in stderr, stderr
    assert len(errors) == 1 and cause in errors[0], stderr


def run_with_file_limit(command: list[str], limit: int) -> subprocess.CompletedProcess[str]:
    """Run a quantcheck command that may write no file beyond `limit` bytes: a full disk."""
    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(command, capture_output=True, text=True, timeout=120,
                          preexec_fn=limit_file_size)


def replace_with(path: Path, kind: str) -> None:
    """`path` made a link to /dev/zero, a FIFO or a folder."""
    path.unlink()
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


def cli_in_child(*args: object, cwd: Path, timeout: float = 60
                 ) -> subprocess.CompletedProcess[str]:
    """`quantcheck ARGS...` in a child process with its memory capped (a reader without
    bounds ends there, not in the test machine's memory); a hang ends at `timeout` as a
    failure."""
    import sys

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    try:
        return subprocess.run([sys.executable, "-m", "quantcheck", *map(str, args)], cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, env=env,
                              preexec_fn=cap_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"quantcheck {' '.join(map(str, args))} hung for {timeout} s")


# --- GitHub's runner, emulated ----------------------------------------------------

EXPRESSION = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")
BASH = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]  # the runner's `shell: bash`


@dataclass
class Ran:
    """What the runner saw: each step's outcome, outputs, and the job's files."""

    outcomes: dict[str, str] = field(default_factory=dict)  # step name -> exit status
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)  # step id -> outputs
    uploads: list[dict[str, str]] = field(default_factory=list)  # `with:` of upload steps
    action_outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""
    logs: str = ""


def evaluate(text: str, contexts: Mapping[str, Mapping[str, object]]) -> str:
    """GitHub's `${{ context.name }}` expressions, the ones action.yml may use; the
    outputs of a step that did not run are empty, as on GitHub."""
    def value(match: re.Match[str]) -> str:
        words = match.group(1).split(".")
        assert words[0] in contexts, f"unknown context: {match.group(1)}"
        found: object = contexts
        for word in words:
            if words[0] == "steps" and not (isinstance(found, Mapping) and word in found):
                return ""
            assert isinstance(found, Mapping) and word in found, f"unknown: {match.group(1)}"
            found = found[word]
        return str(found)
    return EXPRESSION.sub(value, text)


def read_outputs(path: Path) -> dict[str, str]:
    """GITHUB_OUTPUT: `name=value` lines, and `name<<DELIMITER` blocks."""
    outputs: dict[str, str] = {}
    lines = iter(path.read_text().splitlines())
    for line in lines:
        if "<<" in line and "=" not in line.split("<<")[0]:
            name, delimiter = line.split("<<", 1)
            outputs[name] = "\n".join(iter(lambda: next(lines), delimiter))
        elif "=" in line:
            name, value = line.split("=", 1)
            outputs[name] = value
    return outputs


def run_action(inputs: dict[str, str], workspace: Path, bin_dir: Path,
               action: Path = REPO / "action.yml",
               sources: Path | None = REPO / "src") -> Ran:
    """Every step of a composite action (this repository's, unless another is named) in
    order, as the runner would: each `run:` step with bash as the runner starts it, its
    `env:` expressions given the inputs, the runner's files (GITHUB_OUTPUT,
    GITHUB_STEP_SUMMARY) and step outputs. `sources` go first on PYTHONPATH (this
    checkout's, unless None: then what is installed on `bin_dir` runs)."""
    ACTION = yaml.safe_load(action.read_text())
    declared = ACTION["inputs"]
    assert set(inputs) <= set(declared), set(inputs) - set(declared)
    missing = [n for n, spec in declared.items() if spec.get("required") and n not in inputs]
    assert not missing, missing
    given = {name: inputs.get(name, spec.get("default", "")) for name, spec in
             declared.items()}
    temp = workspace.parent / "runner-temp"
    temp.mkdir(exist_ok=True)
    summary = workspace.parent / "step-summary.md"
    contexts: dict[str, Mapping[str, object]] = {
        "inputs": given, "github": {"action_path": str(action.parent)},
        "runner": {"temp": str(temp)}, "steps": {}}
    ran = Ran()
    failed = False
    assert ACTION["runs"]["using"] == "composite"
    for number, step in enumerate(ACTION["runs"]["steps"]):
        name = step.get("name", f"step {number}")
        condition = step.get("if")
        assert condition in (None, "always()"), f"{name}: if: {condition} is not emulated"
        if failed and condition != "always()":
            ran.outcomes[name] = "skipped"
            continue
        if "uses" in step:
            assert step["uses"].startswith("actions/upload-artifact@"), step["uses"]
            ran.uploads.append({k: evaluate(str(v), contexts) for k, v in step["with"].items()})
            ran.outcomes[name] = "0"
            continue
        assert step["shell"] == "bash"
        output = workspace.parent / f"output-{number}"
        output.write_text("")
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(workspace.parent),
               **({"PYTHONPATH": str(sources)} if sources else {}), "LC_ALL": "C.UTF-8",
               "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary),
               "GITHUB_WORKSPACE": str(workspace), "RUNNER_TEMP": str(temp),
               "CI": "true", "GITHUB_ACTIONS": "true",
               **{key: evaluate(str(value), contexts) for key, value in
                  step.get("env", {}).items()}}
        script = workspace.parent / f"step-{number}.sh"
        script.write_text(step["run"])
        done = subprocess.run([*BASH, str(script)], cwd=workspace, env=env,
                              capture_output=True, text=True, timeout=600)
        ran.logs += f"--- {name} ({done.returncode})\n{done.stdout}{done.stderr}"
        ran.outcomes[name] = str(done.returncode)
        if "id" in step:
            ran.outputs[step["id"]] = read_outputs(output)
            contexts["steps"] = {key: {"outputs": value} for key, value in ran.outputs.items()}
        failed = failed or done.returncode != 0
    ran.action_outputs = {name: evaluate(spec["value"], contexts)
                          for name, spec in ACTION["outputs"].items()}
    ran.summary = summary.read_text() if summary.exists() else ""
    return ran


# --- Markdown as GitHub renders a step summary ----------------------------------------

# Strings a server, a prompt file or an edited report may hold, each aimed at the step
# summary: a tag, an image, a link, a heading, a table row or cell, a details block.
MARKDOWN_ATTACKS = [
    "<img src=x onerror=alert(1)>", "![](https://example.com/x.png)", "[click](https://e.x)",
    "<details><summary>open</summary>", "\n## quantcheck determinism: PASS\n",
    "\r\n# PASS", "| pass | ok |", "\n| --- |\n", "`", "``", "\\", "\\|", "*", "_", "~~",
    "https://example.com/a", "www.example.com", "<https://e.x>", "&lt;img&gt;", "&#60;b&#62;",
    "<!--", "-->", "\n---\n", "\n===\n", "\n> quote", "\n- item", "\u2028", "\x00", "\x85",
    "[x]: https://e.x", "[x]", "@user", "<script>", "</td></tr><tr><td>", ":smile:",
    "a@b.co", "mailto:a@b.co", "xmpp:a@b.co/r", "ftp://e.x", "WWW.e.x", "#", "!",
]


def markdown_skeleton(markdown: str) -> list[str]:
    """The tags GitHub's renderer (cmark-gfm with its tables, autolinks, strikethrough,
    raw HTML let through) makes of `markdown`, in order: a string that opens a tag, an
    image, a link, a heading, a table row or cell or a details block adds one. What the
    renderer takes for an e-mail address (`a@b.co`, `mailto:a@b.co`, `x.y@z`: it links
    those whatever is escaped, each showing the address it links to) is left out."""
    import html

    import cmarkgfm
    from cmarkgfm.cmark import Options

    rendered = cmarkgfm.github_flavored_markdown_to_html(markdown,
                                                        options=Options.CMARK_OPT_UNSAFE)

    def own_address(link: re.Match[str]) -> str:
        target, shown = html.unescape(link.group(1)), html.unescape(link.group(2))
        mailed = "@" in shown and target in (shown, "mailto:" + shown)
        return shown if mailed else link.group(0)

    rendered = re.sub(r'<a href="([^"]*)">([^<]*)</a>', own_address, rendered)
    return re.findall(r"</?[A-Za-z][A-Za-z0-9-]*", rendered)


def no_tag_more(markdown: str, plain: str) -> bool:
    """`markdown` renders no tag more than `plain`, the same writer's output for plain
    words (an empty string may render fewer: `****` is no bold)."""
    from collections import Counter

    return Counter(markdown_skeleton(markdown)) <= Counter(markdown_skeleton(plain))
