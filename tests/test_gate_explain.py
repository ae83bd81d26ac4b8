"""What a pull request's reviewer reads of a failing gate: junit.xml and the step
summary name the rule, the check that flipped, A's and B's answers (cut, XML-safe)
and the pair's link in the review sheet, which opens that pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from click.testing import Result
from hypothesis import given, settings
from hypothesis import strategies as st
from junitparser import JUnitXml

from quantcheck import CollectSettings, collect, compare_runs
from quantcheck.gate.explain import markdown_text, sheet_link
from quantcheck.lab.scripted import ScriptedModel

from .conftest import (
    MARKDOWN_ATTACKS,
    RUNNER_UPS,
    Serve,
    WritePrompts,
    gate_writing_a_step_summary,
    invoke,
    markdown_skeleton,
)

LONG = " The capital of Australia is Sydney." + "".join(f" {n} is {n * n}." for n in range(60))


def gate(*args: object) -> Result:
    return invoke("gate", *args)


def failures_of(report: Path) -> dict[str, list[Any]]:
    suite = next(iter(JUnitXml.fromfile(str(report / "junit.xml"))))
    return {case.name: list(case.result) for case in suite}


def test_junit_names_the_check_both_answers_and_the_pairs_link(planted_report: Path) -> None:
    assert gate(planted_report).exit_code == 1
    cases = failures_of(planted_report)
    (flip,) = cases["flip"]
    assert flip.type == "factual_flips"
    assert flip.message == 'factual flips: check contains passes on A, fails on B: ' \
                           'contains: missing "Canberra"; flip cause: confident; fork at ' \
                           "token 5 (A ' Canberra.', B ' Sydney.'): B's token not in A's " \
                           "top-k (both sure)"
    assert flip.text.splitlines() == [
        "flip: breaks rule factual_flips (limit 0)",
        'why: check contains passes on A, fails on B: contains: missing "Canberra"; '
        "flip cause: confident; fork at token 5 (A ' Canberra.', B ' Sydney.'): B's token "
        "not in A's top-k (both sure)",
        "A (a):  The capital of Australia is Canberra.",
        "B (b):  The capital of Australia is Sydney.",
        "review sheet: index.html#pair-flip"]
    (loop,) = cases["loop"]
    assert "why: B's answer is degenerate (repetition), A's is not" in loop.text
    assert "B (b):  need analysis there need analysis there" in loop.text
    assert "... (" in loop.text and "characters)" in loop.text  # a long answer is cut
    (only_a,) = cases["only-a"]
    assert "why: not compared: only A has this prompt" in only_a.text
    assert "B (b): (none)" in only_a.text


def test_the_step_summary_says_why_each_prompt_fails(planted_report: Path,
                                                     tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    result = gate_writing_a_step_summary(planted_report, summary)
    text = summary.read_text()
    assert text.strip() == result.stdout.strip()
    assert "### Why" in text
    row = next(line for line in text.splitlines() if line.startswith("| `flip` |"))
    assert row == ('| `flip` | factual_flips | check contains passes on A, fails on B: '
                   'contains: missing "Canberra"; flip cause: confident; fork at token 5 '
                   "(A ' Canberra.', B ' Sydney.'): B's token not in A's top-k (both sure) | "
                   'The capital of Australia is Canberra. | '
                   'The capital of Australia is Sydney. | `index.html#pair-flip` |')


def run_pair(serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
             prompts: str, a: dict[str, str | list[str]], b: dict[str, str | list[str]]
             ) -> Path:
    files = write_prompts(prompts)
    for side, answers in (("a", a), ("b", b)):
        collect([files], tmp_path / side, CollectSettings(
            endpoint=serve(ScriptedModel(answers, RUNNER_UPS)).url, label=side,
            preflight=False, concurrency=4, top_logprobs=2))
    compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    return tmp_path / "report"


def test_answers_xml_cannot_hold_stay_well_formed_and_are_cut(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    report = run_pair(serve, write_prompts, tmp_path, """
        prompts:
          - {id: "capital <au> & \\"co\\"", prompt: "Q: capital", expect: {contains: Canberra}}
    """, {"Q: capital": " Canberra \x01 ]]> <b>bold</b> & done."}, {"Q: capital": LONG})
    assert gate(report).exit_code == 1
    root = ElementTree.parse(report / "junit.xml").getroot()  # expat: strict
    (failure,) = [f for f in root.iter("failure") if f.get("type") == "factual_flips"]
    text = failure.text or ""
    assert "A (a):  Canberra \\x01 ]]> <b>bold</b> & done." in text
    assert f"B (b): {LONG[:400]}... ({len(LONG)} characters)" in text
    assert "review sheet: index.html#pair-capital%20%3Cau%3E%20%26%20%22co%22" in text


def test_the_link_opens_its_pair_in_the_sheet_even_one_not_rendered_yet(
        page: Any, serve: Serve, write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    """The sheet renders 40 cards at first; a link to the 60th renders up to it."""
    prompts = "prompts:\n" + "".join(
        f'  - {{id: "q/{n} ?", prompt: "Q{n}:", expect: {{contains: "answer {n}"}}}}\n'
        for n in range(60))
    a: dict[str, str | list[str]] = {f"Q{n}:": f" The answer {n}." for n in range(60)}
    b = {**a, "Q59:": " Something else."}
    b.update({f"Q{n}:": f" The answer {n}, surely." for n in range(0, 50)})
    report = run_pair(serve, write_prompts, tmp_path, prompts, a, b)
    assert gate(report).exit_code == 1
    (flip,) = failures_of(report)["q/59 ?"]
    link = flip.text.splitlines()[-1].removeprefix("review sheet: ")
    assert link == sheet_link("q/59 ?") == "index.html#pair-q%2F59%20%3F"
    page.goto(f"{(report / 'index.html').as_uri()}#{link.split('#')[1]}")
    page.wait_for_selector("body[data-ready=true]")
    card = page.locator('article.pair[data-prompt="q/59 ?"]')
    assert card.get_attribute("id") == "pair-q/59 ?"
    assert "current" in (card.get_attribute("class") or "")
    assert card.is_visible() and card.bounding_box()["y"] < 900
    assert page.locator("article.pair").count() > 40  # rendered up to it
    assert not page.errors


@pytest.fixture
def page(browser: Any) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.errors = []
    opened.on("pageerror", lambda error: opened.errors.append(str(error)))
    yield opened
    context.close()


def test_the_overviews_junit_and_summary_explain_each_failing_candidate(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts("""
        prompts:
          - {id: capital, prompt: "Q: capital", expect: {contains: Canberra}}
    """)
    a = serve(ScriptedModel({"Q: capital": " Canberra."}, RUNNER_UPS)).url
    flips = serve(ScriptedModel({"Q: capital": " Sydney."}, RUNNER_UPS)).url
    out = tmp_path / "quants"
    run = invoke("run", "--a", a, "--a-label", "bf16", "--b", flips, "--b-label", "int4", "--b", a,
                 "--b-label", "fp8", "--prompts", prompts, "--out", out, "--no-preflight")
    assert run.exit_code == 1, run.output
    summary = tmp_path / "summary.md"
    result = gate_writing_a_step_summary(out, summary)
    assert result.exit_code == 1
    cases = failures_of(out)
    (failure,) = cases["int4: factual_flips"]
    assert "review sheet: candidates/int4/index.html#pair-capital" in failure.text
    assert "A (bf16):  Canberra." in failure.text and "B (int4):  Sydney." in failure.text
    text = summary.read_text()
    assert "### Why int4 fails" in text and "Why fp8" not in text
    assert "`candidates/int4/index.html#pair-capital`" in text


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text() | st.sampled_from(MARKDOWN_ATTACKS), max_size=5).map("".join))
def test_any_text_shows_as_written_on_one_line_and_opens_nothing(text: str) -> None:
    """The one escaping every Markdown writer uses: a paragraph of the text renders as
    one paragraph of it, line breaks as spaces (NUL as the renderer's U+FFFD)."""
    import html
    import re

    written = "said: " + markdown_text(text)
    assert "\n" not in written and "\r" not in written
    assert markdown_skeleton(written) == ["<p", "</p"]
    import cmarkgfm

    shown = html.unescape(re.sub(r"<[^>]*>", "", cmarkgfm.github_flavored_markdown_to_html(
        written))).strip()
    assert shown == ("said: " + " ".join(text.split())).replace("\x00", "\ufffd").strip()
