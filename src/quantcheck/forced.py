"""Teacher-forced drift: score B on A's own greedy tokens.

Free-running outputs stop being comparable after their first divergence. Here B is
asked for the logprobs of exactly A's generated tokens, after A's prompt, so every
position compares like with like. Per position: whether B's top-1 is A's token, the
change in the probability of A's token (delta p, B minus A, as llama.cpp's
perplexity tool reports it), and a KL(A || B) lower bound over the shared top-k.

Modes: `prompt-logprobs` sends token ids (the prompt through the server's /tokenize,
A's tokens by their ids) to vLLM's completions with `prompt_logprobs`: exact.
`echo` sends text to legacy completions with `echo` and `logprobs` (vLLM,
llama-cpp-python, others): B re-tokenizes the text, so it is labelled approximate;
chat prompts cannot be echoed and are skipped with the reason.

The noise floor is the same figures for A against A's own repeats (over their common
prefix and the first position where they part).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .client import (
    TRANSPORT_ERRORS,
    EndpointClient,
    HTTPStatusError,
    api_key_from_env,
    public_url,
    server_root,
)
from .dialects import MalformedResponse
from .errors import EndpointError, RunFormatError
from .files import make_directory
from .records import Completion, Prompt
from .runstore import (
    iter_jsonl,
    load_run,
    read_json,
    write_json_atomic,
    write_jsonl_atomic,
)
from .runtimes import choose_model
from .servers import describe_server
from .triage import kl_lower_bound

FORCED_JSON = "forced.json"
FORCED_JSONL = "forced.jsonl"
MODES = ("auto", "prompt-logprobs", "echo")

@dataclass
class ForcedSettings:
    endpoint: str
    model: str | None = None
    top_k: int = 20
    mode: str = "auto"
    concurrency: int = 4
    timeout: float = 600.0
    api_key_env: str | None = None


@dataclass
class Positions:
    """Per-position figures of one prompt (forced, or A against its own repeats)."""

    top1: list[bool] = field(default_factory=list)
    kl: list[float] = field(default_factory=list)
    delta_p: list[float] = field(default_factory=list)

    def extend(self, other: Positions) -> None:
        self.top1 += other.top1
        self.kl += other.kl
        self.delta_p += other.delta_p

    def stats(self) -> dict[str, Any]:
        if not self.kl:
            return {"positions": 0}
        kl = np.array(self.kl)
        delta = np.array(self.delta_p)
        return {"positions": len(kl), "top1_agreement": float(np.mean(self.top1)),
                "kl": _spread(kl), "delta_p": {"mean": float(delta.mean()),
                                                **_spread(np.abs(delta), "abs_")}}


def _spread(values: np.ndarray, prefix: str = "") -> dict[str, float]:
    return {f"{prefix}mean": float(values.mean()), f"{prefix}median": float(np.median(values)),
            f"{prefix}p99": float(np.percentile(values, 99)), f"{prefix}max": float(values.max())}


def compare_position(a_token: str, a_logprob: float | None, a_top: tuple[list[str], list[float]],
                     b_logprob: float | None, b_top: tuple[list[str], list[float]]
                     ) -> tuple[bool, float, float]:
    """(B's top-1 is A's token, delta p, KL lower bound) at one position."""
    top1 = bool(b_top[0]) and b_top[0][0] == a_token
    p_a = math.exp(a_logprob) if a_logprob is not None else 0.0
    p_b = math.exp(b_logprob) if b_logprob is not None else 0.0
    return top1, p_b - p_a, kl_lower_bound(a_top[0], a_top[1], b_top[0], b_top[1])


def score_run(a_run: str | Path, out: str | Path, settings: ForcedSettings) -> dict[str, Any]:
    """Score A's first repeat of every prompt on B; write forced.jsonl and forced.json."""
    from .collect import run_blocking

    return run_blocking(score_run_async(a_run, out, settings))


async def score_run_async(a_run: str | Path, out: str | Path, settings: ForcedSettings
                          ) -> dict[str, Any]:
    run = load_run(a_run)
    with_tokens = [r for r in run.completions() if r.ok and r.tokens]
    records = [r for r in with_tokens if r.repeat == 0]
    if not records:
        raise RunFormatError(f"{a_run}: no completions with logprobs to score (collect A "
                             "with --top-logprobs above 0)")
    async with EndpointClient(settings.endpoint, api_key_from_env(settings.api_key_env),
                              settings.timeout) as client:
        models = await client.list_models()
        model = choose_model(models, settings.model, public_url(settings.endpoint))
        server = await describe_server(client, models)
        mode = settings.mode if settings.mode != "auto" else (
            "prompt-logprobs" if server.get("runtime") == "vllm" else "echo")
        scorer = _Scorer(client, model, mode, settings.top_k)
        semaphore = asyncio.Semaphore(settings.concurrency)

        async def one(record: Completion) -> dict[str, Any]:
            async with semaphore:
                return await scorer.score(run.prompts[record.prompt_id], record)

        lines = await asyncio.gather(*(one(r) for r in records))
    overall = Positions()
    for line in lines:
        each = line["per_position"]
        overall.extend(Positions(each["top1"], each["kl"], each["delta_p"]))
    summary = {"endpoint": public_url(settings.endpoint), "model": model, "mode": mode,
               "approximate": mode == "echo", "a_run": str(a_run), "top_k": settings.top_k,
               "scored": sum(1 for line in lines if line["positions"]),
               "skipped": {line["prompt_id"]: line["skipped"] for line in lines
                           if line.get("skipped")},
               "overall": overall.stats(), "noise_floor": noise_floor(with_tokens)}
    folder = Path(out)
    make_directory(folder)
    write_jsonl_atomic(folder / FORCED_JSONL, lines)
    write_json_atomic(folder / FORCED_JSON, summary)
    return summary


class _Scorer:
    def __init__(self, client: EndpointClient, model: str, mode: str, top_k: int) -> None:
        self.client, self.model, self.mode, self.top_k = client, model, mode, top_k
        self.root = server_root(client.endpoint)

    async def score(self, prompt: Prompt, record: Completion) -> dict[str, Any]:
        each = Positions()
        line: dict[str, Any] = {"prompt_id": prompt.id, "mode": self.mode, "positions": 0}
        try:
            if self.mode == "prompt-logprobs":
                forced = await self._by_ids(prompt, record)
            elif prompt.api == "chat":
                forced = []
                line["skipped"] = "a chat prompt cannot be echoed without its chat template"
            else:
                forced = await self._by_echo(prompt, record)
        except (HTTPStatusError, MalformedResponse, KeyError, IndexError, AttributeError,
                TypeError, ValueError, *TRANSPORT_ERRORS) as exc:
            raise EndpointError(f"scoring {prompt.id} on {public_url(self.client.endpoint)} "
                                f"({self.mode}) failed: {exc}") from None
        tokens = record.tokens
        assert tokens is not None
        for n, (b_logprob, b_top) in enumerate(forced[:len(tokens)]):
            top1, delta, kl = compare_position(
                tokens.text[n], tokens.logprob[n], (tokens.top_text[n], tokens.top_logprob[n]),
                b_logprob, b_top)
            each.top1.append(top1)
            each.kl.append(kl)
            each.delta_p.append(delta)
        line.update(each.stats())
        line["aligned"] = len(forced) == len(tokens)
        line["per_position"] = {"top1": each.top1, "kl": each.kl, "delta_p": each.delta_p,
                                "b_logprob": [logprob for logprob, _ in forced[:len(tokens)]]}
        return line

    async def _by_ids(self, prompt: Prompt, record: Completion
                      ) -> list[tuple[float | None, tuple[list[str], list[float]]]]:
        request = ({"messages": prompt.request["messages"], "add_generation_prompt": True}
                   if prompt.api == "chat" else {"prompt": prompt.request["prompt"]})
        prompt_ids = (await self._tokenize(request))
        tokens = record.tokens
        assert tokens is not None
        ids = tokens.ids if tokens.ids and min(tokens.ids) >= 0 else await self._tokenize(
            {"prompt": record.text or "", "add_special_tokens": False})
        answer = await self.client.post_json(self.root + "/v1/completions", {
            "model": self.model, "prompt": prompt_ids + ids, "max_tokens": 1,
            "temperature": 0, "prompt_logprobs": self.top_k})
        entries = answer["choices"][0]["prompt_logprobs"][len(prompt_ids):]
        forced = []
        for token, entry in zip(ids, entries, strict=False):
            ranked = sorted((v for v in entry.values() if v["rank"] <= self.top_k),
                            key=lambda v: v["rank"])
            own = entry.get(str(token))
            forced.append((own["logprob"] if own else None,
                           ([v["decoded_token"] for v in ranked], [v["logprob"] for v in ranked])))
        return forced

    async def _tokenize(self, request: dict[str, Any]) -> list[int]:
        answer = await self.client.post_json(self.root + "/tokenize",
                                             {"model": self.model, **request})
        return [int(t) for t in answer["tokens"]]

    async def _by_echo(self, prompt: Prompt, record: Completion
                       ) -> list[tuple[float | None, tuple[list[str], list[float]]]]:
        text = str(prompt.request["prompt"])
        answer = await self.client.post_json(self.root + "/v1/completions", {
            "model": self.model, "prompt": text + (record.text or ""), "echo": True,
            "logprobs": self.top_k, "max_tokens": 1, "temperature": 0})
        logprobs = answer["choices"][0]["logprobs"]
        generated = int((answer.get("usage") or {}).get("completion_tokens") or 0)
        start = _boundary(logprobs["tokens"], len(text))
        end = len(logprobs["tokens"]) - generated
        forced = []
        for n in range(start, end):
            top = sorted((logprobs["top_logprobs"][n] or {}).items(), key=lambda kv: -kv[1])
            top = top[:self.top_k]
            forced.append((logprobs["token_logprobs"][n],
                           ([t for t, _ in top], [v for _, v in top])))
        return forced


def _boundary(tokens: list[str], prompt_chars: int) -> int:
    """The first echoed token that starts at or after the end of the prompt text."""
    seen = 0
    for n, token in enumerate(tokens):
        if seen >= prompt_chars:
            return n
        seen += len(token)
    return len(tokens)


def noise_floor(completions: list[Completion]) -> dict[str, Any]:
    """The forced figures for A against A's own repeats (successful records with
    tokens): over each repeat's common prefix with repeat 0, and where they part."""
    floor = Positions()
    groups: dict[str, list[Completion]] = {}
    for record in completions:
        groups.setdefault(record.prompt_id, []).append(record)
    repeats = 0
    for records in groups.values():
        records.sort(key=lambda r: r.repeat)
        reference = records[0].tokens
        for other in records[1:]:
            repeats += 1
            floor.extend(_repeat_positions(reference, other.tokens))
    if not repeats:
        return {"positions": 0, "note": "A has one repeat per prompt; collect A with "
                "--repeats 2 or more for a noise floor"}
    return {**floor.stats(), "repeats_compared": repeats}


def _repeat_positions(reference: Any, other: Any) -> Positions:
    found = Positions()
    for n in range(min(len(reference), len(other))):
        top1, delta, kl = compare_position(
            reference.text[n], reference.logprob[n],
            (reference.top_text[n], reference.top_logprob[n]), other.logprob[n],
            (other.top_text[n], other.top_logprob[n]))
        if reference.text[n] != other.text[n]:
            top1 = False
        found.top1.append(top1)
        found.kl.append(kl)
        found.delta_p.append(delta)
        if reference.text[n] != other.text[n]:
            break
    return found


def load_forced(folder: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """forced.json, and forced.jsonl's lines by prompt id."""
    path = Path(folder)
    summary: dict[str, Any] = read_json(path / FORCED_JSON)
    lines = {line["prompt_id"]: line for _, line in iter_jsonl(path / FORCED_JSONL)}
    return summary, lines


def pair_columns(line: dict[str, Any] | None) -> dict[str, Any]:
    """A prompt's forced figures as pairs.csv columns."""
    if not line or not line.get("positions"):
        return {}
    return {"forced_positions": line["positions"], "forced_top1": line["top1_agreement"],
            "forced_kl_mean": line["kl"]["mean"], "forced_kl_p99": line["kl"]["p99"],
            "forced_kl_max": line["kl"]["max"], "forced_delta_p_mean": line["delta_p"]["mean"]}


def all_kl(lines: dict[str, dict[str, Any]]) -> Iterator[float]:
    for line in lines.values():
        yield from (line.get("per_position") or {}).get("kl") or []
