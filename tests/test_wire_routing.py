"""wire/routing.py: MoE routing as vLLM and SGLang send it (a .npy or raw base64 array,
whole or streamed), checked before it is kept: routing that cannot be right is
marked unusable, the answer kept, and compare never reads it as routed alike."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck import CollectSettings, collect, compare_runs, load_run
from quantcheck.store.folders.token_columns import pack
from quantcheck.triage.routing import between
from quantcheck.wire.routing import (
    ROUTING_LIMIT,
    RoutingUnusable,
    decode_npy_routing,
    decode_raw_routing,
    generated_routing,
)

from .conftest import WritePrompts, read_csv
from .hostile import HostileServer, Request, Respond, answer, sse, stream_head


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.binary(max_size=64) | st.text(max_size=40), st.sampled_from(["npy", "raw"]))
def test_any_routing_text_decodes_or_is_refused(data: bytes | str, kind: str) -> None:
    encoded = base64.b64encode(data).decode() if isinstance(data, bytes) else data
    try:
        routing = decode_npy_routing(encoded) if kind == "npy" else decode_raw_routing(encoded)
    except RoutingUnusable:
        return
    assert routing.dtype == np.int32 and (not routing.size or routing.min() >= 0)
    try:
        kept = generated_routing(routing, 3, {"prompt_tokens": 2, "completion_tokens": 3},
                                 (1, 1))
    except RoutingUnusable:
        return
    assert kept.ndim == 3 and len(kept) <= 3


# --- routing that cannot be right, as a server sends it ---------------------------------

PROMPT_TOKENS, GENERATED, LAYERS, K = 4, 3, 2, 2


ROWS = PROMPT_TOKENS + GENERATED - 1  # one per forward-passed position, as both engines


def planted(rows: int = ROWS, layers: int = LAYERS, k: int = K) -> np.ndarray:
    """Routing whose every layer is routed (no dense layer), experts 1..8."""
    return (np.arange(rows * layers * k, dtype=np.int32).reshape(rows, layers, k) % 8) + 1


def npy(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return base64.b64encode(buffer.getvalue()).decode()


def vllm_answer(routed_experts: str, usage: dict[str, int] | None = None) -> dict[str, Any]:
    """A whole vLLM chat answer: 3 tokens with logprobs, its usage and its routing."""
    entries = [{"token": t, "logprob": -0.25, "top_logprobs": [{"token": t, "logprob": -0.25}]}
               for t in (" A", " B", " C")]
    return {"model": "m", "choices": [{
        "index": 0, "message": {"role": "assistant", "content": " A B C"},
        "finish_reason": "stop", "logprobs": {"content": entries},
        "routed_experts": routed_experts}],
        "usage": usage if usage is not None else {
            "prompt_tokens": PROMPT_TOKENS, "completion_tokens": GENERATED,
            "total_tokens": PROMPT_TOKENS + GENERATED}}


def huge_header() -> str:
    """A .npy header claiming 8 GB of experts, followed by 16 bytes."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<i8", "fortran_order": False,
                                                  "shape": (10**6, 1000, 1)})
    return base64.b64encode(buffer.getvalue() + bytes(16)).decode()


UNUSABLE: dict[str, tuple[dict[str, Any], str]] = {
    "no-layers (7, 0, 2)": (vllm_answer(npy(np.zeros((ROWS, 0, K), np.int32))),
                            "holds no experts"),
    "no-experts-per-token": (vllm_answer(npy(np.zeros((ROWS, LAYERS, 0), np.int32))),
                             "holds no experts"),
    "only-the-generated-rows": (vllm_answer(npy(planted(GENERATED))), "prompt + generated"),
    "one-row-short": (vllm_answer(npy(planted(ROWS - 1))), "prompt + generated"),
    "one-row-too-many": (vllm_answer(npy(planted(ROWS + 1))), "prompt + generated"),
    "every-expert-0": (vllm_answer(npy(np.zeros((ROWS, LAYERS, K), np.uint8))),
                       "no layer was routed"),
    "no-usage": ({k: v for k, v in vllm_answer(npy(planted())).items() if k != "usage"},
                 "usage does not give"),
    "usage-disagrees-with-the-logprobs": (vllm_answer(npy(planted()), {
        "prompt_tokens": PROMPT_TOKENS - 1, "completion_tokens": GENERATED + 1}),
        "cannot be matched"),
    "not-base64": (vllm_answer("not base64!"), "not base64"),
    "not-npy": (vllm_answer(base64.b64encode(b"hello").decode()), "not a .npy"),
    "float-experts": (vllm_answer(npy(planted().astype(np.float32))), "expected integers"),
    "negative-expert": (vllm_answer(npy(planted() - 2)), "out of range"),
    "a-header-claiming-8-GB": (vllm_answer(huge_header()), "do not fit"),
}


@pytest.mark.parametrize("case", list(UNUSABLE), ids=list(UNUSABLE))
def test_routing_that_cannot_be_right_is_unusable_and_the_answer_is_kept(
        write_prompts: WritePrompts, tmp_path: Path, case: str) -> None:
    body, reason = UNUSABLE[case]
    prompts = write_prompts(ONE_PROMPT)
    for side, answer_body in (("a", vllm_answer(npy(planted()))), ("b", body)):
        with HostileServer(answer(answer_body)) as server:
            result = collect([prompts], tmp_path / side, CollectSettings(
                endpoint=server.url, label=side, preflight=False, top_logprobs=1,
                routed_experts=True, retries=0))
        assert (result.collected, result.failed) == (1, 0)
    (record,) = list(load_run(tmp_path / "b").completions())
    assert record.error is None and record.text == " A B C"  # text and logprobs kept
    assert record.tokens is not None and record.tokens.logprob == [-0.25] * 3
    assert record.tokens.routing is None
    assert record.routing_unusable is not None and reason in record.routing_unusable

    compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    (pair,) = read_csv(tmp_path / "report" / "pairs.csv")
    assert pair["routing_diff_share"] == "" and pair["routing_first_token"] == ""
    (detail,) = [json.loads(line) for line in (tmp_path / "report" / "details.jsonl")
                 .read_text().splitlines()]
    sentence = detail["routing"]["ab"]["sentence"]
    assert sentence.startswith("not compared: B's routing is unusable") and reason in sentence
    assert "alike" not in (tmp_path / "report" / "details.jsonl").read_text()


ONE_PROMPT = "prompts:\n  - {id: p, messages: [{role: user, content: hi}]}\n"


SGLANG_MODELS = json.dumps({"object": "list", "data": [
    {"id": "m", "object": "model", "owned_by": "sglang"}]}).encode()


def sglang_stream(routing: np.ndarray) -> Respond:
    """SGLang's stream: a token a chunk, the finish, the routing in a chunk without
    choices, then the usage."""
    def respond(request: Request, out: BinaryIO) -> None:
        assert request.body["stream"] and request.body["return_routed_experts"]
        chunks: list[Any] = [{"choices": [{"index": 0, "delta": {"content": t}, "logprobs": {
            "content": [{"token": t, "logprob": -0.25, "top_logprobs": [
                {"token": t, "logprob": -0.25}]}]}}]} for t in (" A", " B", " C")]
        chunks += [{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                   {"choices": [], "sglext": {"routed_experts": base64.b64encode(
                       routing.astype("<i4").tobytes()).decode()}},
                   {"choices": [], "usage": {"prompt_tokens": PROMPT_TOKENS,
                                             "completion_tokens": GENERATED}}, b"[DONE]"]
        out.write(stream_head() + sse(*chunks))

    return respond


@pytest.mark.parametrize("rows", [ROWS, GENERATED], ids=["prompt-and-generated", "too-few"])
def test_sglang_streams_its_routing_and_it_is_checked_the_same(
        write_prompts: WritePrompts, tmp_path: Path, rows: int) -> None:
    routing = planted(rows)
    with HostileServer(sglang_stream(routing), models=SGLANG_MODELS) as server:
        result = collect([write_prompts(ONE_PROMPT)], tmp_path / "s", CollectSettings(
            endpoint=server.url, label="s", preflight=False, top_logprobs=1, stream=True,
            routed_experts=True, routed_experts_shape=[LAYERS, K], retries=0))
    assert result.failed == 0
    run = load_run(tmp_path / "s")
    assert run.manifest.parameters.stream  # not made a whole answer
    (record,) = list(run.completions())
    assert record.error is None and record.tokens is not None
    if rows == ROWS:
        assert record.tokens.routing is not None
        assert np.array_equal(record.tokens.routing, routing[PROMPT_TOKENS - 1:])
    else:
        assert record.tokens.routing is None
        assert "prompt + generated - 1" in (record.routing_unusable or "")


def test_the_routing_limit_counts_the_generated_rows_not_the_prompts(
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    rows = ROUTING_LIMIT + 1  # a long prompt: more entries than kept, all in its rows
    routing = np.ones((rows, 1, 1), np.uint8)
    routing[-GENERATED:] = 5
    body = vllm_answer(npy(routing), {"prompt_tokens": rows - GENERATED + 1,
                                      "completion_tokens": GENERATED})
    with HostileServer(answer(body)) as server:
        result = collect([write_prompts(ONE_PROMPT)], tmp_path / "r", CollectSettings(
            endpoint=server.url, label="r", preflight=False, top_logprobs=1,
            routed_experts=True, retries=0))
    assert (result.collected, result.failed) == (1, 0)
    (record,) = list(load_run(tmp_path / "r").completions())
    assert record.tokens is not None and record.tokens.routing is not None
    assert record.tokens.routing.tolist() == [[[5]]] * GENERATED


def test_dense_layers_stay_out_of_the_differing_share() -> None:
    a = planted(4, layers=4)
    a[:, 0] = a[:, 3] = 0  # layers 0 and 3 dense: both engines send zeros there
    b = a.copy()
    b[1, 1] = [7, 8]  # one routed slot differs
    pair = between(a, b, None)
    assert (pair.first_token, pair.first_layer) == (1, 1)
    assert pair.share == pytest.approx(1 / (4 * 2))  # of 4 tokens x 2 routed layers
    assert "12.5% of shared (token, layer) slots differ" in pair.sentence


def test_a_stored_routing_that_cannot_be_right_is_not_compared(
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    """Runs collected before routing was checked may hold (tokens, 0, k) routing, or
    fewer rows than tokens: compare never reads them as routed alike."""
    prompts = write_prompts(ONE_PROMPT)
    for side in "ab":
        with HostileServer(answer(vllm_answer(npy(planted())))) as server:
            collect([prompts], tmp_path / side, CollectSettings(
                endpoint=server.url, label=side, preflight=False, top_logprobs=1,
                routed_experts=True))
    for stored in (np.zeros((GENERATED, 0, K), np.int32), planted(GENERATED - 1)):
        (line,) = [json.loads(x) for x in (tmp_path / "b" / "completions.jsonl")
                   .read_text().splitlines()]
        (record,) = list(load_run(tmp_path / "b").completions())
        assert record.tokens is not None
        record.tokens.routing = stored
        blob = pack(record.tokens)
        (tmp_path / "b" / "tokens.bin").write_bytes(blob)
        line["tokens"] = {**line["tokens"], "offset": 0, "length": len(blob)}
        (tmp_path / "b" / "completions.jsonl").write_text(json.dumps(line) + "\n")
        compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "report")
        (pair,) = read_csv(tmp_path / "report" / "pairs.csv")
        assert pair["routing_diff_share"] == "" and pair["b_routing"] == ""
        assert "alike" not in (tmp_path / "report" / "details.jsonl").read_text()
