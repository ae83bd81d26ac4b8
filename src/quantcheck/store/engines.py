"""One profile per serving engine: what it is and how it speaks, in one place.

A profile says how an engine is recognised (the `owned_by` of its `/v1/models` entries,
the info endpoints only it answers), where it tokenizes and renders a chat template,
which forced-scoring mode suits it, whether and where it sends MoE routing, how its
prefix cache is turned off, the quirks of its answers (a separate finish chunk, split
UTF-8, one alternative more than asked, logprobs that only whole answers carry), its
top-logprobs limit and what it cannot do. Everything else reads engines through
`profile_of(name)`: no engine's name is compared as a string outside this module
(tests/test_structure.py scans for one). The lab's server reads these profiles too;
what only it writes (tool-call ids, null fields, its errors' shape) is in lab/dialects.py.

Adding an engine: a profile in ENGINES, its recorded answers under
tests/fixtures/wire/, and its row in docs/engines.md (docs/development.md).
"""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN = "unknown"  # the runtime of a server that does not say what it is

# Forced-scoring modes (fetch/forced_scoring.py)
PROMPT_LOGPROBS, TOKEN_IDS, ECHO = "prompt-logprobs", "token-ids", "echo"
# Ways of rendering a chat template on request (fetch/template_check.py)
APPLY_TEMPLATE, TOKENIZE_MESSAGES = "apply-template", "tokenize-messages"
# Where MoE routing comes back (wire/dialects.py reads both)
ROUTING_WHOLE, ROUTING_STREAM_END = "whole answers", "whole answers and a stream's last chunk"
# How legacy /v1/completions carry logprobs
COLUMNS, ENTRIES = "columns", "entries"  # {tokens, token_logprobs, top_logprobs}; chat-style


@dataclass(frozen=True)
class TokenizeEndpoint:
    """POST `path` with the text in `text_field` (and the model's name when
    `wants_model`); the ids come back under `tokens`. `special_field` says whether the
    special tokens (BOS) are added, `special_default` what the engine does unsaid."""

    path: str
    text_field: str
    wants_model: bool = False
    special_field: str = "add_special_tokens"
    special_default: bool = True
    accepts_messages: bool = False  # tokenizes a conversation through its chat template


@dataclass(frozen=True)
class CacheBlocks:
    """How an engine's prefix cache is cut: `tokens` a block unless the server says
    otherwise (1: token by token, no block edge), where the server says its own size (a
    field of its info answer, `info_field`, or a label of a Prometheus gauge, `metrics`:
    the page's path, the gauge's name and the label), and `said`: where the size comes
    from, in words."""

    tokens: int
    said: str
    info_field: str | None = None
    metrics: tuple[str, str, str] | None = None


@dataclass(frozen=True)
class EngineProfile:
    """One engine, as quantcheck reads it."""

    name: str  # the runtime written in manifests and serving cells
    label: str  # the engine's name in sentences
    owned_by: tuple[str, ...] = ()  # /v1/models `owned_by` values that name it
    # recognised (a guess: nothing else says so) by /v1/models entries with no owned_by
    ownerless_models: bool = False
    info_paths: tuple[str, ...] = ()  # GET endpoints that describe the server
    version_at: tuple[str, str] | None = None  # info endpoint and field of its version
    # where its KV cache's dtype is told: an info endpoint and its field, or a
    # Prometheus page, its metric and the label (None: the engine does not tell)
    kv_cache_dtype_at: tuple[str, str] | None = None
    kv_cache_dtype_metric: tuple[str, str, str] | None = None
    tokenize: TokenizeEndpoint | None = None
    detokenize: tuple[str, str] | None = None  # path, and the field the text comes in
    chat_template: str | None = None  # APPLY_TEMPLATE, TOKENIZE_MESSAGES or None
    forced_mode: str | None = ECHO  # what `--forced-mode auto` picks; None: cannot score
    routing: str | None = None  # ROUTING_WHOLE, ROUTING_STREAM_END or None
    routing_request: str | None = None  # the request field that asks for routing
    cache_off_field: str | None = None  # a body field that turns the prefix cache off
    cache_flush_path: str | None = None  # POST here empties the prefix cache
    # what the server must be started with to answer the flush path, or why another
    # way of emptying it is not used ("" when nothing is needed)
    cache_flush_needs: str = ""
    cache_blocks: CacheBlocks | None = None  # None: how its cache is cut is not known
    separate_finish_chunk: bool = False  # finish_reason in its own chunk, empty delta
    split_utf8: bool = False  # holds back split UTF-8: a token may not be valid text
    extra_alternative: bool = False  # sends k+1 alternatives (the sampled one added)
    token_ids_in_entries: bool = False  # logprob entries carry the token's `id`
    token_bytes: bool | None = True  # entries carry `bytes` (None: `bytes: null`)
    reasoning_field: str = "reasoning_content"
    legacy_logprobs: str | None = COLUMNS  # how /v1/completions carries logprobs
    streams_logprobs: bool = True  # False: only whole answers carry logprobs
    # /v1/completions asks for logprobs as chat does (`logprobs: true, top_logprobs: K`)
    legacy_asks_like_chat: bool = False
    # greedy request fields this engine misreads at their greedy value: left out of its
    # requests (its own default is the greedy one)
    left_out: tuple[str, ...] = ()
    # a logprob entry is a copy of the first of its unsorted alternatives, not the
    # generated token: the chosen token is read as the top alternative (greedy decoding),
    # so whether decoding is greedy cannot be checked
    entry_is_an_alternative: bool = False
    # the most alternatives it can answer, however it is started (None: no fixed limit),
    # and where a limit comes from (also a limit its operator sets)
    top_logprobs_limit: int | None = None
    top_logprobs_note: str = ""
    top_logprobs_default: int | None = None  # a limit its operator can raise, as started
    # the request field its refusal of too many alternatives names ("": it says logprobs)
    logprobs_named: str = ""
    # how it must be started when it refuses logprobs within its limit ("": it does not)
    logprobs_start_fix: str = ""
    # a refused request field answered with another status than HTTP 400 or 422: that
    # status and the words its answer carries (None: none; any other answer is retried)
    refuses_fields_with: tuple[int, str] | None = None
    gguf_names: bool = False  # models are named by their GGUF file
    one_at_a_time: str | None = None  # why concurrency above 1 hurts, if it does
    cannot: tuple[str, ...] = ()  # what quantcheck cannot do with it, in words

    def missing_logprobs(self, apis: set[str], stream: bool) -> str | None:
        """Where this engine's answers carry no logprobs, said for a warning; None when
        every answer of these APIs does."""
        where = [f"on /v1/{api}" if api != "chat" else "on /v1/chat/completions"
                 for api in sorted(apis) if not self.sends_logprobs(api, False)]
        streamed = stream and not self.streams_logprobs
        if streamed:
            where.append("in a stream")
        if not where:
            return None
        return (f"{self.label} sends no logprobs {' or '.join(where)}: only texts are "
                "compared there; the figures that need logprobs (drift, top-k agreement, "
                "the determinism signature, teacher-forced scoring) are missing"
                + ("; collect with --no-stream for them" if streamed else ""))

    def sends_logprobs(self, api: str, stream: bool) -> bool:
        """Whether an answer on this API, streamed or whole, carries logprobs."""
        if api != "chat" and self.legacy_logprobs is None:
            return False
        return self.streams_logprobs or not stream


VLLM = EngineProfile(
    name="vllm", label="vLLM", owned_by=("vllm",), info_paths=("/version",),
    version_at=("/version", "version"),
    tokenize=TokenizeEndpoint("/tokenize", "prompt", wants_model=True, accepts_messages=True),
    detokenize=("/detokenize", "prompt"), chat_template=TOKENIZE_MESSAGES,
    forced_mode=PROMPT_LOGPROBS, routing=ROUTING_WHOLE, cache_flush_path="/reset_prefix_cache",
    kv_cache_dtype_metric=("/metrics", "vllm:cache_config_info", "cache_dtype"),
    # vllm/entrypoints/serve/cache: the route is added in development mode only
    cache_flush_needs="vLLM serves it only when started with VLLM_SERVER_DEV_MODE=1",
    cache_blocks=CacheBlocks(16, "vLLM's --block-size (16 unless started otherwise)",
                             metrics=("/metrics", "vllm:cache_config_info", "block_size")),
    top_logprobs_note="--max-logprobs, 20 unless started otherwise", top_logprobs_default=20)
SGLANG = EngineProfile(
    name="sglang", label="SGLang", owned_by=("sglang",),
    info_paths=("/get_server_info", "/server_info"), version_at=("/get_server_info", "version"),
    kv_cache_dtype_at=("/get_server_info", "kv_cache_dtype"),
    detokenize=("/detokenize", "text"), chat_template=TOKENIZE_MESSAGES,
    tokenize=TokenizeEndpoint("/tokenize", "prompt", wants_model=True),
    routing=ROUTING_STREAM_END, routing_request="return_routed_experts",
    # it refuses while requests are running or waiting; the certificate sends none then
    cache_flush_path="/flush_cache", separate_finish_chunk=True,
    cache_blocks=CacheBlocks(1, "SGLang's --page-size (1 unless started otherwise)",
                             info_field="page_size"))
LLAMA_CPP = EngineProfile(
    name="llama.cpp", label="llama.cpp", owned_by=("llamacpp",), info_paths=("/props",),
    version_at=("/props", "build_info"),
    tokenize=TokenizeEndpoint("/tokenize", "content", special_field="add_special",
                              special_default=False),
    chat_template=APPLY_TEMPLATE, forced_mode=TOKEN_IDS, cache_off_field="cache_prompt",
    # POST /slots/ID?action=erase answers HTTP 501 unless started with --slot-save-path
    # (measured here); a request with cache_prompt false reads nothing from the cache
    # (and leaves its own prompt there for the next)
    cache_flush_needs="its slot erase (POST /slots/ID?action=erase) needs --slot-save-path: "
                      "cache_prompt false computes a request cold instead",
    cache_blocks=CacheBlocks(1, "llama.cpp reuses a slot's cached tokens token by token "
                                "(their longest common prefix with the prompt)"),
    separate_finish_chunk=True, split_utf8=True, token_ids_in_entries=True,
    legacy_logprobs=ENTRIES, gguf_names=True,
    cannot=("MoE routing",))
LLAMA_CPP_PYTHON = EngineProfile(
    name="llama-cpp-python", label="llama-cpp-python", owned_by=("me",),
    tokenize=TokenizeEndpoint("/extras/tokenize", "input"),
    extra_alternative=True, token_bytes=None, gguf_names=True,
    refuses_fields_with=(500, "validation error"),  # pydantic's, as HTTP 500
    one_at_a_time=("llama-cpp-python answers one request at a time and, by default, cuts a "
                   "running stream short when another request arrives: use --concurrency 1 "
                   "(or start it with --interrupt_requests false)"),
    cannot=("MoE routing", "rendering a chat template on request"))

OLLAMA = EngineProfile(  # openai/openai.go, middleware/openai.go, server/routes.go
    name="ollama", label="Ollama", owned_by=("library",), info_paths=("/api/version",),
    version_at=("/api/version", "version"), forced_mode=None, separate_finish_chunk=True,
    reasoning_field="reasoning", legacy_logprobs=None, top_logprobs_limit=20,
    top_logprobs_note="fixed: top_logprobs must be between 0 and 20",
    cannot=("logprobs on /v1/completions (its answers carry none: only texts are compared)",
            "tokenizing on request", "rendering a chat template on request",
            "teacher-forced scoring", "MoE routing", "turning its prefix cache off"))

MLX = EngineProfile(  # mlx_lm/server.py of mlx-lm 0.32.0
    name="mlx", label="MLX (mlx_lm.server)", ownerless_models=True, forced_mode=None,
    separate_finish_chunk=True, token_ids_in_entries=True, token_bytes=False,
    reasoning_field="reasoning", legacy_logprobs=ENTRIES, streams_logprobs=False,
    legacy_asks_like_chat=True, entry_is_an_alternative=True, top_logprobs_limit=11,
    top_logprobs_note="fixed: top_logprobs must be at most 11; above it the server drops "
                      "the connection without an answer",
    cannot=("being recognised for sure (its models list no owner and it has no info "
            "endpoint: quantcheck guesses it from the missing owner)",
            "logprobs in a stream (only texts are compared there)",
            "checking greedy decoding (its logprob entries do not say which token was "
            "generated: the top alternative is taken)",
            "tokenizing on request", "rendering a chat template on request",
            "teacher-forced scoring", "MoE routing", "turning its prefix cache off"))

TGI = EngineProfile(  # router/src/{lib,server,chat,validation}.rs of 3.3.6-dev0
    name="tgi", label="TGI (text-generation-inference)", info_paths=("/info",),
    version_at=("/info", "version"), forced_mode=None, legacy_logprobs=None,
    token_bytes=False, left_out=("top_p", "presence_penalty"),
    top_logprobs_note="--max-top-n-tokens, 5 unless started otherwise", top_logprobs_default=5,
    logprobs_named="top_n_tokens",
    cannot=("logprobs on /v1/completions (its answers carry none: only texts are compared)",
            "tokenizing on request in the shape quantcheck reads", "rendering a chat "
            "template on request", "teacher-forced scoring", "MoE routing",
            "turning its prefix cache off"))

TENSORRT_LLM = EngineProfile(  # tensorrt_llm/serve/openai_{protocol,server}.py at 0076e93
    # its GET /version is vLLM's too: recognised by the owner alone, the version read there
    name="tensorrt-llm", label="TensorRT-LLM (trtllm-serve)", owned_by=("tensorrt_llm",),
    version_at=("/version", "version"),
    tokenize=TokenizeEndpoint("/_internal/tokenize", "prompt"), forced_mode=None,
    left_out=("repeat_penalty",), top_logprobs_limit=100,
    top_logprobs_note="fixed: top_logprobs and logprobs must be less than or equal to 100; "
                      "more than 1 needs its pytorch backend (the default) or "
                      "gather_generation_logits",
    logprobs_start_fix="a server on its pytorch backend or started with "
                       "gather_generation_logits",
    cannot=("rendering a chat template on request", "teacher-forced scoring (its "
            "completions score no prompt tokens)", "MoE routing",
            "turning its prefix cache off"))

ENGINES: dict[str, EngineProfile] = {profile.name: profile for profile in (
    VLLM, SGLANG, LLAMA_CPP, LLAMA_CPP_PYTHON, OLLAMA, MLX, TGI, TENSORRT_LLM)}
ENGINE_NAMES = tuple(ENGINES)
INFO_PATHS = tuple(dict.fromkeys(path for p in ENGINES.values() for path in p.info_paths))
TOKENIZERS = tuple((p.name, p.tokenize) for p in ENGINES.values() if p.tokenize)


def profile_of(runtime: str | None) -> EngineProfile | None:
    """The profile of a runtime quantcheck knows; None for an unknown one."""
    return ENGINES.get(runtime or UNKNOWN)


def known(runtime: str | None) -> bool:
    return profile_of(runtime) is not None


def with_forced_mode(mode: str) -> EngineProfile:
    """The engine whose own scoring a forced mode is (prompt-logprobs: vLLM's)."""
    return next(p for p in ENGINES.values() if p.forced_mode == mode)


def tokenizers_first(runtime: str | None) -> list[tuple[str, TokenizeEndpoint]]:
    """Every engine's tokenize endpoint, the runtime's own first."""
    return sorted(TOKENIZERS, key=lambda named: named[0] != runtime)
