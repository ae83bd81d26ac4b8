"""A certificate's cache block, and prefixes cut to a number of tokens.

The block: where the server says it (SGLang's `page_size` in /get_server_info; vLLM's
`block_size` label of the `vllm:cache_config_info` gauge at GET /metrics, as
fetch/server_info.py keeps it, else read here), else its engine's default
(store/engines.py `CacheBlocks`); None for an engine not known.

A prefix of exactly N tokens (the `block` factor): the prompt's request and its sibling
(the same request asking another question) after the first k words of a prefix share
their first tokens, as the server's own tokenizer counts them (the BOS token, the chat
template's start and the system message included): k is searched until they share
exactly N. Where the server cannot tokenize, or no k gives N (a template that already
shares more, a word of several tokens across N), the level is not tested, and why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from ..store.engines import APPLY_TEMPLATE, EngineProfile, profile_of
from ..store.folders.run_dir import ServerInfo
from ..store.runtimes import info_answer, mapping, whole_number
from ..wire.client import TRANSPORT_ERRORS, EndpointClient, HTTPStatusError, server_root
from ..wire.dialects import MalformedResponse, metric_labels

METRICS_BYTES = 4 << 20  # a /metrics answer read at most (vLLM's is some 100 KB)
# A block said larger than this is not taken (the plan draws a prefix of as many words):
# vLLM's are 16 to 256 tokens, SGLang's pages 1 to a few hundred
MAX_BLOCK_TOKENS = 4096


async def cache_block(client: EndpointClient, info: ServerInfo | None, runtime: str | None
                      ) -> tuple[int | None, str]:
    """(tokens a cache block holds, where that comes from); (None, why) when the engine
    is not known."""
    profile = profile_of(runtime)
    blocks = profile.cache_blocks if profile else None
    if profile is None or blocks is None:
        return None, "not known: the server does not say what it is"
    if blocks.info_field and info is not None:
        said = whole_number(mapping(info.server_info).get(blocks.info_field))
        if said and said <= MAX_BLOCK_TOKENS:
            return said, f"the server says: {blocks.info_field} {said}"
    if blocks.metrics:
        said = await metric_number(client, info, *blocks.metrics)
        if said and said <= MAX_BLOCK_TOKENS:
            return said, f"the server says: {blocks.metrics[2]} {said} (GET {blocks.metrics[0]})"
    return blocks.tokens, f"{blocks.said}, the server does not say"


async def metric_number(client: EndpointClient, info: ServerInfo | None, path: str,
                        metric: str, label: str) -> int | None:
    """A whole-number label of a Prometheus metric: as the server's description kept its
    labels (`answers[path]`), else read from the page; None when it is not there."""
    labels = mapping(mapping(info_answer(info, path) if info else None).get(metric))
    if not labels:
        text = await client.get_text(path, METRICS_BYTES)
        labels = (metric_labels(text, metric) or {}) if text is not None else {}
    value = labels.get(label)
    return int(value) if isinstance(value, str) and value.isdigit() and len(value) < 10 \
        and int(value) > 0 else None


class CannotTokenize(Exception):
    """Why a prompt's tokens cannot be counted on this server."""


async def prompt_tokens(client: EndpointClient, model: str, profile: EngineProfile | None,
                        api: str, body: Mapping[str, object]) -> list[int]:
    """A generation body's prompt as the server tokenizes it for generation (special
    tokens added, a chat through its template); CannotTokenize when it cannot."""
    endpoint = profile.tokenize if profile else None
    if endpoint is None:
        raise CannotTokenize("the server cannot tokenize")
    root = server_root(client.endpoint)
    if api == "chat" and endpoint.accepts_messages:
        request: dict[str, object] = {"messages": body.get("messages"),
                                      "add_generation_prompt": True}
    elif api == "chat" and profile is not None and profile.chat_template == APPLY_TEMPLATE:
        rendered = await _post(client, root + "/apply-template", {"messages": body.get("messages")})
        request = {endpoint.text_field: mapping(rendered).get("prompt")}
    elif api != "chat" and isinstance(body.get("prompt"), str):
        request = {endpoint.text_field: body["prompt"]}
    else:
        raise CannotTokenize("the server cannot tokenize this prompt through its template")
    if api != "chat" or not endpoint.accepts_messages:
        request[endpoint.special_field] = True
    if endpoint.wants_model:
        request["model"] = model
    answer = await _post(client, root + endpoint.path, request)
    tokens = mapping(answer).get("tokens")
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        raise CannotTokenize(f"{endpoint.path} answered without token ids")
    return tokens


async def _post(client: EndpointClient, url: str, body: Mapping[str, object]) -> object:
    try:
        return await client.post_json(url, body)
    except HTTPStatusError as exc:
        raise CannotTokenize(f"POST {url.rsplit('/', 1)[-1]} answered HTTP {exc.status}: "
                             f"{exc.message}") from None
    except (MalformedResponse, *TRANSPORT_ERRORS) as exc:
        raise CannotTokenize(f"tokenizing failed: {type(exc).__name__}") from None


def shared_start(one: list[int], other: list[int]) -> int:
    """How many first tokens two token lists share."""
    return next((n for n, (a, b) in enumerate(zip(one, other, strict=False)) if a != b),
                min(len(one), len(other)))


SharedAt = Callable[[int], Awaitable[int]]  # words of the prefix -> tokens shared


async def words_for(tokens: int, most_words: int, shared_at: SharedAt) -> int:
    """The number of the prefix's words after which the request and its sibling share
    exactly `tokens` tokens (the shared count never falls as words are added: the
    fewest words that reach it, by bisection); CannotTokenize when none does."""
    low, high = 0, most_words
    if await shared_at(high) < tokens:
        raise CannotTokenize(f"even {most_words} words of the prefix share fewer than "
                             f"{tokens} tokens")
    while low < high:
        middle = (low + high) // 2
        if await shared_at(middle) >= tokens:
            high = middle
        else:
            low = middle + 1
    got = await shared_at(low)
    if got != tokens:
        raise CannotTokenize(f"no prefix of the plan's words makes the prompt and its "
                             f"sibling share exactly {tokens} tokens ({got} at the nearest: "
                             "the template or a word of several tokens)")
    return low
