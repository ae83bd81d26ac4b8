"""triage/routing.py, MoE expert routing: recorded from vLLM's and SGLang's formats (lab
servers with planted routing), diagnosed across repeats and between A and B, in
pairs.csv, summary.json, the sheet, the determinism report and the gate. Routing as a
server sends it, and routing that cannot be right: test_wire_routing.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from quantcheck import CollectSettings, collect, load_run
from quantcheck.lab.launch import free_port, wait_until_healthy
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.triage.routing import across_repeats, between

from .conftest import Serve, WritePrompts, invoke, read_csv

PROMPTS = """
prompts:
  - {id: capital, prompt: "Q: capital of Australia?\\nA:"}
  - {id: colour, messages: [{role: user, content: "name a colour"}]}
"""
A_ANSWERS = {"Australia": " The capital of Australia is Canberra, not Sydney.",
             "colour": " Blue is a colour."}
B_ANSWERS = {**A_ANSWERS, "Australia": " The capital of Australia is Sydney, not Canberra."}


def run(serve: Serve, write_prompts: WritePrompts, out: Path, a_faults: Faults,
        b_faults: Faults, dialect: str = "vllm", *extra: str) -> dict[str, object]:
    a = serve(ScriptedModel(A_ANSWERS), dialect, faults=a_faults)
    b = serve(ScriptedModel(B_ANSWERS), dialect, faults=b_faults)
    result = invoke("run", "--a", a.url, "--b", b.url, "--prompts", write_prompts(PROMPTS), "--out",
                    out, "--repeats", "3", "--routed-experts", "--context-tokens", "0", *extra)
    assert result.exit_code == 0, result.output
    return {"output": result.output,
            "pairs": {row["prompt_id"]: row for row in read_csv(out / "pairs.csv")},
            "summary": json.loads((out / "summary.json").read_text())}


def test_planted_routing_cases_get_the_right_diagnosis(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    found = run(serve, write_prompts, tmp_path / "r",
                Faults(routing=True, nondeterministic=True),  # A: a finalize kernel
                Faults(routing=True, gating_nondeterministic=True, routing_flip_at=2))
    pairs = found["pairs"]
    assert isinstance(pairs, dict)
    capital, colour = pairs["capital"], pairs["colour"]
    # A: routing stable, logprobs moving -> after routing
    assert capital["a_routing"] == "after_routing" and float(capital["a_routings"]) == 1
    assert float(capital["a_signatures"]) > 1
    # B: routing moving between repeats -> gating
    assert capital["b_routing"] == "gating" and float(capital["b_routings"]) > 1
    # A against B: token 2 of layer 1 routed elsewhere, 3 tokens before " Sydney,"
    assert float(capital["first_divergence"]) == 5
    assert float(capital["routing_first_token"]) == 2
    assert float(capital["routing_first_layer"]) == 1
    assert 0 < float(capital["routing_diff_share"]) < 1
    assert float(colour["routing_first_token"]) == 2  # the planted flip, texts identical
    summary = found["summary"]
    assert isinstance(summary, dict)
    routing = summary["counts"]["routing"]
    assert routing == {"pairs": 2, "a_gating": 0, "b_gating": 2, "a_after_routing": 2,
                       "b_after_routing": 0, "ab_differs": 2}


def test_the_sheet_shows_the_routing_sentences_and_grids(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, browser: Any) -> None:
    run(serve, write_prompts, tmp_path / "r", Faults(routing=True, nondeterministic=True),
        Faults(routing=True, gating_nondeterministic=True, routing_flip_at=2))
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto((tmp_path / "r" / "index.html").as_uri())
    page.wait_for_selector("body[data-ready=true]")
    capital = page.locator('article.pair[data-prompt="capital"]')
    assert "B routing varies" in capital.locator("header").inner_text()
    assert capital.locator(".routing-line[data-routing=ab]").inner_text().startswith(
        "Routing, A vs B: B routed token 2 of layer 1 to other experts, 3 tokens before the "
        "texts part (")
    assert "nondeterminism after routing (expert reduction/finalize)" in capital.locator(
        ".routing-line[data-routing=a_repeats]").inner_text()
    assert "gating is not deterministic" in capital.locator(
        ".routing-line[data-routing=b_repeats]").inner_text()
    grid = capital.locator(".routing-grid").first
    assert grid.locator("rect.d").count() >= 1
    assert grid.get_attribute("height") == "16"  # 4 layers
    assert not errors
    page.close()


def test_sglang_routing_needs_its_shape_and_a_server_without_routing_is_named(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts(PROMPTS)
    sglang = serve(ScriptedModel(A_ANSWERS), "sglang", faults=Faults(routing=True))
    warnings: list[str] = []

    class Warned:
        def __getattr__(self, name: str) -> object:
            return warnings.append if name == "warn" else (lambda *args: None)

    collect([prompts], tmp_path / "s", CollectSettings(
        endpoint=sglang.url, label="s", routed_experts=True, routed_experts_shape=[4, 2],
        context_tokens=0), Warned())  # type: ignore[arg-type]
    records = list(load_run(tmp_path / "s").completions())
    assert all(r.tokens is not None and r.tokens.routing is not None
               and r.tokens.routing.shape == (len(r.tokens), 4, 2) for r in records)
    assert sum(bool(body.get("return_routed_experts")) for body in sglang.requests) == len(
        records)  # every prompt's request asked (not the preflight's probes)
    # SGLang streams its routing (a last chunk without choices): the stream is kept
    assert not any("without streaming" in w for w in warnings)
    assert load_run(tmp_path / "s").manifest.parameters.stream

    warnings.clear()
    collect([prompts], tmp_path / "t", CollectSettings(
        endpoint=sglang.url, label="t", routed_experts=True, context_tokens=0), Warned())  # type: ignore[arg-type]
    assert sum("--routed-experts-shape LAYERS,K" in w for w in warnings) == 1
    assert all(r.error is None and r.tokens is not None and r.tokens.routing is None
               for r in load_run(tmp_path / "t").completions())

    warnings.clear()
    plain = serve(ScriptedModel(A_ANSWERS), "vllm")  # not started to return routing
    collect([prompts], tmp_path / "u", CollectSettings(
        endpoint=plain.url, label="u", routed_experts=True, context_tokens=0), Warned())  # type: ignore[arg-type]
    assert sum("returned no MoE routing" in w for w in warnings) == 1
    assert any("without streaming" in w for w in warnings)  # vLLM: whole answers only
    assert not load_run(tmp_path / "u").manifest.parameters.stream


def test_the_determinism_command_and_the_gate_read_routing(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    gating = serve(ScriptedModel(A_ANSWERS), faults=Faults(routing=True,
                                                            gating_nondeterministic=True))
    result = invoke("determinism", "--endpoint", gating.url, "--prompts", write_prompts(PROMPTS),
                    "--out", tmp_path / "d", "--repeats", "3", "--routed-experts",
                    "--context-tokens", "0")
    assert result.exit_code == 0, result.output
    assert "gating is not deterministic" in result.output
    report = json.loads((tmp_path / "d" / "determinism.json").read_text())
    assert {row["routing"] for row in report["prompts"]} == {"gating"}
    page = (tmp_path / "d" / "index.html").read_text()
    assert page.count('<td class="routing">routing differs between repeats at token') == len(
        report["prompts"])  # every prompt in every mode

    found = run(serve, write_prompts, tmp_path / "r", Faults(routing=True),
                Faults(routing=True, gating_nondeterministic=True))
    assert found["pairs"]["capital"]["b_routing"] == "gating"  # type: ignore[index]
    strict = invoke("gate", tmp_path / "r", "--require-routing-determinism", "--max-factual-flips",
                    "9")
    assert strict.exit_code == 1 and "routing" in strict.output
    stable = run(serve, write_prompts, tmp_path / "s", Faults(routing=True),
                 Faults(routing=True))
    assert stable["pairs"]["capital"]["b_routing"] == "identical"  # type: ignore[index]
    passed = invoke("gate", tmp_path / "s", "--require-routing-determinism", "--max-factual-flips",
                    "9")
    assert passed.exit_code == 0, passed.output


def test_routing_comparisons() -> None:
    a = np.array([[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[0, 2], [1, 3]]], np.int32)
    swapped = a[:, :, ::-1].copy()  # the same experts in another order: alike
    assert between(a, swapped, None).first_token is None
    b = a.copy()
    b[1, 1] = [0, 7]
    pair = between(a, b, 2)
    assert (pair.first_token, pair.first_layer, pair.tokens) == (1, 1, 3)
    assert "1 token before the texts part" in pair.sentence
    assert pair.share == pytest.approx(1 / 6)
    assert between(a, b, 0).first_token is None  # only token 0 is shared
    assert across_repeats([a, a, a], 2).kind == "after_routing"
    assert across_repeats([a, a, a], 1).kind == "identical"
    gating = across_repeats([a, b, a], 1)
    assert gating.kind == "gating" and "token 1, layer 1" in gating.sentence


def test_lab_scripted_serves_planted_routing_from_the_command_line(
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "lab.log"
    with log.open("wb") as handle:
        process = subprocess.Popen([sys.executable, "-m", "quantcheck", "lab", "scripted",
                                    "--routing", "gating", "--port", str(port)],
                                   stdout=handle, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url, process, log, timeout=60)
        result = invoke("determinism", "--endpoint", url, "--prompts", write_prompts(PROMPTS),
                        "--out", tmp_path / "d", "--repeats", "3", "--modes", "sequential",
                        "--routed-experts", "--context-tokens", "0")
    finally:
        process.terminate()
        process.wait(30)
    assert result.exit_code == 0, result.output
    assert "routing: 2 prompts: routing differs between repeats" in result.output

