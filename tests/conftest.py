from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quantcheck import CollectSettings, collect
from quantcheck.lab.scripted import Faults, ScriptedModel, ScriptedServer

FIXTURES = Path(__file__).parent / "fixtures"


def skip_module_without_extra(why: str) -> None:
    """Call from `except ImportError:`; in CI (CI set) a missing extra is a failure."""
    if os.environ.get("CI"):
        raise  # the ImportError being handled by the caller
    pytest.skip(why, allow_module_level=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The real-model and real-engine tests are also `slow`: `pytest -m "not slow"` is
    the contributor's fast loop (docs/development.md)."""
    for item in items:
        if item.get_closest_marker("model") or item.get_closest_marker("llamacpp"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def serve() -> Iterator[Callable[..., ScriptedServer]]:
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
def write_prompts(tmp_path: Path) -> Callable[[str], Path]:
    """Write a prompt file from an indented YAML string."""
    counter = iter(range(1000))

    def write(text: str) -> Path:
        path = tmp_path / f"prompts-{next(counter)}.yaml"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


# A/B runs with one planted difference of each kind triage knows.
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


@pytest.fixture
def ab_runs(serve: Callable[..., ScriptedServer], write_prompts: Callable[[str], Path],
            tmp_path: Path) -> tuple[Path, Path]:
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
    from quantcheck import compare_to_dir

    compare_to_dir(*ab_runs, tmp_path / "report")
    return tmp_path / "report"


CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium driven by Playwright (CI installs both)."""
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
