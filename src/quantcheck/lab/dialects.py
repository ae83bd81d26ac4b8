"""How the lab's loopback server writes what quantcheck does not read but a real client
would see, per engine: tool-call ids, null fields, the extra info of a tokenize or
models answer, the shape of its errors, its version. What quantcheck does read of an
engine (its endpoints, its answers' quirks, its top-logprobs limit, how it asks for
logprobs) the lab takes from the engine's profile (store/engines.py), so the lab and
the product cannot disagree; an engine with no entry here is written with the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..store.engines import (
    LLAMA_CPP,
    LLAMA_CPP_PYTHON,
    MLX,
    OLLAMA,
    SGLANG,
    TENSORRT_LLM,
    TGI,
    VLLM,
    EngineProfile,
)


@dataclass(frozen=True)
class LabDialect:
    """How the lab server writes what only a real client would see."""

    tool_call_id_prefix: str = "call_"
    empty_tool_calls: bool = False  # `tool_calls: []` on a message with none
    function_call_too: bool = False  # each call also as the older `function_call`
    arguments_with_name: bool = True  # a call's first piece carries `arguments: ""`
    null_piece_fields: bool = False  # later pieces carry `id: null`, `name: null`
    reasoning_always: bool = False  # `reasoning_content: null` on every message
    max_alternatives: int | None = None  # sends fewer alternatives than asked
    health_json: bool = False  # /health answers {"status": "ok"}
    models_max_model_len: bool = False  # /v1/models entries carry max_model_len
    tokenize_counts: bool = False  # a tokenize answer also says count and max_model_len
    tokenize_lenient: bool = False  # a tokenize request without its field: no ids, no 400
    echo: bool = False  # legacy completions with echo and logprobs score the prompt
    system_fingerprint: str | None = None
    # Above the profile's top-logprobs limit (as started by default, or fixed): the status
    # answered (0: the connection is dropped without an answer) and its message ({k}
    # asked, {limit}, {field}); None: not enforced
    limit_status: int | None = None
    limit_message: str = ""
    flat_errors: bool = False  # errors as {"error": MESSAGE, "error_type": ...}
    flat_error_type: str = "validation"  # that `error_type` ("": the key is left out)
    # request fields it refuses as unknown (HTTP 400, as its validation errors are sent)
    unknown_fields: tuple[str, ...] = ()
    owner_is_model: bool = False  # /v1/models entries owned by the model's own id
    refuses_top_p_one: bool = False  # `top_p: 1.0` refused (it wants 0 < top_p < 1)
    completions_stream_stop: str = "stop"  # the finish of a completions stream ended by EOS
    vocabulary_pieces: bool = False  # token strings as vocabulary pieces (Ġ for a space)
    version: str = "0.11.0"  # what its version endpoint says


LAB_DIALECTS: dict[str, LabDialect] = {
    VLLM.name: LabDialect(
        tool_call_id_prefix="chatcmpl-tool-", empty_tool_calls=True, arguments_with_name=False,
        reasoning_always=True, models_max_model_len=True, tokenize_counts=True, echo=True),
    SGLANG.name: LabDialect(null_piece_fields=True, max_alternatives=5),
    LLAMA_CPP.name: LabDialect(health_json=True, tokenize_lenient=True,
                               system_fingerprint="b6000-abc1234"),
    LLAMA_CPP_PYTHON.name: LabDialect(tool_call_id_prefix="call__", function_call_too=True,
                                      echo=True),
    OLLAMA.name: LabDialect(
        system_fingerprint="fp_ollama", limit_status=400, version="0.33.0-rc2",
        limit_message="top_logprobs must be between 0 and {limit}"),
    MLX.name: LabDialect(
        health_json=True, limit_status=0, vocabulary_pieces=True, version="0.32.0",
        system_fingerprint="0.32.0-0.30.1-macOS-15.5-arm64-arm-64bit-applegpu_g15s"),
    TGI.name: LabDialect(
        owner_is_model=True, limit_status=422, flat_errors=True, refuses_top_p_one=True,
        version="3.3.6-dev0", completions_stream_stop="eos_token",
        system_fingerprint="3.3.6-dev0-native",
        limit_message="Input validation error: `top_n_tokens` must be >= 0 and <= {limit}. "
                      "Given: {k}"),
    TENSORRT_LLM.name: LabDialect(
        tool_call_id_prefix="chatcmpl-tool-", limit_status=400, flat_errors=True,
        flat_error_type="", unknown_fields=("repeat_penalty",), version="main-0076e93",
        limit_message="1 validation error:\n  {{'type': 'value_error', 'loc': ('body',), "
                      "'msg': 'Value error, {field} must be less than or equal to {limit}'}}"),
}


def lab_dialect(profile: EngineProfile) -> LabDialect:
    """How the lab writes this engine's answers (the defaults for one not listed)."""
    return LAB_DIALECTS.get(profile.name, LabDialect())
