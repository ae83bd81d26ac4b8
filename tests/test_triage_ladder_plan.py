"""triage/ladder_plan.py: the rungs a context holds, the codes, the probes and their
prompt entries (read back by the prompt loader, the expect included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantcheck.store.inputs.prompt_sets import load_prompts
from quantcheck.store.inputs.prompt_writer import entries_yaml
from quantcheck.store.records.ladder_records import LadderProbe, LadderSettings
from quantcheck.triage.ladder_plan import (
    CONTEXT_MARGIN,
    UNKNOWN_CONTEXT_TOP,
    check_language,
    code_for,
    probes_of,
    prompt_entry,
    rung_lengths,
    too_long,
)

SETTINGS = LadderSettings(lengths=[1024], depths=[0.0, 0.5])


def test_the_default_rungs_double_while_the_context_holds_a_prompt_and_its_answer() -> None:
    assert rung_lengths(16384, 16) == [1024, 2048, 4096, 8192]  # 16K + answer overflows
    assert rung_lengths(16384 + 16 + CONTEXT_MARGIN, 16) == [1024, 2048, 4096, 8192, 16384]
    assert rung_lengths(131072, 16, top=32768)[-1] == 32768
    assert rung_lengths(None, 16) == [1024, 2048, 4096, UNKNOWN_CONTEXT_TOP]
    assert rung_lengths(1000, 16) == []
    assert too_long([1024, 16384], 16384, 16) == [16384]
    assert too_long([10**6], None, 16) == []


def test_codes_are_five_digits_the_same_everywhere_and_differ_between_probes() -> None:
    codes = {code_for(1, tokens, depth) for tokens in (1024, 2048) for depth in (0.0, 0.5)}
    assert len(codes) == 4 and all(len(c) == 5 and c.isdigit() for c in codes)
    assert code_for(1, 1024, 0.0) == code_for(1, 1024, 0.0) != code_for(2, 1024, 0.0)


def test_a_rungs_probes_are_a_needle_per_depth_and_one_absent() -> None:
    probes = probes_of(SETTINGS, 2048)
    assert [(p.id, p.kind, p.depth) for p in probes] == [
        ("needle-d0", "needle", 0.0), ("needle-d0.5", "needle", 0.5),
        ("absent", "absent", None)]
    without = probes_of(LadderSettings(lengths=[1024], depths=[0.25], absent=False), 1024)
    assert [p.id for p in without] == ["needle-d0.25"]


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_a_probes_entry_loads_back_with_its_needle_filler_and_expect(tmp_path: Path,
                                                                     api: str) -> None:
    settings = LadderSettings(lengths=[1024], depths=[0.5], api=api, max_tokens=12)
    needle, absent = [LadderProbe(id=p.id, kind=p.kind, depth=p.depth, code=p.code,
                                  sentences=40) for p in probes_of(settings, 1024)]
    path = tmp_path / "probes.yaml"
    path.write_text(entries_yaml([prompt_entry(settings, 1024, needle),
                                  prompt_entry(settings, 1024, absent)]), encoding="utf-8")
    loaded, empty = load_prompts([path])
    assert loaded.id == "ladder-1024-needle-d0.5" and loaded.category == "1024 tokens"
    assert loaded.api == api and loaded.request["max_tokens"] == 12
    text = (loaded.request["prompt"] if api == "completions"
            else loaded.request["messages"][0]["content"])
    assert f"The secret code is {needle.code}." in text
    assert 0.3 < text.index(str(needle.code)) / len(text) < 0.7  # planted mid-way
    assert loaded.expect is not None and loaded.expect.contains == [needle.code]
    other = (empty.request["prompt"] if api == "completions"
             else empty.request["messages"][0]["content"])
    assert "The secret code is" not in other and empty.expect is not None
    assert empty.expect.regex  # the answer must say there is none


def test_a_language_outside_the_fillers_is_named() -> None:
    assert check_language("de") is None
    assert "must be one of en, de, zh" in (check_language("fr") or "")
