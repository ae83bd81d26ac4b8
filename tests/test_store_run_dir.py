"""store/run_dir.py: a run's prompts held as ids and line offsets (PromptLines), each
parsed when asked: the same prompts, order and errors as reading them whole."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck import load_run
from quantcheck.errors import RunFormatError
from quantcheck.store.run_dir import PromptLines

prompt_lines = st.lists(st.tuples(
    st.sampled_from(["q1", "q2", "q3", "\u00e9", ""]), st.text(max_size=12),
    st.sampled_from(["ok", "ok", "torn", "not json", "no id"])), max_size=12)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(prompt_lines)
def test_a_runs_prompts_read_on_demand_are_the_prompts_read_whole(
        lines: list[tuple[str, str, str]]) -> None:
    """compare holds a run's prompts.jsonl as ids and offsets (PromptLines) and parses a
    prompt when asked: the same prompts, in the same order, as load_run reads at once,
    the same error (file and line) for a malformed line, a torn last line skipped."""
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        (run / "manifest.json").write_text("{}")
        text = ""
        for number, (prompt_id, prompt, kind) in enumerate(lines):
            line = json.dumps({"id": prompt_id, "category": "c", "api": "completions",
                               "hash": f"h{number}", "request": {"prompt": prompt}})
            text += {"ok": line + "\n", "torn": line, "not json": "{\n",
                     "no id": '{"category": "c"}\n'}[kind]
            if kind == "torn":
                break
        (run / "prompts.jsonl").write_text(text)
        try:
            whole = load_run(run).prompts
        except RunFormatError as exc:
            with pytest.raises(RunFormatError) as raised:
                PromptLines(run / "prompts.jsonl")
            assert str(raised.value) == str(exc)
            return
        lazy = PromptLines(run / "prompts.jsonl")
        assert list(lazy) == list(whole) and len(lazy) == len(whole)
        assert all(lazy[prompt_id] == prompt for prompt_id, prompt in whole.items())
        assert "never" not in lazy and lazy.get("never") is None
