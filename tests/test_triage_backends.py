"""Who answered a side (triage/backends.py): the backends its records name, counted as
compare reads a run; mixed only when a field the answers name takes two values; per
replica on a side of several URLs, and the mixed-backend check there too."""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.lab.scripted import Faults
from quantcheck.triage import sides
from quantcheck.triage.backends import FIELDS, mixed_sentence

from .conftest import Serve, WritePrompts, gate_rules, invoke

PROMPTS = "prompts:\n" + "".join(f"  - {{id: p{n}, prompt: 'question {n}'}}\n"
                                 for n in range(6))
records = st.lists(st.fixed_dictionaries({
    "prompt_id": st.sampled_from(["p1", "p2", "p3"]),
    "repeat": st.integers(0, 40),
    "error": st.one_of(st.none(), st.just("HTTP 500 (after 4 attempts)")),
    "model": st.sampled_from([None, "m", "m-v2"]),
    "system_fingerprint": st.sampled_from([None, "b6123", "b6124", "\u00e9\n<b>"]),
    "weight_version": st.sampled_from([None, "default", "v2"]),
    "replica": st.sampled_from([None, "http://r1:8000/v1", "http://r2:8000/v1"]),
}), max_size=25, unique_by=lambda r: (r["prompt_id"], r["repeat"]))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(records)
def test_the_backends_of_a_side_are_counted_from_its_records(
        lines: list[dict[str, Any]]) -> None:
    """Whatever the records name: each distinct backend with its successful requests,
    mixed exactly when a named field takes two values, each replica's answers."""
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        (run / "manifest.json").write_text(json.dumps({"parameters": {"repeats": 41}}))
        (run / "prompts.jsonl").write_text("".join(json.dumps({
            "id": i, "category": "c", "api": "completions", "hash": "h", "tags": [],
            "expect": None, "request": {"prompt": i}}) + "\n" for i in ("p1", "p2", "p3")))
        (run / "completions.jsonl").write_text("".join(json.dumps(line) + "\n"
                                                       for line in lines))
        with sides.load_side(run) as side:
            found = side.backends
    assert found is not None
    ok = [line for line in lines if line["error"] is None]
    named = Counter(tuple(line[field] for field in FIELDS) for line in ok)
    assert {(b.model, b.system_fingerprint, b.weight_version): b.requests
            for b in found.backends} == named
    differs = [field for field in FIELDS
               if len({line[field] for line in ok if line[field] is not None}) > 1]
    assert (found.mixed, found.differs) == (bool(differs), differs)
    replicas = {line["replica"] for line in lines} - {None}
    assert {r.endpoint: (r.requests, r.failed) for r in found.replicas} == {
        url: (sum(line["replica"] == url for line in ok),
              sum(line["replica"] == url for line in lines if line["error"]))
        for url in replicas}
    said = mixed_sentence("B", found)
    assert (said is not None) == found.mixed


def test_a_server_naming_a_new_backend_in_every_answer_is_held_within_bounds(
        tmp_path: Path) -> None:
    """A distinct 5,000-character fingerprint in each of 600 answers: compare tells 256
    apart, each cut to 200 characters, and counts the rest; the side is mixed."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"parameters": {"repeats": 600}}))
    (run / "prompts.jsonl").write_text(json.dumps({
        "id": "p", "category": "c", "api": "completions", "hash": "h", "tags": [],
        "expect": None, "request": {"prompt": "p"}}) + "\n")
    (run / "completions.jsonl").write_text("".join(json.dumps({
        "prompt_id": "p", "repeat": n, "model": "m",
        "system_fingerprint": f"{n:04d}" + "x" * 5000}) + "\n" for n in range(600)))
    with sides.load_side(run) as side:
        found = side.backends
    assert found is not None and found.mixed
    assert len(found.backends) == 256 and found.other_backends == 600 - 256
    assert {len(b.system_fingerprint or "") for b in found.backends} == {200}
    said = mixed_sentence("B", found) or ""
    assert said.startswith("B was answered by more than 256 backends, not one server: ")
    assert said.endswith("; and 252 more; 344 requests of still more, not told apart")


def test_two_builds_behind_one_url_are_named_and_fail_the_gate_by_default(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A rollout: one URL, its answers alternating between two system fingerprints."""
    a = serve(dialect="llama.cpp")
    b = serve(dialect="llama.cpp", faults=Faults(rollout=[
        {"system_fingerprint": "b6123-aaaaaaa"}, {"system_fingerprint": "b6124-bbbbbbb"}]))
    out = tmp_path / "report"
    result = invoke("run", "--a", a.url, "--b", b.url, "--prompts", write_prompts(PROMPTS),
                    "--repeats", "2", "--no-preflight", "--out", out)
    assert result.exit_code == 1, result.output
    said = ("B was answered by 2 backends, not one server: system_fingerprint "
            "'b6123-aaaaaaa' (6 requests); system_fingerprint 'b6124-bbbbbbb' (6 requests)")
    assert f"warning: {said}. Its pairs mix what two servers answered" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backends"]["b"]["mixed"] is True
    assert summary["backends"]["b"]["differs"] == ["system_fingerprint"]
    assert summary["backends"]["a"]["mixed"] is False
    assert invoke("gate", out).exit_code == 1
    rule = gate_rules(out)["mixed_backends"]
    assert (rule["count"], rule["limit"], rule["passed"]) == (1, 0, False)
    assert rule["description"] == said
    assert 'id="mixed-backends"' in (out / "index.html").read_text()

    (tmp_path / "policy.yaml").write_text("max_mixed_backends: null\n")
    result = invoke("gate", out, "--policy", tmp_path / "policy.yaml")
    assert result.exit_code == 0, result.output
    assert invoke("gate", out, "--max-mixed-backends", "1").exit_code == 0


def test_the_mixed_backend_check_applies_per_replica(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """The second replica answers the check's probe as the first does, then alternates:
    the replicas do not agree, and the gate says which."""
    a, b1 = serve(dialect="llama.cpp"), serve(dialect="llama.cpp")
    b2 = serve(dialect="llama.cpp", faults=Faults(rollout=[
        {"system_fingerprint": "b6000-abc1234"}, {"system_fingerprint": "b6124-bbbbbbb"}]))
    out = tmp_path / "report"
    result = invoke("run", "--a", a.url, "--b", f"{b1.url},{b2.url}", "--prompts",
                    write_prompts(PROMPTS), "--repeats", "2", "--no-preflight", "--out", out)
    assert result.exit_code == 1, result.output
    b = json.loads((out / "summary.json").read_text())["backends"]["b"]
    assert b["mixed"] is True
    backends = {r["endpoint"]: r["backends"] for r in b["replicas"]}
    assert backends == {b1.url: 1, b2.url: 2}  # each replica as given
    assert "system_fingerprint 'b6124-bbbbbbb' (" in result.output
    assert invoke("gate", out).exit_code == 1
    assert f"on {b2.url})" in gate_rules(out)["mixed_backends"]["description"]
    assert "B: 2 of 2 replicas answered (each prompt's repeats on one replica); their " \
           "answers name more than one backend" in result.output
