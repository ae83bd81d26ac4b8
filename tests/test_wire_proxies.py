"""wire/proxies.py: behind a proxy as the ecosystem does it: a named endpoint reached
through HTTP_PROXY (a forwarding proxy on loopback, the only one that knows the name),
loopback never proxied, NO_PROXY honoured, credentials passed on."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from quantcheck import CollectSettings, collect, load_run
from quantcheck.lab.scripted import ScriptedModel, ScriptedServer
from quantcheck.wire.proxies import proxy_for

from .conftest import AppServer, Serve, WritePrompts, invoke

LabAndProxy = tuple[ScriptedServer, "ForwardingProxy"]
PROMPTS = """
prompts:
  - {id: one, prompt: "Q: one"}
  - {id: two, prompt: "Q: two"}
"""
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


class ForwardingProxy:
    """An HTTP proxy on loopback that answers for one name only (`lab.test`, which no
    resolver knows), forwarding to a lab server; it records every request it gets."""

    def __init__(self, name: str, upstream: str) -> None:
        self.name, self.upstream = name, upstream
        self.seen: list[tuple[str, str, str | None]] = []  # method, URL, credentials
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.forward)
        self.server = AppServer(app)
        self.url = self.server.url

    async def forward(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.method, str(request.url),
                          request.headers.get("Proxy-Authorization")))
        if request.host.split(":")[0] != self.name:
            return web.Response(status=502, text=f"this proxy knows only {self.name}")
        async with aiohttp.ClientSession() as session, session.request(
                request.method, self.upstream + request.path_qs, data=await request.read(),
                headers={"Content-Type": request.headers.get("Content-Type", "")}) as answer:
            response = web.StreamResponse(status=answer.status, headers={
                "Content-Type": answer.headers.get("Content-Type", "application/json")})
            await response.prepare(request)
            async for piece in answer.content.iter_any():
                await response.write(piece)
            await response.write_eof()
            return response

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


@pytest.fixture
def lab_behind_a_proxy(serve: Serve) -> Iterator[LabAndProxy]:
    lab = serve(ScriptedModel())
    proxy = ForwardingProxy("lab.test", lab.url)
    yield lab, proxy
    proxy.stop()


def collect_from(endpoint: str, prompts: Path, out: Path) -> None:
    collect([prompts], out, CollectSettings(endpoint=endpoint, label="b", concurrency=1,
                                            top_logprobs=2, context_tokens=0))


def test_a_named_endpoint_is_reached_through_http_proxy(
        clean_environment: pytest.MonkeyPatch, lab_behind_a_proxy: LabAndProxy,
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    lab, proxy = lab_behind_a_proxy
    clean_environment.setenv("HTTP_PROXY", proxy.url)
    collect_from("http://lab.test/v1", write_prompts(PROMPTS), tmp_path / "run")
    run = load_run(tmp_path / "run")
    assert run.status == "complete" and len(list(run.completions())) == 2
    assert run.manifest.endpoint == "http://lab.test/v1"
    urls = [url for _, url, _ in proxy.seen]
    assert "http://lab.test/v1/models" in urls  # and the preflight's, and the prompts'
    assert sum(url == "http://lab.test/v1/completions" for url in urls) >= 2
    assert len(lab.requests) >= 2  # answered by the lab, through the proxy


def test_loopback_is_never_proxied_even_when_http_proxy_is_set(
        clean_environment: pytest.MonkeyPatch, lab_behind_a_proxy: LabAndProxy,
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    lab, proxy = lab_behind_a_proxy
    clean_environment.setenv("HTTP_PROXY", proxy.url)
    clean_environment.setenv("ALL_PROXY", proxy.url)
    prompts = write_prompts(PROMPTS)
    collect_from(lab.url + "/v1", prompts, tmp_path / "ip")
    collect_from(lab.url.replace("127.0.0.1", "localhost") + "/v1", prompts,
                 tmp_path / "name")
    assert proxy.seen == []
    assert load_run(tmp_path / "ip").status == load_run(tmp_path / "name").status == \
        "complete"


def test_no_proxy_sends_a_name_direct_and_credentials_reach_the_proxy(
        clean_environment: pytest.MonkeyPatch, lab_behind_a_proxy: LabAndProxy,
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    _, proxy = lab_behind_a_proxy
    port = proxy.url.rsplit(":", 1)[1]
    clean_environment.setenv("HTTP_PROXY", f"http://ci%20bot:s%40cret@127.0.0.1:{port}")
    clean_environment.setenv("NO_PROXY", "example.org,.test")
    direct = invoke("collect", "--endpoint", "http://lab.test/v1", "--prompts",
                    write_prompts(PROMPTS), "--out", tmp_path / "direct")
    assert direct.exit_code == 2 and "cannot reach http://lab.test/v1/models" in \
        direct.output
    assert proxy.seen == []
    clean_environment.setenv("NO_PROXY", "example.org")
    collect_from("http://lab.test/v1", write_prompts(PROMPTS), tmp_path / "proxied")
    credentials = base64.b64encode(b"ci bot:s@cret").decode()
    assert {auth for _, _, auth in proxy.seen} == {f"Basic {credentials}"}


def test_which_proxy_each_endpoint_takes(clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.setenv("HTTP_PROXY", "proxy.internal:3128")
    clean_environment.setenv("HTTPS_PROXY", "http://secure.internal:3129")
    clean_environment.setenv("NO_PROXY", "gpu.lan")
    assert proxy_for("http://vllm.example/v1") == "http://proxy.internal:3128"
    assert proxy_for("https://api.example/v1") == "http://secure.internal:3129"
    assert proxy_for("http://node1.gpu.lan:8000/v1") is None
    for loopback in ("http://127.0.0.1:8000/v1", "http://127.8.9.1/v1", "http://[::1]:8000",
                     "http://localhost:8000/v1", "https://lab.localhost/v1"):
        assert proxy_for(loopback) is None, loopback
    clean_environment.delenv("HTTPS_PROXY")
    clean_environment.setenv("ALL_PROXY", "http://all.internal:1080")
    assert proxy_for("https://api.example/v1") == "http://all.internal:1080"

