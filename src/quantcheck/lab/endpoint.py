"""A loopback OpenAI-compatible server in each runtime's dialect, driven by an engine.

The engine decides what is generated (scripted answers, or a real model); the server
speaks the wire format of vllm, sglang, llama.cpp or llama-cpp-python, streams, and
injects the faults a real deployment shows (latency, 429, 5xx, dropped connections,
a top_logprobs limit, missing logprobs, rejected parameters, nondeterministic or
load-dependent logprobs, logprobs that move with the batch size or a cached prefix, a
`seed` accepted and ignored, and long answers gone wrong: output_faults.py).
It can also replay a recorded response body verbatim.

A prefix cache (lab/prefix_cache.py) that the engines' own ways empty: vLLM's POST
/reset_prefix_cache (with `Faults.dev_mode`, as vLLM serves it in development mode
only), SGLang's POST /flush_cache (refused while a request runs); llama.cpp's requests
with `cache_prompt: false` read none of it. Its block is the dialect's (vLLM's says it in
GET /metrics, SGLang's as `page_size`; `server_info` sets either). Planted on it: a
corrupted block (`block_corruption`) and a prefix written by a request computed at the
same time (`cobatch_writer`).

MoE routing (`Faults.routing`, as a server started to return it): a pretend mixture
of ROUTING_EXPERTS experts, ROUTING_LAYERS layers, ROUTING_K per token, each forward
pass routed by a hash of its token and position, sent as vLLM does (non-streamed
`choices[0].routed_experts`, base64 `.npy`) or SGLang does (`sglext.routed_experts`,
base64 raw int32, when the request asks `return_routed_experts`). Planted: gating that
changes from request to request (`gating_nondeterministic`), and one (token, layer)
routed elsewhere (`routing_flip_at`, a generated token's position).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import io
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from ..store.engines import (
    APPLY_TEMPLATE,
    COLUMNS,
    ENGINE_NAMES,
    ENGINES,
    PROMPT_LOGPROBS,
    ROUTING_STREAM_END,
    ROUTING_WHOLE,
    TOKEN_IDS,
)
from .dialects import LabDialect, lab_dialect
from .output_faults import LateLoop, bang_run, collapsed
from .prefix_cache import PrefixCache, shared_start
from .request_body import json_has, json_int, json_items, json_object, prompt_text_of
from .steps import Emit, Scored, Step

DIALECTS = ENGINE_NAMES  # the runtimes whose wire formats the lab speaks (their profiles)


@dataclass
class Faults:
    """Misbehaviour to inject; request numbers count every generation request from 0."""

    latency_s: float = 0.0
    token_delay_s: float = 0.0
    status: dict[int, int] = field(default_factory=dict)
    status_message: str | None = None
    retry_after_s: float | None = None
    retry_headers: dict[str, str] = field(default_factory=dict)  # sent as given, e.g. an HTTP date
    drop: set[int] = field(default_factory=set)
    max_top_logprobs: int | None = None
    no_logprobs: bool = False
    reject_fields: set[str] = field(default_factory=set)
    nondeterministic: bool = False
    load_sensitive: bool = False  # nondeterministic only while other requests are in flight
    # Like llama.cpp's prompt cache: a prompt asked before comes back with its logprobs
    # moved (1e-7 relative, the same every time), unless the body says cache_prompt: false;
    # usage says the cached prompt tokens (`prompt_tokens_details.cached_tokens`).
    prompt_cache: bool = False
    # Batch-variant kernels: with this many generation requests in flight or more, the
    # logprobs move by 1e-7 relative times the count (give latency_s so a batch overlaps).
    batch_variant_at: int | None = None
    # A prefix cache whose reuse changes the numbers: a prompt sharing its first 8 words
    # or more with the previous prompt comes back with its logprobs moved (3e-7
    # relative), unless either body says cache_prompt: false.
    prefix_cache_shift: bool = False
    context_limit: int | None = None  # keep only the prompt's last N tokens, silently
    sliding_window: int | None = None  # the model sees the last N; usage counts them all
    # tokens the server adds to every chat prompt (a default system prompt, a template's
    # markers), counted in usage as real servers count them
    template_tokens: int = 0
    no_usage: bool = False  # responses without a usage object
    not_greedy: str | None = None  # "sampling" (unless top_k is 1) or "penalty" (always)
    reasoning: str | None = None  # "leak" into content, or "eat" every token (chat only)
    other_tokenizer: bool = False  # other token ids and counts (B with another vocabulary)
    routing: bool = False  # return MoE routing (vLLM's server flag; SGLang when asked)
    gating_nondeterministic: bool = False  # one (token, layer) routed by request number
    routing_flip_at: int | None = None  # this generated token's layer 1 routed elsewhere
    # Render conversations with this template ("chatml", "gemma") on /apply-template
    # and vLLM's /tokenize and /detokenize; the lab model knows only Gemma's markers.
    chat_template: str | None = None
    # A server that accepts `seed` and ignores it: sampled answers (temperature > 0)
    # differ between requests with the same seed.
    ignore_seed: bool = False
    # A prefix cache whose state depends on the order of what came before, in scoring
    # (vLLM's prompt_logprobs, llama.cpp's /completion): a scoring request whose first 8
    # token ids an earlier one began with comes back with its logprobs moved by 1e-7
    # relative for each such earlier request, unless the body says cache_prompt: false.
    scoring_cache_shift: bool = False
    # Refuse a prompt of more tokens than this as llama-server does (HTTP 400, "the
    # request exceeds the available context size"), whatever its props say.
    refuse_over_tokens: int | None = None
    # Answers without logprobs when another generation request was in flight with
    # them (an engine whose batched path drops them; give latency_s so a batch overlaps).
    no_logprobs_under_load: bool = False
    # One request computed at a time (a server with one slot): latency_s each, in turn.
    one_at_a_time: bool = False
    # Long answers gone wrong (output_faults.py): a loop after this many tokens, `!` to
    # the length limit, one answer to every prompt
    late_loop_after: int | None = None
    bang_run: bool = False
    collapse: bool = False
    # Not a fault: vLLM started with VLLM_SERVER_DEV_MODE=1, whose POST
    # /reset_prefix_cache empties its cache (without it the path is not there)
    dev_mode: bool = False
    # A corrupted cache block: a request that reads a cached prefix of exactly one block
    # (the start it shares with a cached prompt ends on the block's edge) gets its first
    # token replaced by the runner-up
    block_corruption: bool = False
    # A prefix written by another request computed at the same time: a request that
    # shares its first COBATCH_SHARED tokens or more with another in flight comes back
    # with its logprobs moved (5e-7 relative); give latency_s so that they overlap
    cobatch_writer: bool = False
    # Several builds behind one URL, as during a rollout: generation request n is
    # answered with the fields of rollout[n % len(rollout)] in its body (and each
    # chunk), e.g. [{"system_fingerprint": "b6123"}, {"system_fingerprint": "b6124"}].
    rollout: list[dict[str, object]] = field(default_factory=list)


COBATCH_SHARED = 8
SGLANG_FLUSHED = ("Cache flushed.\nPlease check backend logs for more details. (When there "
                  "are running or waiting requests, the operation will not be performed.)\n")


CHAT_TEMPLATES = {
    "chatml": ("<|im_start|>{role}\n{content}<|im_end|>\n", "<|im_start|>assistant\n"),
    "gemma": ("<start_of_turn>{role}\n{content}<end_of_turn>\n", "<start_of_turn>model\n"),
}
FOREIGN_MARKERS = ("<|im_start|>", "<|im_end|>")  # 6 pieces each to the lab's tokenizer


def render_chat(template: str, messages: object) -> str:
    turn, opening = CHAT_TEMPLATES[template]
    listed = messages if isinstance(messages, list) else []
    return "".join(turn.format(role=m.get("role", ""), content=m.get("content", ""))
                   for m in listed if isinstance(m, dict)) + opening


ROUTING_LAYERS, ROUTING_K, ROUTING_EXPERTS = 4, 2, 8


def _vllm_routing(routing: np.ndarray) -> str:
    """vLLM's `routed_experts`: the routing as base64 of a `.npy` file."""
    buffer = io.BytesIO()
    np.save(buffer, routing.astype(np.uint8))
    return base64.b64encode(buffer.getvalue()).decode()


def _sglang_routing(routing: np.ndarray) -> dict[str, str]:
    """SGLang's `sglext`: the routing as base64 of raw int32, without its shape."""
    return {"routed_experts": base64.b64encode(routing.astype("<i4").tobytes()).decode()}


def lab_routing(forwarded: list[str]) -> np.ndarray:
    """(tokens, layers, k) experts: each token's forward pass routed by a hash of the
    token and its position, k distinct experts per layer (the hash's bytes ranked per
    layer: one hash a token, as fast as the certificate's 4,097-word prefixes need)."""
    digests = b"".join(
        hashlib.blake2b(f"{position}\0{token}".encode(),
                        digest_size=ROUTING_LAYERS * ROUTING_EXPERTS).digest()
        for position, token in enumerate(forwarded))
    keys = np.frombuffer(digests, np.uint8).reshape(len(forwarded), ROUTING_LAYERS,
                                                    ROUTING_EXPERTS)
    chosen = np.argsort(keys, axis=-1, kind="stable")[..., :ROUTING_K]
    return np.sort(chosen, axis=-1).astype(np.int32)


@dataclass(frozen=True)
class CacheRead:
    """What one request read of the lab's prefix cache: its tokens, how many were
    served from the cache, and whether that was a corrupted block."""

    number: int
    ids: list[int]
    read: int
    corrupted: bool


class Engine(Protocol):
    """What generates: `run` emits each step as it is made and returns the finish reason."""

    name: str

    async def run(self, body: Mapping[str, object], chat: bool, top_k: int, jitter: float,
                  emit: Emit) -> str: ...

    def tokenize(self, text: str, special: bool = True) -> list[int]: ...

    def prompt_ids(self, body: Mapping[str, object], chat: bool) -> list[int]: ...

    def prompt_text(self, body: Mapping[str, object], chat: bool) -> str:
        """The text whose tokenization (with special tokens) is `prompt_ids`."""

    def token_text(self, token: int) -> str: ...

    def score(self, ids: list[int], start: int, top_k: int) -> list[Scored]: ...

    def next_top(self, ids: list[int], top_k: int) -> list[tuple[int, str, float]]:
        """The top-k (id, text, logprob) for the token after `ids`."""


class LabServer:
    """Serve an engine on 127.0.0.1 in a background thread (or in your own loop)."""

    def __init__(self, engine: Engine, dialect: str = "vllm", faults: Faults | None = None,
                 replay: dict[str, bytes] | None = None, host: str = "127.0.0.1",
                 port: int = 0, server_info: dict[str, object] | None = None) -> None:
        if dialect not in DIALECTS:
            raise ValueError(f"dialect must be one of {DIALECTS}")
        self.engine = engine
        self.dialect = dialect
        self.profile = ENGINES[dialect]
        self.lab = lab_dialect(self.profile)  # what only the lab writes of this engine
        self.faults = faults or Faults()
        self.replay = replay or {}
        self.host, self.port = host, port
        self.server_info = server_info or {}
        self.requests: list[dict[str, object]] = []  # generation bodies
        self.hits = 0  # every HTTP request, of any path (listing models, probes, ...)
        self.authorizations: list[str | None] = []
        self._counter = 0
        self.in_flight = 0
        self._rng = random.Random(1234)
        self._routed: dict[str, int] = {}  # requests per prompt text (gating fault)
        self._cached: set[str] = set()  # prompt texts seen (prompt_cache fault)
        self._last_cached_prompt = ""  # prefix_cache_shift fault
        self._scored_starts: dict[tuple[int, ...], int] = {}  # scoring_cache_shift fault
        self.prefix_cache = PrefixCache(self._block())
        self._writing: dict[int, list[int]] = {}  # prompts in flight, by request number
        self._cowritten: set[int] = set()  # requests in flight with one sharing their prefix
        self._flying: set[int] = set()  # request numbers in flight
        self._overlapped: set[int] = set()  # those that were in flight with another
        self._one_slot = asyncio.Lock()  # one_at_a_time
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._count])
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/version", self._version)
        app.router.add_get("/api/version", self._version)
        app.router.add_get("/get_server_info", self._sglang_info)
        app.router.add_get("/server_info", self._sglang_info)
        app.router.add_get("/props", self._props)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/info", self._tgi_info)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/extras/tokenize", self._tokenize)
        app.router.add_post("/_internal/tokenize", self._tokenize)
        app.router.add_post("/v1/chat/completions", self._generate)
        app.router.add_post("/v1/completions", self._generate)
        app.router.add_post("/completion", self._native_completion)
        app.router.add_post("/apply-template", self._apply_template)
        app.router.add_post("/detokenize", self._detokenize)
        app.router.add_post("/reset_prefix_cache", self._flush)
        app.router.add_route("*", "/flush_cache", self._flush)
        return app

    @web.middleware
    async def _count(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.hits += 1
        return await handler(request)

    async def start_async(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop_async(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def start(self) -> LabServer:
        """Serve from a background thread; what stops the server from starting (a port
        in use) is raised here."""
        ready = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            self._loop = loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self.start_async())
            except BaseException as exc:  # handed to start(), raised there
                failed.append(exc)
                self._loop = None
                loop.run_until_complete(self.stop_async())
                loop.close()
                return
            finally:
                ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop_async())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True, name="lab-server")
        self._thread.start()
        if not ready.wait(10):
            raise TimeoutError(f"the lab server on {self.host}:{self.port} did not start "
                               "within 10 s")
        if failed:
            self._thread.join()
            raise failed[0]
        return self

    def stop(self) -> None:
        """Stop serving (connections are refused from then on); a second stop does
        nothing."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self) -> LabServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- metadata endpoints -------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        entry = {"id": self.engine.name, "object": "model", "created": 1700000000}
        if self.profile.owned_by:
            entry["owned_by"] = self.profile.owned_by[0]
        if self.lab.owner_is_model:
            entry["owned_by"] = entry["id"]
        if self.lab.models_max_model_len:
            entry["max_model_len"] = self.server_info.get("max_model_len", 8192)
        return _json({"object": "list", "data": [entry]})

    async def _health(self, request: web.Request) -> web.Response:
        if self.lab.health_json:
            return _json({"status": "ok"})
        return web.Response(status=200)

    async def _version(self, request: web.Request) -> web.Response:
        own = self.profile.version_at[0] if self.profile.version_at else None
        if request.path not in self.profile.info_paths and request.path != own:
            raise web.HTTPNotFound()
        return _json({"version": self.server_info.get("version", self.lab.version)})

    async def _sglang_info(self, request: web.Request) -> web.Response:
        if request.path not in self.profile.info_paths:
            raise web.HTTPNotFound()
        info = {"model_path": self.engine.name, "tp_size": 1, "quantization": None,
                "kv_cache_dtype": "auto", "attention_backend": "flashinfer",
                "context_length": 8192, "page_size": 1, "version": "0.5.9"}
        return _json({**info, **self.server_info})

    async def _tgi_info(self, request: web.Request) -> web.Response:
        if request.path not in self.profile.info_paths:
            raise web.HTTPNotFound()
        info = {"model_id": self.engine.name, "model_sha": None, "model_pipeline_tag":
                "text-generation", "max_concurrent_requests": 128, "max_best_of": 2,
                "max_stop_sequences": 4, "max_input_tokens": 8191, "max_total_tokens": 8192,
                "validation_workers": 2, "max_client_batch_size": 4,
                "router": "text-generation-router", "version": self.lab.version,
                "sha": None, "docker_label": None}
        return _json({**info, **self.server_info})

    def _block(self) -> int:
        """The dialect's cache block, as its server says it (`server_info`) or by default."""
        blocks = self.profile.cache_blocks
        if blocks is None:
            return 1
        said = self.server_info.get(blocks.metrics[2] if blocks.metrics else
                                    blocks.info_field or "")
        return said if isinstance(said, int) and said > 0 else blocks.tokens

    async def _flush(self, request: web.Request) -> web.Response:
        """The profile's way of emptying the prefix cache (vLLM's in development mode)."""
        if request.path != self.profile.cache_flush_path or (
                request.path == "/reset_prefix_cache" and not self.faults.dev_mode):
            raise web.HTTPNotFound()
        if request.path == "/flush_cache":
            if self.in_flight:
                return web.Response(status=400, text="Cache not flushed because there are "
                                    "pending requests.")
            self.prefix_cache.empty()
            return web.Response(text=SGLANG_FLUSHED)
        self.prefix_cache.empty()
        return web.Response(status=200)

    async def _props(self, request: web.Request) -> web.Response:
        if request.path not in self.profile.info_paths:
            raise web.HTTPNotFound()
        props = {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1,
                 "model_path": f"/models/{self.engine.name}.gguf", "build_info": "b6000-abc1234"}
        return _json({**props, **self.server_info})

    async def _metrics(self, request: web.Request) -> web.Response:
        """A Prometheus page naming the KV cache's dtype and its block, as the engine that
        tells them there does (vLLM's `vllm:cache_config_info`); `server_info["metrics"]`
        is sent verbatim instead (a recorded page), `server_info["kv_cache_dtype"]` and
        `server_info["block_size"]` set them."""
        at = self.profile.kv_cache_dtype_metric
        if at is None or request.path != at[0]:
            raise web.HTTPNotFound()
        text = self.server_info.get("metrics")
        if not isinstance(text, str):
            kv = self.server_info.get("kv_cache_dtype", "auto")
            text = (f"# HELP {at[1]} Information of the LLMEngine CacheConfig\n"
                    f"# TYPE {at[1]} gauge\n"
                    f'{at[1]}{{block_size="{self._block()}",{at[2]}="{kv}",engine="0"}} 1.0\n')
        return web.Response(text=text, content_type="text/plain")

    async def _tokenize(self, request: web.Request) -> web.Response:
        """vLLM (`prompt` or `messages`), llama.cpp (`content`) and llama-cpp-python
        (`/extras/tokenize`, `input`) each have their own."""
        sent = orjson.loads(await request.read())  # any JSON value: answered as before
        endpoint = self.profile.tokenize
        if endpoint is None or request.path != endpoint.path:
            raise web.HTTPNotFound()
        field = endpoint.text_field
        if not json_has(sent, field) and self.lab.tokenize_lenient:
            return _json({"tokens": []})  # as llama-server answers another server's shape
        if not json_has(sent, field) and not (endpoint.accepts_messages
                                              and json_has(sent, "messages")):
            return _json(_error_body(f"missing field {field!r}", 400), 400)
        ids = self._tokenized(json_object(sent), field)
        if self.lab.tokenize_counts:
            return _json({"count": len(ids), "max_model_len": 8192, "tokens": ids})
        return _json({"tokens": ids})

    def _tokenized(self, body: Mapping[str, object], field: str) -> list[int]:
        """The ids of a tokenize request: of its messages, or of the text in `field`."""
        if "messages" in body and self.faults.chat_template:
            return self.tokenize(render_chat(self.faults.chat_template, body["messages"]))
        if "messages" in body:
            return self.engine.prompt_ids(body, chat=True)
        # llama.cpp's `add_special` defaults to false, vLLM's to true
        endpoint = self.profile.tokenize
        special = body.get(endpoint.special_field, endpoint.special_default) if endpoint \
            else True
        return self.tokenize(str(body[field]), bool(special))

    async def _apply_template(self, request: web.Request) -> web.Response:
        if self.profile.chat_template != APPLY_TEMPLATE:
            raise web.HTTPNotFound()
        body = await _request_body(request)
        if self.faults.chat_template:
            return _json({"prompt": render_chat(self.faults.chat_template,
                                                body.get("messages"))})
        return _json({"prompt": self.engine.prompt_text(body, chat=True)})

    async def _detokenize(self, request: web.Request) -> web.Response:
        """vLLM's and SGLang's: token ids back to text (a lab with a template only)."""
        detokenize = self.profile.detokenize
        if detokenize is None or request.path != detokenize[0] or not self.faults.chat_template:
            raise web.HTTPNotFound()
        body = await _request_body(request)
        text = "".join(self.engine.token_text(json_int(i))
                       for i in json_items(body.get("tokens") or []) if json_int(i) >= 0)
        return _json({detokenize[1]: text})

    async def _native_completion(self, request: web.Request) -> web.Response:
        """llama-server's `/completion` as forced scoring uses it: a prompt of token ids,
        one token predicted, the `n_probs` alternatives for it (with their ids)."""
        if self.profile.forced_mode != TOKEN_IDS:
            raise web.HTTPNotFound()
        body = await _request_body(request)
        self.requests.append(body)
        prompt = body.get("prompt")
        ids = ([json_int(i) for i in prompt] if isinstance(prompt, list)
               else self.tokenize(str(prompt), True))
        alternatives = await asyncio.to_thread(self.engine.next_top, ids,
                                               json_int(body.get("n_probs") or 1))
        moved = 1 + self._scoring_shift(body, ids)
        top = [{"id": i, "token": t, "bytes": list(t.encode()), "logprob": v * moved}
               for i, t, v in alternatives]
        return _json({"content": top[0]["token"] if top else "", "id_slot": 0, "stop": True,
                      "model": self.engine.name, "tokens_predicted": 1,
                      "tokens_evaluated": len(ids), "stop_type": "limit",
                      "completion_probabilities": [{**top[0], "top_logprobs": top}] if top
                      else []})

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        ids = self.engine.tokenize(text, special)
        if self.faults.chat_template and text in FOREIGN_MARKERS:  # unknown: 6 pieces
            ids += [3] * 5
        if self.faults.other_tokenizer:  # another vocabulary: other ids, more pieces
            return [(i * 7 + 3) % 262144 for i in ids] + [1] * (len(ids) // 3)
        return ids

    # --- generation ---------------------------------------------------------------

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        sent = orjson.loads(await request.read())
        number = self._counter
        self._counter += 1  # a body that is no JSON object still takes its number
        body = json_object(sent)
        self.requests.append(body)
        self.authorizations.append(request.headers.get("Authorization"))
        self.in_flight += 1
        if self._flying:  # requests in flight together (no_logprobs_under_load)
            self._overlapped |= self._flying | {number}
        self._flying.add(number)
        try:
            return await self._respond(request, body, number)
        except ConnectionResetError:  # the client went away (a cancelled filler request)
            return web.Response(status=499)
        finally:
            self.in_flight -= 1
            self._flying.discard(number)
            self._writing.pop(number, None)

    async def _respond(self, request: web.Request, body: Mapping[str, object], number: int
                       ) -> web.StreamResponse:
        chat = request.path.endswith("/chat/completions")
        if not chat and (body.get("prompt_logprobs") is not None or body.get("echo")):
            # `is not None`: a response with nothing in its mapping is falsy on aiohttp
            # before 3.12 (aio-libs/aiohttp#10119)
            injected = self._injected_status(number)
            return injected if injected is not None else await self._scored(body)
        stream = bool(body.get("stream"))
        read = self._cache_read(body, number)  # in flight from here, as it computes
        if self.faults.latency_s and self.faults.one_at_a_time:
            async with self._one_slot:
                await asyncio.sleep(self.faults.latency_s)
        elif self.faults.latency_s:
            await asyncio.sleep(self.faults.latency_s)
        rejection = self._rejection(body, request)
        if rejection is not None:
            return rejection
        injected = self._injected_status(number)
        if injected is not None:
            return injected
        body = _keep_last(body, self.faults.context_limit)
        kind = ("chat" if chat else "completions") + ("-stream" if stream else "")
        if kind in self.replay:
            content_type = "text/event-stream" if stream else "application/json"
            return web.Response(body=self.replay[kind], content_type=content_type)
        render = _Renderer(self, body, chat)
        if self.faults.rollout:
            render.envelope.update(self.faults.rollout[number % len(self.faults.rollout)])
        render.cached = self._cache_hit(_keep_last(body, self.faults.sliding_window))
        render.read = read
        if self.faults.no_logprobs_under_load and number in self._overlapped:
            render.logprobs = False
        if stream:
            return await self._stream(request, body, chat, number, render)
        steps: list[Step] = []

        async def keep(step: Step) -> None:
            steps.append(step)

        finish = await self._run_engine(_keep_last(body, self.faults.sliding_window), chat, keep,
                                        render.cached, render.read)
        if number in self.faults.drop:
            request.transport.close()  # type: ignore[union-attr]
            return web.Response()
        routing = self._routing(body, steps) if self.faults.routing else None
        return _json(render.whole(steps, finish, routing))

    def _routing(self, body: Mapping[str, object], steps: list[Step]) -> np.ndarray | None:
        """The routing this answer's forward passes took (prompt + generated - 1 rows),
        planted faults included; None when the server would send none."""
        if self.profile.routing is None or (self.profile.routing_request
                                            and not body.get(self.profile.routing_request)):
            return None
        forwarded = [str(i) for i in self.tokenize(prompt_text_of(body))] + [
            step.token for step in steps[:-1]]
        routing = lab_routing(forwarded)
        generated = len(forwarded) - len(steps)  # the row that chose token 0: the prompt's last
        if self.faults.gating_nondeterministic and steps:
            # the k-th request of a prompt is routed elsewhere at its own (token, layer):
            # every repeat differs from every other, whatever else is in flight
            seen = self._routed.get(prompt_text_of(body), 0)
            self._routed[prompt_text_of(body)] = seen + 1
            if seen:
                self._reroute(routing, generated + seen % len(steps),
                              (seen // len(steps)) % ROUTING_LAYERS)
        if self.faults.routing_flip_at is not None and self.faults.routing_flip_at < len(steps):
            self._reroute(routing, generated + self.faults.routing_flip_at, 1)
        return routing

    @staticmethod
    def _reroute(routing: np.ndarray, row: int, layer: int) -> None:
        if 0 <= row < len(routing):
            routing[row, layer] = (routing[row, layer] + ROUTING_K) % ROUTING_EXPERTS

    async def _stream(self, request: web.Request, body: Mapping[str, object], chat: bool,
                      number: int, render: _Renderer) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        sent = 0
        pending: list[Step] = []  # vLLM puts finish_reason on the last token's chunk
        steps: list[Step] = []

        async def write(chunk: dict[str, object]) -> None:
            nonlocal sent
            if number in self.faults.drop and sent == 2:
                request.transport.close()  # type: ignore[union-attr]
                raise ConnectionResetError("injected drop")
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            sent += 1
            if self.faults.token_delay_s:
                await asyncio.sleep(self.faults.token_delay_s)

        async def emit(step: Step) -> None:
            steps.append(step)
            if pending:
                await write(render.step_chunk(pending.pop(), None))
            pending.append(step)

        for chunk in render.opening_chunks():
            await write(chunk)
        finish = await self._run_engine(_keep_last(body, self.faults.sliding_window), chat, emit,
                                        render.cached, render.read)
        closing = render.closing_chunks(pending, finish)
        routing = self._routing(body, steps) if self.faults.routing else None
        if routing is not None and self.profile.routing == ROUTING_STREAM_END:  # before usage
            closing.insert(len(closing) - (not self.faults.no_usage), {
                **render.envelope, "object": render.kind, "choices": [],
                "sglext": _sglang_routing(routing)})
        for chunk in closing:
            await write(chunk)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _run_engine(self, body: Mapping[str, object], chat: bool, emit: Emit,
                          cached: bool = False, read: CacheRead | None = None) -> str:
        top_k = _requested_k(body)
        if self.lab.max_alternatives is not None:  # fewer alternatives than asked
            top_k = min(top_k, self.lab.max_alternatives)
        loaded = self.faults.load_sensitive and self.in_flight > 1
        # relative, like float rounding under another reduction order
        jitter = 1e-7 if self.faults.nondeterministic or loaded else 0.0
        emit = self._from_cache(emit) if cached else emit
        batched = self.faults.batch_variant_at is not None \
            and self.in_flight >= self.faults.batch_variant_at
        emit = self._shifted(emit, 1e-7 * self.in_flight) if batched else emit
        emit = self._shifted(emit, 3e-7) if self._prefix_hit(body) else emit
        if read is not None and read.corrupted:
            emit = self._corrupted(emit)
        if read is not None and self._written_alongside(read):
            emit = self._shifted(emit, 5e-7)
        if self.faults.ignore_seed:
            body = {key: value for key, value in body.items() if key != "seed"}
        if self.faults.bang_run:
            return await bang_run(body, top_k, emit)
        if self.faults.collapse:
            return await collapsed(body, top_k, emit)
        if self.faults.late_loop_after is not None:
            loop = LateLoop(self.faults.late_loop_after, emit)
            await self.engine.run(body, chat, top_k, jitter, self._misbehaving(body, loop.emit))
            return await loop.finish(body)
        return await self.engine.run(body, chat, top_k, jitter, self._misbehaving(body, emit))

    def _cache_hit(self, body: Mapping[str, object]) -> bool:
        """Whether the prompt_cache fault finds this prompt cached (and caches it: also
        a request that does not read the cache leaves its prompt there, as llama-server
        does)."""
        if not self.faults.prompt_cache:
            return False
        text = prompt_text_of(body)
        seen = text in self._cached and body.get("cache_prompt") is not False
        self._cached.add(text)
        return seen

    def _cache_read(self, body: Mapping[str, object], number: int) -> CacheRead | None:
        """What this request reads of the prefix cache (nothing where its body turns the
        cache off), its prompt written there and counted in flight; None (nothing kept)
        unless a cache fault needs it."""
        if not (self.faults.block_corruption or self.faults.cobatch_writer):
            return None
        ids = self.tokenize(prompt_text_of(body))
        field = self.profile.cache_off_field
        reads = field is None or body.get(field) is not False
        shared = self.prefix_cache.shared(ids)
        read = self.prefix_cache.read(ids) if reads else 0
        block = self.prefix_cache.block
        self.prefix_cache.write(ids)
        alongside = {other for other, written in self._writing.items()
                     if shared_start(ids, written) >= COBATCH_SHARED}
        if alongside:
            self._cowritten |= alongside | {number}
        self._writing[number] = ids
        return CacheRead(number, ids, read, self.faults.block_corruption and reads
                         and read == block == shared)

    def _written_alongside(self, read: CacheRead) -> bool:
        """The cobatch_writer fault: another request sharing this one's prefix was in
        flight with it (each reads what the other writes, whichever came first)."""
        return self.faults.cobatch_writer and read.number in self._cowritten

    @staticmethod
    def _corrupted(emit: Emit) -> Emit:
        """The first token replaced by its runner-up (a corrupted block's answer)."""
        first = True

        async def replaced(step: Step) -> None:
            nonlocal first
            if first and len(step.top) > 1:
                token, logprob = step.top[1]
                step = replace(step, token=token, raw=token.encode(), content=token,
                               logprob=logprob)
            first = False
            await emit(step)
        return replaced

    def _scoring_shift(self, body: Mapping[str, object], ids: list[int]) -> float:
        """The scoring_cache_shift fault's relative move for this scoring request (and the
        request counted for those after it)."""
        if not self.faults.scoring_cache_shift or body.get("cache_prompt") is False:
            return 0.0
        start = tuple(ids[:8])
        seen = self._scored_starts.get(start, 0)
        self._scored_starts[start] = seen + 1
        return 1e-7 * seen

    def _prefix_hit(self, body: Mapping[str, object]) -> bool:
        """Whether the prefix_cache_shift fault reuses a cached prefix for this prompt."""
        if not self.faults.prefix_cache_shift or body.get("cache_prompt") is False:
            return False
        words = prompt_text_of(body).split(" ")
        previous = self._last_cached_prompt.split(" ")
        self._last_cached_prompt = " ".join(words)
        shared = next((n for n, (a, b) in enumerate(zip(words, previous, strict=False))
                       if a != b), min(len(words), len(previous)))
        return shared >= 8

    @staticmethod
    def _shifted(emit: Emit, relative: float) -> Emit:
        """Every logprob moved by `relative`."""
        async def moved(step: Step) -> None:
            await emit(replace(step, logprob=step.logprob * (1 + relative),
                               top=[(token, value * (1 + relative)) for token, value in step.top]))
        return moved

    @staticmethod
    def _from_cache(emit: Emit) -> Emit:
        """Every logprob moved by the same small amount: a cached prompt's numbers."""
        async def moved(step: Step) -> None:
            await emit(replace(step, logprob=step.logprob * (1 + 1e-7),
                               top=[(token, value * (1 + 1e-7)) for token, value in step.top]))
        return moved

    def _misbehaving(self, body: Mapping[str, object], emit: Emit) -> Emit:
        """Wrap `emit` with the sampling and reasoning faults."""
        faults = self.faults
        sampling = faults.not_greedy == "sampling" and body.get("top_k") != 1
        template = body.get("chat_template_kwargs") or {}
        thinking = (faults.reasoning is not None and "messages" in body
                    and json_object(template).get("enable_thinking") is not False)
        position = 0

        async def wrapped(step: Step) -> None:
            nonlocal position
            if thinking and position == 0:
                for word in ("<think>", " Let", " me", " think.", "</think>"):
                    top = [(word, -0.01)] + [(f" alt{n}", -1.5 * n)
                                             for n in range(1, len(step.top))]
                    await emit(Step(word, word.encode(), word, -0.01, top,
                                    reasoning=faults.reasoning == "eat"))
            if thinking and faults.reasoning == "eat":
                step = replace(step, reasoning=True)
            if (sampling and position % 5 == 3 or faults.not_greedy == "penalty"
                    and position % 4 == 2) and len(step.top) > 1:
                token, logprob = step.top[1]  # not the most likely token
                step = replace(step, token=token, raw=token.encode(), content=token,
                               logprob=logprob)
            position += 1
            await emit(step)

        return wrapped

    async def _scored(self, body: Mapping[str, object]) -> web.Response:
        """Logprobs of the prompt's own tokens: vLLM's `prompt_logprobs` (the prompt may
        be token ids), or `echo` with legacy logprobs (vLLM, llama-cpp-python)."""
        vllm_style = body.get("prompt_logprobs") is not None
        if not (self.profile.forced_mode == PROMPT_LOGPROBS if vllm_style
                else self.lab.echo):
            name = "prompt_logprobs" if vllm_style else "echo"
            return _json(_error_body(f"{name} is not supported", 400), 400)
        prompt = body.get("prompt")
        ids = ([json_int(i) for i in prompt] if isinstance(prompt, list)
               else self.engine.tokenize(str(prompt)))
        k = json_int((body.get("prompt_logprobs") if vllm_style else body.get("logprobs")) or 0)
        scored = await asyncio.to_thread(self.engine.score, ids, 1, k)
        moved = 1 + self._scoring_shift(body, ids)
        if moved != 1:
            scored = [replace(one, logprob=one.logprob * moved,
                              top=[(i, t, v * moved) for i, t, v in one.top]) for one in scored]
        texts = [self.engine.token_text(i) for i in ids]
        choice: dict[str, object] = {"index": 0, "text": "" if vllm_style else "".join(texts),
                                     "finish_reason": "length", "logprobs": None}
        if vllm_style:
            choice["prompt_logprobs"] = [None] + [{
                str(token): {"logprob": one.logprob, "rank": 1 + sum(
                    v > one.logprob for _, _, v in one.top), "decoded_token": texts[n + 1]},
                **{str(i): {"logprob": v, "rank": rank, "decoded_token": t}
                   for rank, (i, t, v) in enumerate(one.top, 1)}}
                for n, (token, one) in enumerate(zip(ids[1:], scored, strict=True))]
        else:
            choice["logprobs"] = {
                "tokens": texts, "text_offset": [0] * len(texts),
                "token_logprobs": [None] + [one.logprob for one in scored],
                "top_logprobs": [None] + [{t: v for _, t, v in one.top} for one in scored]}
        return _json({"id": "cmpl-scored", "object": "text_completion", "model": self.engine.name,
                      "choices": [choice], "usage": {"prompt_tokens": len(ids),
                                                     "completion_tokens": 0,
                                                     "total_tokens": len(ids)}})

    def _injected_status(self, number: int) -> web.Response | None:
        status = self.faults.status.get(number)
        if status is None:
            return None
        headers = {}
        if self.faults.retry_after_s is not None:
            headers["Retry-After"] = str(self.faults.retry_after_s)
        headers.update(self.faults.retry_headers)
        message = self.faults.status_message or f"injected HTTP {status}"
        return _json(_error_body(message, status), status, headers)

    def _rejection(self, body: Mapping[str, object], request: web.Request
                   ) -> web.Response | None:
        for name in sorted(self.faults.reject_fields & set(body)):
            return _json(_error_body(f"Unrecognized request argument supplied: {name}", 400), 400)
        k = _requested_k(body)
        lab = self.lab
        for name in sorted(set(lab.unknown_fields) & set(body)):
            return _flat_error(lab, f"1 validation error:\n  {{'type': 'extra_forbidden', 'loc': "
                               f"('body', '{name}'), 'msg': 'Extra inputs are not permitted'}}",
                               400)
        own_limit = self.profile.top_logprobs_default or self.profile.top_logprobs_limit
        if lab.refuses_top_p_one and body.get("top_p") == 1.0:
            return _json({"error": "Input validation error: `top_p` must be > 0.0 and < 1.0",
                          "error_type": "validation"}, 422)
        if self.profile.legacy_asks_like_chat and not isinstance(body.get("logprobs", False), bool):
            request.transport.close()  # type: ignore[union-attr]  # its check raises
            return web.Response()
        if lab.limit_status is not None and own_limit is not None and k > own_limit:
            message = lab.limit_message.format(
                k=k, limit=own_limit, field="top_logprobs" if "messages" in body else "logprobs")
            if not lab.limit_status:  # the engine's handler raises: no answer at all
                request.transport.close()  # type: ignore[union-attr]
                return web.Response()
            if lab.flat_errors:
                return _flat_error(lab, message, lab.limit_status)
            return _json({"error": {"message": message, "type": "invalid_request_error",
                                    "param": None, "code": None}}, lab.limit_status)
        over = self.faults.refuse_over_tokens
        if over is not None and len(self.tokenize(prompt_text_of(body))) > over:
            return _json(_error_body("the request exceeds the available context size, try "
                                     "increasing it", 400), 400)
        limit = self.faults.max_top_logprobs
        if limit is not None and k > limit:
            message = (f"Requested sample logprobs of {k}, which is greater than max allowed: "
                       f"{limit}")
            return _json(_error_body(message, 400), 400)
        return None

    def wants_logprobs(self, body: Mapping[str, object], chat: bool = True) -> bool:
        """Whether the answer carries logprobs: asked for, and sent by this engine on
        this API, streamed or whole."""
        sends = self.profile.sends_logprobs("chat" if chat else "completions",
                                            bool(body.get("stream")))
        return sends and not self.faults.no_logprobs and bool(body.get("logprobs"))


class _Renderer:
    """Turns planned steps into one dialect's response body or stream chunks."""

    def __init__(self, server: LabServer, body: Mapping[str, object], chat: bool) -> None:
        self.dialect = server.dialect
        self.profile = profile = server.profile
        self.lab = server.lab
        self.model = body.get("model") or server.engine.name
        self.chat = chat
        self.kind = ("chat.completion.chunk" if chat else "text_completion")
        self.logprobs = server.wants_logprobs(body, chat)
        self.extra_alt = profile.extra_alternative
        self.legacy = not chat and profile.legacy_logprobs == COLUMNS
        self.prompt_tokens = len(server.tokenize(prompt_text_of(body))) \
            + (server.faults.template_tokens if chat else 0)
        self.no_usage = server.faults.no_usage
        self.reports_cache = server.faults.prompt_cache
        self.cached = False  # the prompt_cache fault found this prompt cached
        # what it read of the prefix cache, said in usage with the cache faults
        self.read: CacheRead | None = None
        self.reports_read = server.faults.block_corruption or server.faults.cobatch_writer
        self.completion_tokens = 0
        self.envelope: dict[str, object] = {"id": "cmpl-scripted", "created": int(time.time()),
                                            "model": self.model}
        if server.lab.system_fingerprint:
            self.envelope["system_fingerprint"] = server.lab.system_fingerprint

    def usage(self) -> dict[str, object]:
        usage: dict[str, object] = {
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens}
        if self.reports_cache:  # as llama-server says what its prompt cache held
            usage["prompt_tokens_details"] = {
                "cached_tokens": self.prompt_tokens - 1 if self.cached else 0}
        elif self.reports_read and self.read is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.read.read}
        return usage

    def whole(self, steps: list[Step], finish: str, routing: np.ndarray | None = None
              ) -> dict[str, object]:
        """The non-streamed response; `routing` as the dialect sends it, if it does."""
        self.completion_tokens = len(steps)
        text = "".join(step.content for step in steps
                       if step.call is None and (not step.reasoning or not self.chat))
        choice: dict[str, object] = {"index": 0, "finish_reason": finish}
        if self.chat:
            choice["message"] = self._whole_message(steps, text)
        else:
            choice["text"] = text
        choice["logprobs"] = self._logprobs(steps) if self.logprobs else None
        if routing is not None and self.profile.routing == ROUTING_WHOLE:
            choice["routed_experts"] = _vllm_routing(routing)
        kind = "chat.completion" if self.chat else "text_completion"
        body = {**self.envelope, "object": kind, "choices": [choice], "usage": self.usage()}
        if self.no_usage:
            del body["usage"]
        if routing is not None and self.profile.routing == ROUTING_STREAM_END:
            body["sglext"] = _sglang_routing(routing)
        return body

    def _whole_message(self, steps: list[Step], text: str) -> dict[str, object]:
        reasoning = "".join(step.content for step in steps if step.reasoning) or None
        message: dict[str, object] = {"role": "assistant", "content": text}
        if self.lab.reasoning_always or reasoning:
            message[self.profile.reasoning_field] = reasoning
        message.update(self._whole_calls(steps))
        return message

    def opening_chunks(self) -> list[dict[str, object]]:
        if not self.chat:
            return []
        return [self._chunk(self.kind, {"role": "assistant", "content": ""}, None, None)]

    def step_chunk(self, step: Step, finish: str | None) -> dict[str, object]:
        self.completion_tokens += 1
        logprobs = self._logprobs([step]) if self.logprobs else None
        if step.call is not None and self.chat:
            return self._chunk(self.kind, {"tool_calls": [self._call_piece(step)]}, logprobs,
                               finish)
        field = self.profile.reasoning_field if step.reasoning and self.chat else "content"
        return self._chunk(self.kind, {field: step.content}, logprobs, finish,
                           text=step.content)

    # Tool calls, as each runtime writes them (their response models: vLLM's ToolCall /
    # DeltaToolCall, SGLang's ToolCall, llama.cpp's server, llama-cpp-python's
    # chatml-function-calling). The content of a message with calls is null.

    def _call_id(self, number: int) -> str:
        return self.lab.tool_call_id_prefix + f"{number:04d}scripted"

    def _whole_calls(self, steps: list[Step]) -> dict[str, object]:
        calls: dict[int, list[str]] = {}
        for step in steps:
            if step.call is not None:
                name_and_arguments = calls.setdefault(step.call, ["", ""])
                if step.call_name is not None:
                    name_and_arguments[0] = step.call_name
                else:
                    name_and_arguments[1] += step.content
        if not calls:
            return {"tool_calls": []} if self.lab.empty_tool_calls else {}
        listed = [{"id": self._call_id(n), "type": "function",
                   "function": {"name": name, "arguments": arguments}}
                  for n, (name, arguments) in sorted(calls.items())]
        message: dict[str, object] = {"content": None, "tool_calls": listed}
        if self.lab.function_call_too:
            message["function_call"] = listed[0]["function"]
        return message

    def _call_piece(self, step: Step) -> dict[str, object]:
        number = step.call or 0
        if step.call_name is not None:  # a call's first piece: its id and name
            function: dict[str, object] = {"name": step.call_name}
            if self.lab.arguments_with_name:
                function["arguments"] = ""
            return {"index": number, "id": self._call_id(number), "type": "function",
                    "function": function}
        if self.lab.null_piece_fields:
            return {"id": None, "index": number, "type": "function",
                    "function": {"name": None, "arguments": step.content}}
        return {"index": number, "function": {"arguments": step.content}}

    def closing_chunks(self, pending: list[Step], finish: str) -> list[dict[str, object]]:
        """The last token (with finish_reason, vLLM-style, or before a separate final
        chunk, SGLang- and llama.cpp-style), then the usage chunk."""
        separate_finish = self.profile.separate_finish_chunk
        chunks = [self.step_chunk(step, None if separate_finish else finish)
                  for step in pending]
        if separate_finish or not pending:
            chunks.append(self._chunk(self.kind, {}, None, finish, text=""))
        if not self.no_usage:
            chunks.append({**self.envelope, "object": self.kind, "choices": [],
                           "usage": self.usage()})
        return chunks

    def _chunk(self, kind: str, delta: dict[str, object], logprobs: dict[str, object] | None,
               finish: str | None, text: str = "") -> dict[str, object]:
        if not self.chat and finish == "stop":
            finish = self.lab.completions_stream_stop
        choice: dict[str, object] = {"index": 0, "logprobs": logprobs, "finish_reason": finish}
        if self.chat:
            choice["delta"] = delta
        else:
            choice["text"] = text
        return {**self.envelope, "object": kind, "choices": [choice]}

    def _logprobs(self, steps: list[Step]) -> dict[str, object]:
        if self.legacy:
            return {
                "text_offset": [0] * len(steps),
                "tokens": [s.token for s in steps],
                "token_logprobs": [s.logprob for s in steps],
                "top_logprobs": [dict(self._alternatives(s)) for s in steps],
            }
        if self.profile.entry_is_an_alternative:
            return {"content": [self._copied_entry(s) for s in steps]}
        return {"content": [self._entry(s.token, s.logprob, s.raw, {
            "top_logprobs": [self._entry(t, v, t.encode()) for t, v in self._alternatives(s)]})
            for s in steps]}

    def _copied_entry(self, step: Step) -> dict[str, object]:
        """MLX's entry: its alternatives in an order of their own (the best one moved last),
        the first of them copied as the entry, whatever was generated."""
        alternatives = [self._entry(t, v, t.encode()) for t, v in self._alternatives(step)]
        alternatives = alternatives[1:] + alternatives[:1]
        return {**alternatives[0], "top_logprobs": alternatives} if alternatives else {}

    def _alternatives(self, step: Step) -> list[tuple[str, float]]:
        if self.extra_alt:  # llama-cpp-python sends one more than asked
            return step.top + [(" extra", step.logprob - 50.0)]
        return step.top

    def _entry(self, token: str, logprob: float, raw: bytes,
               extra: dict[str, object] | None = None) -> dict[str, object]:
        piece = token.replace(" ", "\u0120") if self.lab.vocabulary_pieces else token
        entry: dict[str, object] = {"token": piece, "logprob": logprob}
        if self.profile.token_bytes is not False:
            entry["bytes"] = list(raw) if self.profile.token_bytes else None
        if self.profile.token_ids_in_entries:
            entry["id"] = token_id(raw)
        return {**entry, **(extra or {})}


def _keep_last(body: Mapping[str, object], words: int | None) -> Mapping[str, object]:
    """The request with only the prompt's last `words` words (a context that silently
    drops its start)."""
    split = prompt_text_of(body).split(" ")
    if words is None or len(split) <= words:
        return body
    kept = " ".join(split[-words:])
    if "messages" in body:
        return {**body, "messages": [{"role": "user", "content": kept}]}
    return {**body, "prompt": kept}


@functools.lru_cache(maxsize=1 << 16)
def token_id(raw: bytes) -> int:
    """A stable id for a token the engine gives no id for (scripted tokens are words)."""
    return int(hashlib.sha256(raw).hexdigest()[:6], 16)


def _requested_k(body: Mapping[str, object]) -> int:
    """top_logprobs on chat; an integer `logprobs` on legacy completions."""
    legacy = body.get("logprobs")
    if isinstance(legacy, int) and not isinstance(legacy, bool):
        return legacy
    return json_int(body.get("top_logprobs") or 0)


def _flat_error(lab: LabDialect, message: str, status: int) -> web.Response:
    """An error as {"error": MESSAGE}, with the dialect's `error_type` if it has one."""
    return _json({"error": message, **({"error_type": lab.flat_error_type}
                                       if lab.flat_error_type else {})}, status)


def _error_body(message: str, status: int) -> dict[str, object]:
    return {"error": {"message": message, "type": "BadRequestError" if status == 400 else
                      "ServerError", "param": None, "code": status}}


async def _request_body(request: web.Request) -> dict[str, object]:
    return json_object(orjson.loads(await request.read()))


def _json(data: object, status: int = 200, headers: dict[str, str] | None = None
          ) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, headers=headers,
                        content_type="application/json")
