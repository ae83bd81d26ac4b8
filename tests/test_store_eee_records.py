"""Every Eval Ever records read: those its own converter wrote from a real lm-eval run
(schemas 0.3.0 and 0.2.0) as eval samples, a sample in several results, and any bytes
in their place (read, or said why)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantcheck.errors import EvalLogError, QuantcheckError
from quantcheck.store.evals.eee_records import is_eee, open_eee
from quantcheck.store.evals.eval_runs import write_eval_run

from .conftest import FIXTURES

EVALS = FIXTURES / "evals"
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("version", ["0.3.0", "0.2.0"])
def test_the_converters_records_read_to_their_own_score(version: str) -> None:
    """Schema 0.2.0 wrote `output.raw` as one string, its reference as text and the
    sample id as a number, and had no `eval_library`; both read alike."""
    folder = EVALS / f"eee-{version}"
    assert is_eee(folder)
    log = open_eee(folder)
    (task,) = log.source.tasks
    assert log.source.harness_version == version
    assert log.source.model == "google/gemma-3-270m"
    assert (task.name, task.few_shot, task.samples) == ("capitals/strict-match", 3, 8)
    assert task.metric in ("score", "is_correct")
    samples = {s.sample_id: s for s in log.samples()}
    assert samples["0"].text == "Paris" and samples["0"].target == "Paris"
    assert samples["0"].answer == "Paris" and samples["0"].scores["is_correct"] == 1.0
    passed = sum(s.scores[task.metric] for s in samples.values())
    assert passed / task.samples == task.reported[next(iter(task.reported))]


# --- any bytes in: an EvalLog or quantcheck's own error --------------------------------

SCALARS = (st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=True)
           | st.text(max_size=5))
ANY_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.sampled_from(
                            ["evaluation_name", "sample_id", "input", "raw", "formatted",
                             "reference", "output", "evaluation", "score", "is_correct",
                             "answer_attribution", "extracted_value", "messages", "x"]),
                            inner, max_size=4), max_leaves=14)


def copy_record(folder: Path) -> tuple[Path, Path]:
    shutil.copytree(EVALS / "eee-0.3.0", folder)
    (aggregate,) = folder.glob("*-*.json")
    return aggregate, aggregate.with_name(aggregate.stem + "_samples.jsonl")


def read_whole(folder: Path) -> None:
    try:
        write_eval_run(open_eee(folder), folder / "run", "a", force=True)
    except QuantcheckError:
        pass


@FUZZ
@given(data=st.binary(max_size=300) | ANY_JSON.map(lambda v: json.dumps(v).encode()))
def test_any_aggregate_reads_or_says_why(tmp_path_factory: pytest.TempPathFactory,
                                         data: bytes) -> None:
    aggregate, _ = copy_record(tmp_path_factory.mktemp("eee") / "record")
    aggregate.write_bytes(data)
    read_whole(aggregate.parent)


@FUZZ
@given(field=st.sampled_from(["evaluation_name", "sample_id", "input", "output",
                              "evaluation", "answer_attribution", "token_usage", "error",
                              "messages"]), value=ANY_JSON,
       junk=st.binary(max_size=40))
def test_any_sample_line_reads_or_says_why(tmp_path_factory: pytest.TempPathFactory,
                                           field: str, value: Any, junk: bytes) -> None:
    _, samples = copy_record(tmp_path_factory.mktemp("eee") / "record")
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    lines[1][field] = value
    samples.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines)
                        + junk + b"\n")
    read_whole(samples.parent)


def test_a_sample_counted_in_two_results_reads_once_with_both_scores(tmp_path: Path) -> None:
    """The schema asks for one line per aggregate result a sample counts in: here the
    converter's record given a second result (`is_correct`, as a metric) and each sample
    a second line joined to it by `evaluation_result_id`."""
    aggregate, samples = copy_record(tmp_path / "record")
    record = json.loads(aggregate.read_text())
    first = record["evaluation_results"][0]
    first["evaluation_result_id"] = "strict"
    second = json.loads(json.dumps(first))
    second["evaluation_result_id"] = "lenient"
    second["metric_config"]["metric_id"] = "lenient_match"
    record["evaluation_results"].append(second)
    aggregate.write_text(json.dumps(record))
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    doubled = []
    for line in lines:
        lenient = {**line, "evaluation_result_id": "lenient",
                   "evaluation": {**line["evaluation"], "score": 1.0}}
        doubled += [{**line, "evaluation_result_id": "strict"}, lenient]
    samples.write_text("".join(json.dumps(line) + "\n" for line in doubled))
    log = open_eee(aggregate.parent)
    (task,) = log.source.tasks
    assert task.samples == 8 and task.metrics[:2] == ["score", "is_correct"]
    read = list(log.samples())
    assert len(read) == 8 and all(s.scores["lenient_match"] == 1.0 for s in read)
    samples.write_text(samples.read_text() + json.dumps(doubled[0]) + "\n")
    with pytest.raises(QuantcheckError, match=r":17: sample 0 of capitals/strict-match "
                                              r"\(score\) appears twice \(first at 1\)"):
        open_eee(aggregate.parent)


def test_a_samples_line_past_the_bound_is_one_error_naming_its_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every samples line is read through files.bounded_lines (256 MiB; lowered here to
    the record's longest line): a longer one is refused naming the file and the line."""
    _, samples = copy_record(tmp_path / "record")
    lines = samples.read_bytes().splitlines(keepends=True)
    monkeypatch.setattr("quantcheck.store.evals.eee_records.MAX_LINE_BYTES", max(map(len, lines)))
    write_eval_run(open_eee(tmp_path / "record"), tmp_path / "run", "a")
    samples.write_bytes(b"".join([lines[0], lines[1].rstrip(b"\n") + b" " * 50 + b"\n",
                                  *lines[2:]]))
    with pytest.raises(EvalLogError, match=rf"{samples.name}:2: a line of more than "
                                           r"[\d,]+ bytes, more than a line of a samples file"):
        write_eval_run(open_eee(tmp_path / "record"), tmp_path / "run", "a", force=True)
