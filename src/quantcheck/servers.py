"""What a server reveals about itself, and which runtime it is."""

from __future__ import annotations

from typing import Any

from .client import EndpointClient
from .errors import EndpointError

RUNTIME_BY_OWNER = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama.cpp",
                    "me": "llama-cpp-python"}


async def describe_server(client: EndpointClient, models: list[dict[str, Any]]
                          ) -> dict[str, Any]:
    """GET /v1/models plus each runtime's own info endpoint (those that answer)."""
    info: dict[str, Any] = {"models": models}
    for name, path in (("version", "/version"), ("server_info", "/get_server_info"),
                       ("props", "/props")):
        data = await client.get_json(path)
        if data is None and name == "server_info":
            data = await client.get_json("/server_info")
        if data is not None:
            info[name] = data
    info["runtime"] = identify_runtime(info)
    info["runtime_version"] = runtime_version(info)
    return info


def probe(endpoint: str, model: str | None, overrides: dict[str, Any],
          api_key_env: str | None = None) -> dict[str, Any]:
    """Everything `quantcheck probe` prints: server facts, the cell and its key."""
    from .cells import cell_from_server, cell_key
    from .client import api_key_from_env, public_url
    from .collect import run_blocking

    async def ask() -> tuple[dict[str, Any], str]:
        async with EndpointClient(endpoint, api_key_from_env(api_key_env), 30.0) as client:
            models = await client.list_models()
            chosen = choose_model(models, model, public_url(endpoint))
            return await describe_server(client, models), chosen

    info, chosen = run_blocking(ask())
    cell = {**cell_from_server(info, chosen, 1), **overrides}
    if "concurrency" not in overrides:
        cell.pop("concurrency")  # a property of a collection, not of the server
    return {"endpoint": public_url(endpoint), "server": info, "cell": cell,
            "cell_key": cell_key(cell)}


def identify_runtime(info: dict[str, Any]) -> str:
    for model in info.get("models") or []:
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
        data = info.get(key)
        if isinstance(data, dict) and data.get("version"):
            return str(data["version"])
    props = info.get("props")
    if isinstance(props, dict) and props.get("build_info"):
        return str(props["build_info"])
    return None


def choose_model(models: list[dict[str, Any]], requested: str | None, endpoint: str) -> str:
    ids = [str(m.get("id")) for m in models if m.get("id")]
    if requested:
        return requested
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise EndpointError(f"{endpoint} lists no models; pass --model NAME")
    raise EndpointError(f"{endpoint} serves several models ({', '.join(ids)}); "
                        "pick one with --model")
