"""Send a determinism certificate's plan (triage/certify_plan.py) to one endpoint.

Rounds go one after another; a round's probes are sent at once. The prefix cache is
turned off where the runtime allows it: llama.cpp by `cache_prompt: false` in every
body but the `cache` factor's; vLLM by POST /reset_prefix_cache and SGLang by POST
/flush_cache before each "flush" round. What was used, or why nothing could be, is
said in `cache_control`.

Seeded sampling (`seed` probes): the probe's `temperature` and `seed` replace the
greedy ones in its body. One seeded request is tried first (not counted): a server
that refuses it (HTTP 400) leaves the `seed` factor untested, and `seed_control` says
so; otherwise it says the seed and temperature sent.

MoE routing (`routed_experts`): asked of SGLang in each body (vLLM sends it when
started to, on whole answers only); each answer keeps a digest per generated token of
the experts it was routed to. Routing that cannot be this answer's is not kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import ParameterRejected, QuantcheckError, RequestsFailed
from ..store.certificate_records import Answer, Plan, Probe, Round
from ..store.engines import known, profile_of
from ..store.run_records import Prompt
from ..store.runtimes import context_length
from ..triage.routing import row_digests
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
from ..wire.dialects import Generation, MalformedResponse
from ..wire.routing import RoutingUnusable, generated_routing
from .collect import fields_body, request_body
from .server_info import describe_server


@dataclass
class CertifySettings:
    endpoint: str
    model: str | None = None
    api_key_env: str | None = None
    top_logprobs: int = 20
    timeout: float = 600.0
    retries: int = 4
    max_response_mb: int = 64
    routed_experts: bool = False
    routed_experts_shape: tuple[int, int] | None = None  # (layers, k) for SGLang's flat rows


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
    seed_control: str = ""


async def server_facts(client: EndpointClient, requested: str | None) -> ServerFacts:
    from ..store.runtimes import choose_model

    models = await client.list_models()
    model = choose_model(models, requested, public_url(client.endpoint))
    info = await describe_server(client, models)
    runtime = info.runtime if known(info.runtime) else None
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


def requests_turn_cache_off(prompts: list[Prompt], runtime: str | None) -> bool:
    """Whether the prompts' own requests (their fields and --extra-body) turn the prefix
    cache off by the runtime's body field: the cache factor cannot be tested then."""
    profile = profile_of(runtime)
    field = profile.cache_off_field if profile else None
    return field is not None and any(p.request.get(field) is False for p in prompts)


class PlanSender:
    """Sends one plan's rounds over one client."""

    def __init__(self, client: EndpointClient, settings: CertifySettings, facts: ServerFacts,
                 prompts: list[Prompt]) -> None:
        self.client, self.settings, self.facts = client, settings, facts
        self.prompts = {prompt.id: prompt for prompt in prompts}
        self.first = prompts[0]
        self.failed = 0
        self.profile = profile_of(facts.runtime)
        self.flush_path = self.profile.cache_flush_path if self.profile else None
        self.cache_field = self.profile.cache_off_field if self.profile else None
        self.cache_off_by_requests = requests_turn_cache_off(prompts, facts.runtime)
        self.cache_control = ""
        self.seed_refused = False

    def body(self, probe: Probe) -> tuple[dict[str, object], str]:
        """A probe's request body and api."""
        if probe.prompt_id:
            prompt = self.prompts[probe.prompt_id]
            body = with_prefix(request_body(prompt, self.facts.model,
                                            self.settings.top_logprobs, self.facts.runtime),
                               probe.prefix)
            api = prompt.api
        else:
            api = self.first.api
            text = probe.filler
            request: dict[str, object] = {"max_tokens": self.first.request.get("max_tokens", 64),
                                          "temperature": 0}
            request.update({"messages": [{"role": "user", "content": text}]}
                           if api == "chat" else {"prompt": text})
            body = fields_body(request, api, self.facts.model, self.settings.top_logprobs,
                               self.facts.runtime)
        if self.cache_field and body.get(self.cache_field) is not False:
            body[self.cache_field] = probe.cache
        if probe.seed is not None:
            body.update(temperature=probe.temperature, seed=probe.seed)
        routing_field = self.profile.routing_request if self.profile else None
        if self.settings.routed_experts and routing_field:
            body[routing_field] = True
        return body, api

    def routing(self, generation: Generation, tokens: int) -> list[str]:
        """A digest per generated token of its routing; empty when none was asked or
        sent, or what was sent cannot be this answer's."""
        if not self.settings.routed_experts or generation.routing is None or not tokens:
            return []
        try:
            rows = generated_routing(generation.routing, tokens, generation.usage,
                                     self.settings.routed_experts_shape)
        except RoutingUnusable:
            return []
        return row_digests(rows)

    async def check_seed(self, plan: Plan) -> str:
        """How seeded sampling will be tested, tried once now with the plan's first
        seeded probe; why it cannot be, or that the plan has none."""
        probe = next((p for r in plan.rounds for p in r.probes if p.seed is not None), None)
        if probe is None:
            return "not tested: the plan has no seeded request"
        body, api = self.body(probe)
        try:
            await self.client.generate(api, body, False, self.settings.top_logprobs)
        except ParameterRejected as exc:
            self.seed_refused = True
            return f"not tested: the server refused a seeded request ({exc.reason})"
        except QuantcheckError:
            raise
        except Exception as exc:  # as any request may: the seeded probes try again
            tried = f" (the first try failed: {type(exc).__name__}: {exc})"
        else:
            tried = ""
        return (f"seed {probe.seed} at temperature {probe.temperature:g} in each seeded "
                f"request; the same seed must give the same tokens{tried}")

    async def check_cache_control(self) -> str:
        """How the prefix cache will be turned off, tried once now."""
        if self.cache_field:
            if self.cache_off_by_requests:
                return (f"{self.facts.runtime}: {self.cache_field} false in each request, as "
                        "the requests themselves ask (--extra-body): the cache factor is not "
                        "tested")
            return (f"{self.facts.runtime}: {self.cache_field} false in each request (true "
                    "for the cache factor)")
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

    def sent_in(self, round_: Round) -> list[Probe]:
        """The round's probes that are sent: seeded ones only where a seed is taken."""
        return [p for p in round_.probes if not (self.seed_refused and p.seed is not None)]

    async def send_round(self, round_: Round) -> list[Answer]:
        if round_.action == "flush" and self.flush_path is not None:
            problem = await self.flush()
            if problem is not None:
                raise RequestsFailed(f"the prefix cache could not be emptied: {problem}")
        answered = await all_or_none(self.one(probe) for probe in self.sent_in(round_))
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
                          if tokens else [],
                          routing=self.routing(generation, len(tokens) if tokens else 0))
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
    seed_control = await sender.check_seed(plan)
    answers: list[Answer] = []
    for round_ in plan.rounds:
        answers += await sender.send_round(round_)
        if sent is not None:
            sent(len(sender.sent_in(round_)))
    return Sent(answers, sender.failed, cache_control, seed_control)
