"""The one request builder: every generation body quantcheck sends is made here, from a
prompt's request (or a probe's text), the options of what is asked and the engine's
profile (store/engines.py; None for an engine quantcheck does not know).

A body is, in this key order (JSON keeps it, and a run's recorded bodies are compared):
`model`; the request's fields (a prompt's: `messages` or `prompt`, `max_tokens`, the
greedy fields, its own and --extra-body's; a probe's, the same around its own text),
without the greedy fields the engine misreads at their greedy value
(`EngineProfile.left_out`); the logprobs asked as the API takes them (chat:
`logprobs: true, top_logprobs: K`; legacy completions: `logprobs: K`, or as chat does
where the engine takes no number there, `legacy_asks_like_chat`; none with K = 0); then
what a flow adds: MoE routing asked (`routing_request`), the prefix cache turned off
(`cache_off_field`), unless the request sets it itself. A streamed body then carries
`stream: true` and the usage asked for in the last chunk (`streamed`, added by the
client as it sends). The bodies of teacher-forced scoring (`scoring_body`), the
ladder's prefill probe, the certificate's filler and the judge's question are made
here too; a server's refusal of a body is read back into the fix it needs
(`rejection_advice`).

tests/test_structure.py fails on a generation field (`max_tokens`, `top_logprobs`, ...)
written into a body anywhere else but the lab's servers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import ParameterRejected
from ..store.engines import ENGINES, EngineProfile
from ..store.inputs.prompt_entries import GREEDY_FIELDS
from ..store.records.certificate_records import Probe

# The fields of a preflight probe's request that are the probe's own, not the run's:
# a prompt set whose stop is "\n" on a model that starts with a newline would make
# every probe generate nothing.
PROBE_OWN_FIELDS = ("messages", "prompt", "max_tokens", "stop", "stop_token_ids")


def without_misread(fields: Mapping[str, object], profile: EngineProfile | None
                    ) -> dict[str, object]:
    """Request fields without the greedy ones this engine misreads at their greedy value
    (TGI refuses `top_p: 1.0` and turns `presence_penalty: 0` into a repetition penalty)."""
    if profile is None:
        return dict(fields)
    return {key: value for key, value in fields.items()
            if not (key in profile.left_out and GREEDY_FIELDS.get(key) == value)}


def with_logprobs(body: dict[str, object], api: str, top_k: int, like_chat: bool = False
                  ) -> dict[str, object]:
    """`body` asking for the top-k alternatives of every generated token: chat takes
    `logprobs: true` with `top_logprobs: K`, legacy completions `logprobs: K` (or as chat
    does, `like_chat`, where the engine takes no number there)."""
    if top_k <= 0:
        return body
    if api == "chat" or like_chat:
        return {**body, "logprobs": True, "top_logprobs": top_k}
    return {**body, "logprobs": top_k}


def generation_body(fields: Mapping[str, object], api: str, model: str, top_logprobs: int,
                    profile: EngineProfile | None, routed_experts: bool = False,
                    cache_off: bool = False) -> dict[str, object]:
    """The exact body sent for a request's `fields` on `api` (the client adds the
    streaming fields, `streamed`): logprobs asked as the engine takes them, without the
    greedy fields it misreads; MoE routing asked where the engine wants it asked
    (`routed_experts`), and the prefix cache turned off where its profile can do it per
    request (`cache_off`), unless the request sets it itself."""
    like_chat = profile is not None and profile.legacy_asks_like_chat
    body = with_logprobs({"model": model, **without_misread(fields, profile)}, api,
                         top_logprobs, like_chat)
    if profile is None:
        return body
    if routed_experts and profile.routing_request:
        body[profile.routing_request] = True  # vLLM sends it when started to
    field = profile.cache_off_field
    if cache_off and field is not None and field not in body:
        body[field] = False
    return body


def streamed(body: Mapping[str, object]) -> dict[str, object]:
    """A generation body as it is sent streamed: the usage asked for in the last chunk."""
    return {**body, "stream": True, "stream_options": {"include_usage": True}}


def probe_fields(request: Mapping[str, object]) -> dict[str, object]:
    """The fields a preflight probe shares with a run's request (not its text, length or
    ending)."""
    return {k: v for k, v in request.items() if k not in PROBE_OWN_FIELDS}


def probe_body(fields: Mapping[str, object], api: str, model: str, text: str,
               max_tokens: int, top_k: int, profile: EngineProfile | None
               ) -> dict[str, object]:
    """A preflight probe: `text` asked with the run's request fields, `max_tokens` long."""
    body: dict[str, object] = {"model": model, **without_misread(fields, profile),
                               "max_tokens": max_tokens}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
        body.pop("chat_template_kwargs", None)
    like_chat = profile is not None and profile.legacy_asks_like_chat
    return with_logprobs(body, api, top_k, like_chat)


def filler_fields(api: str, text: str, max_tokens: object) -> dict[str, object]:
    """The request fields of a text that is no prompt of the set (the certificate's
    filler probes), for `generation_body`."""
    fields: dict[str, object] = {"max_tokens": max_tokens, "temperature": 0}
    fields.update({"messages": [{"role": "user", "content": text}]}
                  if api == "chat" else {"prompt": text})
    return fields


def certificate_body(fields: Mapping[str, object], api: str, model: str, top_logprobs: int,
                     profile: EngineProfile | None, probe: Probe, routed_experts: bool
                     ) -> dict[str, object]:
    """A determinism certificate's probe: `generation_body`, the prefix cache left on or
    turned off as the probe says (where the profile has a field for it, unless the
    request turns it off itself), sampled at the probe's seed and temperature when it
    has a seed, MoE routing asked last."""
    body = generation_body(fields, api, model, top_logprobs, profile)
    field = profile.cache_off_field if profile is not None else None
    if field and body.get(field) is not False:
        body[field] = probe.cache
    if probe.seed is not None:
        body.update(temperature=probe.temperature, seed=probe.seed)
    if routed_experts and profile is not None and profile.routing_request:
        body[profile.routing_request] = True
    return body


def judge_body(model: str, messages: list[dict[str, str]], max_tokens: int
               ) -> dict[str, object]:
    """The judge's question: greedy, no logprobs."""
    return {"model": model, "messages": messages, "temperature": 0, "max_tokens": max_tokens}


def prefill_body(model: str, text: str, profile: EngineProfile | None) -> dict[str, object]:
    """A one-token completions request whose prompt is computed cold where the engine's
    profile can turn its prefix cache off per request (the ladder's prefill rate)."""
    body: dict[str, object] = {"model": model, "prompt": text, "max_tokens": 1,
                               "temperature": 0}
    if profile is not None and profile.cache_off_field:
        body[profile.cache_off_field] = False
    return body


def prompt_logprobs_body(model: str, ids: list[int], top_k: int) -> dict[str, object]:
    """Teacher-forced scoring by token ids (vLLM's `prompt_logprobs`): one token generated,
    every prompt position scored."""
    return {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0,
            "prompt_logprobs": top_k}


def native_next_body(ids: list[int], top_k: int) -> dict[str, object]:
    """llama-server's native `/completion`: the next token's top-k after `ids`."""
    return {"prompt": ids, "n_predict": 1, "n_probs": top_k, "temperature": 0}


def echo_body(model: str, text: str, top_k: int) -> dict[str, object]:
    """Legacy completions echoing `text` with its tokens' logprobs."""
    return {"model": model, "prompt": text, "echo": True, "logprobs": top_k,
            "max_tokens": 1, "temperature": 0}


def scoring_body(body: Mapping[str, object], cache_field: str | None,
                 extra_body: Mapping[str, object]) -> dict[str, object]:
    """A scoring request as sent: the prefix cache turned off by `cache_field` (None: not
    touched), then --extra-body (a null value drops a field)."""
    off = {cache_field: False} if cache_field else {}
    return {k: v for k, v in {**body, **off, **extra_body}.items() if v is not None}


def asked_alternatives(body: Mapping[str, object]) -> int | None:
    """How many alternatives a body asks for (None: none, or not as a number)."""
    for key in ("top_logprobs", "logprobs"):
        value = body.get(key)
        if type(value) is int:
            return value
    return None


_LIMIT_SAID = re.compile(r"max(?:imum)? allowed:?\s*(\d+)|at most (\d+)|<=\s*(\d+)|"
                         r"less than or equal to (\d+)")


def rejection_advice(message: str, body: Mapping[str, object],
                     profile: EngineProfile | None = None) -> ParameterRejected:
    """A server's refusal (HTTP 400) of `body` as an error that names the fix."""
    if _refuses_logprobs(message.lower(), profile):
        return ParameterRejected(f"the server rejected the logprobs request: {message}",
                                 f"{_logprobs_fix(message.lower(), body, profile)} (or "
                                 "--top-logprobs 0 to collect text only).")
    named = [key for key in body if key not in ("model", "messages", "prompt")
             and re.search(rf"\b{re.escape(key)}\b", message)]
    if named:
        drop = ", ".join(f'"{key}": null' for key in named)
        return ParameterRejected(f"the server rejected a request parameter: {message}",
                                 f"--extra-body '{{{drop}}}' to leave it out.")
    return ParameterRejected(f"the server rejected the request (HTTP 400): {message}")


def _refuses_logprobs(lowered: str, profile: EngineProfile | None) -> bool:
    """Whether a refusal is of the logprobs asked: it names them, or the field the
    engine's profile says its refusal names them by (`logprobs_named`). For an engine
    quantcheck does not know, the fallback: any name a known engine's refusal uses."""
    names = {"logprob", profile.logprobs_named} if profile is not None else \
        {"logprob", *(p.logprobs_named for p in ENGINES.values())}
    return any(name and name in lowered for name in names)


# The fallback for an engine quantcheck does not know: a refusal naming this start
# option (TensorRT-LLM's TensorRT backend's) asks for a server started otherwise.
_START_OPTION_SAID = "gather_generation_logits"


def _logprobs_fix(lowered: str, body: Mapping[str, object], profile: EngineProfile | None
                  ) -> str:
    """What to ask instead: the engine's fixed limit where more was asked; how to start
    an engine that refuses logprobs within its limit (`logprobs_start_fix`); else the
    limit its refusal says (an operator's setting), or fewer."""
    asked = asked_alternatives(body)
    limit = profile.top_logprobs_limit if profile is not None else None
    if limit is not None and asked is not None and asked > limit:
        return f"--top-logprobs {limit}"
    if profile is not None and profile.logprobs_start_fix:
        return profile.logprobs_start_fix
    if profile is None and _START_OPTION_SAID in lowered:
        return next(p.logprobs_start_fix for p in ENGINES.values() if p.logprobs_start_fix)
    said = _LIMIT_SAID.search(lowered)
    value = next((g for g in said.groups() if g), None) if said else None
    return f"--top-logprobs {value}" if value else "a smaller --top-logprobs"
