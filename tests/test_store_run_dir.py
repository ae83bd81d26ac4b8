"""store/folders/run_dir.py: a run's prompts held as ids and line offsets (PromptLines), each
parsed when asked: the same prompts, order and errors as reading them whole; token
arrays read from tokens.bin as untrusted (a missing file, a reference beyond it, bytes
that are no blob: one RunFormatError naming it); what a resume must match; a line longer
than a run's line holds, read back or about to be written, is one clear error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck import CollectSettings, collect, load_run
from quantcheck.errors import RunFormatError, RunMismatch
from quantcheck.lab.scripted import Faults
from quantcheck.store.folders.run_dir import (
    MAX_LINE_BYTES,
    Manifest,
    Parameters,
    PromptLines,
    RecordNotStorable,
    RunWriter,
)
from quantcheck.store.records.run_records import Completion

from .conftest import (
    TWO_PROMPTS,
    Serve,
    WritePrompts,
    assert_one_clear_line,
    cli_in_child,
    invoke,
)

prompt_lines = st.lists(st.tuples(
    st.sampled_from(["q1", "q2", "q3", "\u00e9", ""]), st.text(max_size=12),
    st.sampled_from(["ok", "ok", "code", "torn", "not json", "no id"])), max_size=12)
CODE = {"code": {"entry_point": "f", "tests": "assert f() == 1"}}


@settings(max_examples=200, deadline=None, derandomize=True)
@given(prompt_lines)
def test_a_runs_prompts_read_on_demand_are_the_prompts_read_whole(
        lines: list[tuple[str, str, str]]) -> None:
    """compare holds a run's prompts.jsonl as ids and offsets (PromptLines) and parses a
    prompt when asked: the same prompts, in the same order, as load_run reads at once,
    the same error (file and line) for a malformed line, a torn last line skipped; it
    knows whether a prompt (an id's last line) asks for its code to be run, and keeps its
    file open, once, until closed."""
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        (run / "manifest.json").write_text("{}")
        text = ""
        for number, (prompt_id, prompt, kind) in enumerate(lines):
            line = json.dumps({"id": prompt_id, "category": "c", "api": "completions",
                               "hash": f"h{number}", "request": {"prompt": prompt},
                               "expect": CODE if kind == "code" else None})
            text += {"ok": line + "\n", "code": line + "\n", "torn": line, "not json": "{\n",
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
        open_before = len(os.listdir("/proc/self/fd"))
        lazy = PromptLines(run / "prompts.jsonl")
        for _ in range(2):  # closed, it opens its file again
            assert list(lazy) == list(whole) and len(lazy) == len(whole)
            assert all(lazy[prompt_id] == prompt for prompt_id, prompt in whole.items())
            assert "never" not in lazy and lazy.get("never") is None
            assert len(os.listdir("/proc/self/fd")) == open_before + bool(whole)
            lazy.close()
            assert len(os.listdir("/proc/self/fd")) == open_before
        assert lazy.code_checked == any(p.expect and p.expect.code for p in whole.values())


def collected(serve: Serve, write_prompts: WritePrompts, folder: Path, **extra: object) -> Path:
    """A run of TWO_PROMPTS on a scripted server, with its token arrays in tokens.bin."""
    server = serve(faults=Faults(routing=True))
    collect([write_prompts(TWO_PROMPTS)], folder, CollectSettings(
        endpoint=server.url, label=folder.name, preflight=False, top_logprobs=3,
        stream=False, **extra))  # type: ignore[arg-type]
    return folder


def rewrite_references(run: Path, **changes: object) -> None:
    """Every line's token reference changed as given (a hand-edited or foreign run)."""
    lines = [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]
    for line in lines:
        line["tokens"] = {**line["tokens"], **changes}
        line["tokens"] = {k: v for k, v in line["tokens"].items() if v is not None}
    (run / "completions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_a_run_copied_without_tokens_bin_is_one_clear_line_in_compare(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    a = collected(serve, write_prompts, tmp_path / "a")
    b = collected(serve, write_prompts, tmp_path / "b")
    (b / "tokens.bin").unlink()
    with pytest.raises(RunFormatError, match="tokens.bin: missing"):
        list(load_run(b).completions())
    result = invoke("compare", a, b, "--out", tmp_path / "report")
    assert result.exit_code == 2
    assert_one_clear_line(result.output, "tokens.bin: missing")


@pytest.mark.parametrize(("changes", "cause"), [
    ({"length": 2**40}, "truncated"),  # never allocated: bounded by the file's size
    ({"offset": 2**40}, "truncated"),
    ({"offset": 1}, "not token arrays quantcheck wrote"),  # inside a blob, not at its start
], ids=["huge-length", "huge-offset", "not-a-blob"])
def test_a_token_reference_that_does_not_fit_tokens_bin_is_refused(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
        changes: dict[str, object], cause: str) -> None:
    run = collected(serve, write_prompts, tmp_path / "run")
    rewrite_references(run, **changes)
    with pytest.raises(RunFormatError, match=cause) as raised:
        list(load_run(run).completions())
    assert "tokens.bin" in str(raised.value)


def test_a_token_reference_without_a_count_reads_as_unknown(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    run = collected(serve, write_prompts, tmp_path / "run")
    rewrite_references(run, n_tokens=None)
    frame = load_run(run).frame()
    assert len(frame) == 2 and frame["n_tokens"].isna().all()


@pytest.mark.parametrize("first", [False, True], ids=["then-routing", "routing-then-none"])
def test_a_resume_that_toggles_moe_routing_is_refused(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, first: bool) -> None:
    """Routing is part of a run's identity, as merge and a stored reference hold it: a
    run is never half with routing and half without."""
    run = collected(serve, write_prompts, tmp_path / "run", routed_experts=first)
    with pytest.raises(RunMismatch, match="routed_experts"):
        collected(serve, write_prompts, run, routed_experts=not first)
    assert set(load_run(run).manifest.identity()) >= {"endpoint", "prompt_hashes"}


def test_a_run_without_routing_keeps_the_identity_it_always_had() -> None:
    assert set(Manifest().identity()) == {"endpoint", "model", "top_logprobs", "stream",
                                          "repeat_mode", "prompt_hashes"}
    routed = Manifest(parameters=Parameters(routed_experts=True, routed_experts_shape=[4, 2]))
    assert routed.identity()["routed_experts_shape"] == [4, 2]


def test_reading_a_runs_records_does_not_load_pandas() -> None:
    code = ("import sys, quantcheck.store.folders.run_dir as r; "
            "assert 'pandas' not in sys.modules, 'pandas loaded'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", ["completions.jsonl", "prompts.jsonl"])
def test_a_run_file_line_of_2_gib_is_one_error_naming_file_and_line(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, name: str) -> None:
    """A run read back is untrusted: a line past what a run's line holds is one error
    (exit 2), read no further (memory capped at 3 GiB in the child: holding the line
    ended in MemoryError, exit 3)."""
    a = collected(serve, write_prompts, tmp_path / "a")
    b = collected(serve, write_prompts, tmp_path / "b")
    lines = (b / name).read_bytes().count(b"\n")
    with (b / name).open("r+b") as handle:
        handle.truncate((b / name).stat().st_size + (2 << 30))  # NULs, sparse on disk
    result = cli_in_child("compare", a, b, "--out", tmp_path / "report", cwd=tmp_path,
                          timeout=120)
    assert result.returncode == 2, result.stderr
    assert_one_clear_line(result.stderr, f"{b / name}:{lines + 1}: a line of more than "
                                         "256 MiB, more than a line of a run or report file")


def test_a_record_whose_line_a_run_cannot_hold_is_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    writer.open()
    try:
        with pytest.raises(RecordNotStorable, match="more than the 256 MiB a run's line"):
            writer.append_line({"prompt_id": "p", "repeat": 0,
                                "text": "x" * (MAX_LINE_BYTES + 1)}, None)
    finally:
        writer.close()
    assert (tmp_path / "completions.jsonl").read_bytes() == b""


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.one_of(st.none(), st.text(max_size=12)), st.one_of(st.none(), st.text(max_size=12)))
def test_a_records_replica_and_weight_version_are_written_only_when_set(
        replica: str | None, weights: str | None) -> None:
    """A side of one URL writes its records as before (no `replica`, no
    `weight_version`); set, any text comes back as written."""
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        (run / "manifest.json").write_text("{}")
        writer = RunWriter(run)
        writer.open()
        writer.append(Completion("p", "h", 0, text="t", replica=replica,
                                 weight_version=weights))
        writer.close()
        line = orjson.loads((run / "completions.jsonl").read_bytes())
        assert ("replica" in line, "weight_version" in line) == (replica is not None,
                                                                 weights is not None)
        (record,) = load_run(run).completions()
        assert (record.replica, record.weight_version) == (replica, weights)
        (read,) = load_run(run).lines()
        assert (read.replica, read.weight_version) == (replica, weights)
