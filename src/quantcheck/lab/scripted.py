"""Scripted answers: the engine the tests and the scripted demo talk to (no model).

At temperature 0 it answers greedily (the planned answer). At a temperature above 0 it
samples: each token is drawn from its top alternatives (at least SAMPLED_ALTERNATIVES,
weighted by exp(logprob / temperature)) by a generator seeded from the request's
`seed` and prompt, so the same seed gives the same tokens; without a seed, a fresh
draw per request.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ..store.engines import ENGINES
from .endpoint import DIALECTS, Faults, LabServer, token_id
from .request_body import json_int, prompt_text_of
from .steps import Emit, Scored, Step

__all__ = ["DIALECTS", "Faults", "ScriptedEngine", "ScriptedModel", "ScriptedServer", "Step"]


@dataclass
class ScriptedModel:
    """Answers by rule: a prompt whose whole text is an `exact` key gets its answer;
    otherwise the first `responses` key found in the prompt picks the answer.

    An answer given as a list is cycled through, one item per request for that key
    (a server whose output changes between identical requests). `runner_ups` names
    the alternatives a token gets in its top-k (e.g. " Canberra" -> [" Sydney"]), so
    tests can plant near-tie forks; other alternatives are filler.
    """

    responses: dict[str, str | list[str]] = field(default_factory=dict)
    runner_ups: dict[str, list[str]] = field(default_factory=dict)
    name: str = "scripted-model"
    served: dict[str, int] = field(default_factory=dict)
    # When the request offers tools: the first key found in the prompt picks these
    # calls, each (tool name, arguments as the model writes them).
    calls: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    exact: dict[str, str | list[str]] = field(default_factory=dict)

    def calls_for(self, prompt_text: str) -> list[tuple[str, str]] | None:
        return next((calls for key, calls in self.calls.items() if key in prompt_text), None)

    def answer(self, prompt_text: str, advance: bool = True) -> str:
        """The answer to `prompt_text` (`advance=False`: without moving a cycled list)."""
        if "What is the secret code" in prompt_text:  # the preflight's context check
            code = re.search(r"The secret code is (\w+)", prompt_text)
            return f" {code.group(1)}" if code else " I do not know."
        if prompt_text in self.exact:
            return self._pick(prompt_text, self.exact[prompt_text], advance)
        for key, text in self.responses.items():
            if key in prompt_text:
                return self._pick(key, text, advance)
        digest = int(hashlib.sha256(prompt_text.encode()).hexdigest()[:8], 16)
        return f" The answer is {digest % 997}. It follows from the question."

    def _pick(self, key: str, text: str | list[str], advance: bool) -> str:
        """The answer, or a cycled list's next item (its current one, without advance)."""
        if isinstance(text, str):
            return text
        served = self.served.get(key, 0) + (1 if advance else 0)
        if advance:
            self.served[key] = served
        return text[(max(served, 1) - 1) % len(text)]


def tokenize(text: str, split_utf8: bool) -> list[tuple[str, bytes, str]]:
    """(token string, token bytes, content it contributes) for each token of `text`.

    With split_utf8, a non-ASCII character becomes one token per byte, as byte-level
    BPE vocabularies do: the token string is U+FFFD and the content appears whole on
    the last byte (llama.cpp holds back incomplete UTF-8).
    """
    pieces: list[tuple[str, bytes, str]] = []
    for word in re.findall(r"\s*\S+|\s+$", text):
        if not split_utf8 or word.isascii():
            pieces.append((word, word.encode(), word))
            continue
        pending = ""
        for char in word:
            if char.isascii():
                pending += char
                continue
            if pending:
                pieces.append((pending, pending.encode(), pending))
                pending = ""
            encoded = char.encode()
            for n, byte in enumerate(encoded):
                last = n == len(encoded) - 1
                pieces.append(("\ufffd", bytes([byte]), char if last else ""))
        if pending:
            pieces.append((pending, pending.encode(), pending))
    return pieces


def plan(model: ScriptedModel, prompt_text: str, max_tokens: int, top_k: int,
         split_utf8: bool, jitter: Callable[[], float], tools: bool = False
         ) -> tuple[list[Step], str]:
    calls = model.calls_for(prompt_text) if tools else None
    if calls is not None:
        return _call_plan(calls, prompt_text, max_tokens, top_k, jitter)
    pieces = tokenize(model.answer(prompt_text), split_utf8)
    finish = "stop" if len(pieces) <= max_tokens else "length"
    steps = []
    for position, (token, raw, content) in enumerate(pieces[:max_tokens]):
        top = forced_top(prompt_text, position, token, top_k, model.runner_ups.get(token, []),
                         jitter)
        steps.append(Step(token, raw, content, top[0][1], top))
    return steps, finish


def until_stop(steps: list[Step], finish: str, stop: object) -> tuple[list[Step], str]:
    """The steps before the one that completes a stop string, as servers end an answer
    there (the stop itself is not sent)."""
    stops = [stop] if isinstance(stop, str) else [s for s in stop or [] if isinstance(s, str)] \
        if isinstance(stop, list) else []
    text = ""
    for n, step in enumerate(steps):
        text += step.content
        if any(s and s in text for s in stops):
            return steps[:n], "stop"
    return steps, finish


def _call_plan(calls: list[tuple[str, str]], prompt_text: str, max_tokens: int, top_k: int,
               jitter: Callable[[], float]) -> tuple[list[Step], str]:
    """Each call as tokens: its name, then its arguments word by word."""
    steps: list[Step] = []
    for number, (name, arguments) in enumerate(calls):
        pieces = [(name, name)] + [(word, word) for word, _, _ in tokenize(arguments, False)]
        for n, (token, content) in enumerate(pieces):
            top = forced_top(prompt_text, len(steps), token, top_k, jitter=jitter)
            steps.append(Step(token, token.encode(), "" if n == 0 else content, top[0][1], top,
                              call=number, call_name=name if n == 0 else None))
    return steps[:max_tokens], "tool_calls" if len(steps) <= max_tokens else "length"


def forced_top(prompt_text: str, position: int, token: str, top_k: int,
               runner_ups: list[str] | None = None,
               jitter: Callable[[], float] = lambda: 0.0) -> list[tuple[str, float]]:
    """The top-k at `position` when `token` is the model's choice there."""
    seed = hashlib.sha256(f"{position}|{token}|{prompt_text}".encode()).digest()
    base = -(int.from_bytes(seed[:2], "big") % 500) / 1000.0 - 0.001
    close = runner_ups or []
    names = [t for t in close if t != token] + [f" alt{n}" for n in range(1, top_k + 1)]
    top = [(token, base * (1 + jitter()))]
    for rank, name in enumerate(names[: max(top_k - 1, 0)], 1):
        gap = 0.05 * rank if name in close else 1.5 * rank
        top.append((name, (base - gap) * (1 + jitter())))
    return top[:max(top_k, 1)]


SAMPLED_ALTERNATIVES = 4


def sampling_temperature(body: Mapping[str, object]) -> float | None:
    """The request's temperature when it asks to sample (above 0), else None."""
    value = body.get("temperature")
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return None
    return float(value)


def sampling_generator(body: Mapping[str, object], prompt_text: str,
                       unseeded: random.Random) -> random.Random:
    """The draw for a sampled answer: from the request's integer `seed` and its prompt
    (the same seed, the same tokens), else `unseeded`."""
    seed = body.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        digest = hashlib.sha256(f"{seed}|{prompt_text}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))
    return unseeded


def sampled(steps: list[Step], temperature: float, top_k: int, draw: random.Random
            ) -> list[Step]:
    """Each step's token drawn from its alternatives; the top-k cut to `top_k` after."""
    chosen = []
    for step in steps:
        best = max(value for _, value in step.top)
        weights = [math.exp((value - best) / temperature) for _, value in step.top]
        token, logprob = draw.choices(step.top, weights)[0]
        if token != step.token:
            step = replace(step, token=token, raw=token.encode(), content=token,
                           logprob=logprob)
        chosen.append(replace(step, top=step.top[:max(top_k, 1)]))
    return chosen


class ScriptedEngine:
    """Plans the whole answer at once, then emits it token by token."""

    def __init__(self, model: ScriptedModel, split_utf8: bool = False) -> None:
        self.model = model
        self.name = model.name
        self.split_utf8 = split_utf8
        self._rng = random.Random(1234)
        self._vocabulary: dict[int, tuple[str, bytes, str]] = {}

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return [self.tokenize_piece(piece) for piece in tokenize(text, self.split_utf8)]

    def prompt_ids(self, body: Mapping[str, object], chat: bool) -> list[int]:
        return self.tokenize(prompt_text_of(body))

    def prompt_text(self, body: Mapping[str, object], chat: bool) -> str:
        return prompt_text_of(body)

    def token_text(self, token: int) -> str:
        return self._vocabulary.get(token, (f"<{token}>", b"", ""))[0]

    def score(self, ids: list[int], start: int, top_k: int) -> list[Scored]:
        """What this model gives each of ids[start:] after the tokens before it: on its
        own answer's track its own top-k; elsewhere (the prompt, or past a token it
        would not have chosen) it follows the forced tokens (teacher forcing)."""
        pieces = [self._vocabulary.get(i, (f"<{i}>", b"", "")) for i in ids]
        texts = [piece[0] for piece in pieces]
        split = self._answer_start(pieces)
        prompt = "".join(piece[2] for piece in pieces[:split]) if split else ""
        own = [t for t, _, _ in tokenize(self.model.answer(prompt, advance=False),
                                         self.split_utf8)] if split else []
        scored = []
        for position in range(start, len(ids)):
            k = position - split if split is not None and position >= split else None
            if k is not None and texts[split:position] == own[:k] and k < len(own):
                top = forced_top(prompt, k, own[k], top_k, self.model.runner_ups.get(own[k]))
            else:
                context = "".join(piece[2] for piece in pieces[:position])
                top = forced_top(context if k is None else prompt, k or position,
                                 texts[position], top_k)
            logprob = dict(top).get(texts[position], top[-1][1] - 2.0)
            for alternative, _ in top:
                self.tokenize(alternative)  # so their ids map back to text
            scored.append(Scored(logprob, [(token_id(t.encode()), t, v) for t, v in top]))
        return scored

    def next_top(self, ids: list[int], top_k: int) -> list[tuple[int, str, float]]:
        """Its own answer's next token when `ids` end on its track (a prompt, then a
        prefix of the answer to that prompt); else as if the last token came again."""
        pieces = [self._vocabulary.get(i, (f"<{i}>", b"", "")) for i in ids]
        following = ids[-1]
        for split in range(1, len(pieces) + 1):
            prompt = "".join(piece[2] for piece in pieces[:split])
            own = tokenize(self.model.answer(prompt, advance=False), self.split_utf8)
            done = [piece[0] for piece in pieces[split:]]
            if len(done) < len(own) and [t for t, _, _ in own[:len(done)]] == done:
                following = self.tokenize_piece(own[len(done)])
                break
        return self.score([*ids, following], len(ids), top_k)[0].top

    def tokenize_piece(self, piece: tuple[str, bytes, str]) -> int:
        number = token_id(piece[1])
        self._vocabulary[number] = piece
        return number

    def _answer_start(self, pieces: list[tuple[str, bytes, str]]) -> int | None:
        """Where the prompt ends: the first position whose token is the first token of
        the answer this model gives to everything before it."""
        for split in range(1, len(pieces)):
            prompt = "".join(piece[2] for piece in pieces[:split])
            answer = tokenize(self.model.answer(prompt, advance=False), self.split_utf8)
            if answer and answer[0][0] == pieces[split][0]:
                return split
        return None

    async def run(self, body: Mapping[str, object], chat: bool, top_k: int, jitter: float,
                  emit: Emit) -> str:
        rng = random.Random(self._rng.random())
        tools = bool(body.get("tools")) and body.get("tool_choice") != "none"
        max_tokens = json_int(body.get("max_tokens") or 16)
        temperature = None if tools else sampling_temperature(body)
        planned_k = top_k if temperature is None else max(top_k, SAMPLED_ALTERNATIVES)
        steps, finish = plan(self.model, prompt_text_of(body), max_tokens, planned_k,
                             self.split_utf8, lambda: rng.uniform(-jitter, jitter), tools)
        if temperature is not None:
            steps = sampled(steps, temperature, top_k,
                            sampling_generator(body, prompt_text_of(body), rng))
        steps, finish = until_stop(steps, finish, body.get("stop"))
        for step in steps:
            await emit(step)
        return finish


class ScriptedServer(LabServer):
    """A LabServer answering from a ScriptedModel in the given dialect."""

    def __init__(self, model: ScriptedModel | None = None, dialect: str = "vllm",
                 faults: Faults | None = None, replay: dict[str, bytes] | None = None,
                 host: str = "127.0.0.1", port: int = 0,
                 server_info: dict[str, object] | None = None) -> None:
        self.model = model or ScriptedModel()
        profile = ENGINES.get(dialect)  # an unknown dialect is refused by LabServer
        engine = ScriptedEngine(self.model, split_utf8=bool(profile and profile.split_utf8))
        super().__init__(engine, dialect, faults, replay, host, port, server_info)
