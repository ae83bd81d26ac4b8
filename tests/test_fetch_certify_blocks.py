"""fetch/certify_blocks.py: the cache block as each engine says it (or its default),
the prompt's tokens as the server counts them, and the fewest words of a prefix that
share exactly N tokens with a sibling."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck.fetch.certify_blocks import (
    CannotTokenize,
    cache_block,
    prompt_tokens,
    words_for,
)
from quantcheck.fetch.server_info import describe_server
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.pipeline.event_loop import run_blocking
from quantcheck.store.engines import profile_of
from quantcheck.wire.client import EndpointClient

from .conftest import Serve

GAUGE = 'vllm:cache_config_info{block_size="32",cache_dtype="auto",num_gpu_blocks="9"} 1.0'


async def _cache_block(url: str) -> tuple[int | None, str]:
    async with EndpointClient(url) as client:
        info = await describe_server(client, await client.list_models())
        return await cache_block(client, info, info.runtime)


@pytest.mark.parametrize(("dialect", "info", "said"), [
    ("vllm", {"block_size": 32}, (32, "the server says: block_size 32 (GET /metrics)")),
    ("vllm", {"metrics": "# a recorded page\n" + GAUGE + "\n"},
     (32, "the server says: block_size 32 (GET /metrics)")),
    ("vllm", {"metrics": GAUGE.replace("32", "x")},
     (16, "vLLM's --block-size (16 unless started otherwise), the server does not say")),
    ("vllm", {"metrics": GAUGE.replace('"32"', '"99999999999"')},
     (16, "vLLM's --block-size (16 unless started otherwise), the server does not say")),
    ("sglang", {"page_size": 64}, (64, "the server says: page_size 64")),
    ("sglang", {}, (1, "the server says: page_size 1")),
    ("llama.cpp", {}, (1, "llama.cpp reuses a slot's cached tokens token by token (their "
                          "longest common prefix with the prompt), the server does not say")),
    ("tgi", {}, (None, "not known: the server does not say what it is")),
])
def test_the_cache_block_is_read_where_the_server_says_it(
        serve: Serve, dialect: str, info: dict[str, int], said: tuple[int | None, str]
) -> None:
    assert run_blocking(_cache_block(serve(dialect=dialect, server_info=info).url)) == said


async def _tokens(url: str, runtime: str, api: str, body: dict[str, object]) -> list[int]:
    async with EndpointClient(url) as client:
        return await prompt_tokens(client, "m", profile_of(runtime), api, body)


@pytest.mark.parametrize("dialect", ["vllm", "sglang", "llama.cpp"])
def test_a_prompt_is_tokenized_as_the_server_counts_it(serve: Serve, dialect: str) -> None:
    server = serve(ScriptedModel(), dialect=dialect)
    ids = run_blocking(_tokens(server.url, dialect, "completions",
                               {"prompt": "river stone lamp\n\nquestion 0"}))
    assert len(ids) == 5  # the lab's words are a token each
    chat = {"messages": [{"role": "user", "content": "river stone lamp"}]}
    if dialect == "sglang":  # its tokenize takes text only
        with pytest.raises(CannotTokenize, match="through its template"):
            run_blocking(_tokens(server.url, dialect, "chat", chat))
    else:
        assert run_blocking(_tokens(server.url, dialect, "chat", chat))


def test_a_server_that_cannot_tokenize_says_so(serve: Serve) -> None:
    server = serve(ScriptedModel(), dialect="tgi")
    with pytest.raises(CannotTokenize, match="cannot tokenize"):
        run_blocking(_tokens(server.url, "tgi", "completions", {"prompt": "x"}))
    with pytest.raises(CannotTokenize, match="answered HTTP 404"):
        run_blocking(_tokens(server.url, "vllm", "completions", {"prompt": "x"}))


def shared_after(counts: list[int]):  # type: ignore[no-untyped-def]
    async def shared(words: int) -> int:
        return counts[words]
    return shared


@given(st.lists(st.integers(0, 3), min_size=1, max_size=30), st.integers(1, 40))
def test_the_fewest_words_that_share_exactly_n_tokens_or_why_none(
        steps: list[int], tokens: int) -> None:
    """Whatever tokens each word adds (0: merged into the next, several: a long word),
    the bisection finds the fewest words reaching exactly `tokens`, or says none does."""
    counts = [1]
    for step in steps:
        counts.append(counts[-1] + step)
    try:
        words = run_blocking(words_for(tokens, len(steps), shared_after(counts)))
    except CannotTokenize:
        assert tokens not in counts
    else:
        assert counts[words] == tokens and tokens not in counts[:words]


def test_a_block_said_beyond_reason_is_not_taken(serve: Serve) -> None:
    """A server saying a page of a billion tokens would have the plan draw a prefix as
    long: the engine's default is taken instead."""
    said = run_blocking(_cache_block(serve(dialect="sglang",
                                           server_info={"page_size": 10**9}).url))
    assert said == (1, "SGLang's --page-size (1 unless started otherwise), the server does "
                       "not say")
