"""Preflight checks against loopback servers that misbehave the way real ones do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import BinaryIO

import orjson
import pytest

from quantcheck import CollectSettings, collect, compare_runs, load_run
from quantcheck.errors import ParameterRejected
from quantcheck.fetch.preflight import PreflightFailed, ProbeShape, check_endpoint
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.pipeline.event_loop import run_blocking
from quantcheck.store.folders.report_dir import read_pairs
from quantcheck.store.inputs.prompt_sets import RequestOptions
from quantcheck.triage.tokenizers import tokenizer_agreement

from .conftest import TWO_PROMPTS, Serve, WritePrompts, invoke
from .hostile import HostileServer, Request, chat_body, good, http


def checks(endpoint: str, **kwargs: object) -> dict[str, tuple[str, str, str | None]]:
    report = run_blocking(check_endpoint(endpoint, **kwargs))  # type: ignore[arg-type]
    return {c.name: (c.status, c.message, c.fix) for c in report.checks}


def test_a_well_behaved_server_passes_everything(serve: Serve) -> None:
    found = checks(serve().url)
    assert {name: status for name, (status, _, _) in found.items()} == {
        "model": "pass", "logprobs": "pass", "greedy": "pass", "context": "pass",
        "reasoning": "pass", "template": "pass", "tokenizer": "pass"}
    assert "6,000-token" in found["context"][1]


@pytest.mark.parametrize(("mode", "fix"), [
    ("sampling", '{"top_k": 1}'), ("penalty", "--repeat-penalty 1.0")])
def test_not_greedy_is_a_hard_failure_that_names_the_fix(serve: Serve, mode: str,
                                                          fix: str) -> None:
    status, message, advice = checks(serve(faults=Faults(not_greedy=mode)).url)["greedy"]
    assert status == "fail" and "chose ' alt1'" in message
    assert advice is not None and fix in advice


def test_silent_truncation_is_caught(serve: Serve) -> None:
    status, message, _ = checks(serve(faults=Faults(context_limit=2000)).url)["context"]
    assert status == "fail" and "truncates" in message
    assert checks(serve(faults=Faults(context_limit=2000)).url, context_tokens=1500)[
        "context"][0] == "pass"


def test_tokens_the_server_adds_to_every_prompt_are_not_taken_for_truncation(
        serve: Serve) -> None:
    """A chat template or default system prompt adds a fixed number of tokens to every
    prompt (llama-server's ChatML fallback: 23 on Gemma 3); the long prompt's expected
    length is predicted from two short ones, so that overhead is not read as filler."""
    status, message, _ = checks(serve(faults=Faults(template_tokens=150)).url)["context"]
    assert status == "pass", message
    status, message, _ = checks(serve(faults=Faults(template_tokens=150,
                                                    context_limit=2000)).url)["context"]
    assert status == "fail" and "truncates" in message


def test_a_server_that_under_counts_cannot_make_the_probe_huge() -> None:
    """Token counts are the server's word: one that counts a single token more for 120
    more words must not make the long prompt 120 times longer than asked."""
    sent: list[int] = []

    def respond(request: Request, out: BinaryIO) -> None:
        text = json.dumps(request.body)
        sent.append(len(text))
        body = chat_body()
        body["usage"]["prompt_tokens"] = 100 + (len(text) > 1200)
        out.write(http(200, json.dumps(body).encode()))

    with HostileServer(respond) as server:
        checks(server.url, context_tokens=6000)
    assert max(sent) < 200_000  # 6,000 words at most, about 43 KB


def test_a_prompt_that_never_reaches_the_model_is_named_so(serve: Serve) -> None:
    """A server that counts a handful of tokens for any prompt (a template that drops the
    message does this) is not told to raise its context: the prompt does not reach it."""
    status, message, fix = checks(serve(faults=Faults(context_limit=5)).url)["context"]
    assert status == "fail" and "prompts do not reach the model whole" in message
    assert fix is not None and "chat template" in fix


def test_a_lost_code_with_the_whole_prompt_counted_only_warns(serve: Serve) -> None:
    status, message, _ = checks(serve(faults=Faults(sliding_window=2000)).url)["context"]
    assert status == "warn" and "counted the whole" in message
    status, message, _ = checks(serve(faults=Faults(context_limit=2000, no_usage=True)).url)[
        "context"]
    assert status == "fail" and "no prompt token count" in message


def test_context_probe_fits_the_advertised_context(serve: Serve) -> None:
    server = serve(server_info={"max_model_len": 3000}, faults=Faults(context_limit=3000))
    status, message, _ = checks(server.url)["context"]
    assert status == "pass" and "2,744-token" in message and "context is 3,000" in message


def test_a_capped_top_k_warns_with_the_cap(serve: Serve) -> None:
    status, message, fix = checks(serve(dialect="sglang").url)["logprobs"]
    assert status == "warn" and "as few as 5" in message and fix is not None \
        and fix.startswith("--top-logprobs 5, or a server that gives 20.")
    status, message, fix = checks(serve(faults=Faults(max_top_logprobs=8)).url)["logprobs"]
    assert status == "fail" and "max allowed: 8" in message and fix is not None \
        and fix.startswith("--top-logprobs 8")
    assert "collect it again with the new value" in fix


def test_the_top_logprobs_fix_fits_a_stored_reference(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """Against a reference collected earlier with 20, the fix says the reference must be
    collected again with the candidate's value; followed, the run is accepted."""
    prompts = write_prompts(TWO_PROMPTS)
    reference, capped = serve().url, serve(dialect="sglang").url  # SGLang gives 5 at most
    common = ["--prompts", prompts, "--context-tokens", 0]
    assert invoke("collect", "--endpoint", reference, *common,
                  "--out", tmp_path / "ref20").exit_code == 0
    warned = invoke("run", "--a-run", tmp_path / "ref20", "--b", capped, *common,
                    "--out", tmp_path / "warned")
    assert "fix: --top-logprobs 5, or a server that gives 20. Both sides need the same " \
        "--top-logprobs: against a reference collected earlier (--a-run), collect it " \
        "again with the new value too." in " ".join(warned.output.split()), warned.output
    assert invoke("collect", "--endpoint", reference, *common, "--top-logprobs", 5,
                  "--out", tmp_path / "ref5").exit_code == 0
    followed = invoke("run", "--a-run", tmp_path / "ref5", "--b", capped, *common,
                      "--top-logprobs", 5, "--out", tmp_path / "followed")
    assert followed.exit_code == 0, followed.output
    assert "WARN logprobs" not in followed.output


def test_a_context_probe_turned_off_says_so(serve: Serve) -> None:
    assert checks(serve().url, context_tokens=0)["context"] == (
        "skip", "not checked: turned off (--context-tokens 0)", None)


@pytest.mark.parametrize(("mode", "words"), [("leak", "appears in the content"),
                                             ("eat", "gave no answer")])
def test_reasoning_problems_warn_with_the_template_switch(serve: Serve, mode: str,
                                                          words: str) -> None:
    status, message, fix = checks(serve(faults=Faults(reasoning=mode)).url)["reasoning"]
    assert status == "warn" and words in message
    assert fix is not None and "enable_thinking" in fix


def test_tokenizer_fingerprints_agree_or_not(serve: Serve) -> None:
    for dialect in ("vllm", "sglang", "llama.cpp", "llama-cpp-python"):
        same = [run_blocking(check_endpoint(serve(dialect=dialect).url, context_tokens=0))
                for _ in range(2)]
        # each runtime's own tokenize (llama-server answers vLLM's shape with no ids)
        assert same[0].tokenizer.method == f"{dialect} tokenize"
        assert all(same[0].tokenizer.ids.values())
        assert tokenizer_agreement(same[0].tokenizer, same[1].tokenizer).status == "pass"
        other = run_blocking(check_endpoint(serve(dialect=dialect, faults=Faults(
            other_tokenizer=True)).url, context_tokens=0))
        assert tokenizer_agreement(same[0].tokenizer, other.tokenizer).status == "warn"
    tgi = [run_blocking(check_endpoint(serve(dialect="tgi").url, context_tokens=0))
           for _ in range(2)]  # no tokenize endpoint: prompt token counts
    assert tgi[0].tokenizer.method == "prompt token counts"
    assert tokenizer_agreement(tgi[0].tokenizer, tgi[1].tokenizer).status == "pass"


def test_collect_records_preflight_and_stops_on_a_hard_failure(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts(TWO_PROMPTS)
    good = serve(ScriptedModel())
    collect([prompts], tmp_path / "ok", CollectSettings(endpoint=good.url, label="a"))
    manifest = orjson.loads((tmp_path / "ok" / "manifest.json").read_bytes())
    assert manifest["preflight"]["status"] == "pass"
    assert {c["name"] for c in manifest["preflight"]["checks"]} >= {"greedy", "context"}

    bad = serve(ScriptedModel(), faults=Faults(not_greedy="penalty"))
    with pytest.raises(PreflightFailed, match="greedy: the server does not decode greedily"):
        collect([prompts], tmp_path / "bad", CollectSettings(endpoint=bad.url, label="b"))
    assert not (tmp_path / "bad" / "completions.jsonl").exists()
    probes = len(bad.requests)
    result = collect([prompts], tmp_path / "bad",
                     CollectSettings(endpoint=bad.url, label="b", preflight=False))
    assert result.collected == 2 and len(bad.requests) == probes + 2


def test_cli_exit_codes_and_json(serve: Serve, tmp_path: Path) -> None:
    good, bad = serve(), serve(faults=Faults(context_limit=1000))
    ok = invoke("preflight", good.url, "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["endpoints"][0]["status"] == "pass"
    failed = invoke("preflight", good.url, bad.url)
    assert failed.exit_code == 2
    assert "FAIL context" in failed.output and "A and B: tokenizer" in failed.output
    unreachable = invoke("preflight", "http://127.0.0.1:9")
    assert unreachable.exit_code == 2 and "cannot reach" in unreachable.output


def test_different_tokenizers_withhold_token_metrics(serve: Serve, write_prompts: WritePrompts,
                                                     tmp_path: Path) -> None:
    prompts = write_prompts(TWO_PROMPTS)
    for side, faults in (("a", Faults()), ("b", Faults(other_tokenizer=True))):
        server = serve(ScriptedModel(responses={"Australia": " Canberra."}), faults=faults)
        collect([prompts], tmp_path / side, CollectSettings(endpoint=server.url, label=side,
                                                            context_tokens=0))
    summary = compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    pairs = read_pairs(tmp_path / "report")
    assert "tokenize differently" in str(summary.preflight.token_metrics_withheld)
    assert pairs["first_divergence"].isna().all() and pairs["kl_topk_mean"].isna().all()
    sheet = (tmp_path / "report" / "index.html").read_text()
    assert 'id="tokens-withheld"' in sheet and "Token-level metrics withheld" in sheet


def test_greedy_is_checked_over_enough_positions(serve: Serve) -> None:
    """A model that stops after a token or two is probed again with other texts; one
    that never says more is a warning, not a pass on a single position."""
    terse = ScriptedModel({"echo twelve": " Echo.", "printing press": " Yes.",
                           "days of the week": " No."})
    status, message, _ = checks(serve(terse).url, context_tokens=0)["greedy"]
    assert status == "warn" and "only 3 generated positions to check in 3 probes" in message
    talkative = ScriptedModel({"echo twelve": " Echo.", "printing press": " it spread " * 8})
    status, message, _ = checks(serve(talkative).url, context_tokens=0)["greedy"]
    assert status == "pass" and message.endswith("positions of 2 probes")


def test_probes_leave_out_the_runs_stop_and_nothing_generated_is_not_no_logprobs(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A prompt set that stops at a newline, on a model whose answers begin with one:
    the probes ask their own questions without the stop; a model that generates nothing
    at all is said to, not to lack logprobs."""
    prompts = write_prompts("""
        defaults: {max_tokens: 8, stop: ["\\n"]}
        prompts:
          - {id: q, prompt: "Q: two and two?\\nA:"}
    """)
    newline_first = serve(ScriptedModel({"": "\nThe answer is four, as you see."}))
    collect([prompts], tmp_path / "a", CollectSettings(
        endpoint=newline_first.url, label="a", context_tokens=0,
        request=RequestOptions(api="completions")))
    found = {c.name: c for c in load_run(tmp_path / "a").manifest.preflight.checks}
    assert (found["logprobs"].status, found["greedy"].status) == ("pass", "pass")
    run_own = [r for r in newline_first.requests if "two and two" in str(r.get("prompt"))]
    probes = [r for r in newline_first.requests if r not in run_own]
    assert run_own and all(r["stop"] == ["\n"] for r in run_own)
    assert probes and all("stop" not in r for r in probes)

    silent = serve(ScriptedModel({"": ""}))
    found = {c.name: c for c in run_blocking(check_endpoint(silent.url)).checks}
    assert found["logprobs"].status == "warn"
    assert "generated nothing" in found["logprobs"].message
    assert "no logprobs" not in found["logprobs"].message


CHAT = """
prompts:
  - {id: q, messages: [{role: user, content: "Q: capital of France?"}], max_tokens: 8}
"""


def test_a_template_the_model_does_not_know_is_named_with_its_fix(serve: Serve) -> None:
    """llama.cpp's way (/apply-template) and vLLM's (/tokenize with messages, then
    /detokenize): ChatML markers the lab model splits into pieces warn; its own pass."""
    for dialect in ("llama.cpp", "vllm"):
        foreign = checks(serve(dialect=dialect, faults=Faults(chat_template="chatml")).url)
        status, message, fix = foreign["template"]
        assert status == "warn" and "<|im_start|> (6 tokens)" in message, message
        assert fix and "--chat-template" in fix
        own = checks(serve(dialect=dialect, faults=Faults(chat_template="gemma")).url)
        assert own["template"][0] == "pass" and "<start_of_turn>user" in own["template"][1]
    completions = checks(serve().url, shape=ProbeShape(api="completions"))
    assert completions["template"][0] == "skip"


@pytest.mark.parametrize("detokenized", [b"[1, 2]", b'"<bos>text"', b"null", b"7"],
                         ids=["a-list", "a-string", "null", "a-number"])
def test_a_detokenize_answer_that_is_no_object_renders_by_ids(detokenized: bytes) -> None:
    """vLLM's way when /detokenize answers JSON that is not an object: the rendering is
    known by its token ids alone, never a crash of the preflight."""
    def respond(request: Request, out: BinaryIO) -> None:
        if request.path == "/tokenize":
            out.write(http(200, b'{"count": 3, "max_model_len": 4096, "tokens": [2, 9, 7]}'))
        elif request.path == "/detokenize":
            out.write(http(200, detokenized))
        else:
            good(request, out)

    with HostileServer(respond) as server:
        status, message, _ = checks(server.url, context_tokens=0)["template"]
    assert status == "pass" and "of 3 token ids" in message, message


def test_two_templates_are_a_confound_in_the_preflight_and_the_cell(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    a = serve(faults=Faults(chat_template="gemma"))
    b = serve(faults=Faults(chat_template="chatml"))
    result = invoke("preflight", a.url, b.url, "--context-tokens", "0")
    assert "A and B: template warn: A and B render the same conversation differently" in \
        result.output
    prompts = write_prompts(CHAT)
    for side, server, quantization in (("a", a, "bf16"), ("b", b, "fp8")):
        collect([prompts], tmp_path / side, CollectSettings(
            endpoint=server.url, label=side, context_tokens=0,
            cell={"quantization": quantization}))
    summary = compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    assert summary.cells.differs == ["quantization", "chat_template"]
    assert summary.cells.warning and "2 axes (quantization, chat_template)" in \
        summary.cells.warning


def test_preflight_results_go_to_stdout(serve: Serve) -> None:
    result = subprocess.run([sys.executable, "-m", "quantcheck", "preflight",
                             serve(ScriptedModel()).url, "--context-tokens", "0"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "preflight pass" in result.stdout and "greedy" in result.stdout
    assert result.stderr == ""


def test_a_top_logprobs_limit_an_engine_cannot_pass_fails_with_its_fix(serve: Serve) -> None:
    """Ollama answers at most 20 alternatives however it is started: preflight says so
    before a probe is refused, and names the flag that fits."""
    status, message, fix = checks(serve(dialect="ollama").url, top_k=25)["logprobs"]
    assert (status, fix) == ("fail", "--top-logprobs 20")
    assert "Ollama answers at most 20" in message
    assert checks(serve(dialect="ollama").url, top_k=20)["logprobs"][0] == "pass"


def test_an_engine_that_hides_the_generated_token_cannot_check_greedy(serve: Serve) -> None:
    """mlx_lm.server copies one of its unsorted alternatives into each logprob entry: the
    greedy check would misread that, so it says it cannot check; above its limit of 11
    the server drops the connection, so preflight fails first with the fix."""
    found = checks(serve(dialect="mlx").url, top_k=5)
    assert found["logprobs"][0] == "pass"
    status, message, _ = found["greedy"]
    assert status == "skip" and "greedy decoding cannot be checked" in message
    status, message, fix = checks(serve(dialect="mlx").url, top_k=12)["logprobs"]
    assert (status, fix) == ("fail", "--top-logprobs 11")
    assert "answers at most 11" in message


def test_an_operator_set_top_logprobs_limit_is_read_from_the_refusal(serve: Serve) -> None:
    """TGI answers at most --max-top-n-tokens (5 by default) alternatives and says so
    with a 422 naming its own field, `top_n_tokens`: the fix still names the flag."""
    status, message, fix = checks(serve(dialect="tgi").url, top_k=20)["logprobs"]
    assert status == "fail" and "top_n_tokens" in message
    assert fix is not None and fix.startswith("--top-logprobs 5")


def test_greedy_fields_an_engine_misreads_are_left_out(serve: Serve) -> None:
    """TGI refuses `top_p: 1.0` (it wants 0 < top_p < 1) and reads `presence_penalty: 0`
    as a repetition penalty of 2: neither is sent there, so its defaults (greedy) hold."""
    server = serve(dialect="tgi")
    assert checks(server.url, top_k=5)["greedy"][0] == "pass"
    assert server.requests and not any("top_p" in body or "presence_penalty" in body
                                       for body in server.requests)


def test_an_engine_that_refuses_unknown_fields_is_not_sent_them(serve: Serve) -> None:
    """trtllm-serve refuses any field its request models do not name (HTTP 400), among
    them llama.cpp's `repeat_penalty`: it is left out there, the other greedy fields kept."""
    server = serve(dialect="tensorrt-llm")
    found = checks(server.url)
    assert found["greedy"][0] == "pass" and found["tokenizer"][0] == "pass"
    assert "tensorrt-llm tokenize" in found["tokenizer"][1]
    assert server.requests and not any("repeat_penalty" in body for body in server.requests)
    assert all(body.get("repetition_penalty") == 1.0 for body in server.requests
               if "max_tokens" in body)


def test_tensorrt_llm_limit_and_backend_refusals_name_the_fix(serve: Serve) -> None:
    """Above its limit of 100 preflight fails without asking; a server on its TensorRT
    backend started without gather_generation_logits refuses top logprobs, and the fix
    says how it must be started instead of asking for fewer."""
    status, message, fix = checks(serve(dialect="tensorrt-llm").url, top_k=120)["logprobs"]
    assert (status, fix) == ("fail", "--top-logprobs 100")
    assert "gather_generation_logits" in message
    refused = serve(dialect="tensorrt-llm", faults=Faults(
        status=dict.fromkeys(range(50), 400),
        status_message="`gather_generation_logits` must be `True` to use `top_logprobs`"))
    with pytest.raises(ParameterRejected) as refusal:
        checks(refused.url)
    assert "gather_generation_logits" in refusal.value.reason
    assert refusal.value.fix is not None and "pytorch backend" in refusal.value.fix


@pytest.mark.parametrize("entry", [
    '{id: one, messages: [{role: user, content: "Say hi"}], max_tokens: 4}',
    '{id: one, prompt: "Say hi", max_tokens: 4}'], ids=["chat", "completions"])
def test_tensorrt_llm_refusing_more_than_its_limit_names_it(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, entry: str) -> None:
    """Unchecked by preflight, a request above 100 alternatives is refused as its
    validation error says it (`... must be less than or equal to 100`): the fix is read
    from it."""
    prompts = write_prompts(f"prompts:\n  - {entry}\n")
    server = serve(ScriptedModel(), dialect="tensorrt-llm")
    with pytest.raises(ParameterRejected) as refusal:
        collect([prompts], tmp_path / "run", CollectSettings(
            endpoint=server.url, label="a", preflight=False, top_logprobs=120))
    assert "less than or equal to 100" in refusal.value.reason
    assert refusal.value.fix is not None and refusal.value.fix.startswith("--top-logprobs 100")
