"""wire/client.py: the endpoint URL read once, refused in one line when it cannot be
used, and written to a manifest without credentials (an IPv6 host keeps its brackets);
the credentials sent, chosen once for every path that sends (a key as Bearer, else the
URL's user and password as Basic), checked on a loopback server that keeps them."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest
from aiohttp import web

from quantcheck import CollectSettings, collect, load_run
from quantcheck.errors import EndpointError
from quantcheck.lab.scripted import ScriptedModel, ScriptedServer
from quantcheck.wire.client import api_base, authorization, split_credentials

from .conftest import TWO_PROMPTS, Serve, WritePrompts, assert_one_clear_line, invoke
from .hostile import HostileServer, Request, http

UNUSABLE = {
    "http://host:abc": "Port could not be cast to integer value",
    "http://host:99999": "Port out of range",
    "http://[::1": "Invalid IPv6 URL",
    "http://:8000/v1": "names no host",
}


@pytest.mark.parametrize("endpoint", list(UNUSABLE), ids=list(UNUSABLE))
def test_an_endpoint_that_cannot_be_used_is_refused_in_one_line(
        endpoint: str, write_prompts: WritePrompts, tmp_path: Path) -> None:
    with pytest.raises(EndpointError, match=UNUSABLE[endpoint]):
        api_base(endpoint)
    result = invoke("collect", "--endpoint", endpoint, "--prompts", write_prompts(TWO_PROMPTS),
                    "--out", tmp_path / "run")
    assert result.exit_code == 2, result.output
    assert_one_clear_line(result.output, UNUSABLE[endpoint])


def test_a_run_on_an_ipv6_loopback_endpoint_records_a_url_that_reads_back(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    try:
        server = serve(host="::1")
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    endpoint = f"http://[::1]:{server.port}/v1"
    collect([write_prompts(TWO_PROMPTS)], tmp_path / "run",
            CollectSettings(endpoint=endpoint, label="a", preflight=False))
    recorded = load_run(tmp_path / "run").manifest.endpoint
    assert recorded == endpoint
    assert api_base(recorded) == endpoint  # the manifest's URL is one the client takes


class RecordingServer(ScriptedServer):
    """A scripted server that keeps the Authorization header of every request it gets,
    whatever its path (models, tokenize, generation, ...)."""

    def __init__(self) -> None:
        super().__init__(ScriptedModel({"capital": "Canberra", "larger": "9.9",
                                        "grade": '{"verdict": "same"}'}))
        self.headers: list[tuple[str, str | None]] = []

    def app(self) -> web.Application:
        app = super().app()

        async def keep(request: web.Request, response: web.StreamResponse) -> None:
            self.headers.append((request.path, request.headers.get("Authorization")))

        app.on_response_prepare.append(keep)
        return app


@pytest.fixture
def recording() -> Iterator[RecordingServer]:
    server = RecordingServer()
    server.start()
    yield server
    server.stop()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_a_urls_user_and_password_go_as_basic_auth_on_every_request(
        recording: RecordingServer, write_prompts: WritePrompts, tmp_path: Path) -> None:
    port = recording.port
    endpoint = f"http://alice:p%40ss%20w@127.0.0.1:{port}/v1"
    result = invoke("run", "--a", endpoint, "--b", endpoint, "--prompts",
                    write_prompts(TWO_PROMPTS), "--out", tmp_path / "r", "--forced",
                    "--throughput", "--throughput-seconds", "0", "--judge", endpoint)
    assert result.exit_code in (0, 1), result.output
    assert "Traceback" not in result.output and "p%40ss" not in result.output
    paths = {path for path, _ in recording.headers}
    # server info, preflight's tokenizer checks, collection, forced scoring, the judge
    assert {"/v1/models", "/version", "/props", "/tokenize", "/v1/chat/completions",
            "/v1/completions"} <= paths
    assert {sent for _, sent in recording.headers} == {basic("alice", "p@ss w")}
    assert "alice" not in (tmp_path / "r" / "a" / "manifest.json").read_text()


def test_an_api_key_wins_over_a_urls_user_and_password_with_one_warning(
        recording: RecordingServer, write_prompts: WritePrompts, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QC_TEST_KEY", "sk-the-key")
    endpoint = f"http://user:pass@127.0.0.1:{recording.port}/v1"
    result = invoke("collect", "--endpoint", endpoint, "--api-key-env", "QC_TEST_KEY",
                    "--prompts", write_prompts(TWO_PROMPTS), "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warned == [f"warning: http://127.0.0.1:{recording.port}/v1: the user and "
                      "password in the endpoint's URL are not sent; the API key is, as a "
                      "Bearer token"]
    assert recording.headers and {sent for _, sent in recording.headers} == \
        {"Bearer sk-the-key"}

    recording.headers.clear()  # every other path that sends: the same choice, no crash
    result = invoke("run", "--a", endpoint, "--b", endpoint, "--api-key-env", "QC_TEST_KEY",
                    "--prompts", write_prompts(TWO_PROMPTS), "--out", tmp_path / "r",
                    "--forced", "--throughput", "--throughput-seconds", "0",
                    "--judge", endpoint, "--judge-api-key-env", "QC_TEST_KEY")
    assert result.exit_code in (0, 1), result.output
    assert "Traceback" not in result.output and "unexpected error" not in result.output
    assert {sent for _, sent in recording.headers} == {"Bearer sk-the-key"}
    for command in (["preflight", endpoint], ["probe", endpoint],
                    ["throughput", endpoint, "--prompts", write_prompts(TWO_PROMPTS),
                     "--seconds", "0"]):
        result = invoke(*command, "--api-key-env", "QC_TEST_KEY")
        assert "unexpected error" not in result.output, (command, result.output)
    assert {sent for _, sent in recording.headers} == {"Bearer sk-the-key"}


def test_the_authorization_header_is_chosen_once_for_every_path() -> None:
    assert authorization("http://h:1/v1", None) is None
    assert authorization("http://h:1/v1", "k") == "Bearer k"
    assert authorization("http://u:p@h:1/v1", "k") == "Bearer k"
    assert authorization("http://u:p@h:1/v1", None) == basic("u", "p")
    assert authorization("http://u@h:1/v1", None) == basic("u", "")
    assert split_credentials("http://u:p@ss@[::1]:8/v1") == ("http://[::1]:8/v1", "u:p@ss")
    assert split_credentials("http://h/v1/a@b") == ("http://h/v1/a@b", None)


@pytest.mark.parametrize("endpoint", ["http://h:1/v1?token=sekrit", "http://h:1/v1#sekrit",
                                      "http://h:1/v1?"])
def test_an_endpoint_with_a_query_or_fragment_is_refused_without_quoting_it(
        endpoint: str) -> None:
    with pytest.raises(EndpointError, match="query string or fragment") as caught:
        api_base(endpoint)
    assert "sekrit" not in str(caught.value)


def test_a_server_quoting_the_credentials_has_the_password_cut_and_the_user_kept(
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    """The user's name is no secret: cutting it would blank that word in every message
    (a user `operator` and any server message that says "operator")."""
    def quote_them(request: Request, out: BinaryIO) -> None:
        message = ("the operator's quota is spent: user operator sent operator:Zq7%21pass, "
                   "that is Zq7!pass")
        out.write(http(503, json.dumps({"error": {"message": message}}).encode()))

    with HostileServer(quote_them) as server:
        endpoint = f"http://operator:Zq7%21pass@127.0.0.1:{server.port}/v1"
        result = invoke("collect", "--endpoint", endpoint, "--prompts",
                        write_prompts(TWO_PROMPTS), "--out", tmp_path / "run", "--retries",
                        "0", "--no-preflight")
    assert result.exit_code == 1, result.output
    stored = (tmp_path / "run" / "completions.jsonl").read_text()
    for shown in (stored, result.output):
        assert "the operator's quota is spent: user operator sent ***, that is ***" in shown
        assert "Zq7" not in shown


KEY_IN_PATH = "AbCd1234EfGh5678IjKl90wxyz"  # a random token, as a gateway puts one


class PathKeyServer(ScriptedServer):
    """A scripted server reached under a key in the path, as some gateways are:
    http://host/KEY/v1."""

    def app(self) -> web.Application:
        gateway = web.Application()
        gateway.add_subapp(f"/{KEY_IN_PATH}/", super().app())
        return gateway


def test_a_key_in_the_endpoints_path_reaches_no_file_and_no_line(
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    server = PathKeyServer(ScriptedModel({"capital": " Canberra."})).start()
    try:
        endpoint = f"http://127.0.0.1:{server.port}/{KEY_IN_PATH}/v1"
        result = invoke("run", "--a", endpoint, "--b", endpoint, "--prompts",
                        write_prompts(TWO_PROMPTS), "--out", tmp_path / "r")
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    written = [path for path in (tmp_path / "r").rglob("*") if path.is_file()]
    assert {"manifest.json", "summary.json", "index.html"} <= {p.name for p in written}
    for path in written:
        assert KEY_IN_PATH.encode() not in path.read_bytes(), path
    assert KEY_IN_PATH not in result.output
    manifest = json.loads((tmp_path / "r" / "a" / "manifest.json").read_text())
    assert manifest["endpoint"] == f"http://127.0.0.1:{server.port}/***/v1"


def test_a_server_quoting_basic_credentials_in_base64_has_them_cut(
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A proxy's error quoting the Authorization it got: the password in Base64 (as
    sent, URL-safe, unpadded) is cut as the password itself is."""
    sent = base64.b64encode(b"operator:Zq7?pass>~").decode()
    url_safe = sent.replace("+", "-").replace("/", "_").rstrip("=")

    def quote_them(request: Request, out: BinaryIO) -> None:
        message = (f"proxy: rejected Authorization: Basic {sent}, credentials {sent} "
                   f"({url_safe}) do not match")
        out.write(http(503, json.dumps({"error": {"message": message}}).encode()))

    with HostileServer(quote_them) as server:
        endpoint = f"http://operator:Zq7%3Fpass%3E~@127.0.0.1:{server.port}/v1"
        result = invoke("collect", "--endpoint", endpoint, "--prompts",
                        write_prompts(TWO_PROMPTS), "--out", tmp_path / "run", "--retries",
                        "0", "--no-preflight")
    assert result.exit_code == 1, result.output
    stored = (tmp_path / "run" / "completions.jsonl").read_text()
    for shown in (stored, result.output):
        assert "proxy: rejected Authorization: Basic ***, credentials *** (***) do not" \
            in shown, shown
        assert sent not in shown and url_safe not in shown


def test_a_text_answer_is_read_up_to_its_limit(serve: Serve) -> None:
    """GET /metrics as text: what a server says, cut at the limit; None on a 404 or where
    nothing answers."""
    from quantcheck.lab.launch import free_port
    from quantcheck.pipeline.event_loop import run_blocking
    from quantcheck.wire.client import EndpointClient

    async def text(url: str, path: str, limit: int) -> str | None:
        async with EndpointClient(url, timeout=5) as client:
            return await client.get_text(path, limit)

    server = serve(dialect="vllm")
    said = run_blocking(text(server.url, "/metrics", 1 << 20))
    assert said is not None and 'vllm:cache_config_info{block_size="16"' in said
    assert run_blocking(text(server.url, "/metrics", 10)) == said[:10]
    assert run_blocking(text(server.url, "/nowhere", 1 << 20)) is None
    assert run_blocking(text(f"http://127.0.0.1:{free_port()}", "/metrics", 100)) is None
