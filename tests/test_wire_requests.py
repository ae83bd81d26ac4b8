"""wire/requests.py: every body made by one builder, exactly as each engine takes it (the
bytes sent pinned, key order included), and a server's refusal read by the engine's
profile, the words of the known engines' refusals only for an engine not known."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck import CollectSettings, collect, load_run
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.store.engines import (
    ENGINES,
    LLAMA_CPP,
    MLX,
    SGLANG,
    TENSORRT_LLM,
    TGI,
    VLLM,
    EngineProfile,
)
from quantcheck.store.inputs.prompt_entries import GREEDY_FIELDS
from quantcheck.store.records.certificate_records import Probe
from quantcheck.wire.requests import (
    certificate_body,
    generation_body,
    probe_body,
    rejection_advice,
    streamed,
)

from .conftest import TWO_PROMPTS, Serve, WritePrompts

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **GREEDY_FIELDS}
LEGACY = {"prompt": "hi", "max_tokens": 8, **GREEDY_FIELDS}
GREEDY_JSON = (b'"temperature":0.0,"top_p":1.0,"seed":0,"frequency_penalty":0.0,'
               b'"presence_penalty":0.0,"repetition_penalty":1.0,"repeat_penalty":1.0')


def test_a_chat_body_names_the_model_first_and_asks_logprobs_last() -> None:
    sent = orjson.dumps(streamed(generation_body(CHAT, "chat", "m", 5, VLLM)))
    assert sent == (b'{"model":"m","messages":[{"role":"user","content":"hi"}],'
                    b'"max_tokens":8,' + GREEDY_JSON + b',"logprobs":true,"top_logprobs":5,'
                    b'"stream":true,"stream_options":{"include_usage":true}}')


@pytest.mark.parametrize(("profile", "asked"), [
    (None, b'"logprobs":3'), (VLLM, b'"logprobs":3'),
    (MLX, b'"logprobs":true,"top_logprobs":3')], ids=["unknown", "vllm", "mlx"])
def test_legacy_completions_ask_logprobs_as_the_engine_takes_them(
        profile: EngineProfile | None, asked: bytes) -> None:
    body = orjson.dumps(generation_body(LEGACY, "completions", "m", 3, profile))
    assert body.endswith(b"," + asked + b"}")


def test_greedy_fields_an_engine_misreads_are_left_out_and_others_kept() -> None:
    tgi = generation_body(CHAT, "chat", "m", 0, TGI)
    assert "top_p" not in tgi and "presence_penalty" not in tgi and tgi["seed"] == 0
    assert "repeat_penalty" not in generation_body(CHAT, "chat", "m", 0, TENSORRT_LLM)
    chosen = generation_body({**CHAT, "top_p": 0.9}, "chat", "m", 0, TGI)
    assert chosen["top_p"] == 0.9  # the user's own value is sent


def test_routing_and_the_cache_come_after_the_request_unless_it_sets_them() -> None:
    sglang = generation_body(CHAT, "chat", "m", 2, SGLANG, routed_experts=True,
                             cache_off=True)
    assert list(sglang)[-1] == "return_routed_experts"  # SGLang turns no cache off by field
    llama = generation_body(CHAT, "chat", "m", 2, LLAMA_CPP, routed_experts=True,
                            cache_off=True)
    assert list(llama)[-1] == "cache_prompt" and llama["cache_prompt"] is False
    own = generation_body({**CHAT, "cache_prompt": True}, "chat", "m", 2, LLAMA_CPP,
                          cache_off=True)
    assert own["cache_prompt"] is True
    assert generation_body(CHAT, "chat", "m", 2, None, True, True) == \
        generation_body(CHAT, "chat", "m", 2, None)


def test_a_probe_is_shaped_like_the_run_and_the_certificate_adds_its_own_last() -> None:
    probe = probe_body({"temperature": 0.0, "top_p": 1.0, "chat_template_kwargs": {}},
                       "completions", "m", "x", 4, 2, TGI)
    assert probe == {"model": "m", "temperature": 0.0, "max_tokens": 4, "prompt": "x",
                     "logprobs": 2}
    seeded = certificate_body(CHAT, "chat", "m", 2, LLAMA_CPP,
                              Probe(factor="seed", level="seeded", seed=7, temperature=0.8,
                                    cache=True), routed_experts=False)
    assert (seeded["temperature"], seeded["seed"], seeded["cache_prompt"]) == (0.8, 7, True)
    assert list(seeded)[-1] == "cache_prompt"


def test_a_known_engines_refusal_is_read_by_its_profile() -> None:
    """TGI's refusal names `top_n_tokens`; another engine's does not mean logprobs by
    it; TensorRT-LLM's fixed limit is the fix however its message words it, and a
    refusal within it asks for another start."""
    tgi = rejection_advice("`top_n_tokens` must be >= 0 and <= 5. Given: 20",
                           {"top_logprobs": 20}, TGI)
    assert tgi.fix is not None and tgi.fix.startswith("--top-logprobs 5")
    other = rejection_advice("`top_n_tokens` is not a field", {"top_logprobs": 20}, VLLM)
    assert "logprobs request" not in other.reason
    above = rejection_advice("top_logprobs too large", {"top_logprobs": 120}, TENSORRT_LLM)
    assert above.fix is not None and above.fix.startswith("--top-logprobs 100")
    within = rejection_advice("top logprobs unavailable", {"top_logprobs": 20}, TENSORRT_LLM)
    assert within.fix is not None and "pytorch backend" in within.fix


def test_an_unknown_engines_refusal_is_read_by_the_known_engines_words() -> None:
    said = rejection_advice("`top_n_tokens` must be >= 0 and <= 5", {"top_logprobs": 9})
    assert said.fix is not None and said.fix.startswith("--top-logprobs 5")
    start = rejection_advice("`gather_generation_logits` must be `True` to use "
                             "`top_logprobs`", {"top_logprobs": 2})
    assert start.fix is not None and "gather_generation_logits" in start.fix


@given(message=st.text(max_size=200),
       body=st.dictionaries(st.text(max_size=12), st.integers() | st.booleans() | st.none(),
                            max_size=5),
       engine=st.sampled_from([None, *ENGINES]))
def test_any_refusal_reads_to_an_error_with_its_message(message: str, body: dict[str, object],
                                                       engine: str | None) -> None:
    refused = rejection_advice(message, body, ENGINES[engine] if engine else None)
    assert message in refused.reason


def test_a_known_engine_answering_500_is_retried_unless_its_profile_says_refusal(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """llama-cpp-python refuses a field with HTTP 500 (pydantic's validation error): the
    run stops with the fix (tests/test_fetch_collect.py). vLLM's 500 is an error of the
    moment, whatever it says: retried, then answered."""
    message = "1 validation error: something went wrong inside"
    server = serve(ScriptedModel(), "vllm",
                   faults=Faults(status={0: 500}, status_message=message))
    collect([write_prompts(TWO_PROMPTS)], tmp_path / "run",
            CollectSettings(endpoint=server.url, label="a", concurrency=1, preflight=False))
    records = list(load_run(tmp_path / "run").completions())
    assert len(records) == 2 and all(r.error is None for r in records)
