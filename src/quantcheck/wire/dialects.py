"""Normalize every server dialect's response (streamed or not) into one Generation.

Dialects seen in the wild:
- vLLM chat: `logprobs.content[]` entries {token, logprob, bytes, top_logprobs[]};
  vLLM legacy completions: `logprobs` {tokens, token_logprobs, top_logprobs: [dict]}.
- SGLang: like vLLM, may return fewer than k alternatives, and sends finish_reason
  in a separate final chunk with an empty delta.
- llama.cpp llama-server: chat-style entries that also carry token `id`s, on
  /v1/completions too; holds back split UTF-8 bytes, so a stream chunk can have an
  empty delta and a token whose string is not valid text. Its native `/completion`
  (teacher-forced scoring) answers `completion_probabilities[]` entries whose
  `top_logprobs[]` are {id, token, bytes, logprob}.
- llama-cpp-python: legacy completions with k+1 alternatives (the sampled token is
  added), chat entries with `bytes: null`; a tool call also as the older
  `function_call`.
- MLX (mlx_lm.server): chat-style entries {id, token, logprob, top_logprobs[{id, token,
  logprob}]} on /v1/completions too, asked for as chat asks; each entry a copy of the
  first of its unsorted alternatives (`chosen_as_top` reads the generated token as the
  top one); token strings are vocabulary pieces; streams carry no logprobs.
- TGI: chat entries {token, logprob, top_logprobs[{token, logprob}]}, streamed too;
  completions carry none; finish reasons `eos_token` and `stop_sequence` (read as
  `stop`), and `""` on a completions stream's chunks before the last.
- TensorRT-LLM: vLLM's shapes (chat entries with bytes, completions columns), streamed
  too; every model field written, null or not; alternatives carry `top_logprobs: null`.
Expert routing (MoE): vLLM's `routed_experts` on a whole answer's choice, SGLang's
`sglext.routed_experts` (whole, or a stream's last chunk); see routing.py. vLLM
choices may also carry `token_ids`.
Tool calls: `message.tool_calls[]` {id, type, function: {name, arguments}} (vLLM sends
`[]` when there is none); streamed as `delta.tool_calls[]` pieces tied together by
`index`: the name once, the arguments string in fragments (SGLang and llama.cpp send
`arguments: ""` with the name, vLLM leaves it out).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, TypeVar

import msgspec
import numpy as np
import orjson

from ..store.records.run_records import JsonValue, Tokens, ToolCall
from .routing import RoutingUnusable, decode_npy_routing, decode_raw_routing

_Shape = TypeVar("_Shape", bound=msgspec.Struct)
_Decoded = TypeVar("_Decoded")
_Value = TypeVar("_Value")


@dataclass
class Generation:
    """What one response said, whatever the dialect."""

    text: str = ""
    reasoning: str | None = None
    tokens: Tokens = field(default_factory=Tokens)
    has_logprobs: bool = False
    finish_reason: str | None = None
    usage: dict[str, object] | None = None
    model: str | None = None
    system_fingerprint: str | None = None
    weight_version: str | None = None  # SGLang's metadata.weight_version
    tool_calls: list[ToolCall] = field(default_factory=list)
    # MoE routing as sent: (rows, layers, k) from vLLM, flat int32 from SGLang; or why
    # what was sent is no routing (routing.py)
    routing: np.ndarray | None = None
    routing_problem: str | None = None


class StreamError(Exception):
    """The server sent an error object inside an otherwise successful response."""


class MalformedResponse(Exception):
    """The body is not JSON, or not shaped like any OpenAI-compatible response."""


# The wire shapes, decoded straight from bytes by msgspec: fields quantcheck does not
# read are skipped without building dicts for them, which makes decoding a top-20
# response faster than parsing it into plain dicts (bench/collect_throughput.py). The
# two a response holds thousands of are not tracked by the garbage collector (they can
# hold no cycle): a tenth off decoding, and fewer collections.

class _Alternative(msgspec.Struct, gc=False):
    token: str = ""
    logprob: float | None = None


class _Entry(msgspec.Struct, gc=False):  # chat style, also llama-server's completions
    token: str = ""
    logprob: float | None = None
    bytes: list[int] | None = None
    id: int | None = None
    top_logprobs: list[_Alternative] | None = None


class _Logprobs(msgspec.Struct):
    content: list[_Entry] | None = None
    tokens: list[str] | None = None  # legacy completions: parallel columns
    token_logprobs: list[float | None] | None = None
    top_logprobs: list[dict[str, float | None] | None] | None = None


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | dict[str, object] | None = None  # a string; a few servers send an object


class _ToolCallPart(msgspec.Struct):  # a whole call, or a streamed piece of one
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Message(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCallPart] | None = None
    function_call: _Function | None = None


class _Choice(msgspec.Struct):
    index: int | None = 0
    message: _Message | None = None
    delta: _Message | None = None
    text: str | None = None
    logprobs: _Logprobs | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = None  # vLLM's return_token_ids
    routed_experts: str | None = None  # vLLM


class _SglExt(msgspec.Struct):
    routed_experts: str | None = None


class _Body(msgspec.Struct):
    model: str | None = None
    system_fingerprint: str | None = None
    usage: dict[str, object] | None = None
    error: object = None
    choices: list[_Choice] | None = None
    sglext: _SglExt | None = None
    metadata: object = None  # SGLang: {"weight_version": ...}, whole answers only


_BODY = msgspec.json.Decoder(_Body)
_BODIES = msgspec.json.Decoder(list[_Body])


def chosen_as_top(tokens: Tokens) -> None:
    """Each position's token read as its top alternative: for an engine whose logprob
    entries copy one of their unsorted alternatives instead of naming the generated token
    (right under greedy decoding only). The alternatives' ids are not kept, so no ids."""
    for position, (texts, values) in enumerate(zip(tokens.top_text, tokens.top_logprob,
                                                   strict=True)):
        if texts:
            tokens.text[position], tokens.logprob[position] = texts[0], values[0]
    tokens.ids = None
    tokens.raw_bytes = None


def parse_response(raw: bytes, top_k: int) -> Generation:
    """A non-streamed chat or completions response body, as bytes."""
    return _generation([_decode(raw, _BODY, _Body)], top_k)


_SSE_DATA = re.compile(rb"^data:[ \t]*(.*)$", re.MULTILINE)  # JSON ignores a trailing \r
TOKEN_ID_LIMIT = 2**63  # ids are stored as int64 at most (store/folders/token_columns.py)


class EventStream:
    """Cuts the `data:` payloads out of a server-sent event stream as bytes arrive,
    however the network splits them: one regex per read over the complete lines, the
    rest kept for the next read (linear in the stream's size, also for a line that
    never ends). `start` keeps the first bytes, to say what came back instead."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self.size = 0
        self.payloads = 0
        self.start = b""

    def feed(self, piece: bytes) -> list[bytes]:
        if len(self.start) < 200:
            self.start += piece[:200 - len(self.start)]
        self.size += len(piece)
        cut = piece.rfind(b"\n") + 1
        if not cut:
            self._pending += piece
            return []
        lines = bytes(self._pending) + piece[:cut] if self._pending else piece[:cut]
        self._pending = bytearray(piece[cut:])
        return self._found(_SSE_DATA.findall(lines))

    def close(self) -> list[bytes]:
        """The payload of a last line that ended without a newline, if any."""
        rest, self._pending = self._pending, bytearray()
        return self._found(_SSE_DATA.findall(rest))

    def _found(self, payloads: list[bytes]) -> list[bytes]:
        self.payloads += len(payloads)
        return payloads


class StreamAccumulator:
    """Give it the SSE `data:` payloads of a stream as bytes; call `finish()` at the end.

    The payloads are decoded together at the end: one parse and one column
    conversion per response instead of one per token chunk.
    """

    def __init__(self, top_k: int) -> None:
        self.top_k = top_k
        self._parts: list[bytes] = []  # each payload after a comma

    def add(self, payloads: list[bytes]) -> None:
        for payload in payloads:
            self._parts += (b",", payload)

    def finish(self) -> Generation:
        # one join makes the JSON array (a stream's answer is copied once, not thrice)
        raw = b"".join([b"[", *self._parts[1:], b"]"])
        return _generation(_decode(raw, _BODIES, list[_Body]), self.top_k)


def first_output(payload: bytes) -> bool:
    """Whether one stream payload carries generated output (for time to first token)."""
    try:
        body = _BODY.decode(payload)
    except msgspec.MsgspecError:
        return False
    for choice in body.choices or ():
        message = choice.delta or choice.message
        if (message and (message.content or message.reasoning_content or message.reasoning
                         or message.tool_calls or message.function_call)) \
                or choice.text or choice.logprobs:
            return True
    return False


def _decode(raw: bytes, decoder: msgspec.json.Decoder[_Decoded], shape: type[_Decoded]
            ) -> _Decoded:
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError:
        pass  # e.g. a number sent as a string: try again, leniently
    except msgspec.DecodeError as exc:
        raise MalformedResponse(f"malformed JSON from server: {exc}") from None
    try:
        loose = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:  # a typed field went wrong before the JSON did
        raise MalformedResponse(f"malformed JSON from server: {exc}") from None
    try:
        return msgspec.convert(loose, shape, strict=False)
    except msgspec.ValidationError as exc:
        raise MalformedResponse(f"unexpected response shape: {exc}") from None


def _generation(bodies: list[_Body], top_k: int) -> Generation:
    """Response bodies (one, or a stream's chunks) -> Generation, column by column:
    each step is one comprehension over all chunks rather than a call per chunk."""
    for body in bodies:
        if body.error:
            message = body.error.get("message", body.error) if isinstance(body.error, dict) \
                else body.error
            raise StreamError(str(message))
    choices = _first_choices(bodies)
    messages = [choice.message or choice.delta for choice in choices]
    pieces = [(message.content if message else choice.text) or ""
              for message, choice in zip(messages, choices, strict=True)]
    reasoning = [m.reasoning_content or m.reasoning or "" for m in messages if m]
    finish_reasons = [choice.finish_reason for choice in choices if choice.finish_reason]
    generation = Generation(
        text="".join(pieces), reasoning="".join(reasoning) or None,
        finish_reason=_FINISH_NAMES.get(finish_reasons[-1], finish_reasons[-1])
        if finish_reasons else None,
        model=_last([body.model for body in bodies]),
        system_fingerprint=_last([body.system_fingerprint for body in bodies]),
        weight_version=_weight_version(_last([body.metadata for body in bodies])),
        usage=_storable_usage(_last([body.usage for body in bodies])),
        tool_calls=_tool_calls([m for m in messages if m]))
    logprobs = [choice.logprobs for choice in choices if choice.logprobs]
    generation.has_logprobs = bool(logprobs)
    entries = [entry for lp in logprobs for entry in lp.content or ()]
    if entries:
        _extend_from_entries(generation.tokens, entries, top_k)
    for lp in logprobs:
        if lp.tokens is not None:
            _append_legacy(generation.tokens, lp, top_k)
    _refuse_non_finite(generation.tokens)
    _take_token_ids(generation.tokens, [i for c in choices for i in c.token_ids or ()])
    generation.routing, generation.routing_problem = _routing(choices, bodies)
    return generation


# Finish reasons spelt otherwise (TGI's completions: the end-of-sequence token, a stop
# string), under the name every other engine uses
_FINISH_NAMES = {"eos_token": "stop", "stop_sequence": "stop"}


# A logprob is at most 0; rounding may put one a hair above it, never this far
LOGPROB_CEILING = 0.01


def _a_logprob(value: float) -> bool:
    return math.isfinite(value) and value <= LOGPROB_CEILING


def _refuse_non_finite(tokens: Tokens) -> None:
    """Every logprob a finite number at most 0. NaN and the infinities (literals, or
    strings such as "NaN" and "-Infinity", which the lenient decoding turns into floats)
    would reach the report's statistics, and JSON cannot hold them; a positive one is no
    log-probability: the answer is refused."""
    chosen = [value for value in tokens.logprob if value is not None]
    # a sum over all of them is cheap (a NaN or an infinity makes the sum one); every
    # value finite, each position's alternatives are ranked as parsed, highest first, so
    # the highest of all is among the first ones (a tenth of the values: 70 us of a
    # top-20 answer's 2 ms, bench/collect_throughput.py). Only an answer that fails it is
    # looked into, position by position
    firsts = [values[0] for values in tokens.top_logprob if values]
    if math.isfinite(sum(chosen)) and math.isfinite(sum(chain.from_iterable(
            tokens.top_logprob))) and all(_a_logprob(max(column, default=0.0))
                                          for column in (chosen, firsts)):
        return
    for position, value in enumerate(tokens.logprob):
        if value is not None and not _a_logprob(value):
            raise MalformedResponse(f"token {position}'s logprob is {value}, not a finite "
                                    "number at most 0")
    for position, values in enumerate(tokens.top_logprob):
        wrong = next((value for value in values if not _a_logprob(value)), None)
        if wrong is not None:
            raise MalformedResponse(f"an alternative's logprob at token {position} is "
                                    f"{wrong}, not a finite number at most 0")


def finite_logprob(value: float, what: str) -> float:
    """`value`, or a MalformedResponse saying `what` is not a finite number at most 0."""
    if not _a_logprob(value):
        raise MalformedResponse(f"{what} is {value}, not a finite number at most 0")
    return value


def _take_token_ids(tokens: Tokens, ids: list[int]) -> None:
    """vLLM's `token_ids`, when the logprob entries carried none and they match up."""
    if tokens.ids is None and ids and len(ids) == len(tokens.text):
        if not all(0 <= i < TOKEN_ID_LIMIT for i in ids):
            raise MalformedResponse("a token id in token_ids is out of range")
        tokens.ids = ids


def _routing(choices: list[_Choice], bodies: list[_Body]
             ) -> tuple[np.ndarray | None, str | None]:
    """The routing an answer carried, or why it is none: a routing problem never fails
    the answer."""
    vllm = next((c.routed_experts for c in choices if c.routed_experts), None)
    sglang = next((b.sglext.routed_experts for b in bodies
                   if b.sglext and b.sglext.routed_experts), None)
    try:
        if vllm is not None:
            return decode_npy_routing(vllm), None
        return (decode_raw_routing(sglang) if sglang is not None else None), None
    except RoutingUnusable as exc:
        return None, str(exc)


def _first_choices(bodies: list[_Body]) -> list[_Choice]:
    """Choice 0 of every body (quantcheck asks for one answer). A response with no
    choice at all, or two under one index, is malformed, never an empty answer."""
    found = [body.choices or () for body in bodies]  # a stream's chunks hold one each
    for several in (each for each in found if len(each) > 1):
        indices = [choice.index or 0 for choice in several]
        if len(set(indices)) != len(indices):
            raise MalformedResponse(f"{len(indices)} choices under index "
                                    f"{max(indices, key=indices.count)} in one answer "
                                    "(quantcheck asks for one choice)")
    if not any(found):
        raise MalformedResponse("no choices in the answer")
    choices = [choice for each in found for choice in each if not choice.index]
    if not choices:
        raise MalformedResponse("no choice with index 0 in the answer")
    if len(bodies) == 1 and choices[0].message is None and choices[0].text is None:
        raise MalformedResponse("choice 0 carries neither a message nor a text")
    return choices


def _tool_calls(messages: list[_Message]) -> list[ToolCall]:
    """The calls of a message, or of a stream's deltas assembled: a piece with an
    `index` joins that call; one without joins the last call unless it names a tool
    or carries an id (then it starts one, as every piece of a whole message does)."""
    parts = [part for message in messages for part in message.tool_calls or ()]
    if not parts:  # llama-cpp-python also sends its call as function_call: counted once
        parts = [_ToolCallPart(function=m.function_call) for m in messages if m.function_call]
    calls: dict[tuple[str, int], _CallPieces] = {}  # by index, or by the piece it began
    key: tuple[str, int] | None = None
    for number, part in enumerate(parts):
        function = part.function or _Function()
        if part.index is not None:
            key = ("index", part.index)
        elif key is None or part.id or function.name:
            key = ("piece", number)
        call = calls.setdefault(key, _CallPieces())
        call.id = call.id or part.id
        if function.name and function.name != call.name:
            call.name += function.name  # a name sent in fragments
        if isinstance(function.arguments, dict):
            call.arguments.append(_arguments_text(function.arguments))
        elif function.arguments:
            call.arguments.append(function.arguments)
    return [_tool_call(n, call) for n, call in enumerate(calls.values())]


@dataclass
class _CallPieces:
    """One tool call as its pieces arrive: its id, its name and its argument strings."""

    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def _arguments_text(arguments: dict[str, object]) -> str:
    """Arguments a server sent as an object, written as the JSON string the format
    expects; msgspec writes what orjson cannot (integers beyond 64 bits, deep nesting)."""
    try:
        return orjson.dumps(arguments).decode()
    except orjson.JSONEncodeError:
        return msgspec.json.encode(arguments).decode()


def _tool_call(number: int, call: _CallPieces) -> ToolCall:
    if not call.name:
        raise MalformedResponse(f"tool call {number} names no function")
    arguments = "".join(call.arguments)
    return ToolCall(name=call.name, arguments=arguments,
                    parsed_arguments=_parsed_arguments(arguments), id=call.id)


def _parsed_arguments(arguments: str) -> JsonValue:
    """The arguments parsed, when they are JSON the run's lines can hold exactly; None
    when they are not JSON, or hold an integer beyond 64 bits, nesting deeper than 254
    levels, a lone surrogate or a number beyond a float's range (the string as sent is
    kept whatever they hold)."""
    try:
        parsed: JsonValue = json.loads(arguments, parse_constant=_not_json,
                                       parse_float=_finite_float)
        orjson.dumps(parsed)
    except (ValueError, RecursionError, orjson.JSONEncodeError):
        return None
    return parsed


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond a float's range")
    return value


def _storable_usage(usage: dict[str, object] | None) -> dict[str, object] | None:
    """The usage object, if it can be written as sent (64-bit integers, sane nesting)."""
    if usage is None:
        return None
    try:
        orjson.dumps(usage)
    except orjson.JSONEncodeError as exc:
        raise MalformedResponse(f"the usage object cannot be stored: {exc}") from None
    return usage


def _weight_version(metadata: object) -> str | None:
    """SGLang's `metadata.weight_version`: which weights answered (it changes when
    weights are updated in place); None when the answer names none."""
    if not isinstance(metadata, dict):
        return None
    version = metadata.get("weight_version")
    return version if isinstance(version, str) and version else None


def _last(values: list[_Value | None]) -> _Value | None:
    present = [value for value in values if value]
    return present[-1] if present else None


def _extend_from_entries(tokens: Tokens, entries: list[_Entry], top_k: int) -> None:
    """Chat-style entries ({token, logprob, top_logprobs, bytes, id}) onto the columns.
    Comprehensions, and checks over all positions at once: this runs for every answer
    (bench/collect_throughput.py)."""
    texts = [entry.token for entry in entries]
    top_lists = [entry.top_logprobs or () for entry in entries]
    top_logprob: list[list[Any]] = [[top.logprob for top in tops] for tops in top_lists]
    top_text = [[top.token for top in tops] for tops in top_lists]
    if not _ranked(top_logprob, top_k):
        for position, values in enumerate(top_logprob):
            if None in values or 0 < top_k < len(values) or values != sorted(values,
                                                                           reverse=True):
                top_text[position], top_logprob[position] = _top_columns(
                    top_text[position], values, top_k)
    tokens.text += texts
    tokens.logprob += [entry.logprob for entry in entries]
    tokens.top_text += top_text
    tokens.top_logprob += top_logprob
    ids = [entry.id for entry in entries]
    if ids.count(None) != len(ids):
        wrong = next((i for i in ids if i is not None and not 0 <= i < TOKEN_ID_LIMIT), None)
        if wrong is not None:
            raise MalformedResponse(f"token id {wrong} is out of range (0 to 2^63 - 1)")
        tokens.ids = [-1 if token_id is None else token_id for token_id in ids]
    raws = [entry.bytes for entry in entries]
    if raws.count(None) != len(raws):
        _keep_differing_bytes(tokens, raws, texts)


def _ranked(rows: list[list[Any]], top_k: int) -> bool:
    """Whether every position's alternatives are as kept: each with a logprob, at most
    k (k 0: any number), highest first; checked for all positions at once."""
    try:
        sum(chain.from_iterable(rows))  # a None raises; a third of the time `None in` takes
    except TypeError:
        return False
    if 0 < top_k < max(map(len, rows), default=0):
        return False
    return [sorted(values, reverse=True) for values in rows] == rows


def _keep_differing_bytes(tokens: Tokens, raws: list[list[int] | None], texts: list[str]
                          ) -> None:
    """The servers' bytes of each token, where they differ from its text in UTF-8."""
    try:
        differing = [raw is not None and bytes(raw) != text.encode("utf-8", "surrogatepass")
                     for raw, text in zip(raws, texts, strict=True)]
    except ValueError:  # bytes() takes only 0 to 255
        wrong = next(raw for raw in raws if raw and not 0 <= min(raw) <= max(raw) <= 255)
        raise MalformedResponse(f"token bytes {wrong[:8]} are not bytes (0 to 255)") from None
    if any(differing):
        tokens.raw_bytes = [raw if differs else None
                            for raw, differs in zip(raws, differing, strict=True)]


def _append_legacy(tokens: Tokens, logprobs: _Logprobs, top_k: int) -> None:
    texts = logprobs.tokens or []
    token_logprobs = logprobs.token_logprobs or []
    top_lists = logprobs.top_logprobs or []
    for position, token in enumerate(texts):
        alternatives = (top_lists[position] if position < len(top_lists) else None) or {}
        logprob = token_logprobs[position] if position < len(token_logprobs) else None
        tokens.append(token, logprob, *_top_columns(list(alternatives),
                                                    list(alternatives.values()), top_k))


def _top_columns(texts: list[str], logprobs: list[float | None], top_k: int
                 ) -> tuple[list[str], list[float]]:
    """The alternatives as (tokens, logprobs), highest first, cut to k.

    Servers usually send them sorted; otherwise a stable sort keeps their order among
    exact ties. Alternatives without a logprob are dropped; extra ones beyond the
    requested k (llama-cpp-python adds the sampled token) are cut off.
    """
    kept = [(text, value) for text, value in zip(texts, logprobs, strict=True)
            if value is not None]
    kept.sort(key=lambda pair: -pair[1])
    if 0 < top_k < len(kept):
        kept = kept[:top_k]
    return [text for text, _ in kept], [value for _, value in kept]


# --- teacher forcing: a prompt scored token by token ------------------------------------

# B's logprob of the forced token (None when B does not say), and B's top-k there.
ScoredPosition = tuple[float | None, tuple[list[str], list[float]]]


class _PromptLogprob(msgspec.Struct):
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class _ScoredChoice(msgspec.Struct):
    prompt_logprobs: list[dict[str, _PromptLogprob] | None] | None = None
    logprobs: _Logprobs | None = None


class _ScoredBody(msgspec.Struct):
    choices: list[_ScoredChoice]
    usage: dict[str, object] | None = None


def _converted(answer: object, shape: type[_Shape], what: str) -> _Shape:
    try:
        return msgspec.convert(answer, shape, strict=False)
    except msgspec.ValidationError as exc:
        raise MalformedResponse(f"unexpected {what}: {exc}") from None


def _scored_choice(answer: object) -> tuple[_ScoredChoice, dict[str, object]]:
    body = _converted(answer, _ScoredBody, "scoring answer")
    if not body.choices:
        raise MalformedResponse("no choices in the scoring answer")
    return body.choices[0], body.usage or {}


def parse_prompt_logprobs(answer: object, ids: list[int], start: int, top_k: int
                          ) -> list[ScoredPosition]:
    """vLLM's `prompt_logprobs` (a map of token id to logprob, rank and decoded token
    per prompt position) for the ids from position `start` on."""
    choice, _ = _scored_choice(answer)
    if choice.prompt_logprobs is None:
        raise MalformedResponse("the answer has no prompt_logprobs")
    scored = []
    for token, entry in zip(ids, choice.prompt_logprobs[start:], strict=False):
        entry = entry or {}
        for value in entry.values():
            finite_logprob(value.logprob, "a prompt logprob")
        ranked = sorted((v for v in entry.values() if v.rank is not None and v.rank <= top_k),
                        key=lambda v: v.rank or 0)
        own = entry.get(str(token))
        scored.append((own.logprob if own else None,
                       ([v.decoded_token or "" for v in ranked], [v.logprob for v in ranked])))
    return scored


def parse_echo(answer: object, prompt_chars: int, top_k: int
               ) -> tuple[list[ScoredPosition], int]:
    """Legacy completions with `echo`: the logprobs of the echoed text after the first
    `prompt_chars` characters, without the tokens generated past it; and how many
    echoed tokens come before them (the prompt's length in tokens)."""
    choice, usage = _scored_choice(answer)
    logprobs = choice.logprobs
    if logprobs is None or logprobs.tokens is None:
        raise MalformedResponse("the echo answer has no token logprobs")
    tokens = logprobs.tokens
    values = logprobs.token_logprobs or []
    tops = logprobs.top_logprobs or []
    generated = usage.get("completion_tokens")
    end = len(tokens) - (generated if isinstance(generated, int) and generated > 0 else 0)
    scored = []
    start = _boundary(tokens, prompt_chars)
    for n in range(start, end):
        alternatives = (tops[n] if n < len(tops) else None) or {}
        for value in [values[n] if n < len(values) else None, *alternatives.values()]:
            if value is not None:
                finite_logprob(value, "an echoed logprob")
        top = sorted(((t, v) for t, v in alternatives.items() if v is not None),
                     key=lambda kv: -kv[1])[:top_k]
        scored.append((values[n] if n < len(values) else None,
                       ([t for t, _ in top], [v for _, v in top])))
    return scored, start


class _NativeAlternative(msgspec.Struct):
    id: int
    logprob: float
    token: str = ""


class _NativeProbability(msgspec.Struct):
    top_logprobs: list[_NativeAlternative] = []


class _NativeCompletion(msgspec.Struct):
    completion_probabilities: list[_NativeProbability]


def parse_native_next(answer: object, token_id: int, token_text: str, top_k: int
                      ) -> ScoredPosition:
    """llama-server's native `/completion` with `n_predict: 1` and `n_probs`: the
    alternatives for the next token, and the logprob of `token_id` among them (None when
    it is outside the top-k). The alternative with that id is given `token_text`, so that
    comparing texts compares ids."""
    body = _converted(answer, _NativeCompletion, "/completion answer")
    if not body.completion_probabilities:
        raise MalformedResponse("the /completion answer has no completion_probabilities")
    alternatives = body.completion_probabilities[0].top_logprobs
    for alternative in alternatives:
        finite_logprob(alternative.logprob, "a logprob in the /completion answer")
    ranked = sorted(alternatives, key=lambda alternative: -alternative.logprob)[:top_k]
    own = next((a.logprob for a in ranked if a.id == token_id), None)
    return own, ([token_text if a.id == token_id else a.token for a in ranked],
                 [a.logprob for a in ranked])


def _boundary(tokens: list[str], prompt_chars: int) -> int:
    """The first echoed token that starts at or after the end of the prompt text."""
    seen = 0
    for n, token in enumerate(tokens):
        if seen >= prompt_chars:
            return n
        seen += len(token)
    return len(tokens)


_METRIC_LABEL = re.compile(r'[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"'
                           r'[ \t]*(,?)')
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def metric_labels(text: str, metric: str) -> dict[str, str] | None:
    """The labels of the first sample of `metric` on a Prometheus text page (vLLM's
    `/metrics`: `vllm:cache_config_info{cache_dtype="fp8_e4m3",...} 1.0`), unescaped;
    None when the page has no well-formed sample of it."""
    start = metric + "{"
    for line in text.split("\n"):  # the format's only line break (values escape theirs)
        if not line.startswith(start):
            continue
        labels: dict[str, str] = {}
        position = len(start)
        while match := _METRIC_LABEL.match(line, position):
            labels[match.group(1)] = re.sub(r"\\(.)", lambda m: _ESCAPES.get(
                m.group(1), "\\" + m.group(1)), match.group(2))
            position = match.end()
            if not match.group(3):
                break
        if line[position:].lstrip(" \t").startswith("}"):
            return labels
    return None
