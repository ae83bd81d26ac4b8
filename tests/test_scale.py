"""Scale: sharded collection and merge (four shards of a run merge into a run that
compares byte for byte like the unsharded one; shards that do not belong together are
refused), and compare on several processes (the same report as on one)."""

from __future__ import annotations

import csv
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck import CollectSettings, collect, compare_runs, load_run
from quantcheck.lab.scripted import ScriptedModel, ScriptedServer
from quantcheck.present import sheet as sheet_module
from quantcheck.store.folders.merging import merge_runs
from quantcheck.store.folders.report_dir import DetailsReader, pairs_csv, read_pair_rows, read_pairs
from quantcheck.store.folders.run_dir import lock_run
from quantcheck.store.folders.shards import ShardError, in_shard, parse_shard
from quantcheck.store.records.pair_records import PAIR_DTYPES, TEXT_COLUMNS
from quantcheck.triage import pairs as compare_module

from .conftest import Serve, WritePrompts, assert_one_clear_line, invoke, run_with_file_limit


def prompt_set(count: int) -> str:
    return "prompts:\n" + "".join(
        f"  - {{id: q{n}, category: c{n % 3}, prompt: 'question {n} about Australia'}}\n"
        for n in range(count))


PROMPTS = prompt_set(23)
A = {"Australia": " The capital of Australia is Canberra, not Sydney."}
B = {"Australia": " The capital of Australia is Sydney, not Canberra."}


def collect_shards(url: str, prompts: Path, folder: Path, count: int, **extra: object
                   ) -> list[Path]:
    runs = []
    for index in range(1, count + 1):
        runs.append(folder / f"shard{index}")
        collect([prompts], runs[-1], CollectSettings(
            endpoint=url, label="b", repeats=2, context_tokens=0,
            shard=f"{index}/{count}", concurrency=1 + index, **extra))  # type: ignore[arg-type]
    return runs


def test_four_shards_merge_into_the_unsharded_run(serve: Serve, write_prompts: WritePrompts,
                                                  tmp_path: Path) -> None:
    prompts = write_prompts(PROMPTS)
    a, b = serve(ScriptedModel(A)), serve(ScriptedModel(B))
    collect([prompts], tmp_path / "a", CollectSettings(endpoint=a.url, label="a", repeats=2,
                                                       context_tokens=0))
    collect([prompts], tmp_path / "whole", CollectSettings(endpoint=b.url, label="b",
                                                           repeats=2, context_tokens=0))
    shards = collect_shards(b.url, prompts, tmp_path, 4)
    sizes = [len(load_run(shard).prompts) for shard in shards]
    assert sum(sizes) == 23 and all(sizes)  # every prompt in exactly one shard

    result = invoke("merge", *reversed(shards), "--out", tmp_path / "merged")
    assert result.exit_code == 0, result.output
    assert "merged 4 shards: 23 prompts, 46 records" in result.output
    merged = load_run(tmp_path / "merged")
    assert merged.status == "complete" and merged.manifest.parameters.shard is None
    assert list(merged.prompts) == list(load_run(tmp_path / "whole").prompts)
    for name in ("whole", "merged"):
        compare_runs(tmp_path / "a", tmp_path / name, tmp_path / f"report-{name}")
    assert (tmp_path / "report-merged" / "pairs.csv").read_bytes() == (
        tmp_path / "report-whole" / "pairs.csv").read_bytes()
    summaries = [json.loads((tmp_path / f"report-{name}" / "summary.json").read_text())
                 for name in ("whole", "merged")]
    assert summaries[0]["counts"] == summaries[1]["counts"]


def test_shards_collected_by_separate_processes_over_replicas_merge_into_one_run(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """The recipe for more than one client: shards of the prompt set, each a `collect
    --shard I/N` process of its own (a Slurm array task, a Kubernetes Indexed Job pod),
    all against the same replicas, then `merge`: every request once, each record naming
    the replica that answered. Two processes of a few prompts make the point (that merged
    shards compare as the unsharded run is the four-shard test's)."""
    prompts = write_prompts(prompt_set(8))
    b1, b2 = serve(ScriptedModel(B)), serve(ScriptedModel(B))
    replicas = f"{b1.url}/v1,{b2.url}/v1"
    shards = [tmp_path / f"shard{index}" for index in (1, 2)]
    processes = [subprocess.Popen(
        [sys.executable, "-m", "quantcheck", "collect", "--endpoint", replicas, "--label", "b",
         "--prompts", str(prompts), "--repeats", "2", "--context-tokens", "0",
         "--no-preflight", "--replica-spread", "repeat", "--shard", f"{index}/2",
         "--out", str(shard)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
        for index, shard in enumerate(shards, 1)]
    for process in processes:
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output
    assert all(load_run(shard).prompts for shard in shards)  # each process had its share

    result = invoke("merge", *shards, "--out", tmp_path / "merged")
    assert result.exit_code == 0, result.output
    assert "merged 2 shards: 8 prompts, 16 records" in result.output
    merged = load_run(tmp_path / "merged")
    keys = [(r.prompt_id, r.repeat) for r in merged.completions()]
    assert len(keys) == len(set(keys)) == 16
    # each prompt's two repeats went to the two replicas (the repeat spread)
    by_prompt: dict[str, set[str | None]] = {}
    for record in merged.completions():
        by_prompt.setdefault(record.prompt_id, set()).add(record.replica)
    assert all(seen == {f"{b1.url}/v1", f"{b2.url}/v1"} for seen in by_prompt.values())
    assert merged.manifest.replication is not None
    assert [r.endpoint for r in merged.manifest.replication.replicas] == [
        f"{b1.url}/v1", f"{b2.url}/v1"]


def test_shards_that_do_not_belong_together_are_refused(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts(PROMPTS)
    b = serve(ScriptedModel(B))
    shards = collect_shards(b.url, prompts, tmp_path / "one", 2)
    other = serve(ScriptedModel(B))
    elsewhere = collect_shards(other.url, prompts, tmp_path / "two", 2)
    thirds = collect_shards(b.url, prompts, tmp_path / "three", 3)
    more_tokens = collect_shards(b.url, prompts, tmp_path / "four", 2, top_logprobs=5)
    cases = [
        ([shards[0]], "shard 2/2 missing"),
        ([shards[0], shards[0], shards[1]], "shard 1/2 given twice"),
        ([shards[0], elsewhere[1]], "not shards of one run: endpoint"),
        ([shards[0], thirds[1]], "different numbers of shards"),
        ([shards[0], more_tokens[1]], "top_logprobs 5 vs 20"),
        ([tmp_path / "one" / "shard1", tmp_path / "nothing"], "not"),
    ]
    for runs, message in cases:
        result = invoke("merge", *runs, "--out", tmp_path / "out")
        assert result.exit_code == 2, (message, result.output)
        assert message in result.output, result.output
        assert "Traceback" not in result.output
    unsharded = tmp_path / "plain"
    collect([prompts], unsharded, CollectSettings(endpoint=b.url, label="b", context_tokens=0))
    with pytest.raises(ShardError, match="is not a shard"):
        merge_runs([unsharded], tmp_path / "out")
    (tmp_path / "out.merging").mkdir()  # an interrupted merge's leftovers
    (tmp_path / "out.merging" / "completions.jsonl").write_text("torn")
    merge_runs(shards, tmp_path / "out")
    assert not (tmp_path / "out.merging").exists()
    assert len(list(load_run(tmp_path / "out").completions())) == 46  # 23 x 2 repeats
    with pytest.raises(ShardError, match="is not empty"):
        merge_runs(shards, tmp_path / "out")

    bad = invoke("collect", "--endpoint", b.url, "--prompts", prompts, "--out", tmp_path / "x",
                 "--shard", "3/2")
    assert bad.exit_code == 2 and "expected I/N with 1 <= I <= N" in bad.output

def write_data_set(folder: Path, kind: str, count: int) -> Path:
    """The prompt set `prompt_set(count)` as a data file: ids q0.. whose own order (q10
    sorts before q2) is not the rows'."""
    rows = [{"id": f"q{n}", "category": f"c{n % 3}", "prompt": f"question {n} about Australia"}
            for n in range(count)]
    folder.mkdir()
    if kind in ("csv", "source-file"):
        data = folder / "data" / "set.csv" if kind == "source-file" else folder / "set.csv"
        data.parent.mkdir(exist_ok=True)
        with data.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, ["id", "category", "prompt"])
            writer.writeheader()
            writer.writerows(rows)
        if kind == "csv":
            return data
        (folder / "set.yaml").write_text("source: data/set.csv\n")
        return folder / "set.yaml"
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "set").mkdir()
    half = count // 2  # two files: each numbers its own rows from 1
    for name, part in (("a.parquet", rows[:half]), ("b.parquet", rows[half:])):
        pq.write_table(pa.Table.from_pylist(part), folder / "set" / name)
    return folder / "set"


@pytest.mark.parametrize("kind", ["csv", "parquet-folder", "source-file"])
def test_shards_of_a_data_file_merge_in_the_unsharded_order(
        serve: Serve, tmp_path: Path, kind: str) -> None:
    prompts = write_data_set(tmp_path / "prompts", kind, 12)
    b = serve(ScriptedModel(B))
    collect([prompts], tmp_path / "whole", CollectSettings(endpoint=b.url, label="b",
                                                           preflight=False))
    shards = [tmp_path / f"shard{index}" for index in (1, 2, 3)]
    for index, shard in enumerate(shards, 1):
        collect([prompts], shard, CollectSettings(endpoint=b.url, label="b", preflight=False,
                                                  shard=f"{index}/3"))
    merge_runs(shards, tmp_path / "merged")
    whole = list(load_run(tmp_path / "whole").prompts)
    assert whole == [f"q{n}" for n in range(12)]
    assert list(load_run(tmp_path / "merged").prompts) == whole
    assert (tmp_path / "merged" / "prompts.jsonl").read_bytes() == (
        tmp_path / "whole" / "prompts.jsonl").read_bytes()


def test_a_shard_that_holds_no_prompt_makes_a_run_merge_takes(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    ids = [f"q{n}" for n in range(40) if in_shard(f"q{n}", 1, 2)][:3]  # shard 2/2: none
    prompts = write_prompts("prompts:\n" + "".join(
        f"  - {{id: {i}, prompt: 'question {i} about Australia'}}\n" for i in ids))
    b = serve(ScriptedModel(B))
    collect([prompts], tmp_path / "whole", CollectSettings(endpoint=b.url, label="b",
                                                           context_tokens=0))
    shards = collect_shards(b.url, prompts, tmp_path, 2)  # with the preflight
    empty = load_run(shards[1])
    assert not empty.prompts and empty.status == "complete"
    assert empty.manifest.preflight is not None  # probed like the set's requests
    assert empty.manifest.preflight.api == "completions"
    result = invoke("merge", *shards, "--out", tmp_path / "merged")
    assert result.exit_code == 0, result.output
    merged = load_run(tmp_path / "merged")
    assert list(merged.prompts) == list(load_run(tmp_path / "whole").prompts) == ids
    assert len(list(merged.completions())) == 6 and merged.status == "complete"


def test_merge_refuses_links_and_a_second_merge_and_keeps_what_they_point_at(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    shards = collect_shards(serve(ScriptedModel(B)).url, write_prompts(PROMPTS), tmp_path, 2)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("mine")
    (tmp_path / "linked.merging").symlink_to(precious)  # planted where merge builds
    with pytest.raises(ShardError, match="is a symbolic link"):
        merge_runs(shards, tmp_path / "linked")
    (tmp_path / "elsewhere").symlink_to(precious, target_is_directory=True)
    with pytest.raises(ShardError, match="is a symbolic link"):
        merge_runs(shards, tmp_path / "elsewhere")
    assert (precious / "keep.txt").read_text() == "mine"
    with lock_run(tmp_path / "busy.merging"):  # another merge into the same place
        result = invoke("merge", *shards, "--out", tmp_path / "busy")
    assert result.exit_code == 2 and "in use by another quantcheck process" in result.output
    assert not (tmp_path / "busy").exists()


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.text(max_size=20), st.integers(1, 9))
def test_every_prompt_is_in_exactly_one_shard(prompt_id: str, count: int) -> None:
    assert sum(in_shard(prompt_id, index, count) for index in range(1, count + 1)) == 1
    assert parse_shard(f"{count}/{count}") == (count, count)


def test_compare_on_several_processes_writes_the_same_report(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts(prompt_set(150))  # above parallel.MIN_ITEMS
    for side, answers in (("a", A), ("b", B)):
        collect([prompts], tmp_path / side, CollectSettings(
            endpoint=serve(ScriptedModel(answers)).url, label=side, repeats=2,
            context_tokens=0, concurrency=16))
    for jobs in ("1", "2"):
        result = invoke("compare", tmp_path / "a", tmp_path / "b", "--out", tmp_path / f"r{jobs}",
                        "--jobs", jobs)
        assert result.exit_code == 0, result.output
    for name in ("pairs.csv", "details.jsonl"):
        assert (tmp_path / "r1" / name).read_bytes() == (tmp_path / "r2" / name).read_bytes()
    summaries = [json.loads((tmp_path / f"r{jobs}" / "summary.json").read_text())
                 for jobs in "12"]
    assert summaries[0]["counts"] == summaries[1]["counts"]
    assert summaries[0]["counts"]["pairs"] == 150


def test_a_large_sheet_embeds_only_the_pairs_that_need_a_human(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, browser: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sheet_module, "EMBED_ALL_UP_TO", 10)  # 23 pairs count as "large" here
    prompts = write_prompts(PROMPTS)
    a = serve(ScriptedModel(A))
    b = serve(ScriptedModel({"question 1": B["Australia"], **A}))  # q1, q10..q19 differ
    collect([prompts], tmp_path / "a", CollectSettings(endpoint=a.url, label="a",
                                                       context_tokens=0))
    collect([prompts], tmp_path / "b", CollectSettings(endpoint=b.url, label="b",
                                                       context_tokens=0))
    compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "r")
    sheet = (tmp_path / "r" / "index.html").read_text()
    assert sheet.count("Sydney, not Canberra") == 11  # B's text of the 11 differing pairs
    assert sheet.count("Canberra, not Sydney") == 11  # A's: the 12 identical ones elided
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto((tmp_path / "r" / "index.html").as_uri())
    page.wait_for_selector("body[data-ready=true]")
    assert page.locator("#shown").inner_text() == "23 of 23 shown"
    page.fill("#f-search", "q5")
    page.dispatch_event("#f-search", "input")
    identical = page.locator('article.pair[data-prompt="q5"]')
    identical.locator("summary").click()
    assert "pairs.csv, row \"q5\"" in identical.locator(".elided").inner_text()
    page.fill("#f-search", "q12")
    page.dispatch_event("#f-search", "input")
    differing = page.locator('article.pair[data-prompt="q12"]')
    assert "Sydney" in differing.locator(".side.b").inner_text()
    assert not errors
    page.close()


def test_a_merge_that_cannot_write_says_so_and_a_rerun_finishes(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    shards = collect_shards(serve(ScriptedModel(B)).url, write_prompts(PROMPTS), tmp_path, 2)
    before = [(shard / "tokens.bin").read_bytes() for shard in shards]
    command = [sys.executable, "-m", "quantcheck", "merge", *map(str, shards), "--out",
               str(tmp_path / "merged")]

    limited = run_with_file_limit(command, 4_000)  # the blobs cannot be written
    assert limited.returncode == 2
    assert_one_clear_line(limited.stderr, "File too large")
    assert not (tmp_path / "merged").exists()  # no half run under the name
    assert [(shard / "tokens.bin").read_bytes() for shard in shards] == before
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert len(list(load_run(tmp_path / "merged").completions())) == 46


def two_runs(serve: Serve, write_prompts: WritePrompts, folder: Path, a_count: int = 23,
             b_count: int = 23) -> tuple[Path, Path]:
    """A and B of PROMPTS (B with its first b_count prompts), 2 repeats each."""
    for side, answers, count in (("a", A, a_count), ("b", B, b_count)):
        collect([write_prompts(prompt_set(count))], folder / side, CollectSettings(
            endpoint=serve(ScriptedModel(answers)).url, label=side, repeats=2,
            context_tokens=0, concurrency=8))
    return folder / "a", folder / "b"


def test_a_report_written_a_few_pairs_at_a_time_is_the_report_written_whole(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """compare streams its pairs to pairs.csv and details.jsonl in chunks: however many,
    the files, the identity and the totals are those of one chunk, and pairs.csv is the
    library's whole frame written at once."""
    a, b = two_runs(serve, write_prompts, tmp_path, a_count=23, b_count=20)
    compare_runs(a, b, tmp_path / "whole")
    monkeypatch.setattr(compare_module, "CHUNK_PAIRS", 3)
    monkeypatch.setattr(sheet_module, "SHEET_PAIRS_CHUNK", 4)
    compare_runs(a, b, tmp_path / "chunked")
    for name in ("pairs.csv", "details.jsonl"):
        assert (tmp_path / "whole" / name).read_bytes() == \
            (tmp_path / "chunked" / name).read_bytes()
    whole, chunked = (json.loads((tmp_path / r / "summary.json").read_text())
                      for r in ("whole", "chunked"))
    assert whole["identity"] == chunked["identity"] and whole["counts"] == chunked["counts"]
    assert whole["counts"]["status"] == {"compared": 20, "only_a": 3}
    frame = compare_module.compare(a, b)
    assert frame.to_csv(index=False) == (tmp_path / "whole" / "pairs.csv").read_text()
    sheets = [(tmp_path / r / "index.html").read_text() for r in ("whole", "chunked")]
    assert [s.count("Sydney, not Canberra") for s in sheets] == [20, 20]


def test_integer_columns_stay_integers_beside_empty_cells(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """pandas wrote an integer column with an empty cell as floats ("12.0"); each column
    now keeps PairRow's type, so a chunk writes the same whatever its neighbours."""
    a, b = two_runs(serve, write_prompts, tmp_path, a_count=5, b_count=3)
    compare_runs(a, b, tmp_path / "r")
    with (tmp_path / "r" / "pairs.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    integers = [c for c, kind in PAIR_DTYPES.items() if kind == "Int64"]
    cells = {row["a_tokens"] for row in rows}
    assert "" in cells and len(cells) > 1  # compared rows and empty only_a rows
    for row in rows:
        for column in integers:
            assert re.fullmatch(r"-?\d*", row[column]), (column, row[column])
    assert {row["identical"] for row in rows} == {"False", ""}


def test_pairs_read_back_as_the_typed_rows_compare_wrote(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """read_pairs keeps each column's type beside empty cells (Int64, boolean, float);
    read_pair_rows gives typed rows that write pairs.csv again byte for byte."""
    a, b = two_runs(serve, write_prompts, tmp_path, a_count=5, b_count=3)
    compare_runs(a, b, tmp_path / "r")
    frame = read_pairs(tmp_path / "r")
    typed = {c: kind for c, kind in PAIR_DTYPES.items() if c not in TEXT_COLUMNS}
    assert {c: str(frame[c].dtype) for c in typed} == typed
    rows = read_pair_rows(tmp_path / "r")
    assert [row.prompt_id for row in rows] == frame["prompt_id"].tolist()
    assert {type(row.a_tokens) for row in rows} == {int, type(None)}
    assert pairs_csv(rows) == (tmp_path / "r" / "pairs.csv").read_bytes()


def test_a_broken_pairs_table_found_while_the_sheet_streams_leaves_the_old_sheet(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = two_runs(serve, write_prompts, tmp_path)
    compare_runs(a, b, tmp_path / "r")
    sheet = (tmp_path / "r" / "index.html").read_bytes()
    with (tmp_path / "r" / "pairs.csv").open("a") as handle:
        handle.write('q99,"a cell that never ends\n')
    monkeypatch.setattr(sheet_module, "SHEET_PAIRS_CHUNK", 5)  # the break is in a later chunk
    result = invoke("report", tmp_path / "r")
    assert result.exit_code == 2
    assert_one_clear_line(result.output, "pairs.csv: not a pairs table written by compare")
    assert (tmp_path / "r" / "index.html").read_bytes() == sheet
    assert not list((tmp_path / "r").glob(".*.tmp"))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.text(max_size=6), unique=True, max_size=12), st.randoms())
def test_details_are_found_in_any_order_and_missing_ones_are_empty(
        ids: list[str], rng: Any) -> None:
    """The sheet reads details.jsonl forward beside pairs.csv; a file in another order,
    or without some prompts, still gives every pair its own details."""
    written = [i for i in ids if rng.random() < 0.8]
    rng.shuffle(written)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "details.jsonl"
        path.write_text("".join(json.dumps({"prompt_id": i, "n": ids.index(i)}) + "\n"
                                for i in written))
        reader = DetailsReader(Path(folder))
        for prompt_id in ids:
            detail = reader.get(prompt_id)
            assert detail == ({"prompt_id": prompt_id, "n": ids.index(prompt_id)}
                              if prompt_id in written else {})


def test_a_compare_that_cannot_write_keeps_the_old_report_and_a_rerun_finishes(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """pairs.csv and details.jsonl are streamed to temporaries: a full disk (a file-size
    limit here) is one line, and the report already there stays whole."""
    a, b = two_runs(serve, write_prompts, tmp_path)
    report = tmp_path / "r"
    compare_runs(a, a, report)
    before = {p.name: p.read_bytes() for p in report.iterdir() if p.is_file()}
    command = [sys.executable, "-m", "quantcheck", "compare", str(a), str(b), "--out",
               str(report)]

    limited = run_with_file_limit(command, 3_000)
    assert limited.returncode == 2
    assert_one_clear_line(limited.stderr, "File too large")
    assert {p.name: p.read_bytes() for p in report.iterdir() if p.is_file()} == before
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "Sydney" in (report / "pairs.csv").read_text()


def _edit_record(shard: Path, change: dict[str, Any] | bytes, number: int = 0) -> None:
    """Line `number` of a shard's completions.jsonl, changed (or replaced by raw bytes)."""
    path = shard / "completions.jsonl"
    records = path.read_bytes().splitlines(keepends=True)
    if isinstance(change, bytes):
        records[number] = change
    else:
        record = orjson.loads(records[number])
        for key, value in change.items():
            if key.startswith("tokens."):
                record["tokens"][key.removeprefix("tokens.")] = value
            else:
                record[key] = value
        records[number] = orjson.dumps(record) + b"\n"
    path.write_bytes(b"".join(records))


def _edit_manifest(run: Path, **changes: Any) -> None:
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    for key, value in changes.items():
        if key == "shard":
            manifest["parameters"]["shard"] = value
        else:
            manifest[key] = value
    path.write_text(json.dumps(manifest))


def _relink(shard: Path, name: str, target: str) -> None:
    (shard / name).unlink()
    (shard / name).symlink_to(target)


def _other_shards_line(one: Path, two: Path) -> None:
    line = (two / "completions.jsonl").read_bytes().splitlines(keepends=True)[0]
    with (one / "completions.jsonl").open("ab") as handle:
        handle.write(line)


def _other_shards_prompt(one: Path, two: Path) -> None:
    line = (two / "prompts.jsonl").read_bytes().splitlines(keepends=True)[0]
    with (one / "prompts.jsonl").open("ab") as handle:
        handle.write(line)


def _a_billion_shards(one: Path, two: Path) -> None:
    for index, shard in enumerate((one, two), 1):
        _edit_manifest(shard, shard=f"{index}/1000000000", prompt_hashes={})
        for name in ("prompts.jsonl", "completions.jsonl"):
            (shard / name).write_bytes(b"")


# how each shard lies -> what the one line of error says (shard 1's file is named)
HOSTILE_SHARDS: dict[str, tuple[Any, str]] = {
    "tokens-in-etc-hostname": (lambda one, two: _edit_record(
        one, {"tokens.file": "/etc/hostname"}), "in its own tokens.bin"),
    "tokens-in-another-shard": (lambda one, two: _edit_record(
        one, {"tokens.file": "../shard2/tokens.bin"}), "in its own tokens.bin"),
    "negative-offset": (lambda one, two: _edit_record(one, {"tokens.offset": -1}),
                        "malformed token reference"),
    "offset-past-the-end": (lambda one, two: _edit_record(one, {"tokens.offset": 10**12}),
                            "lie outside"),
    "offset-inside-a-blob": (lambda one, two: _edit_record(one, {"tokens.offset": 1}),
                             "not the start of a token blob"),
    "length-beyond-2^64": (lambda one, two: _edit_record(one, {"tokens.length": 2**63}),
                           "lie outside"),
    "length-a-string": (lambda one, two: _edit_record(one, {"tokens.length": "12"}),
                        "malformed token reference"),
    "offset-true": (lambda one, two: _edit_record(one, {"tokens.offset": True}),
                    "malformed token reference"),
    "tokens-a-number": (lambda one, two: _edit_record(one, {"tokens": 5}), "not a record"),
    "repeat-a-string": (lambda one, two: _edit_record(one, {"repeat": "0"}), "not a record"),
    "repeat-negative": (lambda one, two: _edit_record(one, {"repeat": -1}), "not a record"),
    "repeat-beyond-the-run": (lambda one, two: _edit_record(one, {"repeat": 2}),
                              "repeat 2 of a run of 2 repeats"),
    "a-list": (lambda one, two: _edit_record(one, b"[]\n"), "not a record"),
    "not-json": (lambda one, two: _edit_record(one, b"{\n"), "not valid JSON"),
    "a-prompt-of-the-other-shard": (_other_shards_line, "which is not in shard 1/2"),
    "an-unknown-prompt": (lambda one, two: _edit_record(one, {"prompt_id": "q999"}),
                          "a record for prompt 'q999'"),
    "another-prompt-version": (lambda one, two: _edit_record(one, {"prompt_hash": "0" * 16}),
                               "another version"),
    "prompts-list-the-other-shards": (_other_shards_prompt, "not in the shard's"),
    "manifest-lists-the-other-shards": (lambda one, two: _edit_manifest(one, prompt_hashes={
        **json.loads((one / "manifest.json").read_text())["prompt_hashes"],
        **json.loads((two / "manifest.json").read_text())["prompt_hashes"]}),
        "is not in shard 1/2"),
    "tokens-bin-linked-outside": (lambda one, two: _relink(one, "tokens.bin", "/etc/hostname"),
                                  "is a symbolic link"),
    "prompts-linked-outside": (lambda one, two: _relink(one, "prompts.jsonl", "/etc/passwd"),
                               "is a symbolic link"),
}
# the ones that would read without end (or hang): merged in a process of bounded memory
UNBOUNDED_SHARDS: dict[str, tuple[Any, str]] = {
    "completions-linked-to-dev-zero": (
        lambda one, two: _relink(one, "completions.jsonl", "/dev/zero"), "symbolic link"),
    "manifest-linked-to-dev-zero": (
        lambda one, two: _relink(one, "manifest.json", "/dev/zero"), "symbolic link"),
    "completions-a-fifo": (lambda one, two: ((one / "completions.jsonl").unlink(),
                                             os.mkfifo(one / "completions.jsonl")),
                           "not a regular file"),
    "a-billion-shards": (_a_billion_shards, "7/1000000000 and 999,999,993 more missing"),
}


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("shards")
    (folder / "prompts.yaml").write_text(PROMPTS)
    server = ScriptedServer(ScriptedModel(B)).start()
    try:
        return collect_shards(server.url, folder / "prompts.yaml", folder, 2)
    finally:
        server.stop()


def _hostile_copy(shards: list[Path], folder: Path, lie: Any) -> list[Path]:
    copies = [folder / shard.name for shard in shards]
    for shard, copy in zip(shards, copies, strict=True):
        shutil.copytree(shard, copy, symlinks=True)
    lie(*copies)
    return copies


@pytest.mark.parametrize("case", list(HOSTILE_SHARDS), ids=list(HOSTILE_SHARDS))
def test_merge_reads_shards_as_hostile_input(two_shards: list[Path], tmp_path: Path,
                                            case: str) -> None:
    lie, says = HOSTILE_SHARDS[case]
    shards = _hostile_copy(two_shards, tmp_path, lie)
    result = invoke("merge", *shards, "--out", tmp_path / "merged")
    assert result.exit_code == 2, result.output
    assert_one_clear_line(result.output, says)
    assert str(shards[0]) in result.output and "cannot write" not in result.output
    assert not (tmp_path / "merged").exists()


@pytest.mark.parametrize("case", list(UNBOUNDED_SHARDS), ids=list(UNBOUNDED_SHARDS))
def test_merge_never_reads_without_end(two_shards: list[Path], tmp_path: Path,
                                       case: str) -> None:
    lie, says = UNBOUNDED_SHARDS[case]
    shards = _hostile_copy(two_shards, tmp_path, lie)

    def bounded_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    done = subprocess.run([sys.executable, "-m", "quantcheck", "merge", *map(str, shards),
                           "--out", str(tmp_path / "merged")], capture_output=True,
                          text=True, timeout=60, preexec_fn=bounded_memory)
    assert done.returncode == 2, done.stderr
    assert_one_clear_line(done.stderr, says)
    assert not (tmp_path / "merged").exists()


@pytest.mark.parametrize("reference", [{"tokens.file": "/etc/hostname"},
                                       {"tokens.offset": -1}, {"tokens.length": "9"}],
                         ids=["a-file-outside", "negative-offset", "length-a-string"])
def test_compare_reads_no_token_file_outside_a_run(two_shards: list[Path], tmp_path: Path,
                                                   reference: dict[str, Any]) -> None:
    one, two = _hostile_copy(two_shards, tmp_path, lambda one, two: _edit_record(one,
                                                                                 reference))
    result = invoke("compare", two, one, "--out", tmp_path / "report")
    assert result.exit_code == 2, result.output
    assert_one_clear_line(result.output, "does not point into tokens.bin")
