"""lab/endpoint.py: the lab server itself (its dialects are tested where they are read:
test_fetch_collect.py, test_wire_formats.py). What keeps it from starting is raised by
`start`, at once."""

from __future__ import annotations

import socket
import time

import pytest

from quantcheck.lab.scripted import ScriptedServer


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
