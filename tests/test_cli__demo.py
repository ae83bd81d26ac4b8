"""`quantcheck demo`: what it prints is honest about the A/B it runs, and the README
says what it prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .conftest import REPO, invoke


def test_the_scripted_demo_is_a_single_variable_ab_that_says_why_it_fails(
        tmp_path: Path) -> None:
    result = invoke("demo", "--engine", "scripted", "--out", tmp_path / "demo")
    assert result.exit_code == 0, result.output
    assert "differ in" not in result.output  # one serving stack, only the weights differ
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert summary["cells"]["a"]["quantization"] == "bf16"
    assert summary["cells"]["b"]["quantization"] == "fp8"
    assert summary["cells"]["warning"] is None
    # capital-au forks at a near tie on A: listed for review, named, not counted
    assert ("gate (default policy): FAIL: 1 confident flip (author-hamlet), 1 degenerate "
            "output new on B (author-hamlet); 1 near-tie flip to review (capital-au); "
            "reference: 2 repeats a prompt, 0 of 8 prompts varied on A (0 in their text)"
            ) in result.output
    # the context probe is off on purpose (a small model cannot recall a code): said so
    assert "a context probe of 0 tokens" not in result.output
    assert "context    not checked: turned off (--context-tokens 0)" in result.output


def test_the_readme_says_what_the_demo_prints_of_fp8() -> None:
    """The README's measured fp8 sentence uses the summary's own words and the counts of
    the demo's overview in docs/candidates.md (the real-model demo is too heavy to run
    here)."""
    readme = " ".join((REPO / "README.md").read_text().split())
    measured = re.search(r"fp8 left (\d+) of (\d+) answers identical and (\d+) to review "
                         r"\(none a flipped fact\)", readme)
    assert measured, "the README's fp8 sentence"
    identical, prompts, review = map(int, measured.groups())
    assert identical + review == prompts
    assert "changed the wording" not in readme
    table = (REPO / "docs" / "candidates.md").read_text()
    row = re.search(r"^fp8\s+pass\s+(\d+)/(\d+)\s+(\d+)\s+(\d+)", table, re.MULTILINE)
    assert row and tuple(map(int, row.groups())) == (prompts, prompts, identical, 0)
