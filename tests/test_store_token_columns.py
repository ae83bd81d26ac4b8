"""tokens.bin: lossless round trips, and runs that point into it."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from quantcheck import CollectSettings, collect, compare, load_run
from quantcheck.errors import RunFormatError
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.store.folders.run_dir import Blobs
from quantcheck.store.folders.token_columns import pack, unpack
from quantcheck.store.records.run_records import Tokens
from quantcheck.triage.sides import signature

from .conftest import TWO_PROMPTS, Serve, WritePrompts

TOKEN_TEXT = st.text(st.characters(codec="utf-8") | st.sampled_from(["\0", "\ud83d", "é"]),
                     max_size=6)
FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=False).map(float)
SHORTEST_FLOAT32 = FLOAT32.map(lambda v: float(str(np.float32(v))))  # as llama.cpp prints
ANY_FLOAT = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def token_arrays(draw: st.DrawFn) -> Tokens:
    values = draw(st.sampled_from([FLOAT32, SHORTEST_FLOAT32, ANY_FLOAT]))
    n = draw(st.integers(0, 12))
    tokens = Tokens()
    for _ in range(n):
        alternatives = draw(st.lists(st.tuples(TOKEN_TEXT, values), max_size=5))
        alternatives.sort(key=lambda pair: -pair[1])
        top_text = [t for t, _ in alternatives]
        chosen = draw(st.sampled_from(top_text[:1] + [draw(TOKEN_TEXT)]))
        logprob = draw(st.sampled_from(
            [alternatives[0][1] if alternatives else None, None, draw(values)]))
        tokens.append(chosen, logprob, top_text, [v for _, v in alternatives])
    if n and draw(st.booleans()):
        tokens.ids = draw(st.lists(st.integers(-1, 2**31 - 1), min_size=n, max_size=n))
    if n and draw(st.booleans()):
        tokens.raw_bytes = [draw(st.none() | st.lists(st.integers(0, 255), max_size=4))
                            for _ in range(n)]
    return tokens


@settings(max_examples=300, deadline=None)
@given(token_arrays())
def test_every_string_and_digit_comes_back(tokens: Tokens) -> None:
    back = unpack(pack(tokens)).to_tokens()
    # json writes each float's shortest repr: equal text, equal values, signs too
    assert json.dumps(back.to_json()) == json.dumps(tokens.to_json())


def vllm_like(n: int, top: int, seed: int = 0, float32: bool = True) -> Tokens:
    rng = np.random.default_rng(seed)
    words = [f" w{k}" for k in range(300)]
    tokens = Tokens()
    for _ in range(n):
        values = np.sort(-rng.exponential(2.0, top))[::-1]
        values = values.astype(np.float32).astype(float) if float32 else values
        texts = [words[k] for k in rng.choice(len(words), top, replace=False)]
        tokens.append(texts[0], float(values[0]), texts, values.tolist())
    return tokens


def test_float32_logprobs_take_far_less_room_than_json() -> None:
    tokens = vllm_like(256, 20)
    as_json = len(orjson.dumps(tokens.to_json()))
    assert len(pack(tokens)) * 4 < as_json
    assert len(pack(tokens)) < len(pack(vllm_like(256, 20, float32=False)))


def test_signature_is_the_same_inline_and_packed(tmp_path: Path) -> None:
    tokens = vllm_like(8, 3)
    blob = pack(tokens)
    (tmp_path / "tokens.bin").write_bytes(b"orphan" + blob)
    reference = {"file": "tokens.bin", "offset": 6, "length": len(blob), "n_tokens": 8}
    inline = tokens.to_json()
    with Blobs(tmp_path) as blobs:
        assert signature(reference, blobs, 12) == signature(inline, blobs, 12)
        other = vllm_like(8, 3, seed=1).to_json()
        assert signature(other, blobs, 12) != signature(inline, blobs, 12)


def test_a_run_keeps_tokens_in_tokens_bin(serve: Serve, write_prompts: WritePrompts,
                                          tmp_path: Path) -> None:
    server = serve(ScriptedModel(responses={"Australia": " Canberra is the capital."}))
    collect([write_prompts(TWO_PROMPTS)], tmp_path / "run",
            CollectSettings(endpoint=server.url, label="a", top_logprobs=3))
    lines = [orjson.loads(line) for line in
             (tmp_path / "run" / "completions.jsonl").read_bytes().splitlines()]
    references = [line["tokens"] for line in lines]
    assert all(ref["file"] == "tokens.bin" and ref["n_tokens"] > 0 for ref in references)
    assert sum(ref["length"] for ref in references) == \
        (tmp_path / "run" / "tokens.bin").stat().st_size
    record = next(r for r in load_run(tmp_path / "run").completions()
                  if r.prompt_id == "capital-au")
    assert record.tokens is not None and "".join(record.tokens.text) == record.text


def test_runs_with_inline_token_arrays_still_compare(serve: Serve, write_prompts: WritePrompts,
                                                     tmp_path: Path) -> None:
    """Runs written before tokens.bin (arrays inline in each line) read the same."""
    server = serve(ScriptedModel(responses={"Australia": " Canberra is the capital."}))
    prompts = write_prompts(TWO_PROMPTS)
    for side in ("a", "b"):
        collect([prompts], tmp_path / side,
                CollectSettings(endpoint=server.url, label=side, top_logprobs=3))
    inline = [record.to_json() for record in load_run(tmp_path / "b").completions()]
    (tmp_path / "b" / "completions.jsonl").write_bytes(
        b"".join(orjson.dumps(line) + b"\n" for line in inline))
    (tmp_path / "b" / "tokens.bin").unlink()
    pairs = compare(tmp_path / "a", tmp_path / "b")
    assert list(pairs["identical"]) == [True, True]
    assert list(pairs["a_signatures"]) == list(pairs["b_signatures"]) == [1, 1]


def test_resume_after_a_blob_without_its_line(serve: Serve, write_prompts: WritePrompts,
                                              tmp_path: Path) -> None:
    server = serve(ScriptedModel(responses={"Australia": " Canberra is the capital."}))
    prompts = write_prompts(TWO_PROMPTS)
    out = tmp_path / "run"
    collect([prompts], out, CollectSettings(endpoint=server.url, label="a"))
    lines = (out / "completions.jsonl").read_bytes().splitlines(keepends=True)
    (out / "completions.jsonl").write_bytes(lines[0])  # killed after the blob, before the line
    result = collect([prompts], out, CollectSettings(endpoint=server.url, label="a"))
    assert (result.skipped, result.collected) == (1, 1)
    records = list(load_run(out).completions())
    assert len(records) == 2 and all(r.tokens is not None and len(r.tokens) for r in records)


def test_a_truncated_tokens_file_is_a_clear_error(serve: Serve, write_prompts: WritePrompts,
                                                  tmp_path: Path) -> None:
    server = serve(ScriptedModel())
    collect([write_prompts(TWO_PROMPTS)], tmp_path / "run",
            CollectSettings(endpoint=server.url, label="a"))
    blobs = tmp_path / "run" / "tokens.bin"
    blobs.write_bytes(blobs.read_bytes()[:10])
    with pytest.raises(RunFormatError, match="tokens.bin: truncated"):
        list(load_run(tmp_path / "run").completions())


def test_blob_header_is_documented_json() -> None:
    """The layout tokenstore.py documents: uint32 length, then a JSON header."""
    import zstandard

    payload = zstandard.ZstdDecompressor().decompress(pack(vllm_like(4, 2)))
    (length,) = struct.unpack_from("<I", payload)
    header = orjson.loads(payload[4:4 + length])
    assert header["v"] == 1 and header["n"] == 4 and header["floats"] == "f4"


ROUTINGS = hnp.arrays(np.int32, hnp.array_shapes(min_dims=3, max_dims=3, max_side=6),
                      elements=st.integers(0, 2**31 - 1))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(ROUTINGS)
def test_routing_stores_and_reads_back_exactly(routing: np.ndarray) -> None:
    tokens = Tokens(text=["x"] * len(routing), logprob=[-0.5] * len(routing),
                    top_text=[["x"]] * len(routing), top_logprob=[[-0.5]] * len(routing),
                    routing=routing)
    back = unpack(pack(tokens)).to_tokens().routing
    assert back is not None and back.dtype == np.int32 and np.array_equal(back, routing)
    assert back.shape == routing.shape
