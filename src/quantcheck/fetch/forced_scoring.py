"""Teacher-forced drift: score B on A's own greedy tokens.

Free-running outputs stop being comparable after their first divergence. Here B is
asked for the logprobs of exactly A's generated tokens, after A's prompt, so every
position compares like with like. Per position: whether B's top-1 is A's token, the
change in the probability of A's token (delta p, B minus A, as llama.cpp's
perplexity tool reports it), and a KL(A || B) lower bound over the shared top-k.

Modes: `prompt-logprobs` sends token ids (the prompt through the server's /tokenize,
A's tokens by their ids) to vLLM's completions with `prompt_logprobs`: exact when A's
run holds its token ids; when it does not, B re-tokenizes A's text, and that prompt's
line (and the summary) is labelled approximate.
`token-ids` asks llama.cpp's llama-server on its native `/completion`, one position
per request: the prompt is A's prompt ids (the prompt, or the chat template applied by
B's `/apply-template`, through B's `/tokenize` with the special tokens the server adds
itself) plus A's generated ids so far, `n_predict` 1, `n_probs` k. Exact, after
checking that B tokenizes like A (A's preflight fingerprint); needs A's token ids
(llama-server records them). B's
logprob of A's token is known only when it is in B's top-k (else delta p counts it 0).
`echo` sends text to legacy completions with `echo` and `logprobs` (vLLM,
llama-cpp-python, others): B re-tokenizes the text, so it is labelled approximate;
chat prompts cannot be echoed and are skipped with the reason.

The prefix cache: a scoring request that reuses a cached prefix is computed otherwise
than one that does not, and which prefixes are cached depends on the order the
requests came in. Where B's engine turns its cache off per request (llama.cpp:
`cache_prompt: false`), every scoring request does (each then evaluates its whole
prompt, so token-ids scoring costs one prefill per position). Where it cannot, or
`--extra-body` keeps it on, A's tokens are scored a second time in the reverse order:
the two scorings' difference is `order_floor`, and an A-vs-B KL mean within it is not
called drift (`within_order_floor`). `cache` says which.

The figures are llama.cpp's (`llama-perplexity --kl-divergence`: triage/forced_figures.py
says each one); KL is estimated from the top-k (a lower bound), and again from each
side's top K/4 so that a reader sees whether the estimate has converged.
Each line records the prompt's length in tokens as B scored it (`prompt_tokens`), so
that every position has its place in the context; forced.json gives the figures by
span of the context (0-1K, 1K-4K, 4K-16K, ...: triage/forced_positions.py).

Noise floors: the same figures for A against A's own repeats (over their common prefix
and the first position where they part); with B's run (`b_run`), for B against B's own
repeats and for B scoring its own greedy tokens as it scores A's (B's forced figures
against B's collected ones). `within_floor` says how much of the A-vs-B KL lies inside
the largest of them.

A prompt B cannot score (a 400 because prompt and answer exceed B's context, an answer
that cannot be read) is listed as skipped with the reason, and the rest are scored; a
B that scores none of the first GIVE_UP_AFTER prompts it is asked, or that cannot be
reached, stops the scoring with one error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from ..errors import EndpointError, RunFormatError
from ..store.engines import (
    ENGINES,
    PROMPT_LOGPROBS,
    TOKEN_IDS,
    EngineProfile,
    profile_of,
    with_forced_mode,
)
from ..store.folders.folder_kinds import FORCED, claim
from ..store.folders.report_dir import write_forced
from ..store.folders.run_dir import Run, ServerInfo, load_run
from ..store.records.preflight_records import Fingerprint
from ..store.records.report_records import ForcedLine, ForcedStats, ForcedSummary, PerPosition
from ..store.records.run_records import Completion, Prompt
from ..store.redaction import public_url
from ..store.runtimes import choose_model, mapping, server_slots
from ..triage.forced_figures import (
    Positions,
    noise_floor,
    order_floor,
    quarter_of,
    score_position,
    top_k_of,
    within_floor,
    within_order,
)
from ..triage.forced_positions import by_position, position_sentence
from ..triage.tokenizers import tokenizer_agreement
from ..wire.client import (
    RETRYABLE_STATUS,
    TRANSPORT_ERRORS,
    UNREACHABLE,
    EndpointClient,
    HTTPStatusError,
    server_root,
    sleep_backoff,
)
from ..wire.dialects import (
    MalformedResponse,
    ScoredPosition,
    parse_echo,
    parse_native_next,
    parse_prompt_logprobs,
)
from ..wire.requests import echo_body, native_next_body, prompt_logprobs_body, scoring_body
from .clients import all_or_none, api_key_from_env
from .preflight import TOKENIZER_PROBES
from .server_info import describe_server

MODES = ("auto", "prompt-logprobs", "token-ids", "echo")
GIVE_UP_AFTER = 5  # prompts that failed, none scored: B cannot score
# What a way of scoring gives: each position of A's answer scored, whether B re-tokenized
# A's text (approximate), and the prompt's length in tokens as B scored it
Scoring = tuple[list[ScoredPosition], bool, int]
# What one prompt's scoring can fail with (an answer of the wrong shape included)
SCORING_ERRORS = (HTTPStatusError, MalformedResponse, KeyError, IndexError, AttributeError,
                  TypeError, ValueError, *TRANSPORT_ERRORS)


@dataclass
class ForcedSettings:
    endpoint: str
    model: str | None = None
    top_k: int = 20
    mode: str = "auto"
    concurrency: int = 4
    timeout: float = 600.0
    api_key_env: str | None = None
    retries: int = 4  # a dropped connection, 429 or 5xx is retried, as collection does
    extra_body: dict[str, object] = field(default_factory=dict)  # into each scoring request
    b_run: str | Path | None = None  # B's own run: B's noise floors too
    top_k_fixed: bool = False  # run --forced asks top_k, not B's collection top-k


async def score_run_async(a_run: str | Path, out: str | Path, settings: ForcedSettings
                          ) -> ForcedSummary:
    """Score A's first repeat of every prompt on B; write forced.jsonl and forced.json."""
    claim(Path(out), FORCED)
    run = load_run(a_run)
    with_tokens = [r for r in run.completions() if r.ok and r.tokens]
    records = [r for r in with_tokens if r.repeat == 0]
    if not records:
        raise RunFormatError(f"{a_run}: no completions with logprobs to score (collect A "
                             "with --top-logprobs above 0)")
    started = time.monotonic()
    async with EndpointClient(settings.endpoint, api_key_from_env(settings.api_key_env),
                              settings.timeout) as client:
        models = await client.list_models()
        model = choose_model(models, settings.model, public_url(settings.endpoint))
        server = await describe_server(client, models)
        mode = settings.mode if settings.mode != "auto" else auto_mode(server)
        a_top_k = top_k_of(records)
        quarter = quarter_of(min(a_top_k or settings.top_k, settings.top_k))
        cache_field = scoring_cache_field(mode, server, settings.extra_body)
        scorer = _Scorer(client, model, mode, settings, quarter, cache_field,
                         keep=cache_field is None)
        scorer.give_up_after = min(GIVE_UP_AFTER, sum(
            1 for r in records if scorer.skip_reason(run.prompts[r.prompt_id], r) is None))
        tokenizer = await scorer.same_tokenizer(run, a_run) if mode == "token-ids" else None
        semaphore = asyncio.Semaphore(_concurrency(mode, settings.concurrency, server))
        lines = await _score_all(scorer, run, records, semaphore)
        by_order = (None if cache_field else await _order_floor(
            scorer, _Scorer(client, model, mode, settings, quarter, None, keep=True), run,
            records, semaphore))
        b_self, b_repeats = (await _b_floors(client, model, mode, settings, quarter, semaphore,
                                             cache_field)
                             if settings.b_run is not None else (None, None))
    overall = scorer.positions
    a_repeats = noise_floor(with_tokens, "A", quarter)
    floors = {"a_repeats": a_repeats, "b_repeats": b_repeats, "b_self": b_self,
              "b_order": by_order}
    summary = ForcedSummary(
        endpoint=public_url(settings.endpoint), model=model, mode=mode,
        approximate=mode == "echo" or any(line.approximate for line in lines),
        a_run=str(a_run), top_k=settings.top_k,
        tokenizer=tokenizer, seconds=round(time.monotonic() - started, 3),
        scored=sum(1 for line in lines if line.positions),
        skipped={line.prompt_id: line.skipped for line in lines if line.skipped},
        overall=overall.stats(), noise_floor=a_repeats, a_top_k=a_top_k, quarter_k=quarter,
        estimator=_estimator(a_top_k, settings.top_k, quarter), b_self=b_self,
        b_noise_floor=b_repeats,
        within_floor=within_floor(overall.kl, {name: stats for name, stats in floors.items()
                                               if stats is not None}),
        cache=_cache_words(cache_field, mode, server),
        order_floor=by_order, within_order_floor=within_order(overall.stats(), by_order),
        by_position=(spans := by_position(lines)),
        by_position_sentence=position_sentence(spans, _largest_floor(floors)))
    write_forced(Path(out), summary, list(lines))
    return summary


def _scoring_engine(mode: str, server: ServerInfo) -> EngineProfile | None:
    """Whose API the scoring requests speak: token-ids is llama.cpp's native API,
    whatever the server says it is; the other modes, the server's engine."""
    return with_forced_mode(mode) if mode == TOKEN_IDS else profile_of(server.runtime)


def scoring_cache_field(mode: str, server: ServerInfo, extra_body: Mapping[str, object]
                        ) -> str | None:
    """The body field that turns B's prefix cache off in each scoring request
    (llama.cpp's `cache_prompt`), or None where the engine has none or --extra-body
    keeps the cache on."""
    profile = _scoring_engine(mode, server)
    field = profile.cache_off_field if profile is not None else None
    if field is None or extra_body.get(field, False) is not False:
        return None
    return field


def _cache_words(field: str | None, mode: str, server: ServerInfo) -> str:
    if field is not None:
        return f"{field} false in every scoring request: no request reuses a cached prefix"
    profile = _scoring_engine(mode, server)
    why = ("--extra-body keeps it on" if profile is not None and profile.cache_off_field
           else f"{profile.label} cannot turn it off per request" if profile is not None
           else "the server does not say what it is, so no way to turn it off is known")
    return (f"the prefix cache stays on ({why}): A's tokens were scored twice, the second "
            "time in the reverse order, and their difference is the scoring-order floor")


async def _order_floor(first: _Scorer, again: _Scorer, run: Run, records: list[Completion],
                       semaphore: asyncio.Semaphore) -> ForcedStats:
    """A's tokens scored again, in the reverse order, against the first scoring."""
    again.give_up_after = first.give_up_after
    await _score_all(again, run, list(reversed(records)), semaphore)
    tokens = {r.prompt_id: list(r.tokens.text) for r in records if r.tokens is not None}
    return order_floor(first.scored_positions, again.scored_positions, tokens, first.quarter)


def auto_mode(server: ServerInfo) -> str:
    """The runtime's own way of scoring given tokens (echo on a server that does not say
    what it is); an engine that has none is an error naming what it cannot do."""
    profile = profile_of(server.runtime)
    if profile is None:
        return "echo"
    if profile.forced_mode is None:
        scorers = ", ".join(p.label for p in ENGINES.values() if p.forced_mode)
        raise EndpointError(f"{profile.label} cannot score given tokens (it answers neither "
                            "prompt logprobs nor echoed logprobs): teacher-forced scoring "
                            f"needs B on one of {scorers}")
    return profile.forced_mode


async def _score_all(scorer: _Scorer, run: Run, records: list[Completion],
                     semaphore: asyncio.Semaphore) -> list[ForcedLine]:
    async def one(record: Completion) -> ForcedLine:
        async with semaphore:
            return await scorer.score(run.prompts[record.prompt_id], record)

    return await all_or_none(one(r) for r in records)


async def _b_floors(client: EndpointClient, model: str, mode: str, settings: ForcedSettings,
                    quarter: int, semaphore: asyncio.Semaphore, cache_field: str | None
                    ) -> tuple[ForcedStats, ForcedStats]:
    """B scoring its own greedy tokens (against B's collected figures), and B against its
    own repeats. B's run without logprobs, or a B that cannot score them, gives a note."""
    assert settings.b_run is not None
    run = load_run(settings.b_run)
    with_tokens = [r for r in run.completions() if r.ok and r.tokens]
    records = [r for r in with_tokens if r.repeat == 0]
    if not records:
        note = (f"B's run {settings.b_run} has no completions with logprobs (collect B with "
                "--top-logprobs above 0)")
        return ForcedStats(positions=0, note=note), ForcedStats(positions=0, note=note)
    scorer = _Scorer(client, model, mode, settings, quarter, cache_field)
    try:
        await _score_all(scorer, run, records, semaphore)
        b_self = scorer.positions.stats()
        if not b_self.positions:
            b_self.note = "B scored none of its own tokens (see why for A's tokens)"
    except EndpointError as exc:
        b_self = ForcedStats(positions=0, note=f"B could not score its own tokens: {exc}")
    return b_self, noise_floor(with_tokens, "B", quarter)


def _largest_floor(floors: Mapping[str, ForcedStats | None]) -> ForcedStats | None:
    """The measured noise floor with the largest KL mean (None: none measured)."""
    measured = [stats for stats in floors.values()
                if stats is not None and stats.positions and stats.kl is not None]
    return max(measured, key=lambda stats: stats.kl.mean if stats.kl else 0.0, default=None)


def _estimator(a_top_k: int, top_k: int, quarter: int) -> str:
    return (f"KL(A||B) over A's top-{a_top_k} alternatives that B's top-{top_k} holds, plus "
            "one bucket for the rest: a lower bound on the full-vocabulary KL that "
            f"llama-perplexity reports; kl_quarter_k is the same on each side's top-{quarter}")


def _concurrency(mode: str, wanted: int, server: ServerInfo) -> int:
    """token-ids scores a prompt's positions one after another on one llama-server
    slot: more prompts in flight than slots would only wait (and, with the prefix cache
    kept on, evict each other's)."""
    if mode != "token-ids":
        return wanted
    return min(wanted, server_slots(server) or 1)


class _Scorer:
    def __init__(self, client: EndpointClient, model: str, mode: str,
                 settings: ForcedSettings, quarter: int, cache_field: str | None,
                 keep: bool = False) -> None:
        self.client, self.model, self.mode, self.top_k = client, model, mode, settings.top_k
        self.quarter = quarter
        self.positions = Positions()  # every scored position, over all prompts
        self.retries, self.extra_body = settings.retries, settings.extra_body
        self.cache_field = cache_field  # set false in each scoring request
        # with `keep`, what B answered per prompt, to set against another order
        self.keep = keep
        self.scored_positions: dict[str, list[ScoredPosition]] = {}
        self.root = server_root(client.endpoint)
        self.scored = self.failed = 0
        self.give_up_after = GIVE_UP_AFTER

    async def _post(self, path: str, body: dict[str, object], scoring: bool = True) -> object:
        """POST with the run's retries (a dropped connection, 429, 5xx, with backoff); a
        scoring request carries --extra-body too (a null value drops a field)."""
        if scoring:
            body = scoring_body(body, self.cache_field, self.extra_body)
        for attempt in range(self.retries + 1):
            try:
                return await self.client.post_json(self.root + path, body)
            except HTTPStatusError as exc:
                if exc.status not in RETRYABLE_STATUS or attempt == self.retries:
                    raise
                await sleep_backoff(attempt, exc.retry_after)
            except TRANSPORT_ERRORS:
                if attempt == self.retries:
                    raise
                await sleep_backoff(attempt, None)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def same_tokenizer(self, run: Run, a_run: str | Path) -> str:
        """Refuse a B that tokenizes unlike A (its ids would not mean A's tokens)."""
        try:
            ids = {text: await self._native_tokenize(text, special=False)
                   for text in TOKENIZER_PROBES}
        except (HTTPStatusError, MalformedResponse, *TRANSPORT_ERRORS) as exc:
            raise EndpointError(f"{public_url(self.client.endpoint)} /tokenize failed "
                                f"({exc}): token-ids scoring needs llama-server's native "
                                "API") from None
        a_print = run.manifest.preflight.tokenizer if run.manifest.preflight else None
        check = tokenizer_agreement(a_print, Fingerprint(method="llama.cpp tokenize", ids=ids))
        if check.status == "warn":
            raise EndpointError(f"{public_url(self.client.endpoint)} tokenizes unlike A "
                                f"({a_run}): A's token ids would mean other tokens there. "
                                "Score with --forced-mode echo (approximate), or check "
                                "that B serves the same model.")
        if check.status == "skip":
            return ("not checked: A's run has no tokenizer fingerprint (collected with "
                    "--no-preflight); B's ids are taken to mean A's tokens")
        return check.message

    async def score(self, prompt: Prompt, record: Completion) -> ForcedLine:
        skipped = self.skip_reason(prompt, record)
        if skipped:
            return ForcedLine(prompt_id=prompt.id, mode=self.mode, positions=0,
                              skipped=skipped)
        scoring = {"prompt-logprobs": self._by_ids, "token-ids": self._by_native_ids,
                   "echo": self._by_echo}[self.mode]
        try:
            forced, approximate, prompt_tokens = await scoring(prompt, record)
        except SCORING_ERRORS as exc:
            return self._failed(prompt, exc)
        self.scored += 1
        if self.keep:
            self.scored_positions[prompt.id] = forced
        line = self._line(prompt, record, forced)
        line.approximate, line.prompt_tokens = approximate, prompt_tokens
        return line

    def _failed(self, prompt: Prompt, exc: Exception) -> ForcedLine:
        """A prompt B could not score: skipped with the reason. Raises EndpointError
        when B cannot be reached, or has scored none of the first prompts it was asked."""
        why = str(exc) or type(exc).__name__
        reason = f"scoring {prompt.id} on {public_url(self.client.endpoint)} ({self.mode}) " \
                 f"failed: {why}"
        self.failed += 1
        if isinstance(exc, UNREACHABLE):
            raise EndpointError(reason) from None
        if not self.scored and self.failed >= self.give_up_after:
            raise EndpointError(f"{reason} (and no prompt before it was scored)") from None
        return ForcedLine(prompt_id=prompt.id, mode=self.mode, positions=0,
                          skipped=f"B could not score it: {why}")

    def _line(self, prompt: Prompt, record: Completion, forced: list[ScoredPosition]
              ) -> ForcedLine:
        """One scored prompt's figures, position by position."""
        tokens = record.tokens
        assert tokens is not None
        each = Positions()
        for n, (b_logprob, b_top) in enumerate(forced[:len(tokens)]):
            each.add(score_position(
                tokens.text[n], tokens.logprob[n], (tokens.top_text[n], tokens.top_logprob[n]),
                b_logprob, b_top, self.quarter))
        self.positions.extend(each)
        line = ForcedLine(prompt_id=prompt.id, mode=self.mode,
                          **msgspec.structs.asdict(each.stats()))
        line.aligned = len(forced) == len(tokens)
        line.per_position = PerPosition(each.top1, each.kl, each.delta_p,
                                        [logprob for logprob, _ in forced[:len(tokens)]],
                                        each.same_top)
        return line

    async def _by_ids(self, prompt: Prompt, record: Completion) -> Scoring:
        """Exact on A's own token ids; approximate (True) when A's run has none and B
        re-tokenizes A's text, which may cut it into other tokens than A generated."""
        request = ({"messages": prompt.request["messages"], "add_generation_prompt": True}
                   if prompt.api == "chat" else {"prompt": prompt.request["prompt"]})
        prompt_ids = (await self._tokenize(request))
        tokens = record.tokens
        assert tokens is not None
        own = bool(tokens.ids) and min(tokens.ids or [-1]) >= 0
        ids = tokens.ids if own and tokens.ids else await self._tokenize(
            {"prompt": record.text or "", "add_special_tokens": False})
        answer = await self._post("/v1/completions", prompt_logprobs_body(
            self.model, prompt_ids + ids, self.top_k))
        return (parse_prompt_logprobs(answer, ids, len(prompt_ids), self.top_k), not own,
                len(prompt_ids))

    async def _tokenize(self, request: Mapping[str, object]) -> list[int]:
        endpoint = with_forced_mode(PROMPT_LOGPROBS).tokenize  # the mode is vLLM's
        path = endpoint.path if endpoint else "/tokenize"
        answer = await self._post(path, {"model": self.model, **request}, scoring=False)
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise MalformedResponse(f"{path} answered without token ids")
        return [int(t) for t in tokens]

    def skip_reason(self, prompt: Prompt, record: Completion) -> str | None:
        """Why a prompt is not scored in this mode at all (None: it is)."""
        if self.mode == "echo" and prompt.api == "chat":
            return "a chat prompt cannot be echoed without its chat template"
        ids = record.tokens.ids if record.tokens else None
        if self.mode == "token-ids" and not (ids and min(ids) >= 0):
            return ("A's record has no token ids (llama-server's logprobs carry them); "
                    "score with --forced-mode echo")
        return None

    async def _by_native_ids(self, prompt: Prompt, record: Completion) -> Scoring:
        if prompt.api == "chat":
            template = await self._post("/apply-template", dict(prompt.request),
                                        scoring=False)
            text = mapping(template).get("prompt")
            if not isinstance(text, str):
                raise MalformedResponse("/apply-template answered without a prompt")
        else:
            text = str(prompt.request["prompt"])
        # the special tokens (BOS) the server adds to a text prompt itself
        prompt_ids = await self._native_tokenize(text, special=True)
        tokens = record.tokens
        assert tokens is not None and tokens.ids is not None
        ids = tokens.ids
        scored = []
        for n, (token_id, token_text) in enumerate(zip(ids, tokens.text, strict=True)):
            answer = await self._post("/completion", native_next_body(prompt_ids + ids[:n],
                                                                      self.top_k))
            scored.append(parse_native_next(answer, token_id, token_text, self.top_k))
        return scored, False, len(prompt_ids)

    async def _native_tokenize(self, text: str, special: bool) -> list[int]:
        answer = await self._post("/tokenize", {"content": text, "add_special": special},
                                  scoring=False)
        tokens = mapping(answer).get("tokens")
        if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
            raise MalformedResponse("/tokenize answered without token ids")
        return tokens

    async def _by_echo(self, prompt: Prompt, record: Completion) -> Scoring:
        text = str(prompt.request["prompt"])
        answer = await self._post("/v1/completions", echo_body(
            self.model, text + (record.text or ""), self.top_k))
        scored, prompt_tokens = parse_echo(answer, len(text), self.top_k)
        return scored, True, prompt_tokens
