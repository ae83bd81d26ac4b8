"""Teacher-forced drift against loopback servers: exact (token ids + prompt_logprobs)
and approximate (echo), the noise floor, and compare / sheet / gate on top."""

from __future__ import annotations

import csv
import gc
import json
from pathlib import Path
from typing import BinaryIO

import pytest

from quantcheck import CollectSettings, collect, load_run
from quantcheck.errors import EndpointError
from quantcheck.fetch.forced_scoring import ForcedSettings
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.pipeline.collecting import score_run
from quantcheck.triage.forced_figures import score_position

from .conftest import Serve, WritePrompts, invoke
from .hostile import HostileServer, Request, http

PROMPTS = """
prompts:
  - {id: capital, category: f, messages: [{role: user, content: "capital of Australia"}]}
  - {id: typed, category: f, prompt: "Q: capital of Australia?\\nA:"}
  - {id: other, category: f, prompt: "Q: name a colour\\nA:"}
"""
A_ANSWERS = {"Australia": " The capital of Australia is Canberra, not Sydney.",
             "colour": " Blue is a colour."}
B_ANSWERS = {**A_ANSWERS, "Australia": " The capital of Australia is Sydney, not Canberra."}


def collect_a(serve: Serve, write_prompts: WritePrompts, tmp_path: Path, dialect: str) -> Path:
    server = serve(ScriptedModel(A_ANSWERS), dialect)
    collect([write_prompts(PROMPTS)], tmp_path / "a", CollectSettings(
        endpoint=server.url, label="a", repeats=2, context_tokens=0))
    return tmp_path / "a"


def lines(folder: Path) -> dict[str, dict[str, object]]:
    found = [json.loads(line) for line in (folder / "forced.jsonl").read_text().splitlines()]
    return {str(line["prompt_id"]): line for line in found}


def test_same_model_scores_zero_and_a_flip_shows_where(serve: Serve, write_prompts: WritePrompts,
                                                      tmp_path: Path) -> None:
    a_run = collect_a(serve, write_prompts, tmp_path, "vllm")
    same = score_run(a_run, tmp_path / "same", ForcedSettings(
        endpoint=serve(ScriptedModel(A_ANSWERS)).url))
    assert same.mode == "prompt-logprobs"
    assert same.scored == 3
    assert same.overall.top1_agreement == 1.0
    assert same.overall.kl is not None and same.overall.delta_p is not None
    assert same.overall.kl.max == 0.0 and same.overall.delta_p.abs_max == 0

    flipped = score_run(a_run, tmp_path / "flip", ForcedSettings(
        endpoint=serve(ScriptedModel(B_ANSWERS)).url, top_k=5))
    capital = lines(tmp_path / "flip")["capital"]
    top1 = capital["per_position"]["top1"]  # type: ignore[index]
    assert top1.index(False) == 5 and top1.count(False) == 1  # " Canberra," vs " Sydney,"
    assert capital["per_position"]["delta_p"][5] < -0.5  # type: ignore[index]
    assert lines(tmp_path / "flip")["other"]["top1_agreement"] == 1.0
    assert flipped.noise_floor.repeats_compared == 3
    assert flipped.noise_floor.kl is not None and flipped.noise_floor.kl.max == 0.0


def test_prompt_logprobs_is_exact_on_as_ids_and_approximate_on_as_text(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A's token ids (llama-server records them) are sent as they are: exact. A run
    without ids (vLLM's logprobs carry none) has B re-tokenize A's text, which may cut
    it otherwise than A generated: each such line, and the summary, say approximate."""
    with_ids = collect_a(serve, write_prompts, tmp_path, "llama.cpp")
    b = serve(ScriptedModel(A_ANSWERS))
    exact = score_run(with_ids, tmp_path / "exact", ForcedSettings(
        endpoint=b.url, mode="prompt-logprobs"))
    assert exact.scored == 3 and not exact.approximate
    assert not any(line.get("approximate") for line in lines(tmp_path / "exact").values())
    recorded = {r.prompt_id: r.tokens.ids for r in load_run(with_ids).completions()
                if r.repeat == 0 and r.tokens}
    sent = [body["prompt"] for body in b.requests if "prompt_logprobs" in body]
    assert all(any(prompt[-len(ids):] == ids for prompt in sent)  # type: ignore[index]
               for ids in recorded.values())

    text_only = tmp_path / "text-only"
    collect([write_prompts(PROMPTS)], text_only, CollectSettings(
        endpoint=serve(ScriptedModel(A_ANSWERS)).url, label="a", preflight=False))
    retokenized = score_run(text_only, tmp_path / "approximate", ForcedSettings(
        endpoint=b.url, mode="prompt-logprobs"))
    assert retokenized.scored == 3 and retokenized.approximate
    assert all(line["approximate"] for line in lines(tmp_path / "approximate").values())
    printed = invoke("forced", text_only, "--endpoint", b.url, "--out", tmp_path / "printed")
    assert printed.exit_code == 0 and "(prompt-logprobs, approximate)" in printed.output


def test_a_prompt_b_cannot_score_is_skipped_with_its_reason(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A 400 for one prompt (prompt and answer beyond B's context) costs that prompt
    only: it is listed as skipped with B's reason, the others are scored."""
    a_run = collect_a(serve, write_prompts, tmp_path, "vllm")
    too_long = "This model's maximum context length is 16 tokens. However, you requested 40"
    b = serve(ScriptedModel(A_ANSWERS), faults=Faults(status={1: 400},
                                                      status_message=too_long))
    result = invoke("forced", a_run, "--endpoint", b.url, "--out", tmp_path / "f",
                    "--forced-concurrency", "1")
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "f" / "forced.json").read_text())
    assert summary["scored"] == 2 and len(summary["skipped"]) == 1
    (prompt_id, reason), = summary["skipped"].items()
    assert too_long in reason and "B could not score it" in reason
    assert lines(tmp_path / "f")[prompt_id]["skipped"] == reason
    assert sum(1 for line in lines(tmp_path / "f").values() if line.get("per_position")) == 2


def test_token_ids_on_llama_server_is_exact_with_the_prefix_cache_off(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """B's prefix cache moves what it scores by the order requests came in; every
    scoring request turns it off, so the same model scores exactly zero."""
    a_run = collect_a(serve, write_prompts, tmp_path, "llama.cpp")
    same_server = serve(ScriptedModel(A_ANSWERS), "llama.cpp",
                        faults=Faults(scoring_cache_shift=True))
    same = score_run(a_run, tmp_path / "same", ForcedSettings(endpoint=same_server.url,
                                                              top_k=5))
    assert same.mode == "token-ids" and not same.approximate
    assert same.tokenizer == "A and B give the same token ids"
    assert same.scored == 3 and not same.skipped  # the chat prompt too (B's template)
    assert same.overall.top1_agreement == 1.0
    assert same.overall.kl is not None and same.overall.kl.max == 0.0
    assert same.cache.startswith("cache_prompt false in every scoring request")
    assert same.order_floor is None and same.within_order_floor is None
    asked = [body for body in same_server.requests if "n_predict" in body]
    assert all(body["n_predict"] == 1 and body["cache_prompt"] is False
               and body["n_probs"] == 5 for body in asked)
    assert len(asked) == same.overall.positions  # one request per position
    lengths = [len(body["prompt"]) for body in asked]  # each one token longer
    assert sum(1 for n, m in zip(lengths, lengths[1:], strict=False) if m == n + 1) >= \
        len(asked) - 3

    flipped = score_run(a_run, tmp_path / "flip", ForcedSettings(
        endpoint=serve(ScriptedModel(B_ANSWERS), "llama.cpp").url, top_k=5))
    for prompt_id in ("capital", "typed"):  # " Canberra," vs " Sydney,"
        top1 = lines(tmp_path / "flip")[prompt_id]["per_position"]["top1"]  # type: ignore
        assert top1.index(False) == 5 and all(top1[:5])
    assert lines(tmp_path / "flip")["other"]["top1_agreement"] == 1.0
    assert flipped.overall.delta_p is not None and flipped.overall.delta_p.abs_max > 0.5


def test_token_ids_refuses_another_tokenizer_and_records_without_ids(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    a_run = collect_a(serve, write_prompts, tmp_path, "llama.cpp")
    other = serve(ScriptedModel(A_ANSWERS), "llama.cpp", faults=Faults(other_tokenizer=True))
    with pytest.raises(EndpointError, match="tokenizes unlike A .*--forced-mode echo"):
        score_run(a_run, tmp_path / "f", ForcedSettings(endpoint=other.url))
    vllm_run = tmp_path / "v"
    collect([write_prompts(PROMPTS)], vllm_run, CollectSettings(
        endpoint=serve(ScriptedModel(A_ANSWERS), "vllm").url, label="a", preflight=False))
    summary = score_run(vllm_run, tmp_path / "g", ForcedSettings(
        endpoint=serve(ScriptedModel(A_ANSWERS), "llama.cpp").url))
    assert summary.tokenizer is not None and summary.tokenizer.startswith("not checked")
    assert summary.scored == 0 and set(summary.skipped) == {"capital", "typed", "other"}
    assert "no token ids" in summary.skipped["typed"]


def test_echo_is_approximate_and_skips_chat_prompts(serve: Serve, write_prompts: WritePrompts,
                                                    tmp_path: Path) -> None:
    a_run = collect_a(serve, write_prompts, tmp_path, "llama-cpp-python")
    b = serve(ScriptedModel(B_ANSWERS), "llama-cpp-python")
    summary = score_run(a_run, tmp_path / "f", ForcedSettings(endpoint=b.url, top_k=5))
    assert summary.mode == "echo" and summary.approximate
    assert summary.skipped == {"capital": "a chat prompt cannot be echoed without its chat "
                                             "template"}
    typed = lines(tmp_path / "f")["typed"]
    assert typed["aligned"] and typed["per_position"]["top1"].count(False) == 1  # type: ignore


def test_a_server_without_scoring_is_a_clear_error(serve: Serve, write_prompts: WritePrompts,
                                                   tmp_path: Path) -> None:
    a_run = collect_a(serve, write_prompts, tmp_path, "vllm")
    sglang = serve(ScriptedModel(A_ANSWERS), "sglang")
    with pytest.raises(EndpointError, match="echo is not supported"):
        score_run(a_run, tmp_path / "f", ForcedSettings(endpoint=sglang.url, mode="echo"))


def test_score_position() -> None:
    a_top = ([" Paris", " Lyon"], [-0.1, -2.5])
    same = score_position(" Paris", -0.1, a_top, -0.1, a_top)
    assert (same.top1, same.delta_p, same.kl) == (True, 0.0, 0.0)
    other = score_position(" Paris", -0.1, a_top, -1.0, ([" Lyon", " Paris"], [-0.5, -1.0]))
    assert not other.top1 and other.kl > 0.5
    assert other.delta_p == pytest.approx(0.3679 - 0.9048, abs=1e-3)


def test_run_forced_reaches_pairs_summary_sheet_and_gate(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    a, b = serve(ScriptedModel(A_ANSWERS)), serve(ScriptedModel(B_ANSWERS))
    out = tmp_path / "report"
    result = invoke("run", "--a", a.url, "--b", b.url, "--prompts", write_prompts(PROMPTS), "--out",
                    out, "--repeats", "2", "--forced", "--context-tokens", "0")
    assert result.exit_code == 0, result.output
    # A on vLLM records no token ids: B re-tokenizes A's text (approximate)
    assert "Teacher-forced (prompt-logprobs, approximate): B's top-1 is A's token at" in \
        result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["forced"]["scored"] == 3 and sum(summary["forced"]["kl_histogram"]["counts"])
    with (out / "pairs.csv").open(newline="") as handle:
        pairs = list(csv.DictReader(handle))
    scored = [row for row in pairs if row["forced_positions"]]
    assert len(scored) == 3 and all(row["forced_positions"].isdigit() for row in scored)
    assert all(float(row["forced_kl_mean"]) >= 0 and row["forced_top1"] for row in scored)
    sheet = (out / "index.html").read_text()
    assert 'id="forced-summary"' in sheet and "teacher-forced KL per position" in sheet

    kl_mean = summary["forced"]["overall"]["kl"]["mean"]
    strict = invoke("gate", out, "--max-forced-kl", f"{kl_mean / 2}")
    assert strict.exit_code == 1 and "teacher-forced KL mean" in strict.output
    loose = invoke("gate", out, "--max-forced-kl", "10", "--max-factual-flips", "5")
    assert loose.exit_code == 0, loose.output


def test_gate_on_forced_kl_needs_forced_scores(serve: Serve, write_prompts: WritePrompts,
                                               tmp_path: Path) -> None:
    a = serve(ScriptedModel(A_ANSWERS))
    out = tmp_path / "report"
    invoke("run", "--a", a.url, "--b", a.url, "--prompts", write_prompts(PROMPTS), "--out", out)
    gate = invoke("gate", out, "--max-forced-kl", "0.1")
    assert gate.exit_code == 1 and "no teacher-forced scores" in gate.output


@pytest.mark.parametrize("completion", [
    b"[1, 2", b'{"completion_probabilities": "x"}', b'{"completion_probabilities": []}',
    b'{"completion_probabilities": [{"top_logprobs": [{"id": 1, "logprob": NaN}]}]}',
    b"<html>busy</html>"], ids=["cut", "wrong-type", "empty", "nan", "html"])
def test_a_broken_llama_server_answer_stops_scoring_with_one_line(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, completion: bytes) -> None:
    a_run = tmp_path / "a"
    collect([write_prompts(PROMPTS)], a_run, CollectSettings(
        endpoint=serve(ScriptedModel(A_ANSWERS), "llama.cpp").url, label="a",
        preflight=False))

    def respond(request: Request, out: BinaryIO) -> None:
        tokens = b'{"tokens": [2, 818, 3823]}'
        out.write(http(200, tokens if request.path == "/tokenize" else completion))

    models = json.dumps({"object": "list", "data": [{"id": "m", "owned_by": "llamacpp"}]})
    with HostileServer(respond, models=models.encode(),
                       info={"/props": b'{"total_slots": 1}'}) as broken:
        result = invoke("forced", a_run, "--endpoint", broken.url, "--out", tmp_path / "f")
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "(token-ids) failed" in errors[0], result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "f" / "forced.json").exists()
    gc.collect()  # a client session left open by a request after the failure warns here


def test_scoring_carries_extra_body_and_retries_like_collection(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """`forced --extra-body` reaches every scoring request; a 503 is retried."""
    a_run = collect_a(serve, write_prompts, tmp_path, "vllm")
    b = serve(ScriptedModel(A_ANSWERS), faults=Faults(status={0: 503}, retry_after_s=0.0))
    result = invoke("forced", a_run, "--endpoint", b.url, "--out", tmp_path / "f", "--extra-body",
                    '{"top_k": 1, "repeat_penalty": null}', "--retries", "2")
    assert result.exit_code == 0, result.output
    scoring = [r for r in b.requests if "prompt_logprobs" in r]
    # the three prompts in two orders (vLLM keeps its prefix cache), one twice (the 503)
    assert len(scoring) == 2 * 3 + 1
    assert all(r["top_k"] == 1 and "repeat_penalty" not in r for r in scoring)


def test_an_engine_that_cannot_score_given_tokens_says_so(
    serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
) -> None:
    a_run = collect_a(serve, write_prompts, tmp_path, "vllm")
    with pytest.raises(EndpointError, match="Ollama cannot score given tokens"):
        score_run(a_run, tmp_path / "forced", ForcedSettings(
            endpoint=serve(ScriptedModel(A_ANSWERS), "ollama").url))


def test_forced_reports_llama_cpps_figures_at_k_and_at_k_over_4(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """--forced-top-logprobs K reaches B (n_probs on llama-server); the summary has
    llama-perplexity's figures, names its estimator and gives KL at K and at K/4."""
    a_server = serve(ScriptedModel(A_ANSWERS), "llama.cpp")
    collect([write_prompts(PROMPTS)], tmp_path / "a", CollectSettings(
        endpoint=a_server.url, label="a", context_tokens=0, top_logprobs=8))
    b = serve(ScriptedModel(B_ANSWERS), "llama.cpp")
    result = invoke("forced", tmp_path / "a", "--endpoint", b.url, "--out", tmp_path / "f",
                    "--forced-top-logprobs", "8")
    assert result.exit_code == 0, result.output
    assert {body["n_probs"] for body in b.requests if "n_predict" in body} == {8}
    summary = json.loads((tmp_path / "f" / "forced.json").read_text())
    assert summary["a_top_k"] == 8 and summary["top_k"] == 8 and summary["quarter_k"] == 2
    assert summary["estimator"].startswith("KL(A||B) over A's top-8 alternatives that B's "
                                           "top-8 holds, plus one bucket for the rest: a "
                                           "lower bound")
    overall = summary["overall"]
    assert overall["kl"]["p90"] <= overall["kl"]["p99"] <= overall["kl"]["max"]
    assert 0 < overall["kl_quarter_k"]["mean"] <= overall["kl"]["mean"]
    # A is greedy: its top-1 is its token, so B's top-1 is A's top-1 where it is A's token
    assert overall["same_top_p"] == overall["top1_agreement"] < 1
    assert overall["rms_delta_p"] > abs(overall["delta_p"]["mean"])
    # A's " Canberra," is beyond B's top-8 there: B's logprob of it is not known
    assert overall["ppl_ratio"] > 1 and overall["ppl_ratio_bound"].startswith("lower bound")
    capital = lines(tmp_path / "f")["capital"]["per_position"]
    assert capital["same_top"] == capital["top1"]  # type: ignore[index]
    assert capital["same_top"][5] is False and all(capital["same_top"][:5])  # type: ignore
    assert "As llama-perplexity reports it: KL mean" in result.output
    assert "same top p" in result.output and "RMS delta p" in result.output
    assert f"at top-8, {overall['kl_quarter_k']['mean']:.3g} at top-2" in result.output


def test_prompt_logprobs_give_an_exact_ppl_ratio_and_run_asks_the_forced_top_k(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """vLLM's prompt_logprobs carry B's logprob of A's token at every position: the
    PPL ratio is exact. `run --forced-top-logprobs K` asks K of B, whatever B's
    collection asked; without --forced it is refused."""
    a, b = serve(ScriptedModel(A_ANSWERS)), serve(ScriptedModel(B_ANSWERS))
    out = tmp_path / "report"
    result = invoke("run", "--a", a.url, "--b", b.url, "--prompts", write_prompts(PROMPTS),
                    "--out", out, "--forced", "--forced-top-logprobs", "12",
                    "--context-tokens", "0")
    assert result.exit_code == 0, result.output
    assert {r["prompt_logprobs"] for r in b.requests if "prompt_logprobs" in r} == {12}
    forced = json.loads((out / "summary.json").read_text())["forced"]
    assert forced["top_k"] == 12 and forced["overall"]["ppl_ratio_bound"] == "exact"
    assert forced["overall"]["ppl_ratio"] > 1  # B is less sure of A's " Canberra,"
    sheet = (out / "index.html").read_text()
    assert 'id="forced-llama-cpp">As llama-perplexity reports it:' in sheet
    # run --forced scores B's own tokens too: the floor the report measures against
    assert forced["b_self"]["positions"] > 0 and forced["within_floor"]["floor"] == "b_self"
    assert "B has one repeat per prompt" in forced["b_noise_floor"]["note"]
    assert "lies within the larger noise floor (B scoring its own tokens" in result.output
    assert 'id="forced-within-floor">' in sheet
    refused = invoke("run", "--a", a.url, "--b", b.url, "--prompts", write_prompts(PROMPTS),
                     "--out", tmp_path / "other", "--forced-top-logprobs", "12")
    assert refused.exit_code == 2 and "--forced-top-logprobs needs --forced" in refused.output


def test_b_scores_its_own_tokens_and_the_larger_floor_is_named(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """With B's run: B against its own repeats, and B scoring its own greedy tokens as
    it scores A's. A is deterministic (floor 0), B's generations move (1e-7): the larger
    floor is B's, and the summary says how much of A-vs-B lies inside it."""
    a_run = collect_a(serve, write_prompts, tmp_path, "vllm")
    b = serve(ScriptedModel(B_ANSWERS), faults=Faults(nondeterministic=True))
    collect([write_prompts(PROMPTS)], tmp_path / "b", CollectSettings(
        endpoint=b.url, label="b", repeats=2, context_tokens=0))
    result = invoke("forced", a_run, "--endpoint", b.url, "--out", tmp_path / "f",
                    "--b-run", tmp_path / "b")
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "f" / "forced.json").read_text())
    a_floor, b_repeats, b_self = (summary["noise_floor"], summary["b_noise_floor"],
                                  summary["b_self"])
    assert a_floor["kl"]["max"] == 0.0 and a_floor["repeats_compared"] == 3
    assert b_repeats["repeats_compared"] == 3 and b_repeats["kl"]["max"] > 0
    # B's own tokens scored on B: every position is B's top-1, its numbers moved a little
    assert b_self["positions"] > 0 and b_self["top1_agreement"] == 1.0
    assert 0 < b_self["kl"]["mean"] < 1e-6
    within = summary["within_floor"]
    floors = {"b_repeats": b_repeats["kl"]["mean"], "b_self": b_self["kl"]["mean"]}
    assert within["floor"] == max(floors, key=lambda name: floors[name])
    assert within["kl_mean"] == max(floors.values())
    assert within["share"] == pytest.approx(within["kl_mean"] / summary["overall"]["kl"]["mean"])
    assert within["sentence"].startswith("<1% of the A-vs-B KL mean")
    assert within["sentence"][0].upper() + within["sentence"][1:] in result.output

    text_only = tmp_path / "b-text"
    collect([write_prompts(PROMPTS)], text_only, CollectSettings(
        endpoint=b.url, label="b", top_logprobs=0, context_tokens=0))
    without = score_run(a_run, tmp_path / "g", ForcedSettings(endpoint=b.url, b_run=text_only))
    assert without.b_self is not None and "no completions with logprobs" in str(
        without.b_self.note)
    assert without.within_floor is not None and without.within_floor.floor == "a_repeats"


START = "Answer in one short plain sentence, please, and nothing more:"
SHARED_START = f"""
prompts:
  - {{id: capital, prompt: "{START} the capital of Australia"}}
  - {{id: colour, prompt: "{START} name a colour"}}
  - {{id: larger, prompt: "{START} is 9.9 larger"}}
"""


def test_a_cache_that_cannot_be_turned_off_is_scored_in_two_orders(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """vLLM has no per-request switch: A's tokens are scored again in the reverse order,
    the two scorings' difference is a floor of its own, and an A-vs-B KL within it is not
    called drift (the gate's forced_kl rule passes, saying so); a real change is above."""
    a_server = serve(ScriptedModel(A_ANSWERS), "vllm")
    collect([write_prompts(SHARED_START)], tmp_path / "a", CollectSettings(
        endpoint=a_server.url, label="a", context_tokens=0))
    b_server = serve(ScriptedModel(A_ANSWERS), "vllm", faults=Faults(scoring_cache_shift=True))
    same = score_run(tmp_path / "a", tmp_path / "same", ForcedSettings(endpoint=b_server.url))
    assert len([b for b in b_server.requests if "prompt_logprobs" in b]) == 2 * 3
    assert "cannot turn it off per request" in same.cache
    assert same.order_floor is not None and same.order_floor.positions == \
        same.overall.positions
    assert same.overall.kl is not None and same.order_floor.kl is not None
    assert 0 < same.overall.kl.mean <= same.order_floor.kl.mean
    assert same.within_order_floor is True

    flipped = score_run(tmp_path / "a", tmp_path / "flip", ForcedSettings(
        endpoint=serve(ScriptedModel(B_ANSWERS), "vllm",
                       faults=Faults(scoring_cache_shift=True)).url))
    assert flipped.within_order_floor is False

    compare = invoke("compare", tmp_path / "a", tmp_path / "a", "--out", tmp_path / "report",
                     "--forced", tmp_path / "same")
    assert compare.exit_code == 0, compare.output
    assert "Scoring-order floor (B scoring A's tokens again in the reverse order" in \
        compare.output and "lies within it: not called drift" in compare.output
    gate = invoke("gate", tmp_path / "report", "--max-forced-kl", "1e-30")
    assert gate.exit_code == 0, gate.output
    rule = json.loads((tmp_path / "report" / "gate.json").read_text())["rules"]
    forced_kl = next(r for r in rule if r["name"] == "forced_kl")
    assert forced_kl["passed"] and "not called drift" in forced_kl["description"]


def test_kl_by_position_names_where_a_long_answer_departs(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A 1,400-token answer that B scores like A for 1,100 tokens and otherwise after:
    forced.jsonl places each position after its prompt, the summary gives 0-1K and
    1K-4K, and the terminal, summary.json and the sheet say KL rises after 1K."""
    answer = " early" * 1100 + " late" * 300
    a = serve(ScriptedModel({"story": answer}))
    b = serve(ScriptedModel({"story": answer}, runner_ups={" late": [" later"]}))
    prompts = write_prompts("""
        prompts:
          - {id: story, prompt: "Tell the story", max_tokens: 2000}
          - {id: other, prompt: "Q: name a colour\\nA:"}
    """)
    out = tmp_path / "report"
    result = invoke("run", "--a", a.url, "--b", b.url, "--prompts", prompts, "--out", out,
                    "--repeats", "2", "--forced", "--context-tokens", "0")
    assert result.exit_code == 0, result.output
    story = lines(next(out.rglob("forced.jsonl")).parent)["story"]
    assert story["prompt_tokens"] == 3 and story["positions"] == 1400
    forced = json.loads((out / "summary.json").read_text())["forced"]
    spans = {span["label"]: span for span in forced["by_position"]}
    assert set(spans) == {"0-1K", "1K-4K"}
    assert spans["0-1K"]["positions"] == (1024 - 3) + 9  # the story's first 1,021, "other"'s 9
    assert spans["0-1K"]["kl"]["max"] == 0.0 and spans["1K-4K"]["kl"]["mean"] > 0.1
    assert "KL rises after 1K" in forced["by_position_sentence"]
    assert forced["by_position_sentence"] + "." in result.output
    sheet = (out / "index.html").read_text()
    assert 'id="forced-by-position"' in sheet and 'data-span="1K-4K"' in sheet
