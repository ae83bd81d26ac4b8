"""present/matrix.py: the serving matrix a candidates' run writes (matrix.csv) and appends
to a user's own (`--matrix`), without duplicates; a file of other columns refused."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.lab.scripted import ScriptedModel
from quantcheck.present.matrix import COLUMNS, append_matrix

from .conftest import (
    CANDIDATE_ANSWERS,
    CANDIDATE_PROMPTS,
    Serve,
    WritePrompts,
    invoke,
    read_csv,
    run_candidates,
)


def test_the_matrix_has_the_seeds_columns_and_appends_without_duplicates(
        candidate_endpoints: dict[str, str], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    mine = tmp_path / "matrix.csv"
    earlier = dict.fromkeys(COLUMNS, "")
    earlier.update(model_id="other-model", runtime="vllm", tested_at="2026-01-01",
                   note="an earlier test")
    with mine.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerow(earlier)
    prompts = write_prompts(CANDIDATE_PROMPTS)
    for attempt in range(2):  # the same cells on the same day: replaced, not added
        result = run_candidates(candidate_endpoints, prompts, tmp_path / f"quants-{attempt}",
                                "--matrix", mine)
        assert result.exit_code == 1, result.output  # written; "flips" fails the gate
    report_rows = read_csv(tmp_path / "quants-0" / "matrix.csv")
    assert list(report_rows[0]) == COLUMNS and len(report_rows) == 5
    assert report_rows[0]["correctness_status"] == "reference"
    by_note = {row["note"].split(";")[0]: row for row in report_rows[1:]}
    assert by_note["flips"]["correctness_status"] == "fail"
    assert by_note["clean"]["correctness_status"] == "pass"
    assert float(by_note["clean"]["agg_tokens_per_second"]) > 0
    assert by_note["clean"]["runtime"] == "vllm" and by_note["clean"]["concurrency"] == "2"
    kept = read_csv(mine)
    assert kept[0] == earlier and len(kept) == 1 + 5


def test_a_matrix_with_other_columns_is_refused(candidate_endpoints: dict[str, str],
                                                write_prompts: WritePrompts,
                                                tmp_path: Path) -> None:
    mine = tmp_path / "matrix.csv"
    mine.write_text("model,speed\nx,1\n")
    result = run_candidates(candidate_endpoints, write_prompts(CANDIDATE_PROMPTS),
                            tmp_path / "q", "--matrix", mine)
    assert result.exit_code == 2 and "not a serving matrix" in result.output
    assert mine.read_text() == "model,speed\nx,1\n"
    assert not list(tmp_path.rglob("completions.jsonl"))  # refused before anything was sent


def test_the_kv_cache_dtype_is_named_in_the_rows_and_tells_cells_apart(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """Two candidates on one engine that differ only in their KV cache (as vLLM's
    metrics page tells it): a row each, the dtype in its column and in its cell key."""
    endpoints = {
        "bf16": serve(ScriptedModel(CANDIDATE_ANSWERS)).url,
        "kv-fp8": serve(ScriptedModel(CANDIDATE_ANSWERS),
                        server_info={"kv_cache_dtype": "fp8_e4m3"}).url,
        "kv-nvfp4": serve(ScriptedModel(CANDIDATE_ANSWERS),
                          server_info={"kv_cache_dtype": "nvfp4"}).url}
    result = invoke("run", "--a", endpoints["bf16"], "--a-label", "bf16",
                    "--b", endpoints["kv-fp8"], "--b-label", "kv-fp8",
                    "--b", endpoints["kv-nvfp4"], "--b-label", "kv-nvfp4",
                    "--prompts", write_prompts(CANDIDATE_PROMPTS), "--out", tmp_path / "kv",
                    "--no-preflight")
    assert result.exit_code == 0, result.output
    rows = read_csv(tmp_path / "kv" / "matrix.csv")
    assert [row["kv_cache_dtype"] for row in rows] == ["auto", "fp8_e4m3", "nvfp4"]
    overview = json.loads((tmp_path / "kv" / "overview.json").read_text())
    keys = [candidate["cell_key"] for candidate in overview["candidates"]]
    assert keys == ["scripted-model__vllm-0.11.0__kv-fp8_e4m3",
                    "scripted-model__vllm-0.11.0__kv-nvfp4"]
@settings(max_examples=100, deadline=None)
@given(st.text(), st.text())
def test_any_text_a_server_names_round_trips_the_matrix(model: str, runtime: str) -> None:
    """A model id (a server's word) holding a bare carriage return once left an unquoted
    cell that the next --matrix append could not read."""
    import tempfile

    row = dict.fromkeys(COLUMNS, "") | {"model_id": "\r" + model, "runtime": runtime + "\r"}
    other = dict.fromkeys(COLUMNS, "") | {"model_id": "other", "note": "x\ry"}
    with tempfile.TemporaryDirectory() as name:
        path = Path(name) / "matrix.csv"
        append_matrix(path, [row])
        assert append_matrix(path, [other]) == 2
        with path.open(newline="") as handle:
            assert list(csv.DictReader(handle)) == [row, other]
