"""Normalize every server dialect's response (streamed or not) into one Generation.

Dialects seen in the wild:
- vLLM chat: `logprobs.content[]` entries {token, logprob, bytes, top_logprobs[]};
  vLLM legacy completions: `logprobs` {tokens, token_logprobs, top_logprobs: [dict]}.
- SGLang: like vLLM, may return fewer than k alternatives, and sends finish_reason
  in a separate final chunk with an empty delta.
- llama.cpp llama-server: chat-style entries that also carry token `id`s, on
  /v1/completions too; holds back split UTF-8 bytes, so a stream chunk can have an
  empty delta and a token whose string is not valid text.
- llama-cpp-python: legacy completions with k+1 alternatives (the sampled token is
  added), chat entries with `bytes: null`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

from .records import Tokens

_LOGPROB = operator.itemgetter("logprob")
_TOKEN = operator.itemgetter("token")


@dataclass
class Generation:
    """What one response said, whatever the dialect."""

    text: str = ""
    reasoning: str | None = None
    tokens: Tokens = field(default_factory=Tokens)
    has_logprobs: bool = False
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    model: str | None = None
    system_fingerprint: str | None = None


class StreamError(Exception):
    """The server sent an error object inside an otherwise successful response."""


def parse_response(body: dict[str, Any], top_k: int) -> Generation:
    """A non-streamed chat or completions response body."""
    _raise_on_error(body)
    generation = Generation(model=body.get("model"),
                            system_fingerprint=body.get("system_fingerprint"),
                            usage=body.get("usage"))
    choices = body.get("choices") or []
    if choices:
        _absorb_choice(generation, choices[0], top_k, message_key="message")
    return generation


class StreamAccumulator:
    """Feed it each decoded SSE `data:` object of a stream; read `generation` at the end."""

    def __init__(self, top_k: int) -> None:
        self.top_k = top_k
        self.generation = Generation()

    def feed(self, chunk: dict[str, Any]) -> None:
        _raise_on_error(chunk)
        generation = self.generation
        generation.model = chunk.get("model") or generation.model
        generation.system_fingerprint = (chunk.get("system_fingerprint")
                                         or generation.system_fingerprint)
        if chunk.get("usage"):
            generation.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) == 0:
                _absorb_choice(generation, choice, self.top_k, message_key="delta")


def _raise_on_error(body: dict[str, Any]) -> None:
    error = body.get("error")
    if error:
        message = error.get("message", error) if isinstance(error, dict) else error
        raise StreamError(str(message))


def _absorb_choice(generation: Generation, choice: dict[str, Any], top_k: int,
                   message_key: str) -> None:
    message = choice.get(message_key) or {}
    content = message.get("content") if message_key in choice else choice.get("text")
    if content:
        generation.text += content
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        generation.reasoning = (generation.reasoning or "") + reasoning
    if choice.get("finish_reason"):
        generation.finish_reason = choice["finish_reason"]
    logprobs = choice.get("logprobs")
    if logprobs:
        generation.has_logprobs = True
        _absorb_logprobs(generation.tokens, logprobs, top_k)


def _absorb_logprobs(tokens: Tokens, logprobs: dict[str, Any], top_k: int) -> None:
    if "content" in logprobs or "tokens" not in logprobs:
        for entry in logprobs.get("content") or []:
            top_text, top_logprob = _top_columns(entry.get("top_logprobs") or [], top_k)
            tokens.append(entry.get("token", ""), entry.get("logprob"), top_text, top_logprob,
                          token_id=entry.get("id"), raw=entry.get("bytes"))
        return
    top_lists = logprobs.get("top_logprobs") or []
    token_logprobs = logprobs.get("token_logprobs") or []
    for position, token in enumerate(logprobs["tokens"]):
        alternatives = (top_lists[position] if position < len(top_lists) else None) or {}
        logprob = token_logprobs[position] if position < len(token_logprobs) else None
        entries = [{"token": t, "logprob": v} for t, v in alternatives.items()]
        tokens.append(token, logprob, *_top_columns(entries, top_k))


def _top_columns(entries: list[dict[str, Any]], top_k: int) -> tuple[list[str], list[float]]:
    """The alternatives as (tokens, logprobs), highest first, cut to k.

    Servers usually send them sorted (checked in one pass); otherwise a stable sort
    keeps their order among exact ties. Extra alternatives beyond the requested k
    (llama-cpp-python adds the sampled token) are cut off.
    """
    try:  # the common case at C speed: every entry has both fields
        logprobs: list[float] = list(map(_LOGPROB, entries))
        texts: list[str] = list(map(_TOKEN, entries))
    except KeyError:
        logprobs = [e.get("logprob") for e in entries]  # type: ignore[misc]
        texts = [e.get("token", "") for e in entries]
    if None in logprobs:
        kept = [i for i, v in enumerate(logprobs) if v is not None]
        texts, logprobs = [texts[i] for i in kept], [logprobs[i] for i in kept]
    if not all(map(operator.ge, logprobs, logprobs[1:])):
        order = sorted(range(len(logprobs)), key=lambda i: -logprobs[i])
        texts, logprobs = [texts[i] for i in order], [logprobs[i] for i in order]
    if 0 < top_k < len(texts):
        return texts[:top_k], logprobs[:top_k]
    return texts, logprobs
