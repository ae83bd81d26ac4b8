"""Which runtime a server is, and what its info endpoints reveal (pure: no network).

The info endpoints' answers (`/v1/models`, vLLM `/version`, SGLang `/get_server_info`,
llama.cpp `/props`) are recorded as sent, and read only through the helpers here: a
value of an unexpected shape (a string where a list was expected, a non-numeric
length) is "not revealed", never an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import EndpointError
from .run_dir import ServerInfo

RUNTIME_BY_OWNER = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama.cpp",
                    "me": "llama-cpp-python"}  # /v1/models `owned_by` -> runtime
RUNTIMES = tuple(RUNTIME_BY_OWNER.values())
# Each runtime's tokenize endpoint: its path, the field that holds the text, and whether
# it wants the model's name (SGLang has none).
TOKENIZE = {"vllm": ("/tokenize", "prompt", True),
            "llama.cpp": ("/tokenize", "content", False),
            "llama-cpp-python": ("/extras/tokenize", "input", False)}


def mapping(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one (not revealed)."""
    return value if isinstance(value, dict) else {}


def whole_number(value: object) -> int | None:
    """A positive integer as the server gave it (number or numeric string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 < value < 2**63 else None


def context_length(info: ServerInfo, model: str) -> int | None:
    """The served context in tokens: vLLM's model card `max_model_len`, SGLang's
    `context_length`, llama.cpp's `n_ctx`; None when not revealed."""
    for entry in info.models:
        if entry.get("id") == model and whole_number(entry.get("max_model_len")):
            return whole_number(entry.get("max_model_len"))
    settings = mapping(mapping(info.props).get("default_generation_settings"))
    return (whole_number(mapping(info.server_info).get("context_length"))
            or whole_number(settings.get("n_ctx")))


def identify_runtime(info: ServerInfo) -> str:
    for model in info.models:
        runtime = RUNTIME_BY_OWNER.get(str(model.get("owned_by", "")).lower())
        if runtime:
            return runtime
    if info.props is not None:
        return "llama.cpp"
    if info.server_info is not None:
        return "sglang"
    if info.version is not None:
        return "vllm"
    return "unknown"


def runtime_version(info: ServerInfo) -> str | None:
    for answer in (info.version, info.server_info):
        version = mapping(answer).get("version")
        if isinstance(version, str | int | float) and version:
            return str(version)
    build = mapping(info.props).get("build_info")
    return build if isinstance(build, str) and build else None


def choose_model(models: Sequence[Mapping[str, object]], requested: str | None,
                 endpoint: str) -> str:
    ids = [str(m["id"]) for m in models if isinstance(m.get("id"), str) and m["id"]]
    if requested:
        return requested
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise EndpointError(f"{endpoint} lists no models; pass --model NAME")
    raise EndpointError(f"{endpoint} serves several models ({', '.join(ids)}); "
                        "pick one with --model")
