"""pipeline/ladder.py on scripted servers: the onset of a B that loses what lies far back
in its prompt, no onset for A against itself, an absent needle that B fills in, the
cost said before each rung is sent, lengths measured on the server's tokenizer (or
estimated and said so), a rerun that resumes without asking again, and settings or
lengths that cannot be used refused before any request."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from quantcheck.errors import QuantcheckError, RunFormatError, RunMismatch
from quantcheck.fetch.collect import CollectSettings
from quantcheck.lab.endpoint import Faults
from quantcheck.lab.scripted import ScriptedModel, ScriptedServer
from quantcheck.pipeline.ladder import LadderRun, run_ladder
from quantcheck.pipeline.ladder_progress import RungCost
from quantcheck.pipeline.ladder_report import read_ladder
from quantcheck.store.records.ladder_records import LadderPlan, ProbeResult, Rung

from .conftest import Serve


@dataclass
class Heard:
    """What the ladder told, in order."""

    events: list[tuple[str, object]] = field(default_factory=list)

    def planned(self, plan: LadderPlan, costs: list[RungCost],
                rates: dict[str, float | None]) -> None:
        self.events.append(("planned", costs))

    def rung_starting(self, cost: RungCost) -> None:
        self.events.append(("rung", cost))

    def probe_done(self, tokens: int, result: ProbeResult, seconds: float) -> None:
        self.events.append(("probe", result))

    def rung_done(self, rung: Rung) -> None:
        self.events.append(("done", rung))

    def note(self, text: str) -> None:
        self.events.append(("note", text))


def job(a: ScriptedServer, b: ScriptedServer, out: Path, **settings: object) -> LadderRun:
    fields: dict[str, object] = {"lengths": [512, 1024, 2048], "depths": [0.0]}
    fields.update(settings)
    return LadderRun(a=CollectSettings(endpoint=a.url, label="f16",
                                       cell={"kv_cache_dtype": "f16"}),
                     b=CollectSettings(endpoint=b.url, label="q4_0",
                                       cell={"kv_cache_dtype": "q4_0"}),
                     out=out, **fields)  # type: ignore[arg-type]


def generations(server: ScriptedServer) -> int:
    return len(server.requests)


def test_a_b_that_loses_the_start_of_long_prompts_has_its_onset_named(
        serve: Serve, tmp_path: Path) -> None:
    """B sees only the last 1,500 tokens (words, to the lab's tokenizer) of a prompt: a
    code at the start of a 2,048-token prompt is lost, one at 1,024 is not."""
    a = serve(ScriptedModel(), "llama.cpp")
    b = serve(ScriptedModel(), "llama.cpp", faults=Faults(sliding_window=1500))
    heard = Heard()
    ladder, page = run_ladder(job(a, b, tmp_path / "ladder"), heard)
    assert ladder.onset == 2048 and not ladder.gate.passed
    assert ladder.onset_sentence.startswith("B departs from A from 2,048 tokens: at 1 of "
                                            "its 2 probes B's verdict is not that of A's")
    assert ladder.axes == ("A and B differ in one axis of the serving cell, kv_cache_dtype "
                           "(f16 on A, q4_0 on B): a one-axis change")
    by_length = {rung.tokens: rung for rung in ladder.rungs}
    assert (by_length[1024].a_recall, by_length[1024].b_recall) == (1.0, 1.0)
    assert (by_length[2048].a_recall, by_length[2048].b_recall) == (1.0, 0.5)
    assert by_length[2048].departures == 1 and by_length[2048].a_floor == 0
    assert by_length[2048].flips == 1  # triage's own flip on the needle's expect
    lost = by_length[2048].probes[0]
    assert lost.probe.kind == "needle" and lost.b_passed is False and lost.departs
    assert lost.kl_mean is not None and lost.positions > 0
    for rung in ladder.rungs:  # measured on the lab's tokenizer: at most the rung
        for probe in rung.probes:
            assert rung.tokens - 20 <= (probe.probe.prompt_tokens or 0) <= rung.tokens
        assert rung.tokens_sent > 3 * rung.tokens and rung.seconds is not None
    assert ladder.complete and ladder.tested_up_to == 2048 and ladder.not_tested == []
    assert "measured on A's tokenizer (/tokenize)" in ladder.length_measure
    # each rung's cost came before its first probe; the preflight ran once on each side
    kinds = [kind for kind, _ in heard.events]
    assert kinds[:2] == ["planned", "rung"] and kinds.count("rung") == 3
    notes = [str(text) for kind, text in heard.events if kind == "note"]
    assert [note.split(":")[0] for note in notes if "preflight checks" in note] == ["A", "B"]
    costs = heard.events[0][1]
    assert isinstance(costs, list) and [c.tokens for c in costs] == [512, 1024, 2048]
    assert all(c.tokens_sent > 0 and c.seconds is not None for c in costs)
    # the files: ladder.json read back, the page, each probe's sheet
    assert read_ladder(tmp_path / "ladder") == ladder
    assert page == tmp_path / "ladder" / "index.html" and "<svg" in page.read_text()
    assert (tmp_path / "ladder" / lost.report / "index.html").exists()


def test_a_against_itself_states_no_onset(serve: Serve, tmp_path: Path) -> None:
    a = serve(ScriptedModel(), "llama.cpp")
    ladder, _ = run_ladder(job(a, a, tmp_path / "self"))
    assert ladder.onset is None and ladder.gate.passed
    assert ladder.onset_sentence == "no departure up to 2,048 tokens"
    assert ladder.floor_sentence.startswith("A's floor: its 2 repeats agree on every probe")
    assert all(rung.kl_mean is not None and rung.a_floor_kl == 0.0 for rung in ladder.rungs)
    assert ladder.axes == "A and B differ in one axis of the serving cell, kv_cache_dtype " \
                          "(f16 on A, q4_0 on B): a one-axis change"  # as the cells say


class FillsIn(ScriptedModel):
    """Names a code even where the record gives none."""

    def answer(self, prompt_text: str, advance: bool = True) -> str:
        if "What is the secret code" in prompt_text and "The secret code is" not in \
                prompt_text:
            return " 55555"
        return super().answer(prompt_text, advance)


def test_an_absent_needle_that_b_fills_in_departs(serve: Serve, tmp_path: Path) -> None:
    a, b = serve(ScriptedModel(), "llama.cpp"), serve(FillsIn(), "llama.cpp")
    ladder, _ = run_ladder(job(a, b, tmp_path / "absent", lengths=[512]))
    absent = ladder.rungs[0].probes[-1]
    assert absent.probe.kind == "absent" and absent.a_passed and absent.b_passed is False
    assert ladder.onset == 512 and "the absent needle gained" not in ladder.onset_sentence
    assert "the absent needle lost: B answered '55555'" in ladder.onset_sentence


def test_a_rerun_resumes_and_asks_nothing_measured_again(serve: Serve, tmp_path: Path
                                                         ) -> None:
    a = serve(ScriptedModel(), "llama.cpp")
    b = serve(ScriptedModel(), "llama.cpp", faults=Faults(sliding_window=1500))
    out = tmp_path / "resumed"
    first, _ = run_ladder(job(a, b, out, lengths=[512, 1024]))
    asked = generations(a), generations(b)
    # an interrupted probe: its report was never written
    (out / "rungs" / "1024" / "absent" / "summary.json").unlink()
    heard = Heard()
    again, _ = run_ladder(job(a, b, out, lengths=[512, 1024]), heard)
    assert (generations(a), generations(b)) == asked  # the runs held every answer
    assert [r.a_recall for r in again.rungs] == [r.a_recall for r in first.rungs]
    measured = [cost for kind, cost in heard.events if kind == "rung"]
    assert [getattr(c, "measured", None) for c in measured] == [True, False]


def test_other_settings_in_the_same_folder_are_refused(serve: Serve, tmp_path: Path) -> None:
    a = serve(ScriptedModel(), "llama.cpp")
    run_ladder(job(a, a, tmp_path / "l", lengths=[512]))
    asked = generations(a)
    with pytest.raises(RunMismatch, match=r"other settings: depths \[0\.0\] \(now \[0\.5\]\)"):
        run_ladder(job(a, a, tmp_path / "l", lengths=[512], depths=[0.5]))
    assert generations(a) == asked


def test_a_length_beyond_the_context_is_refused_before_any_request(
        serve: Serve, tmp_path: Path) -> None:
    a = serve(ScriptedModel(), "llama.cpp", server_info={
        "default_generation_settings": {"n_ctx": 4096}})
    with pytest.raises(QuantcheckError, match=r"--lengths 4,096, 8,192: a prompt that long "
                                              r"and its 16-token answer do not fit the "
                                              r"servers' context of 4,096 tokens"):
        run_ladder(job(a, a, tmp_path / "x", lengths=[1024, 4096, 8192]))
    assert generations(a) == 0 and not (tmp_path / "x").exists()
    ladder, _ = run_ladder(job(a, a, tmp_path / "y", lengths=None))
    assert [r.tokens for r in ladder.rungs] == [1024, 2048]  # what 4,096 holds


def test_an_engine_that_cannot_tokenize_or_score_gets_estimates_and_says_so(
        serve: Serve, tmp_path: Path) -> None:
    """Ollama tokenizes nothing on request and scores no given tokens: the lengths are
    estimated from word counts and the KL is said to be missing, not made up (on its
    completions API, whose answers carry no logprobs, too)."""
    a = serve(ScriptedModel(), "ollama")
    ladder, _ = run_ladder(job(a, a, tmp_path / "ollama", lengths=[512], api="chat"))
    assert ladder.length_measure.startswith("estimated from word counts")
    assert ladder.rungs[0].kl_mean is None
    assert any("teacher-forced KL not scored: Ollama cannot score given tokens" in line
               for line in ladder.not_tested)
    assert ladder.onset is None  # the recall was still measured
    plain, _ = run_ladder(job(a, a, tmp_path / "plain", lengths=[512]))
    assert "512 tokens, needle-d0: teacher-forced KL not scored: A's answers carry no " \
           "logprobs" in plain.not_tested


def test_german_filler_on_the_chat_api(serve: Serve, tmp_path: Path) -> None:
    a = serve(ScriptedModel(), "vllm")
    ladder, _ = run_ladder(job(a, a, tmp_path / "de", lengths=[512], language="de",
                               api="chat", absent=False))
    prompt = json.loads((tmp_path / "de" / "rungs" / "512" / "needle-d0" / "a" /
                         "prompts.jsonl").read_text().splitlines()[0])
    content = prompt["request"]["messages"][0]["content"]
    assert "The secret code is" in content and (" Der " in content or " Die " in content)
    assert ladder.rungs[0].a_recall == 1.0 and ladder.settings.language == "de"


@pytest.mark.parametrize("edit", [
    lambda plan: plan["rungs"][0]["probes"][0].update(id="../../outside"),
    lambda plan: plan["rungs"][0]["probes"][0].update(sentences=0),
    lambda plan: plan["rungs"][0].update(tokens=4096),
    lambda plan: plan.update(format="quantcheck-ladder-plan/9"),
], ids=["id-leaving-the-folder", "no-filler", "other-rung", "later-format"])
def test_an_edited_plan_is_refused_before_any_request(serve: Serve, tmp_path: Path,
                                                      edit: Any) -> None:
    """plan.json is read back on a rerun: a probe id names a folder, so a plan its
    settings would not make is refused, and nothing is written outside --out."""
    a = serve(ScriptedModel(), "llama.cpp")
    out = tmp_path / "inside" / "ladder"
    run_ladder(job(a, a, out, lengths=[512]))
    plan = json.loads((out / "plan.json").read_text())
    edit(plan)
    (out / "plan.json").write_text(json.dumps(plan))
    asked = generations(a)
    with pytest.raises(RunFormatError, match="plan.json: "):
        run_ladder(job(a, a, out, lengths=[512]))
    assert generations(a) == asked and sorted(p.name for p in tmp_path.iterdir()) == ["inside"]
    assert not (tmp_path / "outside").exists() and not (out.parent / "outside").exists()


def test_each_probe_is_asked_with_the_prompt_cache_off(serve: Serve, tmp_path: Path) -> None:
    """llama-server reuses its slot's prompt unless a request says `cache_prompt: false`
    (here a server whose reuse moves the numbers, as a quantized cache's did): every
    answer of the ladder says it, so A's repeats are two whole passes and agree, while
    teacher forcing still reuses the prompt B just answered."""
    a = serve(ScriptedModel(), "llama.cpp", faults=Faults(prompt_cache=True))
    ladder, _ = run_ladder(job(a, a, tmp_path / "cached", lengths=[512]))
    asked = [body for body in a.requests if "What is the secret code" in str(body)]
    # two probes asked three times each (A twice, B once), and each side's warm-up
    assert len(asked) == 2 * 3 + 2 and all(body.get("cache_prompt") is False for body in asked)
    assert ladder.rungs[0].a_floor_kl == 0.0 and ladder.onset is None
    # a server of its own: the first ladder's prompts are in a's cache (a request with
    # the cache off still leaves its prompt there, as llama-server does)
    fresh = serve(ScriptedModel(), "llama.cpp", faults=Faults(prompt_cache=True))
    kept = invoke_ladder_with_cache(fresh, tmp_path / "kept")
    assert kept.rungs[0].a_floor_kl is not None and kept.rungs[0].a_floor_kl > 0


def invoke_ladder_with_cache(server: ScriptedServer, out: Path) -> Any:
    """The same ladder with --extra-body '{"cache_prompt": true}': the user's word wins."""
    ladder_job = job(server, server, out, lengths=[512])
    for side in (ladder_job.a, ladder_job.b):
        side.request.extra_body["cache_prompt"] = True
    return run_ladder(ladder_job)[0]
