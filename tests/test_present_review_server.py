"""`quantcheck review`: a local server a web page on another origin cannot read or write
(real HTTP requests to it, with the headers a browser or an attacker sends)."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from quantcheck.present.review_server import review_app

from .conftest import AppServer, interruptible, report_identity


@pytest.fixture
def server(planted_report: Path) -> Any:
    running = AppServer(review_app(planted_report, "dana"))
    yield running
    running.stop()


def request(server: Any, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    sent = {"Host": f"127.0.0.1:{server.port}", **(headers or {})}
    connection.request(method, path, body=body, headers=sent)
    response = connection.getresponse()
    text = response.read().decode("utf-8", "replace")
    connection.close()
    return response.status, text


def token(server: Any) -> str:
    status, page = request(server, "GET", "/")
    assert status == 200
    found = re.search(r'"token":"([^"]+)"', page)
    assert found
    return found.group(1)


def review(report: Path, verdicts: dict[str, Any]) -> bytes:
    return json.dumps({"format": "quantcheck-review/1", "identity": report_identity(report),
                       "verdicts": verdicts}).encode()


def post(server: Any, body: bytes, **headers: str) -> tuple[int, str]:
    return request(server, "POST", "/api/review", body, headers)


@pytest.mark.parametrize("host", ["attacker.example:{port}", "127.0.0.1:1", "evil:{port}",
                                  ""])
def test_a_foreign_host_gets_403(server: Any, host: str) -> None:
    status, text = request(server, "GET", "/", headers={"Host": host.format(port=server.port)})
    assert status == 403 and "answers only as" in text


def test_localhost_is_this_server(server: Any) -> None:
    assert request(server, "GET", "/", headers={"Host": f"localhost:{server.port}"})[0] == 200


def test_writes_need_json_this_origin_and_the_page_token(server: Any,
                                                         planted_report: Path) -> None:
    body = review(planted_report, {"wording": {"label": "wording"}})
    secret = token(server)
    good = {"Content-Type": "application/json", "X-Quantcheck-Token": secret}
    assert post(server, body, **{**good, "Content-Type": "text/plain"})[0] == 415
    assert post(server, body, **{**good, "Origin": "http://attacker.example"})[0] == 403
    assert post(server, body, **{**good, "Origin": "null"})[0] == 403
    assert post(server, body, **{"Content-Type": "application/json"})[0] == 403
    assert post(server, body, **{**good, "X-Quantcheck-Token": "guess"})[0] == 403
    assert not (planted_report / "reviews" / "dana.json").exists()

    same_origin = {**good, "Origin": f"http://127.0.0.1:{server.port}"}
    status, text = post(server, body, **same_origin)
    assert status == 200, text
    saved = json.loads((planted_report / "reviews" / "dana.json").read_text())
    assert saved["verdicts"] == {"wording": {"label": "wording"}}
    assert post(server, body, **good)[0] == 200  # no Origin (not a browser): fine too


@pytest.mark.parametrize("body", [
    b"[1, 2]", b'"text"', b"null", b"{not json",
    b'{"format": "quantcheck-review/1", "identity": 5, "verdicts": {}}',
], ids=["list", "string", "null", "not-json", "identity-a-number"])
def test_a_body_that_is_not_a_review_is_400(server: Any, body: bytes) -> None:
    headers = {"Content-Type": "application/json", "X-Quantcheck-Token": token(server)}
    status, text = post(server, body, **headers)
    assert status == 400, text


@pytest.mark.parametrize("verdict", [
    {"label": ["wording"]}, {"label": "wording", "right_side": 5},
    {"label": "wording", "notes": 7}, "wording",
], ids=["label-a-list", "side-a-number", "notes-a-number", "verdict-a-string"])
def test_fields_of_the_wrong_type_are_400(server: Any, planted_report: Path,
                                          verdict: Any) -> None:
    headers = {"Content-Type": "application/json", "X-Quantcheck-Token": token(server)}
    status, _ = post(server, review(planted_report, {"wording": verdict}), **headers)
    assert status == 400


def test_two_servers_for_one_reviewer_never_collide(planted_report: Path) -> None:
    servers = [AppServer(review_app(planted_report, "dana")) for _ in range(2)]
    statuses: list[int] = []
    try:
        headers = [{"Content-Type": "application/json", "X-Quantcheck-Token": token(s)}
                   for s in servers]

        def hammer(index: int) -> None:
            for n in range(40):
                body = review(planted_report, {"wording": {"label": "wording",
                                                           "notes": f"{index}-{n}"}})
                statuses.append(post(servers[index], body, **headers[index])[0])

        threads = [threading.Thread(target=hammer, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for running in servers:
            running.stop()
    assert statuses == [200] * 80
    saved = json.loads((planted_report / "reviews" / "dana.json").read_text())
    assert saved["verdicts"]["wording"]["notes"].endswith("-39")
    assert [p.name for p in (planted_report / "reviews").iterdir()] == ["dana.json"]


def test_the_sheet_is_streamed_whole_and_a_broken_table_is_a_500_naming_it(
        server: Any, planted_report: Path) -> None:
    """The server streams the sheet in batches; a pairs.csv that cannot be read is found
    before any byte is sent (a 500 that names it, not half a page), and once the file is
    whole again the next page is whole."""
    status, page = request(server, "GET", "/")
    assert status == 200 and page.rstrip().endswith("</html>")
    pairs = planted_report / "pairs.csv"
    whole = pairs.read_bytes()
    pairs.write_bytes(whole + b'q99,"a cell that never ends\n')
    status, text = request(server, "GET", "/")
    assert status == 500 and "pairs.csv: not a pairs table written by compare" in text
    pairs.write_bytes(whole)
    status, again = request(server, "GET", "/")
    assert status == 200 and again.rstrip().endswith("</html>") and len(again) == len(page)


def test_review_on_port_0_names_the_port_it_took(planted_report: Path) -> None:
    """`quantcheck review --port 0` serves on any free port and prints that one."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    with interruptible([sys.executable, "-m", "quantcheck", "review", str(planted_report),
                        "--port", "0"], env=env, stderr=subprocess.PIPE,
                       stdout=subprocess.DEVNULL, text=True) as process:
        assert process.stderr is not None
        try:
            line = process.stderr.readline()
            port = int(re.search(r"http://127\.0\.0\.1:(\d+)/ ", line)[1])  # type: ignore[index]
            assert port != 0
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", "/", headers={"Host": f"127.0.0.1:{port}"})
            assert connection.getresponse().status == 200
            connection.close()
        finally:
            process.send_signal(signal.SIGINT)
            try:
                assert process.wait(60) == 0  # stopping is how a review ends
            finally:
                process.kill()
