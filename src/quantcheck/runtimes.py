"""Which runtime a server is, and what its info endpoints reveal (pure: no network).

The info endpoints' answers (`/v1/models`, vLLM `/version`, SGLang `/get_server_info`,
llama.cpp `/props`) are recorded as sent, and read only through the helpers here: a
value of an unexpected shape (a string where a list was expected, a non-numeric
length) is "not revealed", never an error.
"""

from __future__ import annotations

from typing import Any

from .errors import EndpointError

RUNTIME_BY_OWNER = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama.cpp",
                    "me": "llama-cpp-python"}


def mapping(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one (not revealed)."""
    return value if isinstance(value, dict) else {}


def whole_number(value: Any) -> int | None:
    """A positive integer as the server gave it (number or numeric string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 < value < 2**63 else None


def listed_models(info: dict[str, Any]) -> list[dict[str, Any]]:
    models = info.get("models")
    return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []


def context_length(info: dict[str, Any], model: str) -> int | None:
    """The served context in tokens: vLLM's model card `max_model_len`, SGLang's
    `context_length`, llama.cpp's `n_ctx`; None when not revealed."""
    for entry in listed_models(info):
        if entry.get("id") == model and whole_number(entry.get("max_model_len")):
            return whole_number(entry.get("max_model_len"))
    settings = mapping(mapping(info.get("props")).get("default_generation_settings"))
    return (whole_number(mapping(info.get("server_info")).get("context_length"))
            or whole_number(settings.get("n_ctx")))


def identify_runtime(info: dict[str, Any]) -> str:
    for model in listed_models(info):
        runtime = RUNTIME_BY_OWNER.get(str(model.get("owned_by", "")).lower())
        if runtime:
            return runtime
    if "props" in info:
        return "llama.cpp"
    if "server_info" in info:
        return "sglang"
    if "version" in info:
        return "vllm"
    return "unknown"


def runtime_version(info: dict[str, Any]) -> str | None:
    for key in ("version", "server_info"):
        version = mapping(info.get(key)).get("version")
        if isinstance(version, str | int | float) and version:
            return str(version)
    build = mapping(info.get("props")).get("build_info")
    return build if isinstance(build, str) and build else None


def choose_model(models: list[dict[str, Any]], requested: str | None, endpoint: str) -> str:
    ids = [str(m["id"]) for m in models if isinstance(m.get("id"), str) and m["id"]]
    if requested:
        return requested
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise EndpointError(f"{endpoint} lists no models; pass --model NAME")
    raise EndpointError(f"{endpoint} serves several models ({', '.join(ids)}); "
                        "pick one with --model")
