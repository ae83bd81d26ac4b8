"""Which runtime a server is, and what its info endpoints reveal (pure: no network).

The info endpoints' answers (`/v1/models`, and each engine's own: engines.py lists
them) are recorded as sent, and read only through the helpers here: a value of an
unexpected shape (a string where a list was expected, a non-numeric length) is "not
revealed", never an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import EndpointError
from .engines import ENGINE_NAMES, ENGINES, UNKNOWN
from .folders.run_dir import ServerInfo

# /v1/models `owned_by` -> runtime
RUNTIME_BY_OWNER = {owner: p.name for p in ENGINES.values() for owner in p.owned_by}
RUNTIMES = ENGINE_NAMES
# The answers ServerInfo keeps in a field of their own (older manifests have only these)
_INFO_FIELDS = {"/version": "version", "/get_server_info": "server_info",
                "/server_info": "server_info", "/props": "props"}


def info_answer(info: ServerInfo, path: str) -> Any:
    """What the server answered on an info endpoint (None: it did not)."""
    slot = _INFO_FIELDS.get(path)
    return getattr(info, slot) if slot else info.answers.get(path)


def with_info_answer(info: ServerInfo, path: str, answer: Any) -> None:
    """Keep an info endpoint's answer (a path sharing a field keeps the first answer)."""
    slot = _INFO_FIELDS.get(path)
    if slot and getattr(info, slot) is None:
        setattr(info, slot, answer)
    elif not slot and answer is not None:
        info.answers[path] = answer


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


def server_slots(info: ServerInfo) -> int | None:
    """llama.cpp's `total_slots` (requests served at once, `--parallel`; each holds the
    `n_ctx` that context_length reads); None when not revealed."""
    return whole_number(mapping(info.props).get("total_slots"))


def identify_runtime(info: ServerInfo) -> str:
    """By the `owned_by` of its models, else by the info endpoints it answers (the
    profiles asked last to first, so that vLLM's plain `/version` counts last), else,
    for models listed with no owner at all, the engine known to list none (a guess)."""
    for model in info.models:
        runtime = RUNTIME_BY_OWNER.get(str(model.get("owned_by", "")).lower())
        if runtime:
            return runtime
    for profile in reversed(ENGINES.values()):
        if any(info_answer(info, path) is not None for path in profile.info_paths):
            return profile.name
    if info.models and not any("owned_by" in model for model in info.models):
        # a guess: the engine that lists no owner and has no info endpoint of its own
        return next((p.name for p in ENGINES.values() if p.ownerless_models), UNKNOWN)
    return UNKNOWN


def runtime_version(info: ServerInfo) -> str | None:
    """The version its own info endpoint gives (the runtime's first, then any other)."""
    places = sorted((p for p in ENGINES.values() if p.version_at),
                    key=lambda p: p.name != info.runtime)
    for profile in places:
        path, key = profile.version_at or ("", "")
        version = mapping(info_answer(info, path)).get(key)
        if isinstance(version, str | int | float) and not isinstance(version, bool) and version:
            return str(version)
    return None


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
