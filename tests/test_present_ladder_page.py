"""The context ladder's page in a real headless Chromium: recall and KL against length
as inline SVG with the onset marked, the rung and probe tables, the cells; the models'
answers shown as text, never run as markup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quantcheck.lab.scripted import ScriptedModel

from .conftest import Serve, invoke

HOSTILE = "<script>window.__pwned = 1</script></svg><img src=x onerror=\"window.__pwned=2\">"


class Hostile(ScriptedModel):
    """Answers every probe with markup."""

    def answer(self, prompt_text: str, advance: bool = True) -> str:
        return " " + HOSTILE if "What is the secret code" in prompt_text else \
            super().answer(prompt_text, advance)


def test_the_page_plots_recall_and_kl_and_escapes_the_answers(
        page: Any, serve: Serve, tmp_path: Path) -> None:
    a, b = serve(ScriptedModel(), "llama.cpp"), serve(Hostile(), "llama.cpp")
    result = invoke("ladder", "--a", a.url, "--b", b.url, "--out", tmp_path / "l",
                    "--lengths", "512,1k", "--depths", "0", "--a-cell", "kv_cache_dtype=f16",
                    "--b-cell", "kv_cache_dtype=q4_0")
    assert result.exit_code == 1, result.output
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto((tmp_path / "l" / "index.html").as_uri())
    page.wait_for_load_state("load")
    assert page.evaluate("window.__pwned") is None and not dialogs and not page.errors
    assert page.locator("script").count() == 0 and page.locator("img").count() == 0
    assert page.locator("svg").count() == 2  # recall, KL
    assert page.locator("svg polyline").count() >= 3  # A's and B's recall, B's KL
    assert page.locator("line.onset").count() == 2  # the onset at 512 on both plots
    text = page.locator("body").inner_text()
    assert HOSTILE in text
    assert "B departs from A from 512 tokens" in page.locator("#onset").inner_text()
    assert page.locator("#cell tr.differs").get_attribute("data-axis") == "kv_cache_dtype"
    assert page.locator("#rungs tr.departs").count() == 2
    sheet = page.locator("#probes a").first.get_attribute("href")
    assert (tmp_path / "l" / str(sheet)).exists()
