"""The lab endpoints on the real Gemma 3 270M: tested like any endpoint (heavy: CI runs them)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from quantcheck import CollectSettings, collect, compare, load_run
from quantcheck.cli.heap import return_freed_memory
from quantcheck.lab.endpoint import LabServer

from .conftest import invoke, skip_module_without_extra, write_review

pytestmark = pytest.mark.model

try:
    import torch

    from quantcheck.lab.model import ModelEngine
except ImportError:
    skip_module_without_extra("the demo extra (torch, transformers, the model package) is "
                              "not installed")

PROMPTS = """
defaults: {max_tokens: 8, stop: ["\\n"]}
prompts:
  - id: capital
    prompt: "Q: What is the capital of Japan?\\nA: Tokyo\\nQ: What is the capital of France?\\nA:"
    expect: {contains: Paris}
  - id: dog
    prompt: "Q: How many legs does a dog have?\\nA:"
    expect: {any_of: ["4", four]}
  - {id: chat, messages: [{role: user, content: "The opposite of hot is"}], max_tokens: 4}
"""

@pytest.fixture(scope="session")
def lab(converted_gemma: Path) -> Iterator[Any]:
    """A lab server per (precision, fault), started once for the whole session: the
    process loads the model once and shares its weights between them (lab/model.py),
    converted once for every worker (`converted_gemma`)."""
    return_freed_memory()  # as every quantcheck command does, `lab serve` included
    servers: dict[tuple[str, str], LabServer] = {}

    def start(precision: str = "bf16", fault: str = "none") -> LabServer:
        if (precision, fault) not in servers:
            engine = ModelEngine(precision, fault, threads=2)
            servers[precision, fault] = LabServer(engine).start()
        return servers[precision, fault]

    yield start
    for server in servers.values():
        server.stop()


def run(server: LabServer, prompts: Path, out: Path, **settings: Any) -> Any:
    # No preflight: its probes cost about 3 s a side (its 6,000-token context probe far
    # more), and these tests are about the endpoints' numerics; the demo's tests run
    # the preflight against the same model.
    collect([prompts], out, CollectSettings(endpoint=server.url, label=out.name,
                                            top_logprobs=5, preflight=False, **settings))
    return load_run(out)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_logprobs_are_the_models_log_softmax_and_greedy_is_argmax(
        lab: Any, write_prompts: Any, tmp_path: Path, stream: bool) -> None:
    server = lab()
    result = run(server, write_prompts(PROMPTS), tmp_path / "bf16", stream=stream)
    manifest = result.manifest
    assert manifest.server.runtime == "vllm" and manifest.model == "gemma-3-270m"
    model, tokenizer = server.engine.model, server.engine.tokenizer
    records = {r.prompt_id: r for r in result.completions()}
    assert "Paris" in (records["capital"].text or "")
    for prompt_id in ("capital", "dog"):
        record = records[prompt_id]
        assert record.error is None and record.tokens is not None and len(record.tokens) > 0
        prompt = result.prompts[prompt_id].request["prompt"]
        prompt_ids = tokenizer(prompt).input_ids
        generated = tokenizer(prompt + (record.text or ""), add_special_tokens=True).input_ids
        assert generated[:len(prompt_ids)] == prompt_ids
        with torch.no_grad():
            logits = model(torch.tensor([generated])).logits[0].float()
        reference = torch.log_softmax(logits, -1)
        for position, (token, logprob) in enumerate(zip(record.tokens.text,
                                                        record.tokens.logprob, strict=True)):
            row = reference[len(prompt_ids) - 1 + position]
            chosen = int(torch.argmax(row))
            assert tokenizer.decode([chosen]) == token  # greedy: the argmax token
            assert logprob == pytest.approx(float(row[chosen]), abs=2e-3)
            assert record.tokens.top_logprob[position][0] == logprob  # top-1 is the chosen
    assert records["chat"].text and records["chat"].finish_reason in ("stop", "length")


def test_reference_is_deterministic_and_the_fault_is_not(lab: Any, write_prompts: Any,
                                                         tmp_path: Path) -> None:
    """Three repeats each: the fault draws a new reduction order for every token, so
    two answers of several tokens share no signature by chance."""
    prompts = write_prompts(PROMPTS)
    reference = run(lab(), prompts, tmp_path / "a", repeats=3, repeat_mode="sequential")
    faulty = run(lab("bf16", "nondeterministic"), prompts, tmp_path / "b", repeats=3,
                 repeat_mode="sequential")
    pairs = compare(reference.path, faulty.path).set_index("prompt_id")
    assert (pairs["a_signatures"] == 1).all()
    assert (pairs.loc[["capital", "dog"], "b_signatures"] > 1).all()
    assert (pairs["b_texts"] == 1).all()  # only the last bits of the logprobs move


def test_precisions_change_numerics_and_the_lmhead_fault_is_caught(
        lab: Any, write_prompts: Any, tmp_path: Path) -> None:
    prompts = write_prompts(PROMPTS)
    a = run(lab(), prompts, tmp_path / "a")
    fp8 = run(lab("fp8"), prompts, tmp_path / "fp8")
    broken = run(lab("bf16", "lmhead-noscale"), prompts, tmp_path / "broken")
    drift = compare(a.path, fp8.path)
    assert (drift["logprob_mean_abs_diff"].dropna() > 0).any()
    assert drift["kl_topk_mean"].dropna().max() > 0
    pairs = compare(a.path, broken.path).set_index("prompt_id")
    assert not pairs["identical"].any()
    assert pairs.loc["capital", "flip"] == "regression"


def test_broken_head_loops_like_the_sglang_bug(lab: Any, write_prompts: Any,
                                               tmp_path: Path) -> None:
    """32 tokens: the broken head's answers below are loops from their 20th token on
    (measured), the reference's are not."""
    prompts = write_prompts("""
        defaults: {max_tokens: 32}
        prompts:
          - {id: legs, prompt: "Q: How many legs does a dog have?\\nA:"}
          - {id: story, prompt: "Once upon a time, there was a"}
    """)
    a = run(lab(), prompts, tmp_path / "a")
    b = run(lab("bf16", "lmhead-noscale"), prompts, tmp_path / "b")
    pairs = compare(a.path, b.path)
    assert list(pairs["b_degenerate"]) == ["repetition", "repetition"]
    assert not pairs["a_degenerate"].any()
    assert list(pairs["b_finish_reason"]) == ["length", "length"]


def test_the_lab_model_as_a_judge_breaks_nothing_and_the_agreement_says_how_poor(
        lab: Any, write_prompts: Any, tmp_path: Path) -> None:
    """A 270M base model is a poor judge: whatever it answers is read strictly (most
    of it is no verdict), the report is whole, and the agreement figure tells."""
    from quantcheck.lab.scripted import ScriptedModel, ScriptedServer

    prompts = write_prompts("""
        defaults: {max_tokens: 6, stop: ["\\n"]}
        prompts:
          - {id: capital, prompt: "Q: What is the capital of France?\\nA:"}
          - {id: legs, prompt: "Q: How many legs does a dog have?\\nA:"}
          - {id: water, prompt: "Q: At what temperature does water boil?\\nA:"}
          - {id: chat, messages: [{role: user, content: "The opposite of hot is"}]}
    """)
    server = lab()
    a = run(server, prompts, tmp_path / "a")
    other = ScriptedServer(ScriptedModel({"France": " Lyon", "dog": " Three legs.",
                                          "water": " 90 degrees.", "opposite": " warm"}))
    with other:
        b = run(other, prompts, tmp_path / "b")
    out = tmp_path / "report"
    result = invoke("compare", a.path, b.path, "--out", out, "--jobs", "1", "--judge", server.url,
                    "--judge-max-tokens", "12", "--judge-concurrency", "1")
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    judge = summary["judge"]
    assert judge["model"] == "gemma-3-270m" and judge["error"] is None
    assert judge["pairs"] == 4 and sum(judge["classes"].values()) == 4
    assert judge["requests"] == 8 and judge["failed"] == 0
    assert set(judge["classes"]) <= {"same", "immaterial", "subset", "superset",
                                     "contradiction", "unclear", "no_verdict"}
    labels = pd.read_csv(out / "pairs.csv", keep_default_na=False).set_index("prompt_id")[
        "judge_label"]
    assert set(labels.index) == {"capital", "legs", "water", "chat"}
    write_review(out, "dana", {p: {"label": "factual_flip"} for p in ("capital", "legs", "water")})
    assert invoke("report", out).exit_code == 0
    found = json.loads((out / "summary.json").read_text())["judge"]["agreement"]
    observed = sum(1 for prompt in ("capital", "legs", "water") if labels[prompt])
    if observed:  # each label the judge gave a reviewed pair is one observation
        assert found["observations"] == observed and found["reviewers"] == ["dana"]
        assert found["agreed"] == sum(labels[p] == "factual_flip"
                                      for p in ("capital", "legs", "water"))
    else:  # nothing parseable: no agreement to speak of, and it says so
        assert found is None
    if not any(labels):
        assert "the judge gave no label, so there is no agreement to measure" in result.output


def test_demo_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = invoke("demo", "--out", out, "--repeats", "1", "--b-precision", "int4")
    assert result.exit_code == 0, result.output
    assert "bf16 (A) vs int4 (B):" in result.output
    assert "gate (default policy):" in result.output
    assert (out / "index.html").exists() and (out / "pairs.csv").exists()
    assert "quantization" in (out / "summary.json").read_text()


def test_demo_with_two_candidates_recommends_one(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = invoke("demo", "--out", out, "--repeats", "1", "--b-precision", "fp8,int4")
    assert result.exit_code == 0, result.output
    overview = json.loads((out / "overview.json").read_text())
    rows = {row["label"]: row for row in overview["candidates"]}
    assert set(rows) == {"fp8", "int4"}
    assert rows["fp8"]["cell"]["quantization"] == "fp8"
    assert (out / "candidates" / "int4" / "index.html").exists()
    assert "recommended:" in result.output or "no candidate is recommended" in result.output
    assert (out / "matrix.csv").read_text().startswith("model_id,runtime,")
    log = (out / "logs" / "servers.log").read_text()  # one process served the three sides
    assert [line.split(" (")[0] for line in log.splitlines() if line.startswith("loading")] == [
        f"loading gemma-3-270m at {precision}" for precision in ("bf16", "fp8", "int4")]
    assert log.count("/v1") == 3 and not list((out / "logs").glob("server-*"))
