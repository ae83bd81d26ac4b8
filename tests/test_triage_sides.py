"""triage/sides.py: a side held as a compact index (a prompt key, an offset and a signature
digest per request): every record reads back from its line, the request counts and
timings match the lines, and two prompt ids that share a key are refused, not merged."""

from __future__ import annotations

import copy
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.errors import RunFormatError
from quantcheck.store.folders.run_dir import Blobs, PromptLines, RunWriter, prompt_key
from quantcheck.store.records.run_records import Completion, Tokens
from quantcheck.triage import sides

from .conftest import cli_in_child, replace_with

completion_lines = st.lists(st.fixed_dictionaries({
    "prompt_id": st.sampled_from(["p1", "p2", "p3", "p\u00e9", "stray"]),
    "repeat": st.integers(0, 3),
    "text": st.one_of(st.none(), st.text(max_size=6)),
    "error": st.one_of(st.none(), st.sampled_from(["HTTP 500 (after 4 attempts)", "timeout"])),
    "finish_reason": st.sampled_from([None, "stop", "length"]),
    "usage": st.one_of(st.none(), st.builds(lambda n: {"completion_tokens": n},
                                            st.integers(0, 500))),
    "ttft_s": st.one_of(st.none(), st.floats(0, 100)),
    "e2e_s": st.one_of(st.none(), st.floats(0, 100)),
    "prompt_hash": st.one_of(st.none(), st.sampled_from(["h1", "h2"]))}), max_size=30)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(completion_lines, st.integers(1, 3))
def test_the_compact_index_gives_back_every_record_and_counts_the_requests(
        lines: list[dict[str, Any]], repeats: int) -> None:
    """A side holds a prompt key, an offset and a signature digest per request: every
    record reads back from its line as written, a prompt's records in file order, the
    prompts in the order they first appear; the request counts and timings summed while
    reading match a count over the lines; a request recorded twice is refused."""
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        (run / "manifest.json").write_text(json.dumps({"parameters": {"repeats": repeats}}))
        (run / "prompts.jsonl").write_text("".join(
            json.dumps({"id": i, "category": "c", "api": "completions", "hash": "h1",
                        "request": {"prompt": i}}) + "\n" for i in ("p1", "p2", "p\u00e9")))
        written = [orjson.dumps(line) + b"\n" for line in lines]
        (run / "completions.jsonl").write_bytes(b"".join(written))
        answered = [(line["prompt_id"], line["repeat"]) for line in lines
                    if line["error"] is None]
        if len(set(answered)) < len(answered):
            with pytest.raises(RunFormatError, match="recorded more than once"):
                sides.load_side(run)
            return
        with sides.load_side(run) as side:
            check_side(side, lines, written, answered, repeats)


def check_side(side: sides.Side, lines: list[dict[str, Any]], written: list[bytes],
               answered: list[tuple[str, int]], repeats: int) -> None:
    offsets = np.cumsum([0] + [len(w) for w in written])
    ids = list(dict.fromkeys(line["prompt_id"] for line in lines))
    assert side.index.order.tolist() == [prompt_key(i) for i in ids]
    for prompt_id in [*ids, "never"]:
        records = side.records(prompt_id) or []
        mine = [(n, line) for n, line in enumerate(lines) if line["prompt_id"] == prompt_id]
        assert [(r.offset, r.repeat, r.text, r.error, r.finish_reason,
                 r.prompt_hash, r.n_tokens) for r in records] == [
            (offsets[n], line["repeat"], line["text"] or "", line["error"],
             line["finish_reason"], line["prompt_hash"],
             (line["usage"] or {}).get("completion_tokens")) for n, line in mine]
    ok = [line for line in lines if line["error"] is None]
    timed = [line for line in ok if line["e2e_s"] is not None]
    seconds = sum(line["e2e_s"] for line in timed)
    tokens = [line["usage"]["completion_tokens"] for line in ok if line["usage"]]
    performance = side.performance
    assert (performance.requests, performance.failed) == (len(lines), len(lines) - len(ok))
    assert performance.output_tokens == (sum(tokens) if tokens else None)
    assert performance.e2e_p99_s == (pytest.approx(np.percentile(
        [line["e2e_s"] for line in timed], 99)) if timed else None)
    rate = (sum(line["usage"]["completion_tokens"] for line in timed if line["usage"])
            / seconds if timed and seconds > 0 else None)
    # a rate beyond a float (subnormal latencies) is no rate
    assert performance.output_tokens_per_s == (pytest.approx(rate) if rate is not None
                                               and math.isfinite(rate) else None)
    asked = {(i, r) for i, r in answered if i in ("p1", "p2", "p\u00e9") and r < repeats}
    assert side.unanswered == 3 * repeats - len(asked)


ANSWERS = [Tokens(text=[" a", " b"], logprob=[-0.1, -0.2], top_text=[[" a", " c"], [" b"]],
                  top_logprob=[[-0.1, -2.0], [-0.2]]),
           Tokens(text=[" a", " c"], logprob=[-0.1, -2.0], top_text=[[" a", " c"], [" c"]],
                  top_logprob=[[-0.1, -2.0], [-2.0]]),
           # the first, a logprob 1e-14 away: another blob, the same signature at 12 digits
           Tokens(text=[" a", " b"], logprob=[-0.1, -0.2 + 1e-14],
                  top_text=[[" a", " c"], [" b"]], top_logprob=[[-0.1, -2.0], [-0.2 + 1e-14]])]
ALIKE = {0: 0, 1: 1, 2: 0, None: None}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(range(len(ANSWERS))) | st.none(), min_size=1, max_size=12))
def test_each_record_gets_its_own_blobs_signature_however_often_a_blob_repeats(
        answers: list[int | None]) -> None:
    """Records whose blobs are the same bytes (repeats that agree) share one unpacking,
    yet each gets the signature of its own blob, as a record read alone gets it."""
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        (run / "manifest.json").write_text(json.dumps({"parameters": {"repeats": 1}}))
        (run / "prompts.jsonl").write_text("")
        writer = RunWriter(run)
        writer.open()
        for number, answer in enumerate(answers):
            writer.append(Completion(prompt_id=f"p{number}", prompt_hash="h", repeat=0,
                                     text="t", tokens=None if answer is None
                                     else copy.deepcopy(ANSWERS[answer])))
        writer.close()
        references = [orjson.loads(line).get("tokens")
                      for line in (run / "completions.jsonl").read_bytes().splitlines()]
        with Blobs(run) as blobs:
            alone = [sides._digest64(sides.signature(reference, blobs, 12))
                     for reference in references]
        with sides.load_side(run, sig_digits=12) as side:
            assert [side.records(f"p{n}")[0].signature  # type: ignore[index]
                    for n in range(len(answers))] == [
                None if digest == sides.MISSING_DIGEST else digest for digest in alone]
        assert len(set(alone)) == len({ALIKE[answer] for answer in answers})


def one_record_run(run: Path, answer: int | None) -> Path:
    """A run of one record whose tokens are ANSWERS[answer] (None: no tokens)."""
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"parameters": {"repeats": 1}}))
    (run / "prompts.jsonl").write_text("")
    writer = RunWriter(run)
    writer.open()
    writer.append(Completion(prompt_id="p", prompt_hash="h", repeat=0, text="t",
                             tokens=None if answer is None else copy.deepcopy(ANSWERS[answer])))
    writer.close()
    return run


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.sampled_from(range(len(ANSWERS))) | st.none(),
       st.sampled_from(range(len(ANSWERS))) | st.none())
def test_a_pairs_answers_stored_as_the_same_bytes_are_unpacked_once(
        a_answer: int | None, b_answer: int | None) -> None:
    """B's record takes A's tokens, read just before, when its blob is the same bytes
    (an identical pair), and reads its own otherwise: what B reads alone either way."""
    with tempfile.TemporaryDirectory() as folder:
        runs = [one_record_run(Path(folder) / name, answer)
                for name, answer in (("a", a_answer), ("b", b_answer))]
        with sides.load_side(runs[0]) as a, sides.load_side(runs[1]) as b, \
                sides.load_side(runs[1]) as alone:
            a_tokens = a.tokens_at(a.records("p")[0].offset)  # type: ignore[index]
            offset = b.records("p")[0].offset  # type: ignore[index]
            b_tokens = b.tokens_at(offset, a)
            own = alone.tokens_at(offset)
        if a_tokens is not None:
            assert (b_tokens is a_tokens) == (a_answer == b_answer)
        assert (b_tokens.to_json() if b_tokens else None) == (
            own.to_json() if own else None)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text("0123456789abcdef", min_size=16, max_size=32),
       st.text("0123456789abcdef", min_size=16, max_size=32))
def test_digests_differ_as_their_first_64_bits_do(one: str, other: str) -> None:
    same = int(one[:16], 16) == int(other[:16], 16)
    assert (sides._digest64(one) == sides._digest64(other)) == same
    assert sides._digest64(one) != sides.MISSING_DIGEST


def test_two_prompt_ids_that_share_a_key_are_refused_not_merged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compare holds prompt ids as 64-bit keys. Two ids of one run that shared a key
    (about 1 in 10^9 at 100,000 prompts) would be judged as one prompt: they are refused,
    by name, where they meet. A key of 1 bit stands in for the coincidence here."""
    from quantcheck.store.folders import run_dir

    def coarse(prompt_id: str) -> int:
        return len(prompt_id) % 2

    monkeypatch.setattr(run_dir, "prompt_key", coarse)
    monkeypatch.setattr(sides, "prompt_key", coarse)
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text("{}")
    (run / "prompts.jsonl").write_text("".join(
        json.dumps({"id": i, "category": "c", "api": "completions", "hash": "h",
                    "request": {"prompt": i}}) + "\n" for i in ("p1", "p2")))
    with pytest.raises(RunFormatError, match="prompt ids 'p[12]' and 'p[12]' share a 64-bit"):
        PromptLines(run / "prompts.jsonl")
    (run / "prompts.jsonl").write_text("")
    for repeat_of_p2 in (0, 1):  # met when indexing, or when the pair is read
        (run / "completions.jsonl").write_text("".join(
            json.dumps({"prompt_id": i, "repeat": r, "text": "t"}) + "\n"
            for i, r in (("p1", 0), ("p2", repeat_of_p2))))
        with pytest.raises(RunFormatError, match="prompt ids 'p1' and 'p2' share a 64-bit"):
            with sides.load_side(run) as side:
                side.records("p1")


# --- a run's file that is not a regular file ------------------------------------------

RUN_FILES = ["completions.jsonl", "prompts.jsonl", "manifest.json", "tokens.bin"]


@pytest.fixture(scope="module")
def collected_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small run with token arrays in tokens.bin, collected once."""
    from quantcheck import CollectSettings, collect
    from quantcheck.lab.scripted import ScriptedModel, ScriptedServer

    from .conftest import A_ANSWERS, RUNNER_UPS

    folder = tmp_path_factory.mktemp("collected")
    (folder / "prompts.yaml").write_text(
        'prompts:\n  - {id: same, prompt: "Q: same"}\n  - {id: flip, prompt: "Q: flip"}\n')
    with ScriptedServer(ScriptedModel(A_ANSWERS, RUNNER_UPS)) as server:
        collect([folder / "prompts.yaml"], folder / "a",
                CollectSettings(endpoint=server.url, label="a", concurrency=1,
                                top_logprobs=3))
    return folder / "a"


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "folder"])
@pytest.mark.parametrize("name", RUN_FILES)
def test_compare_refuses_a_run_file_that_is_not_a_regular_file(
        collected_run: Path, tmp_path: Path, name: str, kind: str) -> None:
    """Never read without end (a device), never wait (a FIFO), never a traceback (a
    folder): exit 2 naming the file."""
    import shutil

    shutil.copytree(collected_run, tmp_path / "a")
    shutil.copytree(collected_run, tmp_path / "b")
    replace_with(tmp_path / "b" / name, kind)
    result = cli_in_child("compare", "a", "b", "--out", "report", cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert f"b/{name}" in line and "not a regular file" in line, line
    assert line.count("\n") == 0, line
