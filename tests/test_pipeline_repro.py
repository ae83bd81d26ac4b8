"""`quantcheck repro` (pipeline/repro.py): one prompt's requests rebuilt as collect sent
them, replayed with curl by the folder's own replay.sh against loopback servers, and
nothing secret written."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from quantcheck.lab.scripted import ScriptedModel

from .conftest import FIXTURES, Serve, WritePrompts, assert_one_clear_line, invoke

PROMPTS = """
prompts:
  - {id: capital, prompt: "Q: capital of Australia", expect: {contains: Canberra}}
  - {id: chat, messages: [{role: user, content: "Name a colour, s'il vous plaît"}]}
"""
A_ANSWERS = {"Australia": " The capital of Australia is Canberra, not Sydney.",
             "colour": " Bleu, « azur » et vert."}
B_ANSWERS = {**A_ANSWERS, "Australia": " The capital of Australia is Sydney, not Canberra."}

needs_curl = pytest.mark.skipif(shutil.which("curl") is None, reason="replay.sh needs curl")


def replay(folder: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(folder / "replay.sh")], capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", **environment})


def run_ab(serve: Serve, write_prompts: WritePrompts, out: Path, *args: str) -> tuple:
    a = serve(ScriptedModel(A_ANSWERS), "llama.cpp")
    b = serve(ScriptedModel(B_ANSWERS), "vllm")
    result = invoke("run", "--a", a.url, "--b", b.url, "--prompts", write_prompts(PROMPTS),
                    "--out", out, "--no-preflight", *args)
    assert result.exit_code in (0, 1), result.output
    return a, b


@needs_curl
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("prompt_id", ["capital", "chat"])
def test_a_repro_holds_the_bodies_sent_and_replays_them_byte_for_byte(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, stream: bool,
        prompt_id: str) -> None:
    a, b = run_ab(serve, write_prompts, tmp_path / "report",
                  *([] if stream else ["--no-stream"]))
    result = invoke("repro", tmp_path / "report", prompt_id, "--out", tmp_path / "repro")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "repro"
    for side, server in (("a", a), ("b", b)):  # byte for byte what the server was sent
        sent = [body for body in server.requests if _prompt_of(body) == _prompt_of(
            json.loads((folder / f"{side}.request.json").read_text()))]
        assert sent and (folder / f"{side}.request.json").read_bytes() == orjson.dumps(sent[0])
        assert ("stream" in sent[0]) is stream
    assert json.loads((folder / "a.request.json").read_text())["cache_prompt"] is False
    assert "cache_prompt" not in json.loads((folder / "b.request.json").read_text())
    readme = (folder / "README.md").read_text()
    assert len(readme.splitlines()) == 5 and "bash replay.sh" in readme
    repro = json.loads((folder / "repro.json").read_text())
    assert repro["format"] == "quantcheck-repro/1" and repro["prompt_id"] == prompt_id
    assert repro["requests"][0]["cell"]["runtime"] == "llama.cpp"
    assert repro["requests"][1]["cell"]["runtime"] == "vllm"

    replayed = replay(folder)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "a: the same answer as recorded" in replayed.stdout
    assert "b: the same answer as recorded" in replayed.stdout
    for side in "ab":
        assert (folder / "replayed" / f"{side}.answer.txt").read_bytes() == \
            (folder / f"{side}.answer.txt").read_bytes()
    if prompt_id == "capital":
        assert repro["divergence"]["token"] == 5 and repro["divergence"]["char"] == 29
        assert "the answers part at generated token 5 (A ' Canberra,', B ' Sydney,'), " \
               "character 29" in readme
        assert "a and b: still differ" in replayed.stdout
    else:
        assert (folder / "a.answer.txt").read_text() == A_ANSWERS["colour"]
        assert repro["divergence"]["sentence"].startswith("the two answers are the same text")
        assert "a and b: the same text, as recorded" in replayed.stdout


def _prompt_of(body: dict[str, object]) -> object:
    return body.get("messages", body.get("prompt"))


@needs_curl
def test_a_replay_says_which_answer_changed_and_fails(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    run_ab(serve, write_prompts, tmp_path / "report")
    invoke("repro", tmp_path / "report", "capital", "--out", tmp_path / "repro")
    other = serve(ScriptedModel(B_ANSWERS), "llama.cpp")  # A now answers as B did
    replayed = replay(tmp_path / "repro", A_URL=other.url + "/v1/completions")
    assert replayed.returncode == 1
    assert re.search(r"a: another answer than recorded: a.answer.txt replayed/a.answer.txt "
                     r"differ: (byte|char) 30", replayed.stdout), replayed.stdout
    assert "b: the same answer as recorded" in replayed.stdout
    assert "a and b: the same answer now" in replayed.stdout

    gone = replay(tmp_path / "repro", A_URL=other.url + "/nowhere")
    assert gone.returncode == 1
    assert "a: the response holds no answer (replayed/a.response)" in gone.stdout


@needs_curl
def test_nothing_secret_is_written_and_a_key_is_sent_from_the_environment(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPRO_API_KEY", "sk-repro-secret-0123456789abcdef")
    a = serve(ScriptedModel(A_ANSWERS), "llama.cpp")
    b = serve(ScriptedModel(B_ANSWERS), "vllm")
    with_password = a.url.replace("http://", "http://alice:hunter2secret@")
    result = invoke("run", "--a", with_password, "--b", b.url,
                    "--prompts", write_prompts(PROMPTS), "--out", tmp_path / "report",
                    "--no-preflight", "--api-key-env", "REPRO_API_KEY")
    assert result.exit_code in (0, 1), result.output
    assert invoke("repro", tmp_path / "report", "capital", "--out",
                  tmp_path / "repro").exit_code == 0
    written = b"".join(path.read_bytes() for path in (tmp_path / "repro").rglob("*")
                       if path.is_file())
    for secret in (b"hunter2secret", b"alice", b"sk-repro-secret"):
        assert secret not in written
    replayed = replay(tmp_path / "repro", API_KEY="sk-repro-secret-0123456789abcdef")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert a.authorizations[-1] == "Bearer sk-repro-secret-0123456789abcdef"


def test_a_body_holding_a_credential_is_written_with_it_cut_and_said(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    run_ab(serve, write_prompts, tmp_path / "report", "--extra-body",
           '{"api_key": "plainsecretvalue"}')
    assert invoke("repro", tmp_path / "report", "capital", "--out",
                  tmp_path / "repro").exit_code == 0
    body = (tmp_path / "repro" / "a.request.json").read_text()
    assert "plainsecretvalue" not in body and '"api_key":"***"' in body
    assert json.loads((tmp_path / "repro" / "repro.json").read_text())[
        "requests"][0]["redacted"] is True
    assert "that replay is not exact" in (tmp_path / "repro" / "README.md").read_text()


@pytest.mark.parametrize(
    ("change", "message"),
    [("prompt", "holds no prompt 'missing'"),
     ("run", "a repro rebuilds the requests from the runs"),
     ("answer", "holds no answer to repeat 0 of 'capital'")],
    ids=["unknown-prompt", "run-moved", "no-answer"])
def test_what_a_repro_cannot_rebuild_is_one_clear_error(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, change: str,
        message: str) -> None:
    run_ab(serve, write_prompts, tmp_path / "report")
    prompt_id = "missing" if change == "prompt" else "capital"
    if change == "run":
        shutil.move(tmp_path / "report" / "a", tmp_path / "elsewhere")
    if change == "answer":
        completions = tmp_path / "report" / "b" / "completions.jsonl"
        kept = [line for line in completions.read_text().splitlines()
                if json.loads(line)["prompt_id"] != "capital"]
        completions.write_text("".join(line + "\n" for line in kept))
    result = invoke("repro", tmp_path / "report", prompt_id, "--out", tmp_path / "repro")
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "repro").exists()


def test_a_report_of_eval_logs_is_refused_naming_the_harness(tmp_path: Path) -> None:
    """An imported run's requests were sent by the eval harness, not by quantcheck:
    nothing to rebuild, said in one line (not an empty endpoint's URL error)."""
    inspect = FIXTURES / "evals" / "inspect-0.3.150"
    assert invoke("compare", inspect / "default-or-not.json", inspect / "default-or-not.eval",
                  "--out", tmp_path / "report").exit_code == 0
    result = invoke("repro", tmp_path / "report", "default_or_not/q1", "--out",
                    tmp_path / "repro")
    assert result.exit_code == 2
    assert_one_clear_line(result.output, "was imported from a log of inspect_ai: quantcheck "
                                         "sent none of its requests")
    assert not (tmp_path / "repro").exists()
