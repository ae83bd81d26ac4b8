"""`quantcheck repro CERT_DIR PROMPT_ID` (pipeline/repro_certificate.py): a certificate's
differing probes replayed from its requests.jsonl, what was sent before and beside each
included, against the same loopback servers; what a certificate folder lacks, or holds
that quantcheck did not write, is one clear error."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantcheck.errors import RunFormatError
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.store.records.certificate_records import Answer, SentRequest, read_lines_of

from .conftest import Serve, WritePrompts, invoke

PROMPTS = "prompts:\n" + "".join(f"  - {{id: p{n}, category: c, prompt: 'question {n}'}}\n"
                                 for n in range(2))
needs_curl = pytest.mark.skipif(shutil.which("curl") is None, reason="replay.sh needs curl")


def certified(serve: Serve, write_prompts: WritePrompts, out: Path, dialect: str,
              faults: Faults, *extra: str) -> str:
    server = serve(ScriptedModel(), dialect=dialect, faults=faults)
    result = invoke("determinism", "--certify", "--endpoint", server.url, "--prompts",
                    write_prompts(PROMPTS), "--out", out, "--max-batch", "4", "--trials", "2",
                    "--no-preflight", *extra)
    assert result.exit_code in (0, 1), result.output
    return server.url


def replay(folder: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(folder / "replay.sh")], capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", **environment})


@needs_curl
def test_a_warm_answer_is_replayed_after_its_cold_request_byte_for_byte(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """llama.cpp's prompt cache (lab): the cold request (cache_prompt false) is the
    baseline, the first answer that differs is read from the cache; the repro sends what
    wrote that cache first, and both answers come back as recorded."""
    certified(serve, write_prompts, tmp_path / "c", "llama.cpp", Faults(prompt_cache=True))
    result = invoke("repro", tmp_path / "c", "p0", "--out", tmp_path / "r")
    assert result.exit_code == 0, result.output
    repro = json.loads((tmp_path / "r" / "repro.json").read_text())
    baseline, other = repro["requests"]
    assert baseline["name"] == "baseline" and other["name"] == "cache-prefix-1"
    assert other["preceded"] == ["cache-prefix-1.before.1.json", "cache-prefix-1.before.2.json"]
    sent = [json.loads(line) for line in (tmp_path / "c" / "requests.jsonl").read_text()
            .splitlines()]
    before = [json.loads((tmp_path / "r" / name).read_text()) for name in other["preceded"]]
    assert [b["cache_prompt"] for b in before] == [False, True]  # cold, then the sibling
    assert before[0]["prompt"].endswith("question 0")
    assert before[1]["prompt"].endswith("Name a colour.")
    own = json.loads((tmp_path / "r" / "cache-prefix-1.request.json").read_text())
    assert own in [s["body"] for s in sent] and own["cache_prompt"] is True
    assert "differ first at logprob of token 0" in repro["divergence"]["sentence"]
    replayed = replay(tmp_path / "r")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "baseline: the same answer as recorded" in replayed.stdout
    assert "cache-prefix-1: the same answer as recorded" in replayed.stdout
    # they parted in a logprob: equal texts again are what was recorded
    assert "baseline and cache-prefix-1: the same text, as recorded" in replayed.stdout


@needs_curl
def test_a_corrupted_block_is_replayed_with_its_flush_and_its_sibling(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """vLLM in development mode with a corrupted block: the repro empties the cache
    (POST /reset_prefix_cache), sends the sibling that wrote the block, then the prompt;
    the corrupted answer comes back byte for byte and still differs from the baseline."""
    certified(serve, write_prompts, tmp_path / "c", "vllm",
              Faults(dev_mode=True, block_corruption=True))
    assert invoke("repro", tmp_path / "c", "p1", "--out", tmp_path / "r").exit_code == 0
    repro = json.loads((tmp_path / "r" / "repro.json").read_text())
    baseline, other = repro["requests"]
    assert other["name"] == "block-16" and other["before"] == "POST /reset_prefix_cache"
    assert baseline["before"] == "POST /reset_prefix_cache" and baseline["preceded"] == []
    assert repro["divergence"]["token"] == 0
    replayed = replay(tmp_path / "r")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "block-16: the same answer as recorded" in replayed.stdout
    assert "baseline and block-16: still differ" in replayed.stdout
    script = (tmp_path / "r" / "replay.sh").read_text()
    assert script.index("reset_prefix_cache") < script.index("block-16.before.1.json")


@needs_curl
def test_a_batch_answer_is_replayed_with_its_fillers_at_once_and_nothing_secret(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CERT_API_KEY", "sk-cert-secret-0123456789abcdef")
    server = serve(ScriptedModel(), dialect="llama.cpp",
                   faults=Faults(batch_variant_at=2, latency_s=0.05))
    with_password = server.url.replace("http://", "http://alice:hunter2secret@")
    result = invoke("determinism", "--certify", "--endpoint", with_password, "--prompts",
                    write_prompts(PROMPTS), "--out", tmp_path / "c", "--max-batch", "4",
                    "--trials", "2", "--no-preflight", "--api-key-env", "CERT_API_KEY",
                    "--extra-body", '{"api_key": "plainsecretvalue"}')
    assert result.exit_code == 1, result.output
    assert invoke("repro", tmp_path / "c", "p0", "--out", tmp_path / "r").exit_code == 0
    repro = json.loads((tmp_path / "r" / "repro.json").read_text())
    other = repro["requests"][1]
    assert other["name"].startswith("batch-") and other["together"]
    assert len(other["together"]) == int(other["name"].split("-")[1]) - 1
    written = b"".join(path.read_bytes() for folder in ("c", "r")
                       for path in (tmp_path / folder).rglob("*") if path.is_file())
    for secret in (b"hunter2secret", b"sk-cert-secret", b"plainsecretvalue"):
        assert secret not in written
    assert other["redacted"] is True
    replayed = replay(tmp_path / "r", API_KEY="sk-cert-secret-0123456789abcdef")
    assert "the request failed" not in replayed.stdout, replayed.stdout + replayed.stderr
    assert server.authorizations[-1] == "Bearer sk-cert-secret-0123456789abcdef"


@pytest.mark.parametrize(("change", "message"), [
    ("no-requests", "requests.jsonl: not there (a certificate written before it was "
                    "recorded?"),
    ("same", "no answer of 'p0'"),
    ("unknown", "holds no answer of 'nobody'"),
    ("foreign", "does not hold as its request"),
    ("action", "is not a request to the server"),
], ids=["before-requests-were-recorded", "nothing-differed", "unknown-prompt",
        "answers-of-another-run", "a-hostile-action"])
def test_what_a_certificate_repro_cannot_use_is_one_clear_error(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, change: str,
        message: str) -> None:
    faults = Faults() if change == "same" else Faults(prompt_cache=True)
    certified(serve, write_prompts, tmp_path / "c", "llama.cpp", faults,
              *(["--max-untested-levels", "0"] if change == "same" else []))
    requests = tmp_path / "c" / "requests.jsonl"
    lines = [json.loads(line) for line in requests.read_text().splitlines()]
    if change == "no-requests":
        requests.unlink()
    if change == "foreign":
        requests.write_bytes(b"".join(orjson.dumps({**line, "prompt_id": "other"}) + b"\n"
                                      for line in lines))
    if change == "action":
        requests.write_bytes(b"".join(orjson.dumps({**line, "action": "$(touch pwned) /x"})
                                      + b"\n" for line in lines))
    result = invoke("repro", tmp_path / "c", "nobody" if change == "unknown" else "p0",
                    "--out", tmp_path / "r")
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "r").exists()


LINE = st.dictionaries(
    st.sampled_from(["index", "round", "action", "factor", "level", "prompt_id", "role",
                     "api", "body", "trial", "text", "tokens", "request", "baseline"]),
    st.none() | st.integers(-3, 5) | st.text(max_size=6) | st.booleans()
    | st.sampled_from(["warm", "target", "chat", "block=16"])
    | st.dictionaries(st.text(max_size=3), st.integers(-9, 9), max_size=2), max_size=14)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(LINE | st.binary(max_size=30).map(lambda b: b.hex()), max_size=4),
       st.sampled_from([Answer, SentRequest]))
def test_any_answers_or_requests_file_reads_or_names_its_line(
        tmp_path: Path, lines: list[object], kind: type) -> None:
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b"".join((orjson.dumps(line) if isinstance(line, dict)
                               else str(line).encode()) + b"\n" for line in lines))
    try:
        records = read_lines_of(path, kind)
    except RunFormatError as exc:
        assert str(exc).startswith(str(path))
    else:
        assert len(records) == len(lines) and all(isinstance(r, kind) for r in records)
