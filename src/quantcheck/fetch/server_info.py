"""Ask a server what it reveals about itself: each runtime's info endpoint, answered
as sent (store/runtimes.py reads them)."""

from __future__ import annotations

from ..store.run_dir import ServerInfo
from ..store.runtimes import choose_model, identify_runtime, runtime_version
from ..wire.client import EndpointClient, api_key_from_env, public_url


async def describe_server(client: EndpointClient, models: list[dict[str, object]]
                          ) -> ServerInfo:
    """The server's `/v1/models` entries (already listed: `models`) and the answers of
    the runtimes' info endpoints that answer (`/get_server_info` or `/server_info`,
    `/version`, `/props`); its runtime and version read from them."""
    sglang = await client.get_json("/get_server_info")
    if sglang is None:
        sglang = await client.get_json("/server_info")
    info = ServerInfo(models=models, version=await client.get_json("/version"),
                      server_info=sglang, props=await client.get_json("/props"))
    info.runtime = identify_runtime(info)
    info.runtime_version = runtime_version(info)
    return info


async def ask_server(endpoint: str, model: str | None, api_key_env: str | None = None
                     ) -> tuple[ServerInfo, str]:
    """What the server reveals about itself, and the model it serves (`--model`, or the
    one it lists)."""
    async with EndpointClient(endpoint, api_key_from_env(api_key_env), 30.0) as client:
        models = await client.list_models()
        chosen = choose_model(models, model, public_url(endpoint))
        return await describe_server(client, models), chosen
