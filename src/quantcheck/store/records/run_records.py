"""The records quantcheck reads and writes, each with exactly one JSON shape."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, NotRequired, TypedDict

import numpy as np

TopK = list[tuple[str, float]]
# A JSON value as parsed: where a record holds what a user wrote (a schema, expected
# arguments) or what a tool call sent.
JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]

# Defaults of a run's settings (run_dir.Parameters), shared by the client and preflight.
DEFAULT_CONTEXT_TOKENS = 6000  # the preflight's context probe
# A top-20 chat answer costs about 2 KB per token on the wire: 256 MiB holds more than
# 100,000 tokens, far beyond any max_tokens a run uses.
DEFAULT_MAX_RESPONSE_MB = 256

# Degenerate output, as triage names it in pairs.csv (`a_degenerate`, `b_degenerate`).
# A loop or an empty answer is degenerate: the gate fails on one new on B. `length`
# (capped by max_tokens where the other side stopped) is reported beside it, never
# counted as degenerate: a longer correct answer is capped too.
DEGENERATE_KINDS = ("repetition", "empty")
LENGTH_CAPPED = "length"


def new_on_b(a_reason: str | None, b_reason: str | None, kinds: tuple[str, ...]) -> bool:
    """B's answer is of one of `kinds` and A's is not."""
    return (b_reason or "") in kinds and (a_reason or "") not in kinds


@dataclass
class ToolCallExpect:
    """One expected tool call: the tool's name (None: no call at all), a JSON Schema its
    arguments must validate against, and argument values they must equal."""

    name: str | None
    arguments_schema: dict[str, JsonValue] | None = None
    arguments: dict[str, JsonValue] | None = None

    def to_json(self) -> dict[str, JsonValue]:
        data: dict[str, JsonValue] = {"name": self.name}
        if self.arguments_schema is not None:
            data["arguments_schema"] = self.arguments_schema
        if self.arguments is not None:
            data["arguments"] = self.arguments
        return data


@dataclass
class CodeExpect:
    """Python code in the answer must define `entry_point` and pass `tests`."""

    entry_point: str
    tests: str


@dataclass
class VerdictExpect:
    """An eval harness's own verdict on each answer (a run imported from its log): the
    answer passes when the record's score for `metric` is 1 (full credit) and fails
    when it is 0; `target` is the reference answer the harness scored against."""

    metric: str
    target: str = ""


# The checks an expect can name, in the order results are given.
CHECKS = ("contains", "any_of", "not_contains", "regex", "number", "json", "json_schema",
          "tool_call", "code", "choice", "verdict")
# Checks only `quantcheck import` sets (from an eval harness's log), never a prompt file.
IMPORTED_CHECKS = ("verdict",)
CHOICE_LETTERS = "ABCDEFGHIJ"  # the options a `choice` expect names


@dataclass
class Expect:
    """A machine-checkable expected answer; all given keys must hold (AND).
    triage/expects.py checks an answer against it; docs/prompts.md ("Expected answers")
    documents each key."""

    contains: list[str] = field(default_factory=list)
    any_of: list[str] = field(default_factory=list)
    not_contains: list[str] = field(default_factory=list)
    regex: str | None = None
    number: float | None = None
    tolerance: float = 0.0
    case_sensitive: bool = False
    json: bool = False
    json_schema: dict[str, JsonValue] | None = None
    tool_call: list[ToolCallExpect] | None = None
    ordered: bool = False
    code: CodeExpect | None = None
    choice: str | None = None
    verdict: VerdictExpect | None = None  # made by `quantcheck import`, not by prompt files

    def to_json(self) -> dict[str, object]:
        defaults = asdict(Expect())
        data = {k: v for k, v in asdict(self).items() if v != defaults[k]}
        if self.tool_call is not None:
            data["tool_call"] = [call.to_json() for call in self.tool_call]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Expect:
        fields = dict(data)
        if fields.get("tool_call") is not None:
            fields["tool_call"] = [ToolCallExpect(**call) for call in fields["tool_call"]]
        if fields.get("code") is not None:
            fields["code"] = CodeExpect(**fields["code"])
        if fields.get("verdict") is not None:
            fields["verdict"] = VerdictExpect(**fields["verdict"])
        return cls(**fields)


# A scan that starts with a character class (which keeps the regex engine fast); a sign
# counts only before a digit or ".digit", a comma only between digits, so that every
# piece below is a float literal: "-e89" in a UUID is 89, never an error. Then each
# match is split: "1,200" is one number, "3,4" two.
_NUMBER_SCAN = re.compile(r"[-+\d](?:(?<=\d)|(?=\.?\d))\d*(?:,\d+)*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def numbers_in(text: str) -> list[float]:
    """Every number in `text`, in order (thousands separators allowed); always finite:
    a numeral beyond a float's range ("1e999") is left out."""
    found: list[float] = []
    for match in _NUMBER_SCAN.findall(text):
        parts = [match.replace(",", "")] if _THOUSANDS.fullmatch(match) else match.split(",")
        found += [number for number in map(float, parts) if math.isfinite(number)]
    return found


def first_number(text: str) -> float | None:
    numbers = numbers_in(text)
    return numbers[0] if numbers else None


@dataclass
class SessionTurn:
    """Where a prompt sits in a tool session (a prompt entry's `session`, store/inputs/sessions.py):
    the session's id, the turn whose calls the prompt asks for (from 1), and how many
    turns the session has."""

    session: str
    turn: int
    turns: int


class SessionJson(TypedDict):
    session: str
    turn: int
    turns: int


class PromptJson(TypedDict):
    """A line of prompts.jsonl."""

    id: str
    category: str
    api: str
    hash: str
    tags: NotRequired[list[str] | None]
    expect: NotRequired[dict[str, object] | None]  # Expect.to_json
    request: dict[str, object]  # the request body, as the user's prompt set makes it
    source: NotRequired[str]
    session: NotRequired[SessionJson]  # a turn of a tool session


@dataclass
class Prompt:
    """One prompt of a prompt set, with the exact request body it produces."""

    id: str
    category: str
    request: dict[str, object]
    api: str
    hash: str
    tags: list[str] = field(default_factory=list)
    expect: Expect | None = None
    source: str = ""
    session: SessionTurn | None = None

    def to_json(self) -> PromptJson:
        data: PromptJson = {
            "id": self.id,
            "category": self.category,
            "api": self.api,
            "hash": self.hash,
            "tags": self.tags,
            "expect": self.expect.to_json() if self.expect else None,
            "request": self.request,
            "source": self.source,
        }
        if self.session is not None:
            data["session"] = {"session": self.session.session, "turn": self.session.turn,
                               "turns": self.session.turns}
        return data

    @classmethod
    def from_json(cls, data: PromptJson) -> Prompt:
        expect = data.get("expect")
        return cls(
            id=data["id"],
            category=data["category"],
            api=data["api"],
            hash=data["hash"],
            tags=data.get("tags") or [],
            expect=Expect.from_json(expect) if expect else None,
            request=data["request"],
            source=data.get("source", ""),
            session=_session_turn(data.get("session")),
        )


def _session_turn(value: object) -> SessionTurn | None:
    """A prompts.jsonl line's `session`, checked field by field (TypeError: malformed)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"session", "turn", "turns"}:
        raise TypeError("session must be {session, turn, turns}")
    session, turn, turns = value["session"], value["turn"], value["turns"]
    if not isinstance(session, str) or not all(
            type(n) is int and n >= 1 for n in (turn, turns)) or turn > turns:
        raise TypeError("session must name its id and a turn from 1 to its turns")
    return SessionTurn(session, turn, turns)


class TokensJson(TypedDict):
    """A record's token arrays written inline (earlier runs; tokens.bin holds them now)."""

    text: list[str]
    logprob: list[float | None]
    top_text: list[list[str]]
    top_logprob: list[list[float]]
    ids: NotRequired[list[int]]
    raw_bytes: NotRequired[list[list[int] | None]]
    routing: NotRequired[list[list[list[int]]]]


@dataclass
class Tokens:
    """Generated tokens, column by column: strings, logprobs, top-k alternatives.

    `top_text[i]` / `top_logprob[i]` are position i's alternatives sorted by logprob,
    highest first (kept as two parallel lists: triage hashes and rounds them as arrays).
    `ids` is set when the server gave token ids. `raw_bytes[i]` is set only where the
    server's bytes differ from `text[i]` in UTF-8 (split multi-byte characters).
    `routing[i]` (tokens, layers, k; int32) is the MoE experts each layer routed the
    forward pass that chose token i to, when asked for and sent (`--routed-experts`).
    """

    text: list[str] = field(default_factory=list)
    logprob: list[float | None] = field(default_factory=list)
    top_text: list[list[str]] = field(default_factory=list)
    top_logprob: list[list[float]] = field(default_factory=list)
    ids: list[int] | None = None
    raw_bytes: list[list[int] | None] | None = None
    routing: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.text)

    def top(self, position: int) -> TopK:
        return list(zip(self.top_text[position], self.top_logprob[position], strict=True))

    def append(
        self,
        token: str,
        logprob: float | None,
        top_text: list[str],
        top_logprob: list[float],
        token_id: int | None = None,
        raw: list[int] | None = None,
    ) -> None:
        """Add one position; its alternatives must already be sorted, highest first."""
        position = len(self.text)
        self.text.append(token)
        self.logprob.append(logprob)
        self.top_text.append(top_text)
        self.top_logprob.append(top_logprob)
        if token_id is not None:
            if self.ids is None:
                self.ids = [-1] * position
            self.ids.append(token_id)
        elif self.ids is not None:
            self.ids.append(-1)
        if raw is not None and raw != list(token.encode("utf-8", "surrogatepass")):
            if self.raw_bytes is None:
                self.raw_bytes = [None] * position
            self.raw_bytes.append(raw)
        elif self.raw_bytes is not None:
            self.raw_bytes.append(None)

    def to_json(self) -> TokensJson:
        # JSON cannot carry infinities, so a parsed server response never holds one.
        data: TokensJson = {"text": self.text, "logprob": self.logprob,
                            "top_text": self.top_text, "top_logprob": self.top_logprob}
        if self.ids is not None:
            data["ids"] = self.ids
        if self.raw_bytes is not None:
            data["raw_bytes"] = self.raw_bytes
        if self.routing is not None:
            data["routing"] = self.routing.tolist()
        return data

    @classmethod
    def from_json(cls, data: TokensJson) -> Tokens:
        return cls(
            text=data["text"],
            logprob=data["logprob"],
            top_text=data["top_text"],
            top_logprob=data["top_logprob"],
            ids=data.get("ids"),
            raw_bytes=data.get("raw_bytes"),
            routing=_routing_array(data.get("routing")),
        )


def _routing_array(value: list[list[list[int]]] | None) -> np.ndarray | None:
    if value is None:
        return None
    array = np.array(value, np.int32)
    return array.reshape(0, 0, 0) if not array.size else array


class ToolCallJson(TypedDict):
    name: str
    arguments: str
    parsed_arguments: NotRequired[JsonValue]
    id: NotRequired[str | None]


@dataclass
class ToolCall:
    """One tool call of an answer: the tool's name, its arguments as sent (a JSON string
    by the OpenAI format, kept verbatim), and those arguments parsed (None when they are
    not JSON)."""

    name: str
    arguments: str
    parsed_arguments: JsonValue = None
    id: str | None = None

    def to_json(self) -> ToolCallJson:
        return {"name": self.name, "arguments": self.arguments,
                "parsed_arguments": self.parsed_arguments, "id": self.id}

    @classmethod
    def from_json(cls, data: ToolCallJson) -> ToolCall:
        return cls(name=data["name"], arguments=data["arguments"],
                   parsed_arguments=data.get("parsed_arguments"), id=data.get("id"))


@dataclass
class Completion:
    """One request to one endpoint and what came back: a line of completions.jsonl."""

    prompt_id: str
    prompt_hash: str
    repeat: int
    text: str | None = None
    reasoning: str | None = None
    tokens: Tokens | None = None
    finish_reason: str | None = None
    usage: dict[str, object] | None = None  # as the server counted the tokens
    ttft_s: float | None = None
    e2e_s: float | None = None
    error: str | None = None
    model: str | None = None
    system_fingerprint: str | None = None
    started_at: str | None = None
    tool_calls: list[ToolCall] | None = None
    # why MoE routing sent with the answer was not kept (the answer itself was)
    routing_unusable: str | None = None
    # a run imported from an eval log: every score the harness gave this answer, by
    # metric, and the part of the answer it scored (its filtered response)
    scores: dict[str, float] | None = None
    answer: str | None = None
    # which weights answered, where the engine names them (SGLang's weight_version)
    weight_version: str | None = None
    # the replica that answered (its public URL), when the side has several
    replica: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, object]:
        # Not dataclasses.asdict: it deep-copies every token list (most of the cost).
        data: dict[str, object] = {name: getattr(self, name) for name in _COMPLETION_FIELDS}
        data["tokens"] = self.tokens.to_json() if self.tokens is not None else None
        if self.tool_calls is not None:
            data["tool_calls"] = [call.to_json() for call in self.tool_calls]
        for name in _WRITTEN_WHEN_SET:  # written only when there is one
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Completion:
        tokens = data.get("tokens")
        fields: dict[str, Any] = {k: data.get(k) for k in _COMPLETION_FIELDS}
        fields["tokens"] = Tokens.from_json(tokens) if tokens else None
        calls = data.get("tool_calls")
        fields["tool_calls"] = [ToolCall.from_json(call) for call in calls] if calls else None
        fields.update({name: data.get(name) for name in _WRITTEN_WHEN_SET})
        return cls(**fields)


_WRITTEN_WHEN_SET = ("routing_unusable", "scores", "answer", "weight_version", "replica")
_COMPLETION_FIELDS = [name for name in Completion.__dataclass_fields__
                      if name not in _WRITTEN_WHEN_SET]
