"""store/folders/judge_cache.py: the judge's cache read back as untrusted: a line past what a
reply's line holds is one error naming the file and the line, read no further."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantcheck.store.files import UnreadableFile
from quantcheck.store.folders.judge_cache import MAX_LINE_BYTES, JudgeCache
from quantcheck.store.records.judge_records import JudgeReply


def test_replies_read_back_and_an_endless_line_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "judge-cache.jsonl"
    with JudgeCache(path) as cache:
        cache.add(JudgeReply(key="k1", model="judge", prompt_version="1", reply="same"))
    assert JudgeCache(path).get("k1") is not None
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size + (2 << 30))  # NULs without end, sparse
    with pytest.raises(UnreadableFile) as caught:
        JudgeCache(path)
    assert str(caught.value) == (f"{path}:2: a line of more than {MAX_LINE_BYTES >> 20} MiB, "
                                 "more than a line of a judge cache holds (is this the right "
                                 "file?)")
