"""fetch/ladder.py over real HTTP on loopback: a probe's filler sized to its rung on the
server's own tokenize endpoint (llama-server's and vLLM's shapes), an estimate where the
engine has none, and the prefill rate of a short prompt."""

from __future__ import annotations

import asyncio

import pytest

from quantcheck.errors import EndpointError
from quantcheck.fetch.ladder import (
    LadderServer,
    Tokenizer,
    ladder_server,
    prefill_rate,
    probe_text,
    size_probe,
)
from quantcheck.lab.endpoint import Faults
from quantcheck.lab.scripted import ScriptedModel, ScriptedServer
from quantcheck.store.records.ladder_records import LadderProbe
from quantcheck.wire.client import EndpointClient

from .conftest import Serve

PROBE = LadderProbe(id="needle-d0.5", kind="needle", depth=0.5, code="48213")


async def sized(server: ScriptedServer, tokens: int, language: str = "en"
                ) -> tuple[LadderProbe, int, str]:
    async with EndpointClient(server.url) as client:
        facts = await ladder_server(client, None)
        tokenizer = Tokenizer(client, facts, language)
        probe = await size_probe(tokenizer.count, PROBE, tokens, 1, language)
        recount = await tokenizer.count(probe_text(probe, probe.sentences, 1, language))
        return probe, recount, tokenizer.describe()


@pytest.mark.parametrize("dialect", ["llama.cpp", "vllm"])
@pytest.mark.parametrize("tokens", [300, 1024, 5000])
def test_a_probe_is_sized_to_its_rung_on_the_servers_tokenizer(serve: Serve, dialect: str,
                                                               tokens: int) -> None:
    server = serve(ScriptedModel(), dialect)
    probe, recount, said = asyncio.run(sized(server, tokens))
    assert probe.prompt_tokens == recount  # what was measured is what is sent
    assert tokens - 12 <= recount <= tokens  # within a sentence, never over
    assert said.startswith("measured on A's tokenizer (/tokenize)")


@pytest.mark.parametrize("language", ["de", "zh"])
def test_other_languages_are_sized_as_well(serve: Serve, language: str) -> None:
    server = serve(ScriptedModel(), "llama.cpp")
    probe, recount, _ = asyncio.run(sized(server, 2000, language))
    assert 2000 - 40 <= recount <= 2000


def test_an_engine_without_a_tokenize_endpoint_is_estimated_and_said_so(serve: Serve) -> None:
    probe, recount, said = asyncio.run(sized(serve(ScriptedModel(), "ollama"), 1000))
    assert said.startswith("estimated from word counts") and 960 <= recount <= 1000


def test_a_tokenize_answer_without_ids_is_one_clear_error(serve: Serve) -> None:
    """llama-server answers a tokenize request of another engine's shape with no ids
    (seen on the real server): the ladder stops before sending, naming the endpoint."""
    server = serve(ScriptedModel(), "llama.cpp")

    async def count() -> int:
        async with EndpointClient(server.url) as client:
            facts = await ladder_server(client, None)
            as_vllm = LadderServer(facts.endpoint, facts.model, "vllm", facts.context)
            return await Tokenizer(client, as_vllm, "en").count("some text")

    with pytest.raises(EndpointError, match="/tokenize answered without token ids"):
        asyncio.run(count())


def test_the_prefill_rate_of_a_short_prompt(serve: Serve) -> None:
    async def rate(server: ScriptedServer) -> float | None:
        async with EndpointClient(server.url) as client:
            facts = await ladder_server(client, None)
            return await prefill_rate(client, facts, 200, "word " * 200)

    assert (asyncio.run(rate(serve(ScriptedModel(), "llama.cpp"))) or 0) > 0
    refused = serve(ScriptedModel(), "llama.cpp", faults=Faults(status={0: 400}))
    assert asyncio.run(rate(refused)) is None
