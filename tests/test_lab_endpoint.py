"""lab/endpoint.py: the lab server itself (its dialects are tested where they are read:
test_fetch_collect.py, test_wire_formats.py). What keeps it from starting is raised by
`start`, at once."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from quantcheck import compare_runs, load_run
from quantcheck.lab.scripted import DIALECTS, ScriptedModel, ScriptedServer
from quantcheck.store.engines import ENGINES

from .conftest import Serve, WritePrompts, invoke


def test_a_port_in_use_is_raised_by_start_at_once() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(OSError, match="address already in use"):
            ScriptedServer(port=port).start()
        assert time.monotonic() - started < 5  # not the 10 s wait for a server never ready
    with ScriptedServer(port=port) as server:  # the port free again: it serves
        assert server.port == port


BOTH_APIS = """prompts:
  - {id: capital, messages: [{role: user, content: "The capital of Australia?"}], max_tokens: 8}
  - {id: sum, prompt: "What is two plus two?", max_tokens: 8}
"""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_is_recognised_collected_and_compared(
    serve: Serve, write_prompts: WritePrompts, tmp_path: Path, dialect: str, stream: bool,
) -> None:
    """Two lab servers speaking one engine's dialect, collected (with the preflight) and
    compared: the runtime is read from what it serves, chat and legacy completions are
    kept, and where the engine sends no logprobs the texts are still compared and the
    collection says which figures are missing."""
    profile = ENGINES[dialect]
    prompts = write_prompts(BOTH_APIS)
    outputs = []
    for side, answer in (("a", " Canberra is the capital."), ("b", " Sydney is the capital.")):
        server = serve(ScriptedModel(responses={"Australia": answer,
                                                "two plus two": " Four, it is four."}), dialect)
        result = invoke("collect", "--endpoint", server.url, "--prompts", prompts, "--out",
                        tmp_path / side, "--top-logprobs", 3,
                        "--stream" if stream else "--no-stream")
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    assert load_run(tmp_path / "a").manifest.server.runtime == dialect
    summary = compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    assert (summary.counts.pairs, summary.counts.identical) == (2, 1)
    missing = profile.missing_logprobs({"chat", "completions"}, stream)
    assert all((missing or "sends no logprobs") in output for output in outputs) == bool(
        missing)
    with_logprobs = [api for api in ("chat", "completions") if profile.sends_logprobs(api, stream)]
    records = {r.prompt_id: r for r in load_run(tmp_path / "b").completions()}
    assert [api for api, prompt_id in (("chat", "capital"), ("completions", "sum"))
            if records[prompt_id].tokens] == with_logprobs
    assert (summary.drift.top1_agreement is not None) == bool(with_logprobs)


def _sampled(server: ScriptedServer, prompt: str, **extra: object) -> list[str]:
    import openai

    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    answer = sdk.completions.create(model="scripted-model", prompt=prompt, max_tokens=12,
                                    temperature=1.0, logprobs=2, extra_body=extra)
    assert answer.choices[0].logprobs is not None
    tokens = answer.choices[0].logprobs.tokens or []
    assert [len(top) for top in answer.choices[0].logprobs.top_logprobs or []] == \
        [2] * len(tokens)  # the alternatives drawn from, cut to the top-k asked
    return tokens


def test_the_scripted_lab_samples_at_a_temperature_and_honours_the_seed() -> None:
    """At temperature > 0 the lab draws each token: the same seed gives the same tokens,
    other seeds and unseeded requests other ones; at temperature 0 it stays greedy."""
    prompts = [f"Question {n}: name a colour." for n in range(4)]
    with ScriptedServer() as server:
        for prompt in prompts:
            assert _sampled(server, prompt, seed=7) == _sampled(server, prompt, seed=7)
        seeds = {tuple(_sampled(server, prompt, seed=seed)) for prompt in prompts
                 for seed in range(6)}
        assert len(seeds) > len(prompts)  # other seeds drew other tokens
        unseeded = {tuple(_sampled(server, prompts[0])) for _ in range(6)}
        assert len(unseeded) > 1


def test_the_ignore_seed_fault_answers_the_same_seed_differently() -> None:
    from quantcheck.lab.scripted import Faults

    with ScriptedServer(faults=Faults(ignore_seed=True)) as server:
        drawn = {tuple(_sampled(server, "Question 1: name a colour.", seed=7))
                 for _ in range(6)}
    assert len(drawn) > 1


def _post(url: str, body: object = None) -> tuple[int, str]:
    import json
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_each_engine_empties_its_cache_its_own_way(serve: Serve) -> None:
    """vLLM's /reset_prefix_cache is there in development mode only (an empty 200);
    SGLang's /flush_cache answers its sentence, and refuses while a request runs;
    llama.cpp has neither (cache_prompt false computes a request cold)."""
    from quantcheck.lab.scripted import Faults

    assert _post(serve(dialect="vllm").url + "/reset_prefix_cache")[0] == 404
    assert _post(serve(dialect="vllm", faults=Faults(dev_mode=True)).url
                 + "/reset_prefix_cache") == (200, "")
    status, said = _post(serve(dialect="sglang").url + "/flush_cache")
    assert status == 200 and said.startswith("Cache flushed.")
    assert _post(serve(dialect="llama.cpp").url + "/flush_cache")[0] == 404
    busy = serve(dialect="sglang", faults=Faults(latency_s=0.5))
    import threading

    talking = threading.Thread(target=_post, args=(busy.url + "/v1/completions", {
        "model": "m", "prompt": "question 0", "max_tokens": 2}))
    talking.start()
    time.sleep(0.2)
    assert _post(busy.url + "/flush_cache")[0] == 400
    talking.join()


def test_a_request_reads_its_cached_prefix_in_blocks_and_usage_says_it(serve: Serve) -> None:
    """With a cache fault on, the lab's cache is kept: vLLM's block as its /metrics says
    it; a prompt sharing 16 tokens with one cached reads one block, and a flush empties it."""
    import json
    import urllib.request

    from quantcheck.lab.scripted import Faults

    server = serve(ScriptedModel(), dialect="vllm", server_info={"block_size": 16},
                   faults=Faults(dev_mode=True, cobatch_writer=True))
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        assert 'vllm:cache_config_info{block_size="16"' in response.read().decode()
    words = " ".join(f"w{n}" for n in range(16))

    def cached(prompt: str) -> int:
        status, said = _post(server.url + "/v1/completions",
                             {"model": "m", "prompt": prompt, "max_tokens": 2})
        assert status == 200, said
        return int(json.loads(said)["usage"]["prompt_tokens_details"]["cached_tokens"])

    assert cached(words + " first") == 0
    assert cached(words + " second") == 16
    assert _post(server.url + "/reset_prefix_cache")[0] == 200
    assert cached(words + " third") == 0
