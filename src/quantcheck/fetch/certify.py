"""Send a determinism certificate's plan (triage/certify_plan.py) to one endpoint.

Rounds go one after another; a round's probes are sent at once. The prefix cache is
turned off where the runtime allows it: llama.cpp by `cache_prompt: false` in every
body but the `cache` factor's; vLLM by POST /reset_prefix_cache and SGLang by POST
/flush_cache before each "flush" round. What was used, or why nothing could be, is
said in `cache_control`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import ParameterRejected, QuantcheckError, RequestsFailed
from ..store.certificate_records import Answer, Plan, Probe, Round
from ..store.run_records import Prompt
from ..store.runtimes import context_length
from ..wire.client import (
    TRANSPORT_ERRORS,
    EndpointClient,
    HTTPStatusError,
    RequestFailed,
    RetryableError,
    all_or_none,
    api_key_from_env,
    public_url,
    server_root,
    sleep_backoff,
)
from ..wire.dialects import MalformedResponse, with_logprobs
from .collect import request_body
from .server_info import describe_server

FLUSH_PATHS = {"vllm": "/reset_prefix_cache", "sglang": "/flush_cache"}


@dataclass
class CertifySettings:
    endpoint: str
    model: str | None = None
    api_key_env: str | None = None
    top_logprobs: int = 20
    timeout: float = 600.0
    retries: int = 4
    max_response_mb: int = 64


@dataclass
class ServerFacts:
    model: str
    runtime: str | None
    context_tokens: int | None


@dataclass
class Sent:
    """What one endpoint answered to a plan."""

    answers: list[Answer]
    failed: int
    cache_control: str


async def server_facts(client: EndpointClient, requested: str | None) -> ServerFacts:
    from ..store.runtimes import choose_model

    models = await client.list_models()
    model = choose_model(models, requested, public_url(client.endpoint))
    info = await describe_server(client, models)
    runtime = info.runtime if info.runtime and info.runtime != "unknown" else None
    return ServerFacts(model, runtime, context_length(info, model))


def with_prefix(request: Mapping[str, object], prefix: str) -> dict[str, object]:
    """The request with `prefix` and a blank line before its prompt's text (the first
    user message's, on chat)."""
    body = dict(request)
    if not prefix:
        return body
    messages = body.get("messages")
    if isinstance(messages, list):
        changed, done = [], False
        for message in messages:
            if not done and isinstance(message, dict) and message.get("role") == "user" \
                    and isinstance(message.get("content"), str):
                message = {**message, "content": f"{prefix}\n\n{message['content']}"}
                done = True
            changed.append(message)
        body["messages"] = changed
    elif isinstance(body.get("prompt"), str):
        body["prompt"] = f"{prefix}\n\n{body['prompt']}"
    return body


class PlanSender:
    """Sends one plan's rounds over one client."""

    def __init__(self, client: EndpointClient, settings: CertifySettings, facts: ServerFacts,
                 prompts: list[Prompt]) -> None:
        self.client, self.settings, self.facts = client, settings, facts
        self.prompts = {prompt.id: prompt for prompt in prompts}
        self.first = prompts[0]
        self.failed = 0
        self.flush_path = FLUSH_PATHS.get(facts.runtime or "")
        self.cache_control = ""

    def body(self, probe: Probe) -> tuple[dict[str, object], str]:
        """A probe's request body and api."""
        if probe.prompt_id:
            prompt = self.prompts[probe.prompt_id]
            body = with_prefix(request_body(prompt, self.facts.model,
                                            self.settings.top_logprobs), probe.prefix)
            api = prompt.api
        else:
            api = self.first.api
            text = probe.filler
            request: dict[str, object] = {"model": self.facts.model,
                                          "max_tokens": self.first.request.get("max_tokens", 64),
                                          "temperature": 0}
            request.update({"messages": [{"role": "user", "content": text}]}
                           if api == "chat" else {"prompt": text})
            body = with_logprobs(request, api, self.settings.top_logprobs)
        if self.facts.runtime == "llama.cpp" and body.get("cache_prompt") is not False:
            body["cache_prompt"] = probe.cache
        return body, api

    async def check_cache_control(self) -> str:
        """How the prefix cache will be turned off, tried once now."""
        if self.facts.runtime == "llama.cpp":
            return "llama.cpp: cache_prompt false in each request (true for the cache factor)"
        if self.flush_path is None:
            return ("none could be: the runtime is not known to empty its prefix cache, so "
                    "the prefix ladder ran with whatever cache the server keeps")
        problem = await self.flush()
        if problem is not None:
            self.flush_path = None
            return f"none could be: {problem}"
        return f"{self.facts.runtime}: POST {self.flush_path} before each cache-off request"

    async def flush(self) -> str | None:
        """Empty the prefix cache; why it could not be, or None."""
        if self.flush_path is None:
            return None
        url = server_root(self.client.endpoint) + self.flush_path
        try:
            await self.client.request_json("POST", url)
        except HTTPStatusError as exc:
            return f"POST {self.flush_path} answered HTTP {exc.status}: {exc.message}"
        except MalformedResponse:
            return None  # vLLM answers 200 with an empty body: it was emptied
        except TRANSPORT_ERRORS as exc:
            return f"POST {self.flush_path} failed: {type(exc).__name__}"
        return None

    async def send_round(self, round_: Round) -> list[Answer]:
        if round_.action == "flush" and self.flush_path is not None:
            problem = await self.flush()
            if problem is not None:
                raise RequestsFailed(f"the prefix cache could not be emptied: {problem}")
        answered = await all_or_none(self.one(probe) for probe in round_.probes)
        return [answer for answer in answered if answer is not None]

    async def one(self, probe: Probe) -> Answer | None:
        """A probe's answer (None for a filler); its error after the retries."""
        body, api = self.body(probe)
        error = None
        for attempt in range(self.settings.retries + 1):
            try:
                generation, _ = await self.client.generate(api, body, probe.stream,
                                                           self.settings.top_logprobs)
            except RetryableError as exc:
                error = f"{exc} (after {attempt + 1} attempts)"
                if attempt < self.settings.retries:
                    await sleep_backoff(attempt, exc.retry_after)
                continue
            except ParameterRejected:
                raise
            except RequestFailed as exc:
                error = str(exc)
                break
            except QuantcheckError:
                raise
            except Exception as exc:  # an answer no parser foresaw: that request fails
                error = f"unreadable answer ({type(exc).__name__}: {exc})"
                break
            if not probe.prompt_id:
                return None
            tokens = generation.tokens if generation.has_logprobs else None
            return Answer(prompt_id=probe.prompt_id, factor=probe.factor, level=probe.level,
                          trial=probe.trial, prefix_words=len(probe.prefix.split()),
                          baseline=probe.baseline, text=generation.text,
                          tokens=list(tokens.text) if tokens else [],
                          logprobs=list(tokens.logprob) if tokens else [],
                          top=[list(zip(t, v, strict=True)) for t, v in
                               zip(tokens.top_text, tokens.top_logprob, strict=True)]
                          if tokens else [])
        self.failed += 1
        if not probe.prompt_id:
            return None
        return Answer(prompt_id=probe.prompt_id, factor=probe.factor, level=probe.level,
                      trial=probe.trial, baseline=probe.baseline, error=error)


def client_for(settings: CertifySettings) -> EndpointClient:
    return EndpointClient(settings.endpoint, api_key_from_env(settings.api_key_env),
                          settings.timeout, max_response_mb=settings.max_response_mb)


async def warm_up(sender: PlanSender) -> float:
    """One request of the first prompt (not counted), its seconds: the server's first
    answer may differ from later ones (kernels chosen, caches filled)."""
    started = time.perf_counter()
    await sender.one(Probe(factor="repeat", level="warm-up", prompt_id=sender.first.id))
    sender.failed = 0
    return time.perf_counter() - started


async def send_plan(sender: PlanSender, plan: Plan,
                    sent: Callable[[int], None] | None = None) -> Sent:
    """Every round in order; `sent(n)` after each round of n requests."""
    cache_control = await sender.check_cache_control()
    answers: list[Answer] = []
    for round_ in plan.rounds:
        answers += await sender.send_round(round_)
        if sent is not None:
            sent(len(round_.probes))
    return Sent(answers, sender.failed, cache_control)
