"""Send a determinism certificate's plan (triage/certify_plan.py) to one endpoint.

Rounds go one after another; a round's probes are sent at once. The prefix cache is
turned off where the runtime allows it: llama.cpp by `cache_prompt: false` in every
body but those of a probe that leaves the cache on (the cache factors' cached
requests); vLLM by POST /reset_prefix_cache and SGLang by POST /flush_cache before each
"flush" round. What was used, or why nothing could be, is said in `cache_control`;
where nothing can, the cache factors (store/records/certificate_records.py CACHE_FACTORS) are
not tested. A sibling probe is its prompt's request asking SIBLING_QUESTION after the
same prefix; a probe with `shared_tokens` has its prefix cut so that it and its sibling
share exactly that many tokens (certify_blocks.py), or its level is not tested.

Every request sent is recorded (`PlanSender.log`, certify_requests.py) and each answer
names its round and request.

Seeded sampling (`seed` probes): the probe's `temperature` and `seed` replace the
greedy ones in its body. One seeded request is tried first (not counted): a server
that refuses it (HTTP 400) leaves the `seed` factor untested, and `seed_control` says
so; otherwise it says the seed and temperature sent.

What is not sent, and why (`PlanSender.untested`, by factor and level): a round with
a request that does not fit the endpoint's context, the `cache` factor where the
prefix cache cannot be emptied or the requests turn it off, the `seed` factor where
the server refuses a seed, and a level (with the levels held to it) from the first
request the server refuses as too long for its context.

The warm-up (certify_warm_up.py, not counted) measures the `Pace` the time estimate
and the fit of a level rest on.

MoE routing (`routed_experts`): asked of SGLang in each body (vLLM sends it when
started to, on whole answers only); each answer keeps a digest per generated token of
the experts it was routed to. Routing that cannot be this answer's is not kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from ..errors import ParameterRejected, QuantcheckError, RequestsFailed
from ..store.engines import known, profile_of
from ..store.folders.run_dir import ServerInfo
from ..store.records.certificate_records import (
    CACHE_FACTORS,
    Answer,
    Factor,
    Plan,
    Probe,
    Round,
)
from ..store.records.preflight_records import Preflight
from ..store.records.run_records import DEFAULT_CONTEXT_TOKENS, Prompt
from ..store.redaction import public_url
from ..store.runtimes import context_length, server_slots
from ..triage.certificate_coverage import why_untested
from ..triage.certify_plan import (
    ASSUMED_CONTEXT,
    SIBLING_QUESTION,
    TOKENS_PER_WORD,
    fits,
    probe_words,
)
from ..triage.determinism import cached_prompt_tokens
from ..triage.routing import row_digests
from ..wire.client import (
    TRANSPORT_ERRORS,
    EndpointClient,
    HTTPStatusError,
    RequestFailed,
    RetryableError,
    context_overflow,
    server_root,
    sleep_backoff,
)
from ..wire.dialects import Generation, MalformedResponse
from ..wire.requests import certificate_body, filler_fields
from ..wire.routing import RoutingUnusable, generated_routing
from .certify_blocks import CannotTokenize, cache_block, prompt_tokens, shared_start, words_for
from .certify_requests import RequestLog, with_prefix
from .clients import all_or_none, api_key_from_env
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
    preflight: bool = True  # collect's preflight first (--no-preflight: not)
    context_tokens: int = DEFAULT_CONTEXT_TOKENS  # the preflight's context probe


@dataclass
class ServerFacts:
    model: str
    runtime: str | None
    context_tokens: int | None  # a slot's, on llama.cpp
    slots: int | None = None  # llama.cpp's --parallel
    models: list[dict[str, object]] = field(default_factory=list)
    info: ServerInfo | None = None
    cache_block: tuple[int | None, str] = (None, "")  # its tokens, and where that comes from

    def context_phrase(self) -> str:
        """The context a request must fit, in words: why a level was not sent."""
        if self.context_tokens is None:
            return (f"the server does not say its context (only what fits "
                    f"{ASSUMED_CONTEXT:,} tokens is sent)")
        if self.slots and self.slots > 1:
            return f"a slot holds {self.context_tokens:,} tokens"
        return f"the context is {self.context_tokens:,} tokens"


async def server_facts(client: EndpointClient, requested: str | None) -> ServerFacts:
    from ..store.runtimes import choose_model

    models = await client.list_models()
    model = choose_model(models, requested, public_url(client.endpoint))
    info = await describe_server(client, models)
    runtime = info.runtime if known(info.runtime) else None
    return ServerFacts(model, runtime, context_length(info, model), server_slots(info),
                       models, info, await cache_block(client, info, runtime))


def prompt_words(prompt: Prompt) -> int:
    """Words of a prompt's messages or text (as JSON: every string it holds)."""
    asked = prompt.request.get("messages", prompt.request.get("prompt", ""))
    return len(msgspec.json.encode(asked).split())


def max_tokens_of(prompts: list[Prompt]) -> int:
    asked = [p.request.get("max_tokens") for p in prompts]
    return max([v for v in asked if isinstance(v, int)] or [64])


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
        self.max_tokens = max_tokens_of(prompts)
        self.words = {prompt.id: prompt_words(prompt) for prompt in prompts}
        self.untested: dict[tuple[Factor, str], str] = {}  # why, by factor and level
        self.sent = 0  # the plan's requests sent
        self.tokens_per_word = float(TOKENS_PER_WORD)  # measured in the warm-up
        self.cache_untested = ""  # why the cache factors cannot be tested
        self.seed_untested = ""
        self.cuts: dict[tuple[str, str], str] = {}  # prefixes cut to tokens, by prompt, level
        self.rounds_sent = 0
        self.log = RequestLog(lambda probe: self.body(probe)[0])  # every request, as sent

    def body(self, probe: Probe) -> tuple[dict[str, object], str]:
        """A probe's request body and api."""
        if probe.prompt_id:
            prompt = self.prompts[probe.prompt_id]
            prefix = self.cuts.get((probe.prompt_id, probe.level), probe.prefix) \
                if probe.shared_tokens else probe.prefix
            fields = with_prefix(prompt.request, prefix,
                                 SIBLING_QUESTION if probe.sibling else None)
            api = prompt.api
        else:
            api = self.first.api
            fields = filler_fields(api, probe.filler,
                                   self.first.request.get("max_tokens", 64))
        return certificate_body(fields, api, self.facts.model, self.settings.top_logprobs,
                                self.profile, probe, self.settings.routed_experts), api

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
            self.seed_untested = f"the server refused a seeded request ({exc.reason})"
            return f"not tested: {self.seed_untested}"
        except QuantcheckError:
            raise
        except Exception as exc:  # as any request may: the seeded probes try again
            tried = f" (the first try failed: {type(exc).__name__}: {exc})"
        else:
            tried = ""
        return (f"seed {probe.seed} at temperature {probe.temperature:g} in each seeded "
                f"request; the same seed must give the same tokens{tried}")

    async def check_cache_control(self) -> str:
        """How the prefix cache will be turned off, tried once now; where it cannot be,
        the cache factors are not tested (cached and cold answers cannot be told apart)."""
        if self.cache_field:
            if self.cache_off_by_requests:
                self.cache_untested = (f"the requests turn the prefix cache off "
                                       f"({self.cache_field}: false)")
                return (f"{self.facts.runtime}: {self.cache_field} false in each request, as "
                        "the requests themselves ask (--extra-body): the cache factors are "
                        "not tested")
            return (f"{self.facts.runtime}: {self.cache_field} false in each request (true "
                    "for the cache factors' cached requests: a request with it false is "
                    "computed cold)")
        needs = f" ({self.profile.cache_flush_needs})" if self.profile and \
            self.profile.cache_flush_needs else ""
        if self.flush_path is None:
            said = ("none could be: the runtime is not known to empty its prefix cache, so "
                    "the prefix ladder ran with whatever cache the server keeps")
        elif (problem := await self.flush()) is not None:
            self.flush_path = None
            said = f"none could be: {problem}{needs}"
        else:
            return (f"{self.facts.runtime}: POST {self.flush_path} before each cache-off "
                    "request (its answer computed cold)")
        self.cache_untested = ("the prefix cache could not be emptied or turned off, so "
                               "cached and cold answers cannot be told apart")
        return said

    def why_not(self, round_: Round) -> str | None:
        """Why a round cannot be sent to this endpoint; None when it can."""
        if self.seed_refused and any(p.seed is not None for p in round_.probes):
            return self.seed_untested
        if self.cache_untested and any(p.factor in CACHE_FACTORS for p in round_.probes):
            return self.cache_untested
        if not all(fits(probe_words(p) + self.words.get(p.prompt_id, 0),
                        self.facts.context_tokens, self.max_tokens, self.tokens_per_word)
                   for p in round_.probes):
            return self.facts.context_phrase()
        return None

    def rounds_to_send(self, plan: Plan) -> list[Round]:
        """The plan's rounds this endpoint is sent: none of a level (or of a level held
        to it) that cannot be tested whole here, whose reason is kept in `untested`."""
        for round_ in plan.rounds:
            reason = self.why_not(round_)
            if reason is not None:
                for probe in round_.probes:
                    self.untested.setdefault((probe.factor, probe.level), reason)
        return [r for r in plan.rounds if not self.skipped(r)]

    def skipped(self, round_: Round) -> bool:
        return any(why_untested(p.factor, p.level, self.untested) is not None
                   for p in round_.probes)

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
        """The round's answers; none when the server refuses one of its requests as
        too long for its context, or a prefix cannot be cut to its tokens (its levels
        are then not tested)."""
        if not await self.cut_prefixes(round_):
            return []
        action = ""
        if round_.action == "flush" and self.flush_path is not None:
            problem = await self.flush()
            if problem is not None:
                raise RequestsFailed(f"the prefix cache could not be emptied: {problem}")
            action = f"POST {self.flush_path}"
        built = [self.body(probe) for probe in round_.probes]
        numbers = [self.log.recorded(probe, body, api, (self.rounds_sent, action,
                                                        round_.action == "flush"))
                   for probe, (body, api) in zip(round_.probes, built, strict=True)]
        answered = await all_or_none(self.one(probe, sent) for probe, sent
                                     in zip(round_.probes, built, strict=True))
        self.sent += len(round_.probes)
        self.rounds_sent += 1
        refusal = next((a for a in answered if isinstance(a, Refused)), None)
        if refusal is not None:
            for probe in round_.probes:
                self.untested.setdefault((probe.factor, probe.level), refusal.reason)
            return []
        for answer, number in zip(answered, numbers, strict=True):
            if isinstance(answer, Answer):
                answer.round, answer.request = self.rounds_sent - 1, number
        return [answer for answer in answered if isinstance(answer, Answer)]

    async def cut_prefixes(self, round_: Round) -> bool:
        """Cut the prefixes of a round's probes that share a number of tokens with their
        sibling; False (the level not tested, and why) where one cannot be."""
        for probe in round_.probes:
            key = (probe.prompt_id, probe.level)
            if not probe.shared_tokens or key in self.cuts:
                continue
            words = probe.prefix.split()

            async def shared_at(count: int, probe: Probe = probe,
                                words: list[str] = words) -> int:
                return await self.shared_tokens(probe, words[:count])

            try:
                count = await words_for(probe.shared_tokens, len(words), shared_at)
            except CannotTokenize as exc:
                self.untested.setdefault((probe.factor, probe.level),
                                         f"{exc}, so a prefix of exactly {probe.shared_tokens} "
                                         "tokens cannot be built")
                return False
            self.cuts[key] = " ".join(words[:count])
        return True

    async def shared_tokens(self, probe: Probe, words: list[str]) -> int:
        """The tokens a probe's request and its sibling share after these words."""
        cut = msgspec.structs.replace(probe, prefix=" ".join(words), shared_tokens=0)
        ids = []
        for sibling in (False, True):
            body, api = self.body(msgspec.structs.replace(cut, sibling=sibling))
            ids.append(await prompt_tokens(self.client, self.facts.model, self.profile,
                                           api, body))
        return shared_start(*ids)

    async def one(self, probe: Probe, sent: tuple[dict[str, object], str] | None = None
                  ) -> Answer | Refused | None:
        """A probe's answer (None for a filler or sibling); its error after the retries;
        Refused when the server says it does not fit its context."""
        got = await self.ask(probe, sent)
        if isinstance(got, Refused):
            return got
        if isinstance(got, str):
            self.failed += 1
            return Answer(prompt_id=probe.prompt_id, factor=probe.factor, level=probe.level,
                          trial=probe.trial, baseline=probe.baseline, error=got) \
                if probe.target else None
        if not probe.target:
            return None
        tokens = got.tokens if got.has_logprobs else None
        prefix = self.cuts.get((probe.prompt_id, probe.level), "") if probe.shared_tokens \
            else probe.prefix
        return Answer(prompt_id=probe.prompt_id, factor=probe.factor, level=probe.level,
                      trial=probe.trial, prefix_words=len(prefix.split()),
                      baseline=probe.baseline, text=got.text,
                      tokens=list(tokens.text) if tokens else [],
                      logprobs=list(tokens.logprob) if tokens else [],
                      top=[list(zip(t, v, strict=True)) for t, v in
                           zip(tokens.top_text, tokens.top_logprob, strict=True)]
                      if tokens else [],
                      routing=self.routing(got, len(tokens) if tokens else 0),
                      cached_tokens=cached_prompt_tokens(got.usage),
                      shared_tokens=probe.shared_tokens or None)

    async def ask(self, probe: Probe, sent: tuple[dict[str, object], str] | None = None
                  ) -> Generation | Refused | str:
        """A probe's generation (its body as built, or `sent`), Refused, or its error
        after the retries."""
        body, api = sent or self.body(probe)
        error = ""
        for attempt in range(self.settings.retries + 1):
            try:
                generation, _ = await self.client.generate(api, body, probe.stream,
                                                           self.settings.top_logprobs)
                return generation
            except RetryableError as exc:
                error = f"{exc} (after {attempt + 1} attempts)"
                if attempt < self.settings.retries:
                    await sleep_backoff(attempt, exc.retry_after)
            except ParameterRejected as exc:
                if context_overflow(exc.reason):
                    return Refused(f"the server refused a request of this level as too "
                                   f"long: {exc.reason}")
                raise
            except RequestFailed as exc:
                return str(exc)
            except QuantcheckError:
                raise
            except Exception as exc:  # an answer no parser foresaw: that request fails
                return f"unreadable answer ({type(exc).__name__}: {exc})"
        return error


@dataclass(frozen=True)
class Refused:
    """A request the server refused as too long for its context."""

    reason: str


@dataclass
class Side:
    """One endpoint, reached: its client, what it said of itself, its preflight."""

    settings: CertifySettings
    client: EndpointClient
    facts: ServerFacts
    preflight: Preflight | None


def client_for(settings: CertifySettings) -> EndpointClient:
    return EndpointClient(settings.endpoint, api_key_from_env(settings.api_key_env),
                          settings.timeout, max_response_mb=settings.max_response_mb)


async def send_rounds(sender: PlanSender, rounds: list[Round],
                      sent: Callable[[int], None] | None = None) -> list[Answer]:
    """Every round in order, but those of a level found untested on the way; `sent(n)`
    after each round of n requests."""
    answers: list[Answer] = []
    for round_ in rounds:
        if sender.skipped(round_):
            continue
        answers += await sender.send_round(round_)
        if sent is not None:
            sent(len(round_.probes))
    return answers
