"""The determinism certificate's page in a real headless Chromium: prompt ids and
answers from users' files and models are shown as text, never run as markup."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quantcheck.lab.scripted import Faults, ScriptedModel

from .conftest import Serve, WritePrompts, invoke

# three of each: the page shows up to three examples per factor
HOSTILE = [
    "<script>window.__pwned = 1</script> &amp;",
    "</svg></td></tr></table><script>window.__pwned = 2</script>",
    "\"><img src=x onerror=\"window.__pwned = 3\">",
]
IDS = ["a<script>window.__pwned = 5</script>", "b\"'</svg><b>", "c'\"><img src=x>"]


def test_hostile_prompt_ids_and_answers_are_escaped_on_the_certificate_page(
        page: Any, serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    quoted = [prompt_id.replace("'", "''") for prompt_id in IDS]
    prompts = write_prompts("prompts:\n" + "".join(
        f"  - {{id: '{prompt_id}', category: c, prompt: 'attack {n}'}}\n"
        for n, prompt_id in enumerate(quoted)))
    # varying answers, so the examples table shows both texts of each
    server = serve(ScriptedModel({f"attack {n}": text for n, text in enumerate(HOSTILE)}),
                   dialect="llama.cpp", faults=Faults(nondeterministic=True))
    result = invoke("determinism", "--certify", "--endpoint", server.url, "--prompts", prompts,
                    "--out", tmp_path / "c", "--max-batch", "2", "--trials", "2")
    assert result.exit_code == 1, result.output  # NOT CERTIFIED: the answers vary
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto((tmp_path / "c" / "index.html").as_uri())
    page.wait_for_load_state("load")
    assert page.evaluate("window.__pwned") is None
    assert not dialogs and not page.errors
    assert page.locator("script").count() == 0 and page.locator("img").count() == 0
    assert page.locator("svg").count() == 1 and page.locator("b").count() == 0
    text = page.locator("body").inner_text()
    for shown in HOSTILE + IDS:
        assert shown.strip() in text, shown
