"""triage/log_signatures.py: known failure signatures in a server's log (the shipped ones
against the field reports, a user's own), `quantcheck logscan`, and a blocking one in
compare and the gate."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from quantcheck.errors import ConfigFileError
from quantcheck.triage.log_signatures import load_signatures, scan_log
from quantcheck.triage.searches import Searches

from .conftest import FIXTURES, assert_one_clear_line, cli_in_child, invoke

LOGS = FIXTURES / "logs"


@pytest.mark.parametrize(
    ("log", "signature", "blocking"),
    [
        ("sglang-lmhead-prefix.log", "fp8-lm-head-scale-not-loaded", True),
        ("vllm-mla-fp8-kv.log", "triton-shared-memory-over-limit", True),
        ("flashinfer-jit.log", "jit-build-without-ninja", True),
        ("vllm-spark-nightly.log", "trtllm-attention-fallback", False),
    ],
)
def test_shipped_signatures_match_the_field_reports(log: str, signature: str,
                                                    blocking: bool) -> None:
    (match,) = scan_log(LOGS / log, load_signatures())
    assert (match.signature, match.blocking) == (signature, blocking)
    assert match.line > 1 and match.meaning and match.action and match.reference
    assert not scan_log(LOGS / "clean.log", load_signatures())


def test_logscan_command(tmp_path: Path) -> None:
    result = invoke("logscan", LOGS / "sglang-lmhead-prefix.log")
    assert result.exit_code == 1
    assert "BLOCKING" in result.output and "fp8-lm-head-scale-not-loaded" in result.output
    assert "sgl-project/sglang#35228" in result.output
    assert invoke("logscan", LOGS / "vllm-spark-nightly.log").exit_code == 0
    result = invoke("logscan", LOGS / "clean.log")
    assert result.exit_code == 0 and "no known failure signature" in result.output
    as_json = invoke("logscan", LOGS / "sglang-lmhead-prefix.log", "--json")
    assert as_json.exit_code == 1
    (match,) = json.loads(as_json.output)
    assert match["signature"] == "fp8-lm-head-scale-not-loaded" and match["blocking"] is True


def test_user_signatures(tmp_path: Path) -> None:
    own = tmp_path / "mine.yaml"
    own.write_text("signatures:\n  - id: oom\n    pattern: 'CUDA out of memory'\n"
                   "    meaning: OOM\n    action: lower --gpu-memory-utilization\n"
                   "    blocking: true\n")
    log = tmp_path / "server.log"
    log.write_text("ok\ntorch.OutOfMemoryError: CUDA out of memory. Tried 2 GiB\n"
                   "CUDA out of memory again\n")
    result = invoke("logscan", log, "--signatures", own)
    assert result.exit_code == 1 and "(2x) oom" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("signatures:\n  - {id: x, pattern: '(', regex: true, meaning: m, "
                   "action: a}\n")
    with pytest.raises(ConfigFileError, match=r"signatures\[1\]: field 'pattern': invalid"):
        load_signatures([bad])


def test_blocking_signature_in_a_side_log_fails_the_gate(ab_runs: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = invoke("compare", ab_runs[0], ab_runs[1], "--out", out, "--b-log",
                    LOGS / "sglang-lmhead-prefix.log", "--a-log", LOGS / "clean.log")
    assert result.exit_code == 1, result.output
    assert "BLOCKING: B log" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["log_matches"]["a"] == []
    assert summary["log_matches"]["b"][0]["signature"] == "fp8-lm-head-scale-not-loaded"
    assert "fp8-lm-head-scale-not-loaded" in (out / "index.html").read_text()
    lenient = ["--max-factual-flips", "9", "--max-new-degenerate", "9", "--max-not-compared", "9"]
    gate = invoke("gate", out, *lenient)
    assert gate.exit_code == 1
    assert "1 blocking log signature (B: fp8-lm-head-scale-not-loaded)" in gate.output
    allowed = invoke("gate", out, *lenient, "--max-blocking-log-signatures", "1")
    assert allowed.exit_code == 0


def test_a_pattern_that_backtracks_on_a_log_line_is_refused_not_a_hang(tmp_path: Path) -> None:
    own = tmp_path / "mine.yaml"
    own.write_text("signatures:\n  - {id: loop, pattern: '^(a|aa)+$', regex: true, "
                   "meaning: m, action: a}\n")
    log = tmp_path / "server.log"
    log.write_text("ok\n" + "a" * 60 + "b\n")
    started = time.monotonic()
    result = invoke("logscan", log, "--signatures", own)
    assert time.monotonic() - started < 10
    assert result.exit_code == 2
    assert_one_clear_line(result.output, f"signature 'loop': its pattern /^(a|aa)+$/ was "
                                         f"stopped after 1 s on {log}:2")


@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
def test_a_log_that_is_not_a_regular_file_is_refused_naming_it(tmp_path: Path,
                                                                kind: str) -> None:
    import os

    if kind == "dev-zero":
        (tmp_path / "server.log").symlink_to("/dev/zero")
    else:
        os.mkfifo(tmp_path / "server.log")
    result = cli_in_child("logscan", "server.log", cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "server.log: the log is" in result.stderr
    assert "not a regular file" in result.stderr


def test_a_log_line_of_2_gib_is_one_error_naming_the_log_and_line(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with log.open("wb") as handle:
        handle.write(b"INFO started\n")
        handle.truncate(2 << 30)  # one line of NULs without end, sparse on disk
    result = cli_in_child("logscan", "server.log", cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    assert_one_clear_line(result.stderr, "server.log:2: a line of more than 64 MiB, more "
                                         "than a line of a log holds")


def test_patterns_that_spend_the_scans_budget_are_refused_naming_one(tmp_path: Path) -> None:
    """Slow but under a second a line, on many lines: the scan's budget ends it (a
    budget of 0.5 s here; 60 s in a comparison)."""
    own = tmp_path / "slow.yaml"
    own.write_text("signatures:\n  - {id: slow, pattern: '^(a|aa)+$', regex: true, "
                   "meaning: m, action: a}\n")
    log = tmp_path / "server.log"
    log.write_text(("a" * 24 + "b\n") * 20_000)  # each line: milliseconds of backtracking
    started = time.monotonic()
    with pytest.raises(ConfigFileError) as caught:
        scan_log(log, load_signatures([own]), Searches(budget=0.5))
    assert time.monotonic() - started < 20
    message = str(caught.value)  # the signature not searched, and the one that was slow
    assert re.fullmatch(r"signature '[\w-]+': its pattern /.+/ not searched: the 0\.5 s all "
                        r"pattern searches may take together are spent \(/\^\(a\|aa\)\+\$/ "
                        rf"took 0\.\d s of them: rewrite it\) \(on {re.escape(str(log))}:\d+\)",
                        message), message
