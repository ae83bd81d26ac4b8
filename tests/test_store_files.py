"""Bad luck on disk: a full disk, a file-size limit, a read-only directory, a second
collector, planted symlinks. Real file system conditions, real processes. And the one
line reader of a user's file (`bounded_lines`): any content reads as its lines, or as
one error naming the first line past the limit, never more of it read."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.store.files import (
    CSV_WRITTEN_WITH,
    LineTooLong,
    StorageError,
    bounded_lines,
    csv_rows,
    write_atomic,
)
from quantcheck.store.folders.run_dir import load_run, write_json_atomic

from .conftest import Serve, WritePrompts, assert_one_clear_line, invoke, run_with_file_limit

PROMPTS = "prompts:\n" + "".join(
    f'  - {{id: p{n:02d}, prompt: "Q: {n}", max_tokens: 24}}\n' for n in range(40))
MODEL = ScriptedModel({"Q:": " A long enough answer with several words in it, so that "
                             "every record takes some room on the disk, and a little more."})


def collect_command(url: str, prompts: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "quantcheck", "collect", "--endpoint", url, "--label", "a",
            "--prompts", str(prompts), "--out", str(out), "--no-preflight",
            "--top-logprobs", "20", "--concurrency", "2", *extra]


def keys(run_dir: Path) -> list[tuple[str, int]]:
    return [(r.prompt_id, r.repeat) for r in load_run(run_dir).completions()]


def temporary_files(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if p.name.endswith(".tmp")]


# A tiny tmpfs in a private mount namespace (unshare: no privileges needed beyond a
# user namespace), filled by a real collection, then given room and resumed.
FULL_DISK = textwrap.dedent("""
    import json, subprocess, sys
    from pathlib import Path
    from quantcheck.lab.scripted import ScriptedModel, ScriptedServer
    disk, prompts, answer = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(disk)], check=True)
    out = {}
    with ScriptedServer(ScriptedModel({"Q:": answer})) as server:
        command = [sys.executable, "-m", "quantcheck", "collect", "--endpoint", server.url,
                   "--label", "a", "--prompts", prompts, "--out", str(disk / "run"),
                   "--no-preflight", "--top-logprobs", "20", "--concurrency", "2"]
        full = subprocess.run(command, capture_output=True, text=True)
        out["full"] = [full.returncode, full.stderr,
                       sorted(p.name for p in (disk / "run").iterdir())]
        out["manifest"] = json.loads((disk / "run" / "manifest.json").read_text())
        subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)
        again = subprocess.run(command, capture_output=True, text=True)
        out["again"] = [again.returncode, again.stderr]
        lines = (disk / "run" / "completions.jsonl").read_bytes().splitlines()
        out["keys"] = [[json.loads(l)["prompt_id"], json.loads(l)["repeat"]] for l in lines]
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        elsewhere = [str(disk / "other") if part == str(disk / "run") else part
                     for part in command]
        readonly = subprocess.run(elsewhere, capture_output=True, text=True)
        out["readonly"] = [readonly.returncode, readonly.stderr]
    print(json.dumps(out))
""")


def in_private_mounts(script: str, *args: str) -> dict[str, Any]:
    if not shutil.which("unshare"):
        pytest.skip("no unshare on this machine")
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", sys.executable,
                           "-c", script, *args], capture_output=True, text=True, timeout=300)
    if done.returncode and "unshare" in done.stderr and not os.environ.get("CI"):
        pytest.skip(f"no user namespaces here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_full_disk_stops_with_one_line_and_loses_nothing(
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    answer = MODEL.responses["Q:"]
    result = in_private_mounts(FULL_DISK, str(disk), str(write_prompts(PROMPTS)), str(answer))

    code, stderr, files = result["full"]
    assert code == 2
    assert_one_clear_line(stderr, "No space left on device")
    assert not [name for name in files if name.endswith(".tmp")], files
    assert result["manifest"]["label"] == "a"  # whole: written before the disk filled

    code, stderr = result["again"]
    assert code == 0, stderr
    keys = [tuple(key) for key in result["keys"]]
    assert len(keys) == len(set(keys)) == 40  # resumed: every request once

    code, stderr = result["readonly"]
    assert code == 2
    assert_one_clear_line(stderr, "Read-only file system")


def test_a_file_size_limit_stops_with_one_line_and_a_rerun_finishes(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(MODEL)
    command = collect_command(server.url, write_prompts(PROMPTS), tmp_path / "run")

    limited = run_with_file_limit(command, 30_000)
    assert limited.returncode == 2
    assert_one_clear_line(limited.stderr, "File too large")
    assert not temporary_files(tmp_path / "run")
    assert load_run(tmp_path / "run").status == "interrupted"

    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert sorted(keys(tmp_path / "run")) == sorted((f"p{n:02d}", 0) for n in range(40))


def test_a_second_collector_is_refused_with_the_holders_pid(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(MODEL, faults=Faults(token_delay_s=0.01))
    command = collect_command(server.url, write_prompts(PROMPTS), tmp_path / "run")
    first = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "run" / "completions.jsonl").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert load_run(tmp_path / "run").status == "running"
    second = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert second.returncode == 2
    assert_one_clear_line(second.stderr, f"in use by another quantcheck process "
                                         f"(pid {first.pid})")
    _, first_errors = first.communicate(timeout=120)
    assert first.returncode == 0, first_errors
    assert sorted(keys(tmp_path / "run")) == sorted((f"p{n:02d}", 0) for n in range(40))
    assert load_run(tmp_path / "run").status == "complete"


def test_compare_refuses_a_run_with_requests_recorded_twice(
        ab_runs: tuple[Path, Path], tmp_path: Path) -> None:
    completions = ab_runs[1] / "completions.jsonl"
    completions.write_bytes(completions.read_bytes() * 2)  # two collectors, before locks
    result = invoke("compare", *ab_runs, "--out", tmp_path / "report")
    assert result.exit_code == 2
    assert "recorded more than once" in result.output and "'same' repeat 0" in result.output


def test_gate_never_writes_through_a_symlink_leading_outside(planted_report: Path,
                                                             tmp_path: Path) -> None:
    outside = tmp_path / "outside.xml"
    outside.write_text("precious")
    (planted_report / "junit.xml").symlink_to(outside)
    result = invoke("gate", planted_report)
    assert result.exit_code == 2
    assert "symbolic link" in result.output and "Traceback" not in result.output
    assert outside.read_text() == "precious"


def test_planted_tmp_symlinks_are_never_written_through(ab_runs: tuple[Path, Path],
                                                        tmp_path: Path) -> None:
    report = tmp_path / "report"
    report.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    for name in ("pairs.csv.tmp", "summary.json.tmp", "index.html.tmp", "details.jsonl.tmp"):
        (report / name).symlink_to(outside)
    result = invoke("compare", *ab_runs, "--out", report)
    assert result.exit_code == 1, result.output  # written; the planted flip fails the gate
    assert outside.read_text() == "precious"
    assert orjson.loads((report / "summary.json").read_bytes())["counts"]["prompts"] == 13


def test_collect_refuses_a_completions_file_linked_outside(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text("")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "completions.jsonl").symlink_to(outside)
    done = subprocess.run(collect_command(serve(MODEL).url, write_prompts(PROMPTS),
                                          tmp_path / "run"),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert_one_clear_line(done.stderr, "symbolic link")
    assert outside.read_text() == ""


def _write_many(path: str, value: int) -> None:
    for n in range(300):
        write_json_atomic(Path(path), {"writer": value, "n": n, "pad": "x" * 5000})


def test_two_writers_of_one_file_never_collide(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_write_many, args=(str(target), v)) for v in (1, 2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
    assert [w.exitcode for w in writers] == [0, 0]
    assert orjson.loads(target.read_bytes())["n"] == 299
    assert not temporary_files(tmp_path)


def test_a_write_error_names_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    (folder / "summary.json").mkdir()  # a directory where the file goes: replace fails
    with pytest.raises(StorageError, match=r"cannot write .*summary\.json"):
        write_atomic(folder / "summary.json", b"{}")
    assert [p.name for p in folder.iterdir()] == ["summary.json"]


@pytest.mark.parametrize(("args", "named"), [
    (["compare", "a.texts.json", "b1.texts.json", "b2.texts.json", "--prompts", "rows.jsonl",
      "--out", "report", "--matrix", "loop"], "loop"),
    (["compare", "a.texts.json", "b1.texts.json", "b2.texts.json", "--prompts", "rows.jsonl",
      "--out", "report", "--matrix", "loop/matrix.csv"], "loop/matrix.csv"),
    (["init", "loop"], "loop"),
    (["init", "repository"], "repository/quantcheck"),
], ids=["matrix-a-loop", "matrix-in-a-loop", "init-into-a-loop", "init-kit-path-a-loop"])
def test_symbolic_links_in_a_loop_are_one_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], named: str) -> None:
    """A path whose links lead back to themselves (Path.resolve's RuntimeError on
    Python 3.11) is refused naming it, exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    for side in ("a", "b1", "b2"):
        (tmp_path / f"{side}.texts.json").write_text('["Paris"]')
    (tmp_path / "rows.jsonl").write_text('{"id": "capital", "prompt": "Q: capital"}\n')
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "repository").mkdir()
    (tmp_path / "repository" / "quantcheck").symlink_to("quantcheck")
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert f"error: {named}: cannot follow its symbolic links" in result.output
    assert not (tmp_path / "report").exists()
    assert sorted(path.name for path in (tmp_path / "repository").iterdir()) == ["quantcheck"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.text(), min_size=3, max_size=3), max_size=5))
def test_any_text_in_any_cell_reads_back_from_a_csv_and_rows_end_with_lf(
        rows: list[list[str]]) -> None:
    """The one way our CSVs end their rows: a cell with a bare carriage return is quoted
    (it once split its row for every reader), and a row ends with LF as before."""
    import csv
    import io

    import pandas as pd

    buffer = io.StringIO()
    csv.writer(buffer, lineterminator=CSV_WRITTEN_WITH).writerows([["a", "b", "c"], *rows])
    text = csv_rows(buffer.getvalue())
    assert list(csv.reader(io.StringIO(text, newline=""))) == [["a", "b", "c"], *rows]
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    assert frame.to_numpy().tolist() == rows
    if not any("\r" in cell or "\n" in cell for row in rows for cell in row):
        assert "\r" not in text and text.count("\n") == len(rows) + 1
# --- bounded_lines: every line reader of a user's file -----------------------------

@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=8),
       st.booleans(), st.integers(1, 30))
def test_bounded_lines_gives_each_line_or_names_the_first_too_long(
        lines: list[bytes], last_newline: bool, limit: int) -> None:
    data = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    expected = io.BytesIO(data).readlines()
    too_long = next((n for n, line in enumerate(expected, 1) if len(line) > limit), None)
    read: list[tuple[int, bytes]] = []
    try:
        for item in bounded_lines(io.BytesIO(data), Path("f.jsonl"), limit, "data file"):
            read.append(item)
    except LineTooLong as exc:
        assert too_long is not None and str(exc).startswith(f"f.jsonl:{too_long}: a line of")
        assert [line for _, line in read] == expected[:too_long - 1]
        return
    assert too_long is None
    assert read == list(enumerate(expected, 1))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.text(max_size=120), st.integers(1, 40))
def test_bounded_lines_reads_a_text_stream_as_its_own_lines(text: str, limit: int) -> None:
    stream = io.StringIO(text, newline=None)
    expected = io.StringIO(text, newline=None).readlines()
    try:
        read = [line for _, line in bounded_lines(stream, Path("server.log"), limit, "log")]
    except LineTooLong:
        assert any(len(line) > limit for line in expected)
        return
    assert read == expected and all(len(line) <= limit for line in read)


def test_a_line_without_end_is_read_no_further_than_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "endless.jsonl"
    with path.open("wb") as handle:
        handle.write(b'{"ok": 1}\n')
        handle.truncate(4 << 30)  # 4 GiB of NULs without a newline, sparse on disk
    started = time.monotonic()
    with path.open("rb") as stream, pytest.raises(LineTooLong) as caught:
        for _ in bounded_lines(stream, path, 1 << 20, "data file"):
            pass
    assert time.monotonic() - started < 5
    assert str(caught.value) == (f"{path}:2: a line of more than 1 MiB, more than a line of "
                                 "a data file holds (is this the right file?)")
