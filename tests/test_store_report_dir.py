"""store/report_dir.py: a report's files read back as untrusted input: one that is
missing or malformed is one RunFormatError naming it, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantcheck import CollectSettings, collect
from quantcheck.errors import RunFormatError
from quantcheck.fetch.forced_scoring import ForcedSettings
from quantcheck.pipeline.collecting import score_run
from quantcheck.store.report_dir import FORCED_JSON, FORCED_JSONL, read_forced

from .conftest import TWO_PROMPTS, Serve, WritePrompts, assert_one_clear_line, invoke


@pytest.fixture
def forced(serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> tuple[Path, Path]:
    """A run, and A's tokens scored on a second server (DIR/forced.json and .jsonl)."""
    run = tmp_path / "a"
    collect([write_prompts(TWO_PROMPTS)], run, CollectSettings(
        endpoint=serve().url, label="a", preflight=False, top_logprobs=3))
    score_run(run, tmp_path / "forced", ForcedSettings(endpoint=serve().url, top_k=3))
    return run, tmp_path / "forced"


@pytest.mark.parametrize("damage", ["lines-missing", "lines-a-folder", "a-line-malformed",
                                    "summary-malformed"])
def test_forced_scores_that_cannot_be_read_are_one_clear_line(
        forced: tuple[Path, Path], tmp_path: Path, damage: str) -> None:
    run, folder = forced
    read_forced(folder)  # as written, it reads
    if damage == "lines-missing":
        (folder / FORCED_JSONL).unlink()
    elif damage == "lines-a-folder":
        (folder / FORCED_JSONL).unlink()
        (folder / FORCED_JSONL).mkdir()
    elif damage == "a-line-malformed":
        (folder / FORCED_JSONL).write_text('{"prompt_id": 7}\n')
    else:
        (folder / FORCED_JSON).write_text('{"scored": "many"}')
    named = FORCED_JSON if damage == "summary-malformed" else FORCED_JSONL
    with pytest.raises(RunFormatError, match=named):
        read_forced(folder)
    result = invoke("compare", run, run, "--forced", folder, "--out", tmp_path / "report")
    assert result.exit_code == 2
    assert_one_clear_line(result.output, named)
