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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .client import (
    TRANSPORT_ERRORS,
    EndpointClient,
    HTTPStatusError,
    api_key_from_env,
    public_url,
    run_blocking,
    server_root,
)
from .dialects import MalformedResponse
from .drift import FORCED_JSON, FORCED_JSONL, Positions, compare_position, noise_floor
from .errors import EndpointError, RunFormatError
from .files import make_directory
from .records import Completion, Prompt
from .runstore import (
    load_run,
    write_json_atomic,
    write_jsonl_atomic,
)
from .runtimes import choose_model
from .servers import describe_server

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


def score_run(a_run: str | Path, out: str | Path, settings: ForcedSettings) -> dict[str, Any]:
    """Score A's first repeat of every prompt on B; write forced.jsonl and forced.json."""
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
            "prompt-logprobs" if server.runtime == "vllm" else "echo")
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


