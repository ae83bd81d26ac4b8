"""The review sheet in a real headless Chromium (Debian's, driven by Playwright)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from quantcheck import CollectSettings, CompareOptions, collect, compare_runs
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.present.review_server import review_app

from .conftest import (
    AppServer,
    Serve,
    WritePrompts,
    card,
    open_sheet,
    report_identity,
    write_review,
)


def test_sheet_is_self_contained_and_offline(page: Any, planted_report: Path) -> None:
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    open_sheet(page, (planted_report / "index.html").as_uri())
    assert all(url.startswith("file://") for url in requests), requests
    html = (planted_report / "index.html").read_text()
    assert "http://" not in html.replace("http://127.0.0.1", "").replace(
        "http://www.w3.org/2000/svg", "")
    assert page.locator("#axes-warning").is_visible()  # model and runtime both differ
    assert page.locator("tr.differs[data-axis=runtime]").count() == 1
    assert page.locator(".plots svg").count() == 3
    assert page.locator("#shown").inner_text() == "13 of 13 shown"
    assert page.locator("#progress").inner_text() == "0 of 9 reviewed"
    assert not page.errors


def test_pair_shows_diff_divergence_determinism_and_flags(page: Any,
                                                          planted_report: Path) -> None:
    open_sheet(page, (planted_report / "index.html").as_uri())
    flip = card(page, "flip")
    assert flip.locator(".side.a del.d").inner_text() == "Canberra."
    assert flip.locator(".side.b ins.d").inner_text() == "Sydney."
    assert "expect regression" in flip.locator("header").inner_text()
    assert flip.locator("label.choice.suggested").inner_text().strip() == "Factual flip [f]"
    assert "suggested by triage" in flip.inner_text()
    numbers = card(page, "numbers")
    assert numbers.locator("ins.d.num").inner_text() == "80"
    near = card(page, "near-tie")
    assert "fork: both sides unsure" in near.locator(".divergence").inner_text()
    assert near.locator("table.topk td.chosen").count() == 2
    noisy = card(page, "noisy")
    assert "2 distinct outputs across 2 repeats" in noisy.locator("details.variants").inner_text()
    assert "B degenerate: repetition" in card(page, "loop").locator("header").inner_text()
    same = card(page, "same")
    assert same.locator("details.collapsed").get_attribute("open") is None
    assert same.locator("form.rubric").count() == 0


def test_filters_and_search(page: Any, planted_report: Path) -> None:
    open_sheet(page, (planted_report / "index.html").as_uri())
    page.select_option("#f-class", "factual_flip")
    assert page.locator("article.pair").count() == 2  # flip and better
    page.select_option("#f-class", "identical")
    assert [c.get_attribute("data-prompt") for c in page.locator("article.pair").all()] == [
        "same"]
    page.select_option("#f-class", "not_compared")
    assert page.locator("article.pair").count() == 3
    page.select_option("#f-class", "")
    page.check("#f-flagged")
    flagged = {c.get_attribute("data-prompt") for c in page.locator("article.pair").all()}
    assert flagged == {"flip", "better", "numbers", "loop", "empty", "capped"}
    page.uncheck("#f-flagged")
    page.fill("#f-search", "sydney")
    assert [c.get_attribute("data-prompt") for c in page.locator("article.pair").all()] == [
        "flip"]
    page.fill("#f-search", "")
    page.select_option("#f-category", "numeric")
    assert page.locator("article.pair").count() == 2
    page.select_option("#f-category", "")
    page.check("#f-unreviewed")
    assert page.locator("article.pair").count() == 9


def test_score_with_mouse_and_keyboard_and_reload_keeps_scores(page: Any,
                                                               planted_report: Path) -> None:
    url = (planted_report / "index.html").as_uri()
    open_sheet(page, url)
    card(page, "wording").locator("label.choice", has_text="Wording only").click()
    assert page.locator("#progress").inner_text() == "1 of 9 reviewed"
    page.keyboard.press("j")  # "wording": pairs needing a review come first; j skips "same"
    page.keyboard.press("j")
    assert page.locator("article.pair.current").get_attribute("data-prompt") == "near-tie"
    # the card's head sits below the sticky toolbar, not under it
    toolbar = page.locator(".toolbar").bounding_box()
    head = page.locator("article.pair.current > header").bounding_box()
    assert toolbar and head and head["y"] >= toolbar["y"] + toolbar["height"] - 1
    page.keyboard.press("a")
    page.keyboard.press("j")
    page.keyboard.press("f")
    flip = card(page, "flip")
    flip.locator("select.right-side").select_option("a")
    page.keyboard.press("n")
    page.keyboard.type("Canberra is right")
    page.keyboard.press("Escape")
    page.keyboard.press("k")
    assert page.locator("article.pair.current").get_attribute("data-prompt") == "near-tie"
    assert page.locator("#progress").inner_text() == "3 of 9 reviewed"

    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    assert page.locator("#progress").inner_text() == "3 of 9 reviewed"
    assert card(page, "near-tie").locator("input[value=ambiguous]").is_checked()
    flip = card(page, "flip")
    assert flip.locator("input[value=factual_flip]").is_checked()
    assert flip.locator("label.choice.suggested").count() == 0  # confirmed, not suggested
    assert flip.locator("select.right-side").input_value() == "a"
    assert flip.locator("textarea.notes").input_value() == "Canberra is right"


def test_export_and_import(page: Any, planted_report: Path, tmp_path: Path) -> None:
    open_sheet(page, (planted_report / "index.html").as_uri())
    card(page, "numbers").locator("label.choice", has_text="Minor regression").click()
    with page.expect_download() as download:
        page.click("#export")
    exported = json.loads(Path(download.value.path()).read_text())
    identity = report_identity(planted_report)
    assert exported["format"] == "quantcheck-review/1" and exported["identity"] == identity
    assert exported["verdicts"]["numbers"]["label"] == "minor"

    review = {**exported, "verdicts": {"loop": {"label": "factual_flip", "right_side": "a",
                                                "notes": "imported"}}}
    path = tmp_path / "review.json"
    path.write_text(json.dumps(review))
    page.set_input_files("#import", str(path))
    expect(page.locator("#progress")).to_have_text("2 of 9 reviewed")
    assert card(page, "loop").locator("input[value=factual_flip]").is_checked()

    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({**review, "identity": "other-run"}))
    page.set_input_files("#import", str(stale))
    expect(page.locator("#import-refused")).to_contain_text("stale.json refused: made for "
                                                            "another run")
    expect(page.locator("#progress")).to_have_text("2 of 9 reviewed")


HOSTILE = [
    "<script>window.__pwned = 1</script>",
    "</textarea><script>window.__pwned = 2</script>",
    "</script><script>window.__pwned = 3</script>",
    '<img src=x onerror="window.__pwned = 4">',
    "\u2028<!--<script>",
]


def test_hostile_model_output_never_executes(
        page: Any, serve: Serve, write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    prompts = write_prompts("prompts:\n" + "".join(
        f"  - {{id: 'x{n}<b>', category: '<i>c</i>', prompt: 'attack {n}'}}\n"
        for n in range(len(HOSTILE))))
    a_server = serve(ScriptedModel({f"attack {n}": text for n, text in enumerate(HOSTILE)}))
    b_server = serve(ScriptedModel({f"attack {n}": f"B says {text}"
                                    for n, text in enumerate(HOSTILE)}))
    for server, side in ((a_server, "a"), (b_server, "b")):
        collect([prompts], tmp_path / side,
                CollectSettings(endpoint=server.url, label=side, top_logprobs=2))
        # collect refuses such a label; a manifest edited by hand still holds one
        manifest = tmp_path / side / "manifest.json"
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()),
                                        "label": f"<b>{side}</b>"}))
    compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    open_sheet(page, (tmp_path / "report" / "index.html").as_uri())
    assert page.evaluate("window.__pwned") is None
    assert not dialogs and not page.errors
    assert page.locator("img").count() == 0
    text = page.locator("#pairs").inner_text()
    for attack in HOSTILE[:4]:
        assert attack in text
    assert "x0<b>" in text and "<b>a</b>" in page.locator("h1").inner_text()


def test_review_server_writes_every_change_to_disk(page: Any, planted_report: Path) -> None:
    server = AppServer(review_app(planted_report, "dana"))
    try:
        open_sheet(page, server.url + "/")
        assert page.locator("#reviewer").input_value() == "dana"
        card(page, "wording").locator("label.choice", has_text="Wording only").click()
        expect(page.locator("#save-status")).to_have_text("saved to reviews/dana.json")
        saved = json.loads((planted_report / "reviews" / "dana.json").read_text())
        assert saved["reviewer"] == "dana"
        assert saved["verdicts"]["wording"]["label"] == "wording"

        status = page.evaluate("""async () => (await fetch('/api/review', {method: 'POST',
            headers: {'Content-Type': 'application/json', 'X-Quantcheck-Token': DATA.live.token},
            body: JSON.stringify({format: 'quantcheck-review/1', identity: 'stale',
                                  verdicts: {}})})).status""")
        assert status == 400
        missing = page.evaluate("async () => (await fetch('/../summary.json')).status")
        assert missing == 404
    finally:
        server.stop()
    assert sorted(p.name for p in (planted_report / "reviews").iterdir()) == ["dana.json"]


def test_reviewers_disagreeing_are_shown(page: Any, planted_report: Path) -> None:
    from quantcheck.present.sheet import write_sheet

    for name, label in (("dana", "wording"), ("li", "minor")):
        write_review(planted_report, name, {"numbers": {"label": label}})
    write_review(planted_report, "old", {"numbers": {"label": "factual_flip"}},
                 run="another-run")
    write_sheet(planted_report)
    open_sheet(page, (planted_report / "index.html").as_uri())
    numbers = card(page, "numbers")
    assert "dana: Wording only" in numbers.inner_text()  # label names, not ids
    assert "li: Minor regression" in numbers.inner_text()
    assert "old:" not in numbers.inner_text()  # another run's review is never applied
    assert "reviewers disagree" in numbers.inner_text()
    page.check("#f-disagree")
    assert [c.get_attribute("data-prompt") for c in page.locator("article.pair").all()] == [
        "numbers"]


def test_large_sheet_renders_lazily(page: Any, tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
    from triage_scale import generate

    generate(tmp_path / "runs", 2000, 1, 24, 3)
    compare_runs(tmp_path / "runs" / "a", tmp_path / "runs" / "b", tmp_path / "report")
    open_sheet(page, (tmp_path / "report" / "index.html").as_uri())
    assert page.locator("#shown").inner_text() == "2000 of 2000 shown"
    assert page.locator("article.pair").count() == 40
    page.locator("#sentinel").scroll_into_view_if_needed()
    expect(page.locator("article.pair")).to_have_count(80)


def test_approved_pairs_show_as_reviewed(page: Any, ab_runs: tuple[Path, Path],
                                         tmp_path: Path) -> None:
    from quantcheck.triage.approvals import APPROVALS_FORMAT, approval_key
    from quantcheck.triage.pairs import compare

    pairs = compare(*ab_runs).set_index("prompt_id")
    row = pairs.loc["wording"]
    key = approval_key(row["prompt_hash"], row["a_text"], row["b_text"])
    approvals = tmp_path / "approvals.json"
    approvals.write_text(json.dumps({"format": APPROVALS_FORMAT, "approvals": {
        key: {"prompt_id": "wording", "label": "wording", "approved_at": "2026-11-01"}}}))
    compare_runs(*ab_runs, tmp_path / "report", CompareOptions(approvals=approvals))
    open_sheet(page, (tmp_path / "report" / "index.html").as_uri())
    wording = card(page, "wording")
    assert "approved: Wording only (2026-11-01)" in wording.locator("header").inner_text()
    assert "no second review needed" in wording.inner_text()
    assert page.locator("#progress").inner_text() == "1 of 9 reviewed"


def test_a_review_file_the_gate_refuses_is_refused_visibly(page: Any, planted_report: Path
                                                           ) -> None:
    from quantcheck.present.sheet import write_sheet

    write_review(planted_report, "kim", {"wording": {"label": "wording", "right_side": 5}})
    write_sheet(planted_report)
    open_sheet(page, (planted_report / "index.html").as_uri())
    refused = page.locator(".refused-review")
    assert refused.is_visible()
    assert "kim.json: verdict for 'wording': right_side must be" in refused.inner_text()
    assert page.locator("article.pair").count() > 0 and not page.errors
    assert "Other reviewers" not in card(page, "wording").inner_text()


ODD_IDS = ["__proto__", "constructor", "toString"]


def test_prompt_ids_named_like_object_properties_keep_their_verdicts(
        page: Any, serve: Serve, write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    prompts = write_prompts("prompts:\n" + "".join(
        f'  - {{id: "{name}", prompt: "Q: {name}"}}\n' for name in ODD_IDS))
    for side, answer in (("a", " One answer."), ("b", " Another answer.")):
        server = serve(ScriptedModel({"Q:": answer}))
        collect([prompts], tmp_path / side, CollectSettings(endpoint=server.url, label=side,
                                                            preflight=False))
    report = tmp_path / "report"
    compare_runs(tmp_path / "a", tmp_path / "b", report)
    write_review(report, "li", {name: {"label": "wording"} for name in ODD_IDS})
    from quantcheck.present.sheet import write_sheet

    write_sheet(report)
    page.add_init_script("localStorage.setItem('quantcheck:reviewer', 'li')")
    open_sheet(page, (report / "index.html").as_uri())
    for name in ODD_IDS:
        assert "reviewed: Wording only" in card(page, name).locator("header").inner_text()
    assert page.locator("#progress").inner_text() == "3 of 3 reviewed"
    card(page, "__proto__").locator("label.choice", has_text="Minor regression").click()
    with page.expect_download() as download:
        page.click("#export")
    exported = json.loads(Path(download.value.path()).read_text())["verdicts"]
    assert sorted(exported) == sorted(ODD_IDS)
    assert exported["__proto__"]["label"] == "minor"
    assert not page.errors


# --- the reviewer's first screen and keys ---------------------------------------------

@pytest.mark.parametrize("width", [1400, 800])
def test_the_first_pair_needing_review_is_in_the_first_viewport(
        browser: Any, planted_report: Path, width: int) -> None:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    open_sheet(page, (planted_report / "index.html").as_uri())
    first = page.locator("article.pair").first
    assert first.locator("form.rubric").count() == 1  # pairs needing a review come first
    head = first.locator("header").bounding_box()
    assert head is not None and head["y"] + head["height"] <= 900
    # the cell shows the axes that differ; empty and equal rows wait behind a button
    assert page.locator("#cell tr[data-axis=runtime]").is_visible()
    assert not page.locator("#cell tr[data-axis=endpoint]").is_visible()
    assert page.locator("#cell tr[data-axis=gpu]").count() == 0  # empty on both sides
    page.click("#all-axes")
    assert page.locator("#cell tr[data-axis=endpoint]").is_visible()
    assert not page.locator("#preflight").get_attribute("open")  # every check passed
    context.close()


def test_keys_visit_the_pairs_needing_review_and_question_mark_shows_them(
        page: Any, planted_report: Path) -> None:
    open_sheet(page, (planted_report / "index.html").as_uri())
    seen = []
    for _ in range(12):
        page.keyboard.press("j")
        seen.append(page.locator("article.pair.current").get_attribute("data-prompt"))
    assert "same" not in seen and "changed" not in seen  # identical, not comparable
    assert seen[-1] == seen[-2]  # j stops at the last pair needing review
    page.check("#f-keys-all")
    for _ in range(12):
        page.keyboard.press("j")
    assert page.locator("article.pair.current").get_attribute("data-prompt") == "same"
    assert page.locator("#keys-help").is_hidden()
    page.keyboard.press("?")
    help_text = page.locator("#keys-help").inner_text()
    assert "Factual flip" in help_text and "near tie" in help_text
    page.keyboard.press("Escape")
    assert page.locator("#keys-help").is_hidden()


def test_a_chosen_label_looks_chosen_and_says_its_name(page: Any, planted_report: Path
                                                      ) -> None:
    open_sheet(page, (planted_report / "index.html").as_uri())
    flip = card(page, "flip")
    flip.locator("label.choice", has_text="Factual flip").click()
    chosen = card(page, "flip").locator("label.choice.chosen input")
    assert chosen.is_checked()
    # the checked dot is drawn in the accent colour: white on the chosen label's blue
    assert chosen.evaluate("e => getComputedStyle(e).accentColor") == "rgb(255, 255, 255)"
    assert "reviewed: Factual flip" in card(page, "flip").locator("header").inner_text()


def test_the_alternatives_at_a_divergence_show_what_matters_first(
        page: Any, planted_report: Path) -> None:
    open_sheet(page, (planted_report / "index.html").as_uri())
    flip = card(page, "flip")
    rows = flip.locator("table.topk tr")
    shown = [r for r in rows.all() if r.is_visible()]
    assert 2 < len(shown) < rows.count()  # the header, both tokens; not all five
    assert flip.locator("table.topk td.chosen").count() == 2
    flip.locator("button.more-topk").click()
    assert all(r.is_visible() for r in rows.all())


def test_a_b_text_sent_as_its_shared_start_with_a_reads_back_whole(
        page: Any, tmp_path: Path) -> None:
    """The page carries B's text as [n, rest] when it starts with A's first n UTF-16
    units: astral characters before the fork, B ending inside A, identical texts and
    markup after the fork all read back as B's exact text, and nothing executes."""
    shared = "\U0001f642 caf\u00e9 \U0001d54f a long shared start, " * 2
    texts = [(shared + "then A goes on.", shared + "then B <img src=x onerror=alert(1)>."),
             (shared + "A is longer than B", shared + "A is"),
             (shared, shared),
             ("short A", "other B")]
    (tmp_path / "a.texts.json").write_text(json.dumps([a for a, _ in texts]))
    (tmp_path / "b.texts.json").write_text(json.dumps([b for _, b in texts]))
    compare_runs(tmp_path / "a.texts.json", tmp_path / "b.texts.json", tmp_path / "report")
    html = (tmp_path / "report" / "index.html").read_text()
    assert html.count("then A goes on") == 1  # the shared start is not sent twice
    open_sheet(page, (tmp_path / "report" / "index.html").as_uri())
    assert not page.errors and page.locator("img").count() == 0
    for number, (a_text, b_text) in enumerate(texts):
        shown = card(page, str(number)).locator(".side.b")
        if a_text != b_text:
            assert shown.inner_text() == f"B: b\n{b_text}"
    page.fill("#f-search", "then b <img")  # the search reads the rebuilt texts too
    page.wait_for_timeout(300)
    assert card(page, "0").count() == 1 and card(page, "1").count() == 0
