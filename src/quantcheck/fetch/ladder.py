"""What the context ladder asks the servers before it collects: who they are and their
context (`ladder_server`), a prompt's length on A's own tokenizer (`Tokenizer`, the
engine's tokenize endpoint from its profile; an estimate from word counts where the
engine has none), each probe's filler sized to its rung (`size_probe`), and how fast
each side takes in a prompt (`prefill_rate`, one short request), for the cost said
before a rung is sent."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..errors import EndpointError
from ..store.engines import profile_of
from ..store.inputs.haystack import LANGUAGES, filler_text, sentences_for
from ..store.records.ladder_records import LadderProbe
from ..store.redaction import public_url
from ..store.runtimes import choose_model, context_length, mapping, whole_number
from ..triage.ladder_plan import needle_sentence, prompt_template
from ..wire.client import (
    TRANSPORT_ERRORS,
    EndpointClient,
    HTTPStatusError,
    server_root,
)
from ..wire.dialects import MalformedResponse
from ..wire.requests import prefill_body
from .clients import api_key_from_env
from .collect import CollectSettings
from .server_info import describe_server

WARM_UP_TOKENS = 256  # the prompt that times a side's prefill
MAX_MEASURES = 6  # tokenize requests to size one probe


@dataclass(frozen=True)
class LadderServer:
    """One side as the ladder needs it: the model, runtime and context it serves."""

    endpoint: str
    model: str
    runtime: str
    context: int | None


async def ladder_server(client: EndpointClient, model: str | None) -> LadderServer:
    models = await client.list_models()
    chosen = choose_model(models, model, public_url(client.endpoint))
    info = await describe_server(client, models)
    return LadderServer(public_url(client.endpoint), chosen, info.runtime,
                        context_length(info, chosen))


class Tokenizer:
    """A text's length in tokens on one server (special tokens included, as a prompt
    is sent), or estimated from its words when the server cannot say."""

    def __init__(self, client: EndpointClient, server: LadderServer, language: str) -> None:
        profile = profile_of(server.runtime)
        self.client, self.model = client, server.model
        self.endpoint = profile.tokenize if profile is not None else None
        self.filler = LANGUAGES[language]
        self.measured = self.endpoint is not None

    def describe(self) -> str:
        if self.endpoint is None:
            return ("estimated from word counts (the server does not tokenize on request): "
                    "lengths are approximate")
        return (f"measured on A's tokenizer ({self.endpoint.path}); a chat template adds "
                "a few tokens")

    async def count(self, text: str) -> int:
        if self.endpoint is None:
            return round(self.filler.estimate(text))
        endpoint = self.endpoint
        body: dict[str, object] = {endpoint.text_field: text, endpoint.special_field: True}
        if endpoint.wants_model:
            body["model"] = self.model
        try:
            answer = await self.client.post_json(server_root(self.client.endpoint)
                                                 + endpoint.path, body)
        except (HTTPStatusError, MalformedResponse, *TRANSPORT_ERRORS) as exc:
            raise EndpointError(f"{public_url(self.client.endpoint)}{endpoint.path} failed "
                                f"({exc}): the ladder measures its prompts there") from None
        tokens = mapping(answer).get("tokens")
        if not isinstance(tokens, list) or not tokens:
            raise EndpointError(f"{public_url(self.client.endpoint)}{endpoint.path} "
                                "answered without token ids")
        return len(tokens)


def probe_text(probe: LadderProbe, sentences: int, seed: int, language: str) -> str:
    filler = filler_text(sentences, probe.depth or 0.0, needle_sentence(probe), seed,
                         language)
    return prompt_template().replace("{haystack}", filler)


async def size_probe(count: Callable[[str], Awaitable[int]], probe: LadderProbe, tokens: int,
                     seed: int, language: str) -> LadderProbe:
    """The probe with the most filler sentences whose prompt is at most `tokens` long
    (its measured length kept): a first guess from the language's estimate, then steps
    by the tokens a sentence was measured to take."""
    async def measure(sentences: int) -> int:
        return await count(probe_text(probe, sentences, seed, language))

    base = await measure(0)
    sentences = max(sentences_for(max(tokens - base, 1), language, seed), 1)
    best: tuple[int, int] | None = None
    for _ in range(MAX_MEASURES):
        found = await measure(sentences)
        if found <= tokens and (best is None or sentences > best[0]):
            best = (sentences, found)
        per_sentence = max((found - base) / sentences, 1.0)
        step = int((tokens - found) / per_sentence)
        if found <= tokens and step == 0:
            break
        sentences = max(sentences + (step if step else -1), 1)
    if best is None:
        best = (1, await measure(1))
    return LadderProbe(id=probe.id, kind=probe.kind, depth=probe.depth, code=probe.code,
                       sentences=best[0], prompt_tokens=best[1])


async def prefill_rate(client: EndpointClient, server: LadderServer, count: int,
                       text: str) -> float | None:
    """Prompt tokens a second for one short completions request of `count` tokens
    (None: the server refused it; the ladder then says no estimate)."""
    body = prefill_body(server.model, text, profile_of(server.runtime))
    started = time.monotonic()
    try:
        answer = await client.post_json(server_root(client.endpoint) + "/v1/completions",
                                        body)
    except (HTTPStatusError, MalformedResponse, *TRANSPORT_ERRORS):
        return None
    seconds = time.monotonic() - started
    usage = mapping(mapping(answer).get("usage"))
    prompt_tokens = whole_number(usage.get("prompt_tokens")) or count
    return prompt_tokens / seconds if seconds > 0 else None


def ladder_client(side: CollectSettings) -> EndpointClient:
    """The client the ladder sends one side's probes with."""
    return EndpointClient(side.endpoint, api_key_from_env(side.api_key_env), side.timeout)
