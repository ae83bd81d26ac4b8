"""An eval log written as a run directory: what it holds, read back as any run is; a
sample twice refused naming both places; a log that fails halfway leaves the folder
as it was; a run already there is kept unless --force sets it aside."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantcheck.errors import EvalLogError
from quantcheck.store.evals.eval_records import EvalSample, EvalSource, EvalTask
from quantcheck.store.evals.eval_runs import write_eval_run
from quantcheck.store.evals.inspect_logs import open_inspect
from quantcheck.store.evals.lm_eval_logs import open_lm_eval
from quantcheck.store.folders.run_dir import load_run

from .conftest import FIXTURES

LM_EVAL = FIXTURES / "evals" / "lm-eval-0.4.5"
INSPECT = FIXTURES / "evals" / "inspect-0.3.150" / "default-or-not.json"


def test_a_log_becomes_a_run_every_reader_takes(tmp_path: Path) -> None:
    imported = write_eval_run(open_lm_eval(LM_EVAL), tmp_path / "run", "old")
    run = load_run(tmp_path / "run")
    assert (imported.prompts, imported.records, imported.failed) == (6, 6, 0)
    assert run.manifest.label == "old" and run.manifest.status == "complete"
    assert run.manifest.evaluation is not None
    assert run.manifest.evaluation.tasks[0].metric == "exact_match,strict-match"
    prompt = run.prompts["arith_two_filters/1"]
    assert prompt.category == "arith_two_filters"
    assert prompt.expect is not None and prompt.expect.verdict is not None
    assert (prompt.expect.verdict.metric, prompt.expect.verdict.target) == (
        "exact_match,strict-match", "8")
    (record,) = [r for r in run.completions() if r.prompt_id == "arith_two_filters/1"]
    assert (record.text, record.answer) == (" 8, I think.", "[invalid]")
    assert record.scores == {"exact_match,strict-match": 0.0,
                             "exact_match,flexible-extract": 1.0}
    assert set(run.manifest.prompt_hashes) == set(run.prompts)


def test_a_sample_twice_is_refused_naming_both_places(tmp_path: Path) -> None:
    log = json.loads(INSPECT.read_text())
    log["samples"].append(log["samples"][0])
    (tmp_path / "twice.json").write_text(json.dumps(log))
    with pytest.raises(EvalLogError, match=r"samples\[3\]: sample q1 of task default_or_not "
                                           r"\(epoch 1\) appears twice \(first at .*samples"
                                           r"\[0\]\)"):
        write_eval_run(open_inspect(tmp_path / "twice.json"), tmp_path / "run", "a")
    assert not (tmp_path / "run").exists()
    assert not list(tmp_path.glob(".run.importing-*"))


def test_two_ids_of_one_document_are_a_note(tmp_path: Path) -> None:
    log = json.loads(INSPECT.read_text())
    copy = json.loads(json.dumps(log["samples"][0]))
    copy["id"] = "q1-again"
    log["samples"].append(copy)
    (tmp_path / "twins.json").write_text(json.dumps(log))
    imported = write_eval_run(open_inspect(tmp_path / "twins.json"), tmp_path / "run", "a")
    assert imported.source.notes == [
        "1 sample(s) hold the same document as an earlier one (default_or_not: samples q1 "
        "and q1-again): each is paired by its own id"]


def test_a_run_already_there_is_kept_unless_forced(tmp_path: Path) -> None:
    write_eval_run(open_lm_eval(LM_EVAL), tmp_path / "run", "first")
    with pytest.raises(EvalLogError, match="already holds a run; give another --out, or "
                                           "--force"):
        write_eval_run(open_inspect(INSPECT), tmp_path / "run", "second")
    assert load_run(tmp_path / "run").manifest.label == "first"
    write_eval_run(open_inspect(INSPECT), tmp_path / "run", "second", force=True)
    assert load_run(tmp_path / "run").manifest.label == "second"
    (aside,) = (tmp_path / "run").glob("superseded-*")
    assert (aside / "manifest.json").exists()


def test_a_log_that_fails_halfway_leaves_the_run_as_it_was(tmp_path: Path) -> None:
    write_eval_run(open_lm_eval(LM_EVAL), tmp_path / "run", "first")
    before = sorted(p.name for p in (tmp_path / "run").iterdir())
    shutil.copytree(LM_EVAL, tmp_path / "log")
    (samples,) = (tmp_path / "log").rglob("samples_*.jsonl")
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    lines[4]["arguments"] = {"gen_args_0": {"arg_0": 7}}  # read on the second pass only
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines))
    log = open_lm_eval(tmp_path / "log")
    with pytest.raises(EvalLogError, match=r":5: `arguments.gen_args_0.arg_0` must be a "
                                           "string"):
        write_eval_run(log, tmp_path / "run", "second", force=True)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == before
    assert load_run(tmp_path / "run").manifest.label == "first"


# --- whatever a reader gives, the run holds exactly ------------------------------------

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)


@dataclass
class Given:
    """What a reader gives the writer (its source and samples): an EvalLog."""

    source: EvalSource
    drawn: list[EvalSample]

    def samples(self) -> Iterator[EvalSample]:
        return iter(self.drawn)


@st.composite
def samples(draw: st.DrawFn) -> list[EvalSample]:
    ids = draw(st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=4, unique=True))
    return [EvalSample(task="t", sample_id=sample_id, request={"prompt": draw(TEXT)},
                       api="completions", where=f"log:{n}", text=draw(TEXT),
                       target=draw(TEXT), answer=draw(st.none() | TEXT),
                       scores=draw(st.dictionaries(TEXT, st.floats(allow_nan=False,
                                                                   allow_infinity=False),
                                                   max_size=3)))
            for n, sample_id in enumerate(ids)]


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=samples(), metric=st.none() | TEXT)
def test_any_samples_are_written_and_read_back_exactly(
        tmp_path_factory: pytest.TempPathFactory, drawn: list[EvalSample],
        metric: str | None) -> None:
    source = EvalSource(harness="h", tasks=[EvalTask(name="t", metric=metric)])
    out = tmp_path_factory.mktemp("runs") / "run"
    write_eval_run(Given(source, drawn), out, "a")
    run = load_run(out)
    records = {r.prompt_id: r for r in run.completions()}
    for sample in drawn:
        prompt, record = run.prompts[sample.prompt_id], records[sample.prompt_id]
        assert prompt.request == sample.request and prompt.category == "t"
        verdict = prompt.expect.verdict if prompt.expect else None
        assert (verdict.metric, verdict.target) == (metric, sample.target) if metric \
            else verdict is None
        assert (record.text, record.answer) == (sample.text, sample.answer)
        assert record.scores == (sample.scores or None)
