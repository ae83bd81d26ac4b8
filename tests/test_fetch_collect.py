"""collect against real loopback HTTP servers (whose wire format the real openai SDK reads:
test_wire_formats.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from quantcheck import CollectSettings, collect, load_run
from quantcheck.errors import ParameterRejected, RunMismatch
from quantcheck.lab.scripted import DIALECTS, Faults, ScriptedModel, ScriptedServer
from quantcheck.store.engines import ENGINES
from quantcheck.store.inputs.prompt_sets import GREEDY_FIELDS
from quantcheck.store.runtimes import choose_model

from .conftest import A_ANSWERS, PROMPTS, TWO_PROMPTS, Serve, WritePrompts, interruptible, invoke

MODEL = ScriptedModel(responses={"Australia": " Canberra is the capital of Australia.",
                                 "larger": " 9.9 is larger than 9.11 because"})


def wait_for_records(run_dir: Path, count: int) -> None:
    """Until a running collection has written `count` records (120 s at most: a loaded
    machine starts Python slowly)."""
    deadline = time.monotonic() + 120
    path = run_dir / "completions.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path}: fewer than {count} records after 120 s")


def settled_request_count(server: ScriptedServer) -> int:
    """Requests the server has received, once those a killed client sent have landed."""
    count = -1
    while count != len(server.requests) or server.in_flight:
        count = len(server.requests)
        time.sleep(0.3)
    return count


def records(run_dir: Path) -> list[dict[str, object]]:
    lines = (run_dir / "completions.jsonl").read_bytes().splitlines()
    return [orjson.loads(line) for line in lines]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_collects_every_dialect(serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
                                dialect: str, stream: bool) -> None:
    server = serve(MODEL, dialect)
    settings = CollectSettings(endpoint=server.url + "/v1", label="a", repeats=2, stream=stream,
                               top_logprobs=3)
    result = collect([write_prompts(TWO_PROMPTS)], tmp_path / "run", settings)
    assert (result.collected, result.failed) == (4, 0)

    run = load_run(tmp_path / "run")
    by_prompt = {(r.prompt_id, r.repeat): r for r in run.completions()}
    assert sorted(by_prompt) == [("capital-au", 0), ("capital-au", 1), ("larger", 0),
                                 ("larger", 1)]
    capital = by_prompt[("capital-au", 0)]
    assert capital.text == " Canberra is the capital of Australia."
    assert capital.finish_reason == "stop"
    profile = ENGINES[dialect]
    if profile.sends_logprobs("chat", stream):  # not in MLX's streams
        assert capital.tokens is not None and len(capital.tokens) == 6
        assert capital.tokens.text == [top[0] for top in capital.tokens.top_text]
        assert all(len(top) == 3 for top in capital.tokens.top_logprob)
    else:
        assert capital.tokens is None
    larger = by_prompt[("larger", 0)]
    assert larger.text == " 9.9 is larger than" and larger.finish_reason == "length"

    manifest = run.manifest
    assert manifest.server.runtime == dialect  # recognised by what the lab serves
    assert manifest.model == "scripted-model" and manifest.status == "complete"
    assert run.prompts["capital-au"].expect is not None
    frame = run.frame()
    counted = {n for api, n in (("chat", 6), ("completions", 4))
               if profile.sends_logprobs(api, stream)}  # not Ollama's completions
    assert len(frame) == 4 and set(frame["n_tokens"].dropna()) == counted


def test_sends_an_explicitly_greedy_request(serve: Serve, write_prompts: WritePrompts,
                                             tmp_path: Path) -> None:
    server = serve(MODEL)
    collect([write_prompts(TWO_PROMPTS)], tmp_path / "run",
            CollectSettings(endpoint=server.url, label="a", concurrency=1, top_logprobs=5,
                            preflight=False))
    chat, completion = server.requests
    assert chat == {
        "model": "scripted-model",
        "messages": [{"role": "user", "content": "What is the capital of Australia?"}],
        "max_tokens": 256, **GREEDY_FIELDS,
        "logprobs": True, "top_logprobs": 5,
        "stream": True, "stream_options": {"include_usage": True},
    }
    assert completion["prompt"] == "Q: Which is larger, 9.11 or 9.9?\nA:"
    assert completion["logprobs"] == 5 and "top_logprobs" not in completion
    assert completion["max_tokens"] == 4


def test_retries_5xx_429_and_dropped_connections(serve: Serve, write_prompts: WritePrompts,
                                                  tmp_path: Path) -> None:
    faults = Faults(status={0: 503, 1: 429, 3: 500}, retry_after_s=0.0, drop={5, 7})
    server = serve(MODEL, faults=faults)
    result = collect([write_prompts(TWO_PROMPTS)], tmp_path / "run",
                     CollectSettings(endpoint=server.url, label="a", repeats=2, concurrency=1,
                                     preflight=False))
    assert (result.collected, result.failed) == (4, 0)
    assert len(server.requests) == 4 + 5  # prompt 1 needed three attempts
    assert all(r["error"] is None for r in records(tmp_path / "run"))


def test_dropped_connection_without_stream_is_retried(serve: Serve, write_prompts: WritePrompts,
                                                       tmp_path: Path) -> None:
    server = serve(MODEL, faults=Faults(drop={0}))
    result = collect([write_prompts(TWO_PROMPTS)], tmp_path / "run",
                     CollectSettings(endpoint=server.url, label="a", stream=False, concurrency=1,
                                     preflight=False))
    assert (result.collected, result.failed) == (2, 0)
    assert len(server.requests) == 3


def test_exhausted_retries_are_recorded_then_retried_on_resume(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts(TWO_PROMPTS)
    server = serve(MODEL, faults=Faults(status={0: 500, 1: 500}))
    settings = CollectSettings(endpoint=server.url, label="a", concurrency=1, retries=1,
                               preflight=False)
    result = collect([prompts], tmp_path / "run", settings)
    assert (result.collected, result.failed) == (1, 1)
    failed = [r for r in records(tmp_path / "run") if r["error"]]
    assert len(failed) == 1 and "HTTP 500" in str(failed[0]["error"])
    assert orjson.loads((tmp_path / "run" / "manifest.json").read_bytes())["status"] == \
        "incomplete"

    result = collect([prompts], tmp_path / "run", settings)
    assert (result.skipped, result.collected, result.failed) == (1, 1, 0)
    lines = records(tmp_path / "run")
    assert len(lines) == 2 and all(r["error"] is None for r in lines)


def test_request_timeout_is_retried_then_reported(serve: Serve, write_prompts: WritePrompts,
                                                  tmp_path: Path) -> None:
    server = serve(MODEL, faults=Faults(latency_s=1.0))
    settings = CollectSettings(endpoint=server.url, label="a", timeout=0.2, retries=1,
                               concurrency=2, preflight=False)
    result = collect([write_prompts(TWO_PROMPTS)], tmp_path / "run", settings)
    assert result.failed == 2
    assert all("no complete answer within --timeout 0.2 s" in str(r["error"])
               for r in records(tmp_path / "run"))


def test_top_logprobs_limit_stops_the_run_and_names_the_fix(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve(MODEL, faults=Faults(max_top_logprobs=5))
    with pytest.raises(ParameterRejected) as caught:
        collect([write_prompts(TWO_PROMPTS)], tmp_path / "run",
                CollectSettings(endpoint=server.url, label="a", repeats=5, concurrency=1,
                                preflight=False))
    message = str(caught.value)
    assert "Requested sample logprobs of 20, which is greater than max allowed: 5" in message
    assert "--top-logprobs 5" in message
    assert len(server.requests) == 1  # stopped at once, not after 10 failures


def test_rejected_parameter_names_the_extra_body_fix(serve: Serve, write_prompts: WritePrompts,
                                                     tmp_path: Path) -> None:
    prompts = write_prompts(TWO_PROMPTS)
    server = serve(MODEL, faults=Faults(reject_fields={"repeat_penalty"}))
    out = tmp_path / "run"
    args = ["collect", "--endpoint", server.url, "--prompts", str(prompts), "--out", str(out)]
    result = invoke(*args)
    assert result.exit_code == 2
    assert "Unrecognized request argument supplied: repeat_penalty" in result.output
    assert """--extra-body '{"repeat_penalty": null}'""" in result.output
    assert "Traceback" not in result.output

    result = invoke(*args, "--force", "--extra-body", '{"repeat_penalty": null}')
    assert result.exit_code == 0, result.output
    assert len(records(out)) == 2


FIVE_PROMPTS = "prompts:\n" + "".join(
    f'  - {{id: p{n}, messages: [{{role: user, content: "Question {n}?"}}]}}\n'
    for n in range(5))
OVER_LONG = {  # each runtime's 400 for a prompt (with max_tokens) beyond its context
    "vllm": "This model's maximum context length is 4096 tokens. However, you requested "
            "4352 tokens (4096 in the messages, 256 in the completion). Please reduce the "
            "length of the messages or completion.",
    "vllm-max-tokens": "'max_tokens' or 'max_completion_tokens' is too large: 256. This "
                       "model's maximum context length is 4096 tokens and your request has "
                       "4000 input tokens (256 > 4096 - 4000).",
    "sglang": "The input (5000 tokens) is longer than the model's context length (4096 "
              "tokens).",
    "llama.cpp": "the request exceeds the available context size, try increasing it",
    "llama-cpp-python": "Requested tokens (5000) exceed context window of 4096",
}


@pytest.mark.parametrize("runtime", list(OVER_LONG), ids=list(OVER_LONG))
def test_a_prompt_beyond_the_context_is_a_failed_record_and_the_run_goes_on(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, runtime: str) -> None:
    """Even as the very first answer: one over-long prompt must not keep a data set from
    ever finishing."""
    server = serve(MODEL, faults=Faults(status={0: 400}, status_message=OVER_LONG[runtime]))
    result = collect([write_prompts(FIVE_PROMPTS)], tmp_path / "run", CollectSettings(
        endpoint=server.url, label="a", concurrency=1, preflight=False))
    assert (result.collected, result.failed) == (4, 1)
    assert len(server.requests) == 5  # not retried: asking again gets the same
    (failed,) = [r for r in records(tmp_path / "run") if r["error"]]
    assert failed["prompt_id"] == "p0" and OVER_LONG[runtime] in str(failed["error"])
    assert load_run(tmp_path / "run").manifest.status == "incomplete"


def test_a_rejection_once_others_were_answered_is_that_prompts_failed_record(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A server that answers the run's requests and refuses one prompt's (a field of its
    own): that prompt fails with the server's reason; the rest are collected."""
    server = serve(MODEL, faults=Faults(status={2: 400},
                                        status_message="invalid tool schema in this request"))
    result = collect([write_prompts(FIVE_PROMPTS)], tmp_path / "run", CollectSettings(
        endpoint=server.url, label="a", concurrency=1, preflight=False))
    assert (result.collected, result.failed) == (4, 1)
    (failed,) = [r for r in records(tmp_path / "run") if r["error"]]
    assert failed["prompt_id"] == "p2"
    assert "invalid tool schema in this request" in str(failed["error"])


def test_the_same_rejection_for_prompts_in_a_row_stops_the_run(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A parameter the server starts refusing for every prompt (here after the first
    answer): three prompts in a row refused alike stop the run with the fix."""
    server = serve(MODEL, faults=Faults(
        status={n: 400 for n in range(1, 5)},
        status_message="Unrecognized request argument supplied: repeat_penalty"))
    with pytest.raises(ParameterRejected) as caught:
        collect([write_prompts(FIVE_PROMPTS)], tmp_path / "run", CollectSettings(
            endpoint=server.url, label="a", concurrency=1, preflight=False))
    assert """--extra-body '{"repeat_penalty": null}'""" in str(caught.value)
    assert len(server.requests) == 4  # p0 answered, p1 and p2 recorded, p3 stops it
    assert [r["error"] is None for r in records(tmp_path / "run")] == [True, False, False]


def test_missing_logprobs_warn_once_and_text_is_kept(serve: Serve, write_prompts: WritePrompts,
                                                     tmp_path: Path) -> None:
    server = serve(MODEL, faults=Faults(no_logprobs=True))
    out = tmp_path / "run"
    result = invoke("collect", "--endpoint", server.url, "--prompts", write_prompts(TWO_PROMPTS),
                    "--out", out, "--repeats", "3")
    assert result.exit_code == 0, result.output
    assert result.output.count("returns no logprobs") == 1
    lines = records(out)
    assert len(lines) == 6 and all(r["tokens"] is None and r["text"] for r in lines)


def test_unreachable_endpoint_is_one_line_and_exit_2(write_prompts: WritePrompts,
                                                     tmp_path: Path) -> None:
    result = invoke("collect", "--endpoint", "http://127.0.0.1:9", "--prompts",
                    write_prompts(TWO_PROMPTS), "--out", tmp_path / "run")
    assert result.exit_code == 2
    assert result.output.startswith("error: cannot reach http://127.0.0.1:9")
    assert result.output.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_bad_prompt_file_is_reported_without_traceback(write_prompts: WritePrompts,
                                                       tmp_path: Path) -> None:
    bad = write_prompts("prompts:\n  - id: a\n    promt: x\n")
    result = invoke("collect", "--endpoint", "http://127.0.0.1:9", "--prompts", bad, "--out",
                    tmp_path / "run")
    assert result.exit_code == 2
    assert f"{bad}:3: prompt a: field 'promt': unknown field" in result.output
    assert "Traceback" not in result.output


def test_other_parameters_are_refused_unless_forced(serve: Serve, write_prompts: WritePrompts,
                                                    tmp_path: Path) -> None:
    prompts = write_prompts(TWO_PROMPTS)
    server = serve(MODEL)
    out = tmp_path / "run"
    collect([prompts], out, CollectSettings(endpoint=server.url, label="a"))
    changed = write_prompts(TWO_PROMPTS.replace("9.11", "9.12"))
    with pytest.raises(RunMismatch, match=r"prompts \(0 added, 0 removed, 1 asked otherwise: "
                       r"an edited prompt, or another --max-tokens or --extra-body\)"):
        collect([changed], out, CollectSettings(endpoint=server.url, label="a"))
    other_body = invoke("collect", "--endpoint", server.url, "--label", "a", "--prompts",
                        prompts, "--extra-body", '{"cache_prompt": false}', "--out", out)
    assert other_body.exit_code == 2
    assert "prompts (0 added, 0 removed, 2 asked otherwise: an edited prompt" in \
        other_body.output
    with pytest.raises(RunMismatch, match="top_logprobs"):
        collect([prompts], out, CollectSettings(endpoint=server.url, label="a", top_logprobs=4))

    collect([changed], out, CollectSettings(endpoint=server.url, label="a"), force=True)
    (aside,) = out.glob("superseded-*")
    assert len(records(aside)) == 2 and len(records(out)) == 2


def test_more_repeats_extend_a_run(serve: Serve, write_prompts: WritePrompts,
                                   tmp_path: Path) -> None:
    prompts = write_prompts(TWO_PROMPTS)
    server = serve(MODEL)
    collect([prompts], tmp_path / "run", CollectSettings(endpoint=server.url, label="a"))
    result = collect([prompts], tmp_path / "run",
                     CollectSettings(endpoint=server.url, label="a", repeats=3))
    assert (result.skipped, result.collected) == (2, 4)
    keys = [(r["prompt_id"], r["repeat"]) for r in records(tmp_path / "run")]
    assert len(keys) == len(set(keys)) == 6


def test_torn_last_line_is_dropped_and_collected_again(serve: Serve, write_prompts: WritePrompts,
                                                       tmp_path: Path) -> None:
    prompts = write_prompts(TWO_PROMPTS)
    server = serve(MODEL)
    out = tmp_path / "run"
    collect([prompts], out, CollectSettings(endpoint=server.url, label="a"))
    lines = (out / "completions.jsonl").read_bytes().splitlines(keepends=True)
    (out / "completions.jsonl").write_bytes(lines[0] + lines[1][:40])
    result = collect([prompts], out, CollectSettings(endpoint=server.url, label="a"))
    assert (result.skipped, result.collected) == (1, 1)
    assert len(records(out)) == 2


def test_resume_after_kill_never_duplicates(serve: Serve, write_prompts: WritePrompts,
                                            tmp_path: Path) -> None:
    many = "prompts:\n" + "".join(f"  - {{id: p{n}, prompt: 'question {n}'}}\n"
                                  for n in range(12))
    prompts = write_prompts(many)
    server = serve(MODEL, faults=Faults(token_delay_s=0.02))
    out = tmp_path / "run"
    command = [sys.executable, "-m", "quantcheck", "collect", "--endpoint", server.url,
               "--prompts", str(prompts), "--out", str(out), "--repeats", "2",
               "--concurrency", "2"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_records(out, 5)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    kept = len(records(out))
    assert 5 <= kept < 24
    sent_before = settled_request_count(server)

    finished = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    assert f"resuming, {kept} of 24" in finished.stderr
    keys = [(r["prompt_id"], r["repeat"]) for r in records(out)]
    assert len(keys) == len(set(keys)) == 24
    assert len(server.requests) - sent_before == 24 - kept


def test_choose_model() -> None:
    assert choose_model([{"id": "a"}], None, "x") == "a"
    assert choose_model([{"id": "a"}, {"id": "b"}], "b", "x") == "b"
    with pytest.raises(Exception, match=r"several models \(a, b\)"):
        choose_model([{"id": "a"}, {"id": "b"}], None, "x")


def test_api_key_comes_from_the_named_variable(serve: Serve, write_prompts: WritePrompts,
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    server = serve(MODEL)
    prompts = write_prompts(TWO_PROMPTS)
    monkeypatch.setenv("QC_TEST_KEY", "sk-secret")
    collect([prompts], tmp_path / "run", CollectSettings(endpoint=server.url, label="a",
                                                         api_key_env="QC_TEST_KEY"))
    assert set(server.authorizations) == {"Bearer sk-secret"}
    assert "sk-secret" not in (tmp_path / "run" / "manifest.json").read_text()

    result = invoke("collect", "--endpoint", server.url, "--prompts", prompts, "--out",
                    tmp_path / "other", "--api-key-env", "QC_UNSET_KEY")
    assert result.exit_code == 2
    assert "QC_UNSET_KEY: that environment variable is not set" in result.output


def test_ctrl_c_keeps_records_and_says_how_to_resume(serve: Serve, write_prompts: WritePrompts,
                                                     tmp_path: Path) -> None:
    many = "prompts:\n" + "".join(f"  - {{id: p{n}, prompt: 'question {n}'}}\n"
                                  for n in range(20))
    # slow enough that a loaded machine still interrupts it mid-run (about 16 s)
    server = serve(MODEL, faults=Faults(token_delay_s=0.2))
    out = tmp_path / "run"
    process = interruptible(
        [sys.executable, "-m", "quantcheck", "collect", "--endpoint", server.url, "--prompts",
         str(write_prompts(many)), "--out", str(out), "--concurrency", "2", "--no-preflight"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_records(out, 3)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr[-3000:]
    assert "interrupted. Records so far are kept" in stderr
    assert "Traceback" not in stderr
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert manifest["status"] == "interrupted"
    assert 3 <= len(records(out)) < 20


def test_a_validation_error_sent_as_http_500_stops_the_run(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    # llama-cpp-python reports a rejected field as HTTP 500 with a pydantic message
    message = ("1 validation error:\n  {'type': 'greater_than_equal', 'loc': ('body', "
               "'repeat_penalty'), 'msg': 'Input should be greater than or equal to 0'}")
    server = serve(MODEL, "llama-cpp-python",
                   faults=Faults(status={n: 500 for n in range(20)}, status_message=message))
    with pytest.raises(ParameterRejected) as caught:
        collect([write_prompts(TWO_PROMPTS)], tmp_path / "run",
                CollectSettings(endpoint=server.url, label="a", concurrency=1, preflight=False))
    assert """--extra-body '{"repeat_penalty": null}'""" in str(caught.value)
    assert len(server.requests) == 1  # not retried: retrying cannot help


def test_llama_cpp_python_with_concurrency_warns(serve: Serve, write_prompts: WritePrompts,
                                                 tmp_path: Path) -> None:
    server = serve(MODEL, "llama-cpp-python")
    args = ["collect", "--endpoint", server.url, "--prompts", str(write_prompts(TWO_PROMPTS)),
            "--no-preflight"]
    warned = invoke(*args, "--out", tmp_path / "a")
    assert warned.exit_code == 0 and "use --concurrency 1" in warned.output
    quiet = invoke(*args, "--out", tmp_path / "b", "--concurrency", "1")
    assert quiet.exit_code == 0 and "--concurrency 1" not in quiet.output


def test_failures_of_one_cause_are_one_line_and_a_count(serve: Serve,
                                                         write_prompts: WritePrompts,
                                                         tmp_path: Path) -> None:
    """A server failing every request alike prints its cause once, then the count, not
    a line per request."""
    server = serve(MODEL, faults=Faults(status={n: 500 for n in range(2, 40)},
                                        status_message="CUDA error: an illegal memory access"))
    prompts = write_prompts("prompts:\n" + "".join(
        f"  - {{id: p{n}, prompt: 'Q{n}'}}\n" for n in range(12)))
    result = invoke("collect", "--endpoint", server.url, "--prompts", prompts, "--out",
                    tmp_path / "run", "--retries", "0", "--concurrency", "1", "--no-preflight")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert sum("repeat 0 failed: HTTP 500" in line for line in lines) == 1
    assert any(line.startswith("run: 10 requests failed: HTTP 500") and "illegal memory" in
               line for line in lines)
    assert "" not in lines[:-1]  # no blank line after each failure in a log


def test_fewer_repeats_on_resume_are_refused(serve: Serve, write_prompts: WritePrompts,
                                             tmp_path: Path) -> None:
    prompts, server = write_prompts(PROMPTS), serve(ScriptedModel(A_ANSWERS))

    def run(repeats: int) -> None:
        collect([prompts], tmp_path / "run", CollectSettings(
            endpoint=server.url, label="a", preflight=False, repeats=repeats))

    run(3)
    with pytest.raises(RunMismatch, match="holds 3 repeats per prompt; --repeats 2"):
        run(2)
    run(4)  # more repeats extend the run
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["parameters"]["repeats"] == 4
    assert manifest["counts"] == {"requests": 48, "ok": 48, "failed": 0}


@pytest.mark.parametrize(
    ("dialect", "cache_off", "extra_body", "field", "how", "off"),
    [("llama.cpp", True, {}, False, "llama.cpp: cache_prompt false in every request", True),
     ("llama.cpp", True, {"cache_prompt": True}, True,
      "llama.cpp: cache_prompt true, as the requests themselves ask", False),
     ("llama.cpp", False, {}, None, "left as the server keeps it", False),
     ("vllm", True, {}, None, "left on: vLLM cannot turn its prefix cache off per request (it "
      "can only be emptied as a whole: POST /reset_prefix_cache)", False)],
    ids=["llama.cpp-off", "asked-on", "server-as-it-serves", "vllm-cannot"])
def test_requests_turn_the_prefix_cache_off_where_the_engine_can(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, dialect: str,
        cache_off: bool, extra_body: dict[str, object], field: bool | None, how: str,
        off: bool) -> None:
    """A repeat that finds its prompt cached is computed otherwise than the first request:
    every request goes with the cache off where the engine's profile can say so per
    request, unless the requests set it themselves; the manifest says which way."""
    from quantcheck.store.inputs.prompt_entries import RequestOptions

    server = serve(MODEL, dialect)
    collect([write_prompts(TWO_PROMPTS)], tmp_path / "run", CollectSettings(
        endpoint=server.url, label="a", repeats=2, preflight=False, cache_off=cache_off,
        request=RequestOptions(extra_body=extra_body)))
    assert len(server.requests) == 4
    assert [body.get("cache_prompt") for body in server.requests] == [field] * 4
    cache = json.loads((tmp_path / "run" / "manifest.json").read_text())["cache"]
    assert cache == {"off": off, "how": how}
