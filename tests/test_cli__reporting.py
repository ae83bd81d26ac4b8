"""`quantcheck compare` reads a data file of prompts as `run` does: the mapping its own
error suggests is an option it takes."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import invoke, read_csv


def test_compare_takes_the_map_its_data_file_error_suggests(tmp_path: Path) -> None:
    data = tmp_path / "qa.csv"
    data.write_text("id,question,answer\nau,What is the capital of Australia?,Canberra\n"
                    "author,Who wrote Emma?,Jane Austen\n")
    a, b = tmp_path / "a.texts.json", tmp_path / "b.texts.json"
    a.write_text(json.dumps(["It is Canberra.", "Jane Austen."]))
    b.write_text(json.dumps(["It is Sydney.", "Jane Austen."]))
    unmapped = invoke("compare", a, b, "--prompts", data, "--out", tmp_path / "unmapped")
    assert unmapped.exit_code == 2 and "--map prompt=COLUMN" in unmapped.output
    mapped = invoke("compare", a, b, "--prompts", data, "--map", "id=id",
                    "--map", "prompt=question",
                    "--map", "expect.contains=answer", "--out", tmp_path / "report")
    assert mapped.exit_code == 1, mapped.output
    rows = {row["prompt_id"]: row for row in read_csv(tmp_path / "report" / "pairs.csv")}
    assert set(rows) == {"au", "author"}
    assert "1 confident flip (of them 1 fork unverified) (au)" in mapped.output
