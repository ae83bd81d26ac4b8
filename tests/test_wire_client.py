"""wire/client.py: the endpoint URL read once, refused in one line when it cannot be
used, and written to a manifest without credentials (an IPv6 host keeps its brackets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantcheck import CollectSettings, collect, load_run
from quantcheck.errors import EndpointError
from quantcheck.wire.client import api_base, public_url

from .conftest import TWO_PROMPTS, Serve, WritePrompts, assert_one_clear_line, invoke

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


def test_public_url_keeps_an_ipv6_hosts_brackets_and_drops_credentials() -> None:
    assert public_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
    assert public_url("https://user:secret@[2001:db8::1]/v1?key=x") == \
        "https://[2001:db8::1]/v1"
    assert public_url("http://user:secret@Example.com:8000/v1") == "http://example.com:8000/v1"
    assert public_url("http://host:abc/v1") == "http://?"  # nothing of it is shown


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
