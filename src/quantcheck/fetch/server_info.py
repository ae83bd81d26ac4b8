"""Ask a server what it reveals about itself (read by runtimes.py)."""

from __future__ import annotations

from typing import Any

import msgspec

from ..store.run_dir import ServerInfo
from ..store.runtimes import choose_model, identify_runtime, runtime_version
from ..wire.client import EndpointClient, run_blocking


async def describe_server(client: EndpointClient, models: list[dict[str, Any]]
                          ) -> ServerInfo:
    """GET /v1/models plus each runtime's own info endpoint (those that answer)."""
    sglang = await client.get_json("/get_server_info")
    if sglang is None:
        sglang = await client.get_json("/server_info")
    info = ServerInfo(models=models, version=await client.get_json("/version"),
                      server_info=sglang, props=await client.get_json("/props"))
    info.runtime = identify_runtime(info)
    info.runtime_version = runtime_version(info)
    return info


def probe(endpoint: str, model: str | None, overrides: dict[str, Any],
          api_key_env: str | None = None) -> dict[str, Any]:
    """Everything `quantcheck probe` prints: server facts, the cell and its key."""
    from ..judge.cells import cell_from_server, cell_key
    from ..wire.client import api_key_from_env, public_url

    async def ask() -> tuple[ServerInfo, str]:
        async with EndpointClient(endpoint, api_key_from_env(api_key_env), 30.0) as client:
            models = await client.list_models()
            chosen = choose_model(models, model, public_url(endpoint))
            return await describe_server(client, models), chosen

    info, chosen = run_blocking(ask())
    cell = {**cell_from_server(info, chosen, 1), **overrides}
    if "concurrency" not in overrides:
        cell.pop("concurrency")  # a property of a collection, not of the server
    return {"endpoint": public_url(endpoint), "server": msgspec.to_builtins(info), "cell": cell,
            "cell_key": cell_key(cell)}
