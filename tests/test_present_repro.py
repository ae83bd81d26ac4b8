"""What a repro folder's replay.sh is made of (present/repro.py): a text quoted for bash
comes back as written, and the answer's text is read back exactly from any answer,
whole or streamed, as quantcheck records it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.lab.scripted import ScriptedModel
from quantcheck.present.repro import TEXT_OF, _double_quoted, replay_script, url_variable
from quantcheck.store.records.repro_records import Repro, ReproDivergence, ReproRequest

from .conftest import Serve

TEXTS = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
                max_size=40)


@settings(max_examples=40, deadline=None)
@given(TEXTS)
def test_a_text_in_bash_double_quotes_is_taken_literally(text: str) -> None:
    shown = subprocess.run(["bash", "-c", f'printf %s "{_double_quoted(text)}"'],
                           capture_output=True, timeout=30).stdout.decode("utf-8")
    assert shown == "".join(" " if ord(c) < 32 or c == "\x7f" else c for c in text)


@settings(max_examples=25, deadline=None)
@given(st.lists(TEXTS, min_size=1, max_size=5), st.booleans(), st.booleans())
def test_the_answer_text_is_read_back_exactly_whole_or_streamed(
        tmp_path_factory: pytest.TempPathFactory, pieces: list[str], chat: bool,
        stream: bool) -> None:
    folder = tmp_path_factory.mktemp("answer")
    if stream:
        chunks = [{"choices": [{"index": 0, "delta": {"content": piece}} if chat
                               else {"index": 0, "text": piece}]} for piece in pieces]
        chunks.append({"choices": [], "usage": {"prompt_tokens": 3}})
        raw = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
    else:
        choice = ({"index": 0, "message": {"role": "assistant", "content": "".join(pieces)}}
                  if chat else {"index": 0, "text": "".join(pieces)})
        raw = json.dumps({"choices": [choice]})
    (folder / "response").write_text(raw, encoding="utf-8")
    subprocess.run([sys.executable, "-c", TEXT_OF, str(folder / "response"),
                    str(folder / "text")], check=True, timeout=30)
    assert (folder / "text").read_bytes() == "".join(pieces).encode("utf-8")


def test_a_response_that_is_no_answer_says_so(tmp_path: Path) -> None:
    folder = tmp_path
    (folder / "response").write_text("404: Not Found")
    done = subprocess.run([sys.executable, "-c", TEXT_OF, str(folder / "response"),
                           str(folder / "text")], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "not an answer" in done.stderr
    assert not (folder / "text").exists()


def test_each_request_has_its_own_endpoint_variable() -> None:
    assert [url_variable(n) for n in ("a", "b", "alone", "batch=8")] == \
        ["A_URL", "B_URL", "ALONE_URL", "BATCH_8_URL"]


def test_a_request_sent_with_others_at_once_is_replayed_with_them(
        serve: Serve, tmp_path: Path) -> None:
    """More requests than an A/B's two fit: a certificate's "alone" and "batch=3", the
    batch's other members sent at the same moment."""
    server = serve(ScriptedModel({"capital": " Canberra.", "colour": " Blue."}), "vllm")
    url = server.url + "/v1/completions"

    def body(prompt: str) -> bytes:
        return orjson.dumps({"model": "scripted-model", "prompt": prompt, "max_tokens": 8,
                             "temperature": 0})

    files = {"alone.json": body("Q: capital"), "batch.json": body("Q: capital"),
             "filler-1.json": body("Q: colour"), "filler-2.json": body("Q: colour, again"),
             "alone.txt": b" Canberra.", "batch.txt": b" Canberra."}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    repro = Repro(source="certificate", prompt_id="capital", requests=[
        ReproRequest(name="alone", url=url, body="alone.json", answer="alone.txt"),
        ReproRequest(name="batch=3", url=url, body="batch.json", answer="batch.txt",
                     together=["filler-1.json", "filler-2.json"])],
        divergence=ReproDivergence(sentence="the two answers are the same text"))
    (tmp_path / "replay.sh").write_text(replay_script(repro))
    done = subprocess.run(["bash", str(tmp_path / "replay.sh")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "alone: the same answer as recorded" in done.stdout
    assert "batch=3: the same answer as recorded" in done.stdout
    assert ("alone and batch=3: the same text, as recorded (the recorded texts were equal; "
            "each answer's logprobs are in replayed/alone.response and "
            "replayed/batch=3.response)") in done.stdout
    assert sorted(body["prompt"] for body in server.requests) == [
        "Q: capital", "Q: capital", "Q: colour", "Q: colour, again"]


def test_what_preceded_a_request_is_sent_after_its_flush_and_before_it() -> None:
    """A certificate's warm request: the cache emptied, its cold request sent, then it;
    a method that is not one bash keeps as a word is quoted, never run."""
    request = ReproRequest(name="warm", url="http://h/v1/completions", body="warm.request.json",
                           answer="warm.answer.txt", before="POST /flush_cache",
                           preceded=["warm.before.1.json", "warm.before.2.json"])
    script = replay_script(Repro(source="c", prompt_id="p", requests=[request],
                                 divergence=ReproDivergence(sentence="s")))
    flush = script.index("/flush_cache")
    first, second = script.index("warm.before.1.json"), script.index("warm.before.2.json")
    own = script.index("send warm \"$WARM_URL\" warm.request.json")
    assert flush < first < second < own
    hostile = ReproRequest(name="x", url="http://h/v1/completions", body="b.json",
                           answer="a.txt", before="$(touch pwned) /flush_cache")
    script = replay_script(Repro(source="c", prompt_id="p", requests=[hostile],
                                 divergence=ReproDivergence(sentence="s")))
    assert "-X '$(touch' \"${X_URL%%/v1/*}pwned) /flush_cache\"" in script


@pytest.mark.parametrize(("recorded_char", "second_prompt", "said"), [
    (None, "Q: capital", "warm: the same text, as recorded (the recorded texts were equal; "),
    (None, "Q: colour", "warm: their texts differ now; the recorded texts were equal: "),
    (0, "Q: capital", "warm: the same answer now"),
    (0, "Q: colour", "warm: still differ: "),
], ids=["logprobs-only-as-recorded", "logprobs-only-now-text", "text-gone", "text-kept"])
def test_the_two_replayed_answers_are_said_against_what_was_recorded(
        serve: Serve, tmp_path: Path, recorded_char: int | None, second_prompt: str,
        said: str) -> None:
    """Recorded answers that part in a logprob only have equal texts: equal texts again
    are what was recorded (the logprobs are in the responses), never "the same answer
    now"; recorded texts that differed keep their words."""
    server = serve(ScriptedModel({"capital": " Canberra.", "colour": " Blue."}), "vllm")
    for name, prompt in (("baseline", "Q: capital"), ("warm", second_prompt)):
        (tmp_path / f"{name}.json").write_bytes(orjson.dumps({
            "model": "scripted-model", "prompt": prompt, "max_tokens": 8, "temperature": 0}))
    (tmp_path / "answer.txt").write_bytes(b" Canberra.")
    repro = Repro(source="certificate", prompt_id="capital", requests=[
        ReproRequest(name=name, url=server.url + "/v1/completions", body=f"{name}.json",
                     answer="answer.txt") for name in ("baseline", "warm")],
        divergence=ReproDivergence(char=recorded_char, sentence="s"))
    (tmp_path / "replay.sh").write_text(replay_script(repro))
    done = subprocess.run(["bash", str(tmp_path / "replay.sh")], capture_output=True,
                          text=True, timeout=60)
    assert f"baseline and {said}" in done.stdout, done.stdout + done.stderr
