"""Repeat modes and the determinism command against a server whose output changes under load."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from quantcheck import CollectSettings, collect, compare
from quantcheck.lab.scripted import Faults, ScriptedModel

from .conftest import Serve, WritePrompts, invoke

PROMPTS = "prompts:\n" + "".join(f"  - {{id: p{n}, category: c, prompt: 'question {n}'}}\n"
                                 for n in range(3))


def test_modes_show_load_dependent_nondeterminism(
        serve: Serve, write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    server = serve(ScriptedModel(), faults=Faults(load_sensitive=True, latency_s=0.05,
                                                   token_delay_s=0.005))
    out = tmp_path / "det"
    result = invoke("determinism", "--endpoint", server.url, "--prompts", write_prompts(PROMPTS),
                    "--out", out, "--repeats", "4", "--concurrency", "3",
                    "--fail-on-nondeterminism")
    assert result.exit_code == 1, result.output
    assert "sequential: 3 prompts: 3 deterministic" in result.output
    assert "burst: 3 prompts: 0 deterministic, 3 with varying logprobs" in result.output
    assert "loaded: 3 prompts: 0 deterministic, 3 with varying logprobs" in result.output
    frame = pd.read_csv(out / "determinism.csv").set_index(["mode", "prompt_id"])
    assert frame.loc[("sequential", "p0"), "signatures"] == "1 distinct of 4"
    burst = frame.loc[("burst", "p0")]
    assert burst["distinct_signatures"] > 1 and burst["texts"] == "1 distinct of 4"
    assert burst["first_logprob_divergence"] == 0 and 0 < burst["max_logprob_spread"] < 1e-5
    assert not frame["only_first_differs"].any()  # load noise is not a prompt cache's mark
    summary = json.loads((out / "determinism.json").read_text())
    assert summary["modes"]["sequential"] == {"prompts": 3, "text_varies": 0,
                                              "logprobs_vary": 0, "deterministic": 3}
    assert "logprobs vary" in (out / "index.html").read_text()
    # sequential mode means one request at a time: the server never saw two at once
    for mode in ("sequential",):
        assert (out / mode / "completions.jsonl").read_bytes().count(b"\n") == 12


def test_deterministic_endpoint_passes(serve: Serve,
                                       write_prompts: WritePrompts,
                                       tmp_path: Path) -> None:
    server = serve(ScriptedModel())
    result = invoke("determinism", "--endpoint", server.url, "--prompts", write_prompts(PROMPTS),
                    "--out", tmp_path / "det", "--modes", "sequential,burst",
                    "--fail-on-nondeterminism")
    assert result.exit_code == 0, result.output
    assert "burst: 3 prompts: 3 deterministic" in result.output


def test_the_report_names_the_endpoint_without_its_password(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    url = serve(ScriptedModel()).url.replace("http://", "http://alice:hunter2@")
    result = invoke("determinism", "--endpoint", url, "--prompts", write_prompts(PROMPTS),
                    "--out", tmp_path / "det", "--modes", "sequential", "--repeats", "2")
    assert result.exit_code == 0, result.output
    written = b"".join(path.read_bytes() for path in (tmp_path / "det").rglob("*")
                       if path.is_file())
    assert b"hunter2" not in written and b"alice" not in written


def test_a_prompt_cache_shows_as_only_the_first_request_differing(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """llama.cpp's prompt cache: the first request evaluates the whole prompt, the
    repeats find it cached; the two paths' numbers differ, the repeats agree."""
    server = serve(ScriptedModel(), faults=Faults(prompt_cache=True))
    prompts = write_prompts(PROMPTS)
    cached = invoke("determinism", "--endpoint", server.url, "--prompts", prompts,
                    "--out", tmp_path / "cached", "--modes", "sequential", "--repeats", "3")
    assert "sequential: 3 prompts: 0 deterministic, 3 with varying logprobs" in cached.output
    assert "3 prompts: only the first request differs" in cached.output
    assert "cache_prompt" in cached.output
    frame = pd.read_csv(tmp_path / "cached" / "determinism.csv")
    assert frame["only_first_differs"].all()
    assert (frame["signatures"] == "2 distinct of 3").all()
    report = json.loads((tmp_path / "cached" / "determinism.json").read_text())
    assert report["modes"]["sequential"]["only_first_differs"] == 3
    assert "only the first request differs" in (tmp_path / "cached" / "index.html").read_text()
    off = invoke("determinism", "--endpoint", server.url, "--prompts", prompts,
                 "--out", tmp_path / "off", "--modes", "sequential", "--repeats", "3",
                 "--extra-body", '{"cache_prompt": false}')
    assert "sequential: 3 prompts: 3 deterministic" in off.output
    assert "only the first" not in off.output


def test_two_repeats_cannot_show_a_prompt_cache(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), faults=Faults(prompt_cache=True))
    result = invoke("determinism", "--endpoint", server.url, "--prompts",
                    write_prompts(PROMPTS), "--out", tmp_path / "det", "--modes",
                    "sequential", "--repeats", "2")
    assert "3 with varying logprobs" in result.output and "only the first" not in result.output
    assert not pd.read_csv(tmp_path / "det" / "determinism.csv")["only_first_differs"].any()


def test_unknown_mode_is_a_usage_error(write_prompts: WritePrompts,
                                       tmp_path: Path) -> None:
    result = invoke("determinism", "--endpoint", "http://127.0.0.1:9", "--prompts",
                    write_prompts(PROMPTS), "--out", tmp_path, "--modes", "sequential,chaos")
    assert result.exit_code == 2 and "unknown mode 'chaos'" in result.output


@pytest.mark.parametrize("mode", ["sequential", "burst", "loaded"])
def test_compare_says_which_mode_made_the_repeats(
        serve: Serve, write_prompts: WritePrompts,
        tmp_path: Path, mode: str) -> None:
    server = serve(ScriptedModel(), faults=Faults(load_sensitive=True, latency_s=0.05,
                                                   token_delay_s=0.005))
    prompts = write_prompts(PROMPTS)
    for side in ("a", "b"):
        collect([prompts], tmp_path / side,
                CollectSettings(endpoint=server.url, label=side, repeats=3, concurrency=3,
                                repeat_mode=mode))
    pairs = compare(tmp_path / "a", tmp_path / "b")
    assert set(pairs["a_repeat_mode"]) == {mode}
    varies = (pairs["b_signatures"] > 1).all()
    assert varies == (mode != "sequential")


def test_help_defaults_and_behaviour_agree(serve: Serve,
                                           write_prompts: WritePrompts,
                                           tmp_path: Path) -> None:
    """Six repeats by default, as --help says; --repeat-mode is not an option here (the
    modes are --modes); the endpoint is preflighted once, not once per mode; the page
    names the model the server serves."""
    help_text = " ".join(invoke("determinism", "--help").output.split())
    assert "[default: 6; x>=2]" in help_text and "--repeat-mode" not in help_text
    refused = invoke("determinism", "--endpoint", "http://127.0.0.1:9", "--prompts",
                     write_prompts(PROMPTS), "--out", tmp_path / "x", "--repeats", "1")
    assert refused.exit_code == 2 and "--repeats" in refused.output
    server = serve(ScriptedModel())
    result = invoke("determinism", "--endpoint", server.url, "--prompts", write_prompts(PROMPTS),
                    "--out", tmp_path / "det", "--modes", "sequential,burst", "--context-tokens",
                    "0")
    assert result.exit_code == 0, result.output
    assert result.output.count("preflight checks on") == 1
    for mode in ("sequential", "burst"):
        lines = (tmp_path / "det" / mode / "completions.jsonl").read_bytes().count(b"\n")
        assert lines == 3 * 6
    assert "(model scripted-model)" in (tmp_path / "det" / "index.html").read_text()
