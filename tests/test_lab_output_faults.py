"""Long answers gone wrong, planted in the lab: a loop after 3,000 good tokens, `!` to
the length limit, one answer to every prompt; what each sends (streamed or whole), and
that triage catches each on B and stays quiet on A against itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quantcheck import CollectSettings, collect, compare_runs, load_run
from quantcheck.lab.launch import free_port, wait_until_healthy
from quantcheck.lab.output_faults import COLLAPSED_ANSWER, LOOP_TOKENS
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.store.inputs.haystack import haystack

from .conftest import Serve, WritePrompts, invoke

STORIES = {f"story {n}": " " + haystack(4000, 0.5, f"Chapter {n} ends.", seed=n)
           for n in range(3)}
PROMPTS = "prompts:\n" + "".join(
    f'  - {{id: story-{n}, prompt: "Continue story {n}", max_tokens: 4000}}\n'
    for n in range(3))


def _collect(url: str, prompts: Path, out: Path, stream: bool = False) -> Path:
    collect([prompts], out, CollectSettings(endpoint=url, label=out.name, top_logprobs=2,
                                            preflight=False, stream=stream))
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_each_fault_sends_what_it_says(serve: Serve, write_prompts: WritePrompts,
                                       tmp_path: Path, stream: bool) -> None:
    prompts = write_prompts(PROMPTS)
    model = ScriptedModel(STORIES)
    runs = {name: _collect(serve(model, faults=faults).url, prompts, tmp_path / name, stream)
            for name, faults in (("a", Faults()), ("loop", Faults(late_loop_after=3000)),
                                 ("bang", Faults(bang_run=True)),
                                 ("collapse", Faults(collapse=True)))}
    answers = {name: {r.prompt_id: r for r in load_run(run).completions()}
               for name, run in runs.items()}
    a, loop = answers["a"]["story-0"], answers["loop"]["story-0"]
    assert a.finish_reason == "stop" and a.tokens is not None and 3000 < len(a.tokens) < 4000
    assert loop.tokens is not None and loop.finish_reason == "length"
    assert loop.tokens.text[:3000] == a.tokens.text[:3000]  # 3,000 good tokens
    cycle = a.tokens.text[3000 - LOOP_TOKENS:3000]
    assert loop.tokens.text[3000:] == (cycle * 200)[:1000]  # then its last 8, to the limit
    bang = answers["bang"]["story-1"]
    assert bang.text == "!" * 4000 and bang.finish_reason == "length"
    assert {r.text for r in answers["collapse"].values()} == {COLLAPSED_ANSWER}


def test_triage_catches_each_fault_on_b_and_is_quiet_on_a_against_itself(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A late loop and a `!` run are degenerate output new on B (the `!` run a collapse
    too); one answer to every prompt is a collapse; A against a second collection of
    itself shows neither."""
    prompts = write_prompts(PROMPTS)
    model = ScriptedModel(STORIES)
    a = _collect(serve(model).url, prompts, tmp_path / "a")
    found = {}
    for name, faults in (("self", Faults()), ("loop", Faults(late_loop_after=3000)),
                         ("bang", Faults(bang_run=True)), ("collapse", Faults(collapse=True))):
        b = _collect(serve(model, faults=faults).url, prompts, tmp_path / name)
        counts = compare_runs(a, b, tmp_path / f"report-{name}").counts
        assert counts.collapse is not None
        found[name] = (counts.degenerate_new_on_b_kinds["repetition"], counts.collapse.new_on_b)
    assert found == {"self": (0, 0), "loop": (3, 0), "bang": (3, 3), "collapse": (0, 3)}
    gate = invoke("gate", tmp_path / "report-bang")
    assert gate.exit_code == 1
    failed = {r["name"] for r in json.loads((tmp_path / "report-bang" / "gate.json")
                                            .read_text())["rules"] if not r["passed"]}
    assert failed == {"new_degenerate_on_b", "collapsed_on_b"}
    assert invoke("gate", tmp_path / "report-self").exit_code == 0


def test_the_lab_serves_a_fault_from_the_command_line(write_prompts: WritePrompts,
                                                      tmp_path: Path) -> None:
    """`quantcheck lab scripted --fault bang-run`, started as a CI job starts it, answers
    `!` to the length limit; an unknown fault is refused naming the known ones."""
    port, log = free_port(), tmp_path / "lab.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "quantcheck", "lab", "scripted", "--port", str(port),
             "--fault", "bang-run"], stdout=handle, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}", process, log, timeout=60)
        run = _collect(f"http://127.0.0.1:{port}/v1", write_prompts(
            'prompts:\n  - {id: q, prompt: "Q: anything", max_tokens: 50}\n'), tmp_path / "b")
    finally:
        process.terminate()
        process.wait(30)
    answer, = load_run(run).completions()
    assert answer.text == "!" * 50 and answer.finish_reason == "length"
    refused = invoke("lab", "scripted", "--fault", "loop")
    assert refused.exit_code == 2 and "late-loop" in refused.output
