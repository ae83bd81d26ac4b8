"""Ask a server what it reveals about itself: each runtime's info endpoint, answered
as sent (store/runtimes.py reads them)."""

from __future__ import annotations

from ..store.engines import INFO_PATHS, profile_of
from ..store.folders.run_dir import ServerInfo
from ..store.redaction import public_url
from ..store.runtimes import choose_model, identify_runtime, runtime_version, with_info_answer
from ..wire.client import EndpointClient
from ..wire.dialects import metric_labels
from .clients import api_key_from_env


async def describe_server(client: EndpointClient, models: list[dict[str, object]]
                          ) -> ServerInfo:
    """The server's `/v1/models` entries (already listed: `models`) and the answers of
    the engines' info endpoints that answer (store/engines.py: `/version`,
    `/get_server_info` or `/server_info`, `/props`, ...); its runtime and version read
    from them. The client reads the server's refusals by its engine's profile from then on."""
    info = ServerInfo(models=models)
    for path in INFO_PATHS:
        with_info_answer(info, path, await client.get_json(path))
    info.runtime = identify_runtime(info)
    client.profile = profile_of(info.runtime)
    info.runtime_version = runtime_version(info)
    await _with_metric(client, info)
    return info


async def _with_metric(client: EndpointClient, info: ServerInfo) -> None:
    """The labels of the metric the runtime tells its KV cache's dtype in (vLLM's
    `vllm:cache_config_info` on `/metrics`), kept as `answers[path] = {metric: labels}`:
    the page itself is large and changes with every request."""
    profile = profile_of(info.runtime)
    if profile is None or profile.kv_cache_dtype_metric is None:
        return
    path, metric, _ = profile.kv_cache_dtype_metric
    text = await client.get_text(path)
    labels = metric_labels(text, metric) if text is not None else None
    if labels is not None:
        info.answers[path] = {metric: labels}


async def ask_server(endpoint: str, model: str | None, api_key_env: str | None = None
                     ) -> tuple[ServerInfo, str]:
    """What the server reveals about itself, and the model it serves (`--model`, or the
    one it lists)."""
    async with EndpointClient(endpoint, api_key_from_env(api_key_env), 30.0) as client:
        models = await client.list_models()
        chosen = choose_model(models, model, public_url(endpoint))
        return await describe_server(client, models), chosen
