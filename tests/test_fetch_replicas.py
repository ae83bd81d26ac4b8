"""A side served by several URLs (fetch/replicas.py): the list read, the replicas
checked to be one configuration before any prompt is sent, requests spread over them
and each record naming its replica, a replica that stops answering handing its
requests to the others, and resumes that send nothing twice; against scripted
loopback servers."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck import CollectSettings, collect, load_run
from quantcheck.errors import EndpointError, QuantcheckError, RunMismatch
from quantcheck.fetch.collect import SilentReporter
from quantcheck.fetch.replicas import ReplicaMismatch, check_distinct, split_endpoints
from quantcheck.lab.scripted import Faults, ScriptedModel, ScriptedServer

from .conftest import Serve, WritePrompts, invoke

PROMPTS = "prompts:\n" + "".join(f"  - {{id: p{n}, prompt: 'question {n}'}}\n"
                                 for n in range(12))
CHAT = "prompts:\n" + "".join(f"  - {{id: c{n}, messages: [{{role: user, content: "
                              f"'question {n}'}}]}}\n" for n in range(4))


def urls(*servers: ScriptedServer) -> str:
    return ",".join(f"{server.url}/v1" for server in servers)


def prompt_requests(server: ScriptedServer) -> list[str]:
    """The prompts of the set a server was sent (the checks' probes left out)."""
    sent = []
    for body in server.requests:
        text = json.dumps(body.get("prompt", body.get("messages")))
        if "question" in text:
            sent.append(text)
    return sent


class Warnings(SilentReporter):
    def __init__(self) -> None:
        self.said: list[str] = []

    def warn(self, message: str) -> None:
        self.said.append(message)


# --- the list ---------------------------------------------------------------------------

HOSTS = st.sampled_from(["127.0.0.1", "gpu-1", "[::1]", "replica.internal"])
PASSWORDS = st.text(st.sampled_from("ab,%@:9"), max_size=6)
PATHS = st.sampled_from(["", "/v1", "/v1/", "/openai/a,b/v1"])


@st.composite
def endpoint_urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP"]))
    password = draw(PASSWORDS)
    userinfo = f"u:{password}@" if password and "@" not in password else ""
    port = draw(st.integers(1, 65535))
    return f"{scheme}://{userinfo}{draw(HOSTS)}:{port}{draw(PATHS)}"


@given(st.lists(endpoint_urls(), min_size=1, max_size=5), st.sampled_from([",", ", ", " ,"]))
def test_a_list_of_replicas_reads_back_each_url_whole(listed: list[str], joint: str) -> None:
    # a comma inside a URL (a password, a path) stays: the list splits only where the
    # next URL's scheme begins
    assert split_endpoints(joint.join(listed)) == listed


@pytest.mark.parametrize("given_text", [
    "http://a:1/v1,,http://b:1/v1", "http://a:1/v1,", "http://a:1/v1, ,http://b:1/v1"])
def test_an_empty_replica_in_the_list_is_refused(given_text: str) -> None:
    if given_text.endswith(","):  # one URL ending in a comma is a URL the client refuses
        assert split_endpoints(given_text) == [given_text]
        return
    with pytest.raises(EndpointError, match="empty one"):
        split_endpoints(given_text)


def test_a_replica_named_twice_is_refused_whatever_its_credentials() -> None:
    with pytest.raises(EndpointError, match="named twice"):
        check_distinct(["http://u:one@h:1/v1", "http://h:2/v1", "http://u:two@h:1/v1"])
    result = invoke("collect", "--endpoint", "http://h:1/v1,http://h:1/v1", "--suite",
                    "facts", "--out", "never")
    assert result.exit_code == 2 and "named twice" in result.output


# --- spread and recorded ----------------------------------------------------------------

def test_a_prompts_repeats_go_to_one_replica_and_each_record_names_it(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    first, second = serve(dialect="llama.cpp"), serve(dialect="llama.cpp")
    result = collect([write_prompts(PROMPTS)], tmp_path / "run", CollectSettings(
        endpoint=urls(first, second), label="b", repeats=3, concurrency=2))
    assert (result.collected, result.failed) == (36, 0)
    run = load_run(tmp_path / "run")
    by_prompt: dict[str, set[str | None]] = defaultdict(set)
    for record in run.completions():
        by_prompt[record.prompt_id].add(record.replica)
    assert all(len(replicas) == 1 for replicas in by_prompt.values())
    answered = Counter(next(iter(replicas)) for replicas in by_prompt.values())
    assert set(answered) == {f"{first.url}/v1", f"{second.url}/v1"}
    # what each server was sent is what the records say it answered, once each
    for server in (first, second):
        assert len(prompt_requests(server)) == 3 * answered[f"{server.url}/v1"]
    replication = run.manifest.replication
    assert replication is not None and replication.spread == "prompt"
    assert [r.endpoint for r in replication.replicas] == [f"{first.url}/v1",
                                                          f"{second.url}/v1"]
    assert replication.checked == ["model", "serving cell", "tokenizer", "backend"]
    assert replication.not_checked == ["chat template: completions API, no template"]
    assert run.manifest.endpoint == f"{first.url}/v1"


def test_a_side_of_one_url_writes_its_records_as_before(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve()
    collect([write_prompts(PROMPTS)], tmp_path / "run",
            CollectSettings(endpoint=server.url, label="a", preflight=False))
    line = json.loads((tmp_path / "run" / "completions.jsonl").read_text().splitlines()[0])
    assert "replica" not in line and "weight_version" not in line
    assert load_run(tmp_path / "run").manifest.replication is None


def replica_run(serve: Serve, write_prompts: WritePrompts, out: Path,
                b_second: ScriptedModel | None = None) -> Any:
    a = serve(dialect="llama.cpp")
    b1, b2 = serve(dialect="llama.cpp"), serve(b_second, dialect="llama.cpp")
    result = invoke("run", "--a", a.url, "--b", urls(b1, b2), "--prompts",
                    write_prompts(PROMPTS), "--repeats", "2", "--replica-spread", "repeat",
                    "--out", out)
    return result, json.loads((out / "summary.json").read_text())["backends"]["b"]


def test_the_repeat_spread_tells_whether_the_replicas_agree(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    result, b = replica_run(serve, write_prompts, tmp_path / "same")
    assert result.exit_code == 0, result.output
    assert (b["spread"], b["spread_prompts"], b["spread_differing"]) == ("repeat", 12, 0)
    assert [(r["requests"], r["backends"]) for r in b["replicas"]] == [(12, 1), (12, 1)]
    assert "B: 2 of 2 replicas answered (each prompt's repeats on different replicas); one " \
           "backend; the 12 prompts answered on several replicas agree" in result.output
    sheet = (tmp_path / "same" / "index.html").read_text()
    assert '<p class="replicas">Replicas: B: 2 of 2 replicas answered' in sheet

    # a replica that answers one prompt otherwise: named, and said not to agree
    other = ScriptedModel(responses={"question 7": " Something else entirely."})
    result, b = replica_run(serve, write_prompts, tmp_path / "other", other)
    assert (b["spread_prompts"], b["spread_differing"], b["spread_differing_ids"]) == \
        (12, 1, ["p7"])
    assert "1 of 12 prompts answered on several replicas differ between them (p7): the " \
           "replicas do not agree" in result.output


Q4 = {"model_ftype": "Q4_K - Medium"}
MISMATCHES = [
    # (what the second replica does otherwise, the first's server info, the second's
    # server arguments, the words refused)
    # llama.cpp names a model by its file, whose path may differ between machines: the
    # model's name read from it decides
    ("another model", {}, {"model": ScriptedModel(name="other-model")},
     "model 'other-model' (replica 1: 'scripted-model')"),
    ("another context size", {},
     {"server_info": {"default_generation_settings": {"n_ctx": 4096}}},
     "context_len 4096 (replica 1: 8192)"),
    ("another build", {}, {"server_info": {"build_info": "b7000-def5678"}},
     "runtime_version 'b7000-def5678'"),
    ("other slots", {}, {"server_info": {"total_slots": 4}}, "slots 4 (replica 1: 1"),
    ("another GGUF", Q4, {"server_info": {"model_ftype": "Q2_K - Medium"}},
     "quantization 'Q2_K' (replica 1: 'Q4_K_M')"),
    # the same GGUF at another path: llama-server lists it (and answers) by that path
    ("one GGUF by another name", Q4,
     {"model": ScriptedModel(name="/data/scripted-model.gguf"), "server_info": Q4},
     "the name it lists its model by, '/data/scripted-model.gguf' (replica 1: "
     "'scripted-model')"),
]


@pytest.mark.parametrize(("what", "first_info", "differs", "said"), MISMATCHES,
                         ids=[m[0] for m in MISMATCHES])
def test_a_replica_of_another_configuration_is_refused_before_any_request(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, what: str,
        first_info: dict[str, object], differs: dict[str, Any], said: str) -> None:
    first = serve(dialect="llama.cpp", server_info=first_info)
    second = serve(differs.pop("model", None), dialect="llama.cpp", **differs)
    with pytest.raises(ReplicaMismatch, match="replica 2") as refused:
        collect([write_prompts(PROMPTS)], tmp_path / "run",
                CollectSettings(endpoint=urls(first, second), label="b"))
    assert said in str(refused.value) and "No prompt was sent" in str(refused.value)
    assert first.requests == second.requests == []  # nothing generated at all
    assert not (tmp_path / "run" / "completions.jsonl").exists()


def test_a_replica_that_does_not_list_the_model_is_refused_before_any_request(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    first, second = serve(), serve(ScriptedModel(name="other-model"))  # vLLM's dialect
    with pytest.raises(ReplicaMismatch, match="replica 2 .* does not serve 'scripted-model', "
                       "which replica 1 serves \\(it lists: other-model\\)"):
        collect([write_prompts(PROMPTS)], tmp_path / "run",
                CollectSettings(endpoint=urls(first, second), label="b"))
    assert first.requests == second.requests == []


PROBED = [
    ("another tokenizer", {"faults": Faults(other_tokenizer=True)}, "its tokenizer"),
    ("another chat template", {"faults": Faults(chat_template="chatml")}, "chat template"),
    ("another build in its answers",
     {"faults": Faults(rollout=[{"system_fingerprint": "b6999-0000000"}])},
     "system_fingerprint its answers name, 'b6999-0000000' (replica 1: 'b6000-abc1234')"),
]


@pytest.mark.parametrize(("what", "differs", "said"), PROBED, ids=[m[0] for m in PROBED])
def test_a_replica_that_tokenizes_renders_or_answers_otherwise_is_refused_before_any_prompt(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, what: str,
        differs: dict[str, Any], said: str) -> None:
    first, second = serve(dialect="llama.cpp"), serve(dialect="llama.cpp", **differs)
    with pytest.raises(ReplicaMismatch, match="replica 2") as refused:
        collect([write_prompts(CHAT)], tmp_path / "run",
                CollectSettings(endpoint=urls(first, second), label="b"))
    assert said in str(refused.value)
    assert prompt_requests(first) == prompt_requests(second) == []  # only the probes


def test_a_replica_that_cannot_be_reached_is_named_before_any_request(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    first = serve()
    result = invoke("collect", "--endpoint", f"{first.url}/v1,http://127.0.0.1:9/v1",
                    "--prompts", write_prompts(PROMPTS), "--label", "b", "--out",
                    tmp_path / "run")
    assert result.exit_code == 2
    assert "b: replica 2 of 2 (http://127.0.0.1:9/v1): cannot reach" in result.output
    assert first.requests == []


def test_burst_and_loaded_repeats_are_not_spread_over_replicas(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    first, second = serve(), serve()
    with pytest.raises(QuantcheckError, match="shapes the load of one server"):
        collect([write_prompts(PROMPTS)], tmp_path / "run", CollectSettings(
            endpoint=urls(first, second), label="b", repeat_mode="burst", repeats=2))
    assert first.hits == second.hits == 0


def test_replica_options_where_they_mean_nothing_are_refused(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = serve()
    result = invoke("collect", "--endpoint", server.url, "--replica-spread", "repeat",
                    "--prompts", write_prompts(PROMPTS), "--out", tmp_path / "run")
    assert result.exit_code == 2 and "--replica-spread needs replicas" in result.output
    result = invoke("determinism", "--endpoint", f"{server.url},{server.url}/v1",
                    "--prompts", write_prompts(PROMPTS), "--out", tmp_path / "det")
    assert result.exit_code == 2 and "takes one server's URL" in result.output
    assert server.hits == 0


# --- a replica that stops answering, and resumes ----------------------------------------

def stop_after(server: ScriptedServer, requests: int) -> threading.Thread:
    """Stop `server` (connections refused from then on) once it has had `requests`
    generation requests."""
    def watch() -> None:
        deadline = time.monotonic() + 60
        while len(server.requests) < requests and time.monotonic() < deadline:
            time.sleep(0.005)
        server.stop()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_replica_that_stops_answering_hands_its_requests_to_the_others(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a replica is given up after 0.5 s of silence instead of 5: the same rule, sooner
    monkeypatch.setattr("quantcheck.fetch.collect.GIVE_UP_AFTER_SECONDS", 0.5)
    first = serve(faults=Faults(latency_s=0.02))
    second = serve(faults=Faults(latency_s=0.02))
    watcher = stop_after(second, 4)  # the probe, then three of the set's requests
    heard = Warnings()
    result = collect([write_prompts(PROMPTS)], tmp_path / "run", CollectSettings(
        endpoint=urls(first, second), label="b", repeats=2, concurrency=2, retries=1,
        preflight=False), heard)
    watcher.join()
    assert (result.collected, result.failed) == (24, 0)  # none lost, none failed
    run = load_run(tmp_path / "run")
    keys = [(r.prompt_id, r.repeat) for r in run.completions()]
    assert len(keys) == len(set(keys)) == 24
    answered = Counter(r.replica for r in run.completions())
    # those it had in hand when it stopped may have been answered; every other went on
    assert answered[f"{second.url}/v1"] <= 5 and answered[f"{first.url}/v1"] >= 19
    assert sum(answered.values()) == 24
    assert run.manifest.replication is not None
    dropped = {r.endpoint: r.dropped for r in run.manifest.replication.replicas}
    assert dropped[f"{first.url}/v1"] is None
    assert "stopped answering" in (dropped[f"{second.url}/v1"] or "")
    assert any(said.startswith(f"b: {second.url}/v1 stopped answering (") and
               said.endswith("; its requests go to the 1 other replica") for said in heard.said)
    result = invoke("compare", tmp_path / "run", tmp_path / "run", "--out", tmp_path / "report")
    assert f"mid-run, {second.url}/v1 stopped answering (" in result.output
    assert "); its requests went to the others" in result.output


def test_a_resumed_run_with_the_same_replicas_sends_nothing_twice(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts, out = write_prompts(PROMPTS), tmp_path / "run"
    # the second replica's first request is the check's probe; four of the set fail
    first, second = serve(), serve(faults=Faults(status={n: 500 for n in range(1, 5)}))
    settings = CollectSettings(endpoint=urls(first, second), label="b", repeats=2,
                               retries=0, preflight=False)
    result = collect([prompts], out, settings)
    assert (result.collected, result.failed) == (20, 4)
    sent = len(prompt_requests(first)) + len(prompt_requests(second))
    assert sent == 24

    result = collect([prompts], out, settings)
    assert (result.skipped, result.collected, result.failed) == (20, 4, 0)
    assert len(prompt_requests(first)) + len(prompt_requests(second)) == sent + 4
    keys = [(r.prompt_id, r.repeat) for r in load_run(out).completions()]
    assert len(keys) == len(set(keys)) == 24

    # a replica of the run may resume it with others; a set that shares none is refused
    third = serve()
    result = collect([prompts], out, CollectSettings(
        endpoint=urls(second, third), label="b", repeats=2, preflight=False))
    assert result.skipped == 24 and prompt_requests(third) == []
    with pytest.raises(RunMismatch, match="endpoint"):
        collect([prompts], out, CollectSettings(endpoint=urls(serve(), serve()), label="b",
                                                repeats=2, preflight=False))
