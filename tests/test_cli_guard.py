"""cli/guard.py: what a command says when it ends badly, and the crash file a bug leaves,
never hold a credential: not the endpoint's password, not the API key, not a token in a
query, whether the command line, the traceback or an error's message carries it."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from .conftest import TWO_PROMPTS, Serve, WritePrompts, invoke
from .hostile import HostileServer, Request, http

KEY = "Zq7-the-api-key-4417"
PASSWORD = "Zq7-pass word%40x"  # percent-encoded @, and a space no URL pattern expects


def test_a_crash_file_holds_no_credential(serve: Serve, write_prompts: WritePrompts,
                                          tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    server = serve()
    endpoint = f"http://alice:{PASSWORD}@127.0.0.1:{server.port}/v1"
    monkeypatch.setenv("QC_TEST_KEY", KEY)

    def planted_bug(*args: Any, **kwargs: Any) -> Any:
        try:  # what a library's error may quote: the URL, the headers sent
            raise ConnectionError(f"{endpoint}/chat/completions?token=Zq7-query-token: "
                                  f"{{'Authorization': 'Bearer {KEY}'}}")
        except ConnectionError as exc:
            raise RuntimeError(f"lost {endpoint}") from exc

    monkeypatch.setattr("quantcheck.pipeline.collecting.collect_async", planted_bug)
    crashes = tmp_path / "tmp"
    crashes.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(crashes))
    arguments = ["collect", "--endpoint", endpoint, "--api-key-env", "QC_TEST_KEY",
                 "--prompts", write_prompts(TWO_PROMPTS), "--out", tmp_path / "run"]
    monkeypatch.setattr(sys, "argv", ["quantcheck", *map(str, arguments)])
    result = invoke(*arguments)
    assert result.exit_code == 3, result.output
    (saved,) = crashes.glob("quantcheck-crash-*.txt")
    text = saved.read_text()
    assert "RuntimeError: lost http://***@127.0.0.1" in text  # the traceback is kept
    assert f"command: quantcheck collect --endpoint http://***@127.0.0.1:{server.port}/v1 " \
           "--api-key-env QC_TEST_KEY" in text
    for shown in (text, result.output):
        for secret in ("Zq7-pass", "word%40x", "word@x", KEY, "Zq7-query-token"):
            assert secret not in shown, (secret, shown)


def test_an_error_line_never_quotes_the_endpoints_password(tmp_path: Path,
                                                           write_prompts: WritePrompts) -> None:
    for endpoint in (f"http://alice:{PASSWORD}@host:port/v1",
                     "http://alice:Zq7-pass@gpu:8000/v1?token=Zq7-query-token"):
        result = invoke("collect", "--endpoint", endpoint, "--prompts",
                        write_prompts(TWO_PROMPTS), "--out", tmp_path / "run")
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: endpoint ")
        for secret in ("Zq7-pass", "Zq7-query-token"):
            assert secret not in result.output, result.output


def test_a_server_that_quotes_the_key_back_has_it_cut_from_records_and_lines(
        write_prompts: WritePrompts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def quote_the_key(request: Request, out: BinaryIO) -> None:
        message = f"upstream refused the key {KEY} (Authorization: Bearer {KEY})"
        out.write(http(503, json.dumps({"error": {"message": message}}).encode()))

    monkeypatch.setenv("QC_TEST_KEY", KEY)
    with HostileServer(quote_the_key) as server:
        result = invoke("collect", "--endpoint", f"{server.url}/v1", "--api-key-env",
                        "QC_TEST_KEY", "--prompts", write_prompts(TWO_PROMPTS), "--out",
                        tmp_path / "run", "--retries", "0", "--no-preflight")
    assert result.exit_code == 1, result.output
    stored = (tmp_path / "run" / "completions.jsonl").read_text()
    assert "upstream refused the key ***" in stored and "upstream refused" in result.output
    assert KEY not in stored and KEY not in result.output
