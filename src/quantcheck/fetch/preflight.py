"""Preflight: check that an endpoint can give a meaningful A/B before a prompt is spent.

Checks, each `pass`, `warn` (a soft finding), `fail` (hard: the run would be
meaningless) or `skip`:
- model: the model is listed; `max_model_len` when the server exposes it;
- logprobs: logprobs come back, with the requested number of alternatives;
- greedy: at every position of a probe the chosen token is the top-1 alternative;
- context: a code placed at the start of a long prompt is recalled (a short control
  prompt must recall it too), and the server counts the whole prompt (against the
  length two short prompts' token counts predict);
- reasoning: a reasoning model neither leaks its reasoning into the content nor
  spends max_tokens reasoning;
- template (chat): how the server renders a conversation, and whether its markers are
  tokens the model knows (template_check.py);
- tokenizer: a fingerprint (token ids from `/tokenize`, and prompt token counts),
  compared between A and B by `triage.tokenizers.tokenizer_agreement`.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import EndpointError, ParameterRejected, QuantcheckError
from ..store.engines import UNKNOWN, EngineProfile, profile_of, tokenizers_first
from ..store.folders.run_dir import ServerInfo
from ..store.inputs.prompt_sets import GREEDY_FIELDS
from ..store.records.preflight_records import Check, Fingerprint, Preflight
from ..store.records.run_records import DEFAULT_CONTEXT_TOKENS, Prompt
from ..store.redaction import public_url
from ..store.runtimes import context_length
from ..wire.client import (
    TRANSPORT_ERRORS,
    EndpointClient,
    HTTPStatusError,
    RequestFailed,
    RetryableError,
    server_root,
)
from ..wire.dialects import Generation, MalformedResponse
from ..wire.requests import probe_body, probe_fields, rejection_advice
from .template_check import template_check

# Probed in turn until MIN_GREEDY_POSITIONS positions are checked: a model that stops
# after a token or two (a small base model on a chat prompt) proves nothing with one.
GREEDY_PROBES = ("Write the word echo twelve times, separated by spaces, then count from "
                 "one to ten in words.",
                 "The history of the printing press began in the fifteenth century, when",
                 "List the days of the week, then the months of the year, separated by commas.")
MIN_GREEDY_POSITIONS = 16
REASONING_PROBE = "What is 17 + 25? Answer with the number only."
TOKENIZER_PROBES = ("The quick brown fox jumps over 13 lazy dogs.",
                    "Ünïcödé, emoji 🙂 and CJK 漢字 mixed with code: x = f(y) + 3.14;",
                    "    indented\n\tlines\n\nand  double  spaces")
THINKING_OFF = '--extra-body \'{"chat_template_kwargs": {"enable_thinking": false}}\''
# The context probe's filler, and how many more words of it a second control prompt
# carries to measure its tokens per word.
CALIBRATION_WORDS = 120
_FILLER = ("river", "stone", "quiet", "morning", "garden", "paper", "window", "seven",
           "light", "table", "north", "silver", "market", "winter", "bridge", "yellow")


class PreflightFailed(QuantcheckError):
    """A hard preflight check failed; the message explains which and how to fix it."""


@dataclass
class ProbeShape:
    """How probe requests look: the API and the fields every request of the run carries
    (but its text, length and ending: the probes ask their own questions)."""

    api: str = "chat"
    fields: dict[str, object] = field(default_factory=lambda: dict(GREEDY_FIELDS))

    @classmethod
    def like(cls, prompt: Prompt) -> ProbeShape:
        """Probes shaped like this prompt's request: its API and every other field."""
        return cls(api=prompt.api, fields=probe_fields(prompt.request))


async def run_preflight(client: EndpointClient, model: str, models: list[dict[str, object]],
                        server: ServerInfo, shape: ProbeShape, top_k: int = 20,
                        context_tokens: int = DEFAULT_CONTEXT_TOKENS) -> Preflight:
    """Run every check against one endpoint (a few short requests and one long one)."""
    started = time.perf_counter()
    report = Preflight(endpoint=public_url(client.endpoint), model=model, api=shape.api,
                       max_model_len=context_length(server, model))
    probes = _Probes(client, model, shape, profile_of(server.runtime))
    report.checks.append(_model_check(model, models, report.max_model_len))
    report.checks += await _logprob_checks(probes, top_k, profile_of(server.runtime))
    report.checks.append(await _context_check(probes, context_tokens, report.max_model_len))
    report.checks.append(await _reasoning_check(probes))
    check, report.template = await template_check(client, model, server, shape.api)
    report.checks.append(check)
    report.tokenizer = await tokenizer_fingerprint(client, model, probes, server.runtime)
    recorded = report.tokenizer.method
    report.checks.append(Check("tokenizer", "pass" if recorded else "skip",
                               f"fingerprint recorded ({recorded})" if recorded
                               else "the server reports no token counts"))
    report.seconds = time.perf_counter() - started
    report.settle()
    return report


async def replica_probe(client: EndpointClient, model: str, shape: ProbeShape,
                        runtime: str) -> tuple[Fingerprint, Generation]:
    """What tells two servers of one configuration apart, cheaply: a one-token answer to
    a fixed probe (its `model`, `system_fingerprint`, `weight_version` and prompt token
    count) and the tokenizer fingerprint (the tokenize endpoint's ids of fixed texts)."""
    probes = _Probes(client, model, shape, profile_of(runtime))
    answer = await probes.ask(TOKENIZER_PROBES[0], 1)
    return await tokenizer_fingerprint(client, model, probes, runtime), answer


class _Probes:
    """Sends probe requests shaped like the run's own."""

    def __init__(self, client: EndpointClient, model: str, shape: ProbeShape,
                 profile: EngineProfile | None) -> None:
        self.client, self.model, self.shape, self.profile = client, model, shape, profile
        self.prompt_tokens: dict[str, int] = {}

    async def ask(self, text: str, max_tokens: int, top_k: int = 0,
                  extra: Mapping[str, object] | None = None) -> Generation:
        body = {**probe_body(self.shape.fields, self.shape.api, self.model, text, max_tokens,
                             top_k, self.profile), **(extra or {})}
        attempts = 3
        while True:
            try:
                generation, _ = await self.client.generate(self.shape.api, body, False, top_k)
                break
            except ParameterRejected as exc:
                raise rejection_advice(exc.reason, body, self.profile) from None
            except RequestFailed as exc:
                raise EndpointError(f"preflight request failed: {exc}") from None
            except RetryableError as exc:
                attempts -= 1
                if not attempts:
                    raise EndpointError(f"preflight request failed: {exc}") from None
                await asyncio.sleep(0.5)
        tokens = (generation.usage or {}).get("prompt_tokens")
        if isinstance(tokens, int):
            self.prompt_tokens[text] = tokens
        return generation


def _model_check(model: str, models: list[dict[str, object]], length: int | None) -> Check:
    listed = [str(entry.get("id")) for entry in models]
    context = f", context {length:,} tokens" if length else ""
    if model in listed:
        return Check("model", "pass", f"{model} is listed{context}")
    return Check("model", "fail", f"{model} is not listed by the server "
                 f"(it lists: {', '.join(listed) or 'nothing'})",
                 f"--model {listed[0]}" if listed else None)


# A candidate is asked what its reference was: a fix that changes --top-logprobs on B
# alone is refused against a reference collected earlier (run --a-run).
SAME_ON_THE_REFERENCE = ("Both sides need the same --top-logprobs: against a reference "
                         "collected earlier (--a-run), collect it again with the new value "
                         "too.")


async def _logprob_checks(probes: _Probes, top_k: int, profile: EngineProfile | None
                          ) -> list[Check]:
    if top_k == 0:
        return [Check("logprobs", "skip", "--top-logprobs 0: text only"),
                Check("greedy", "skip", "needs logprobs")]
    limit = profile.top_logprobs_limit if profile else None
    if profile is not None and limit is not None and top_k > limit:
        return [Check("logprobs", "fail", f"asked for {top_k} alternatives per position; "
                      f"{profile.label} answers at most {limit} ({profile.top_logprobs_note})",
                      f"--top-logprobs {limit}"),
                Check("greedy", "skip", "needs logprobs")]
    try:
        generation = await _first_answer(probes, top_k)
    except ParameterRejected as exc:
        if "logprob" not in exc.reason.lower():
            raise  # another field: stop, as collect would, with its fix
        fix = f"{exc.fix} {SAME_ON_THE_REFERENCE}" if exc.fix else None
        return [Check("logprobs", "fail", exc.reason, fix),
                Check("greedy", "skip", "needs logprobs")]
    if generation is None:
        return [Check("logprobs", "warn", f"the {len(GREEDY_PROBES)} probes generated "
                      "nothing, so logprobs could not be checked"),
                Check("greedy", "skip", "nothing generated to check")]
    if not generation.has_logprobs or not len(generation.tokens):
        return [Check("logprobs", "warn", "no logprobs came back: only texts will be "
                      "compared", "start the server with logprobs enabled"),
                Check("greedy", "skip", "needs logprobs")]
    if profile is not None and profile.entry_is_an_alternative:
        return [_k_check(generation, top_k),
                Check("greedy", "skip", f"{profile.label} does not say which token it "
                      "generated (each logprob entry copies one of its alternatives): "
                      "greedy decoding cannot be checked there, and the top alternative is "
                      "taken as the generated token")]
    return [_k_check(generation, top_k), await _greedy_check(probes, generation, top_k)]


async def _first_answer(probes: _Probes, top_k: int) -> Generation | None:
    """The first probe's answer that generated something: an answer with no token and
    no text says nothing about logprobs (the model stopped at once)."""
    for text in GREEDY_PROBES:
        generation = await probes.ask(text, 32, top_k)
        if len(generation.tokens) or generation.text or _completion_tokens(generation):
            return generation
    return None


def _completion_tokens(generation: Generation) -> int:
    tokens = (generation.usage or {}).get("completion_tokens")
    return tokens if isinstance(tokens, int) else 0


def _k_check(generation: Generation, top_k: int) -> Check:
    fewest = min(len(top) for top in generation.tokens.top_text)
    if fewest >= top_k:
        return Check("logprobs", "pass", f"top-{top_k} alternatives at every position")
    return Check("logprobs", "warn", f"asked for {top_k} alternatives per position, the "
                 f"server gave as few as {fewest}",
                 f"--top-logprobs {fewest}, or a server that gives {top_k}. "
                 f"{SAME_ON_THE_REFERENCE}")


def first_non_greedy(generation: Generation) -> str | None:
    """Where the chosen token is not the most likely alternative, described; else None."""
    tokens = generation.tokens
    for position, (token, logprob) in enumerate(zip(tokens.text, tokens.logprob, strict=True)):
        if not tokens.top_text[position] or logprob is None:
            continue
        best, best_logprob = tokens.top_text[position][0], tokens.top_logprob[position][0]
        if token != best and logprob < best_logprob - 1e-6:
            return (f"at position {position} it chose {token!r} (logprob {logprob:.3f}) "
                    f"over {best!r} ({best_logprob:.3f})")
    return None


async def _greedy_check(probes: _Probes, generation: Generation, top_k: int) -> Check:
    positions, used = len(generation.tokens), 1
    where = first_non_greedy(generation)
    while where is None and positions < MIN_GREEDY_POSITIONS and used < len(GREEDY_PROBES):
        generation = await probes.ask(GREEDY_PROBES[used], 32, top_k)
        positions, used = positions + len(generation.tokens), used + 1
        where = first_non_greedy(generation)
    if where is None and positions < MIN_GREEDY_POSITIONS:
        return Check("greedy", "warn", f"only {positions} generated positions to check in "
                     f"{used} probes (the model stops early); the top-1 token was chosen at "
                     "each")
    if where is None:
        return Check("greedy", "pass", f"the top-1 token was chosen at all {positions} "
                     f"positions of {used} probe{'s' * (used > 1)}")
    try:
        retried: Generation | None = await probes.ask(GREEDY_PROBES[used - 1], 32, top_k,
                                                      {"top_k": 1})
    except ParameterRejected:
        retried = None
    if retried is not None and first_non_greedy(retried) is None:
        return Check("greedy", "fail", f"temperature 0 is not greedy on this server: {where}",
                     "--extra-body '{\"top_k\": 1}' (the server samples unless top_k is 1)")
    return Check("greedy", "fail", f"the server does not decode greedily: {where}; the "
                 "request already turns off every penalty it can, so the server applies its "
                 "own (a default repetition penalty or logit bias)",
                 "start the server without default penalties (vLLM: --generation-config vllm; "
                 "llama.cpp: --repeat-penalty 1.0; SGLang: no --sampling-defaults model), "
                 "or name the field with --extra-body")


def needle_prompt(code: str, words: int, seed: int = 0) -> str:
    """A code at the very start, `words` words of filler, then the question."""
    rng = random.Random(seed)
    filler = []
    for n in range(words):
        filler.append(rng.choice(_FILLER) + ("." if n % 12 == 11 else ""))
    return (f"The secret code is {code}. Remember it.\n\n" + " ".join(filler)
            + "\n\nWhat is the secret code given at the very beginning? "
              "Answer with the code only.")


async def _context_check(probes: _Probes, context_tokens: int, length: int | None) -> Check:
    if context_tokens <= 0:
        return Check("context", "skip", "not checked: turned off (--context-tokens 0)")
    code = f"{random.Random(context_tokens).randrange(10**6):06d}"
    wanted = min(context_tokens, length - 256) if length else context_tokens
    note = f" (the server's context is {length:,})" if length and wanted < context_tokens \
        else ""
    control_text = needle_prompt(code, 60)
    try:
        control = await probes.ask(control_text, 16)
    except ParameterRejected as exc:
        return Check("context", "warn", f"the control prompt was refused: {exc}")
    if (unseen := _prompt_unseen(probes.prompt_tokens.get(control_text))) is not None:
        return unseen
    per_word = await _tokens_per_word(probes, code, control_text)
    words = max(int(wanted / per_word) - 60, 60)
    long_text = needle_prompt(code, words, seed=1)
    expected = probes.prompt_tokens.get(control_text, 0) + (words - 60) * per_word
    try:
        answer = await probes.ask(long_text, 16)
    except EndpointError as exc:  # ParameterRejected among them
        return Check("context", "warn", f"a prompt of about {wanted:,} tokens was refused "
                     f"({exc}); the server refuses rather than truncates, but its context "
                     "is shorter than advertised", "--context-tokens N with a smaller N")
    counted = probes.prompt_tokens.get(long_text)
    if counted is not None and counted < 0.8 * expected:
        return Check("context", "fail", f"the server counted {counted:,} prompt tokens for a "
                     f"prompt of about {expected:,.0f}: it truncates long prompts silently",
                     "raise the server's context (vLLM --max-model-len, llama.cpp -c, Ollama "
                     "num_ctx) or keep prompts shorter")
    if code not in control.text:
        return Check("context", "warn", "inconclusive: the model did not repeat the code "
                     "from a short prompt either",
                     "collect and run: --context-tokens 0 skips this check")
    if code not in answer.text and counted is not None:
        return Check("context", "warn", f"the server counted the whole {counted:,}-token "
                     f"prompt, but the model did not recall a code from its start{note} (a "
                     "short prompt recalled it): weak long-context recall, or the engine "
                     "drops context internally (a sliding window, a context shift)",
                     "--context-tokens N with a smaller N to check a shorter context")
    if code not in answer.text:
        return Check("context", "fail", f"a code at the start of a {wanted:,}-token prompt "
                     f"was lost{note} (a short prompt recalled it) and the server reports no "
                     "prompt token count to tell why: it may truncate the context silently",
                     "raise the server's context (vLLM --max-model-len, llama.cpp -c, Ollama "
                     "num_ctx), --context-tokens N with a smaller N, or --context-tokens 0")
    return Check("context", "pass", f"a code at the start of a {wanted:,}-token prompt was "
                 f"recalled{note}")


def _prompt_unseen(counted: int | None) -> Check | None:
    """A fail when the server counts fewer tokens for the 60-word control prompt than
    any tokenizer makes of it: the prompt does not reach the model (seen: llama-server
    with --chat-template given a name it does not know renders every conversation as
    that name, 3 tokens)."""
    if counted is None or counted >= 30:
        return None
    return Check("context", "fail", f"the server counted {counted} prompt tokens for a "
                 "60-word prompt: prompts do not reach the model whole (a chat template "
                 "that drops the message, or a context of a few tokens)",
                 "see the template check; serve the model with its own chat template and "
                 "enough context (llama.cpp -c, vLLM --max-model-len)")


async def _tokens_per_word(probes: _Probes, code: str, control_text: str) -> float:
    """The filler's tokens per word, from two prompts that differ only in its length, so
    what the server adds around every prompt cancels out. Measured on llama-server: its
    ChatML fallback adds 23 tokens to Gemma 3's prompts and the question takes 39; one
    prompt's ratio counted them as filler (1.53 tokens a word against a true 1.08) and
    took a whole prompt for a truncated one."""
    longer = needle_prompt(code, 60 + CALIBRATION_WORDS, seed=2)
    try:
        await probes.ask(longer, 1)
    except EndpointError:  # ParameterRejected among them
        pass
    short, long = probes.prompt_tokens.get(control_text), probes.prompt_tokens.get(longer)
    if short is None or long is None or long <= short:
        return 1.3  # a typical English BPE ratio
    # at least a token a word: a server that under-counts must not make the long
    # prompt thousands of times longer than asked
    return max((long - short) / CALIBRATION_WORDS, 1.0)


async def _reasoning_check(probes: _Probes) -> Check:
    if probes.shape.api != "chat":
        return Check("reasoning", "skip", "completions API: no chat template")
    generation = await probes.ask(REASONING_PROBE, 64)
    text = generation.text
    if re.search(r"</?think>", text) or (generation.reasoning is None
                                          and text.lstrip().lower().startswith("thinking")):
        return Check("reasoning", "warn", "the model's reasoning appears in the content; it "
                     "will be compared as if it were the answer", THINKING_OFF)
    if generation.reasoning and not text.strip():
        return Check("reasoning", "warn", "the model spent all 64 probe tokens reasoning and "
                     "gave no answer: answers may be cut off by max_tokens", THINKING_OFF)
    if generation.reasoning:
        return Check("reasoning", "pass", "the model reasons first; its reasoning is kept "
                     "apart from the answer")
    return Check("reasoning", "pass", "no reasoning in the output")


async def tokenizer_fingerprint(client: EndpointClient, model: str, probes: _Probes,
                                runtime: str = UNKNOWN) -> Fingerprint:
    """Token ids of fixed texts from the server's tokenize endpoint (vLLM, llama.cpp,
    llama-cpp-python; the runtime's own first), plus the prompt token counts the probes
    reported. No ids for a text is no answer: llama-server answers vLLM's request shape
    (without its `content` field) with an empty list."""
    ids: dict[str, list[int]] = {}
    method = None
    root = server_root(client.endpoint)
    for name, endpoint in tokenizers_first(runtime):
        path, key = endpoint.path, endpoint.text_field
        extra = {"model": model} if endpoint.wants_model else {}
        try:
            for text in TOKENIZER_PROBES:
                answer = await client.post_json(root + path, {**extra, key: text})
                ids[text] = [int(t) for t in answer["tokens"]]
                if not ids[text]:
                    raise ValueError(f"{path} gave no token ids")
            method = name
            break
        except (HTTPStatusError, MalformedResponse, KeyError, TypeError, ValueError,
                *TRANSPORT_ERRORS):
            ids = {}
    counts = dict(probes.prompt_tokens)
    if not ids and not counts:
        return Fingerprint()
    return Fingerprint(method=f"{method} tokenize" if method else "prompt token counts",
                       ids=ids, prompt_tokens=counts)


async def check_endpoint(endpoint: str, model: str | None = None,
                         shape: ProbeShape | None = None, top_k: int = 20,
                         context_tokens: int = DEFAULT_CONTEXT_TOKENS,
                         api_key: str | None = None, timeout: float = 600.0) -> Preflight:
    """Every check against one endpoint; an unreachable one raises EndpointError."""
    from ..store.runtimes import choose_model
    from .server_info import describe_server

    async with EndpointClient(endpoint, api_key, timeout) as client:
        models = await client.list_models()
        chosen = choose_model(models, model, public_url(endpoint))
        server = await describe_server(client, models)
        return await run_preflight(client, chosen, models, server, shape or ProbeShape(),
                                   top_k, context_tokens)
