"""Every Eval Ever records written: valid under the JSON Schemas of
evaleval/every_eval_ever (tests/fixtures/evals/eee-schema-0.3.0) and read back to the
same verdicts; the same report and side make the same files."""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft7Validator

from quantcheck.store.evals.eee_export import EeeSample, EeeSide, EeeTaskScore, write_eee
from quantcheck.store.evals.eee_records import open_eee

from .conftest import FIXTURES

SCHEMAS = FIXTURES / "evals" / "eee-schema-0.3.0"


def schema(name: str) -> Draft7Validator:
    return Draft7Validator(json.loads((SCHEMAS / name).read_text()))


def sample(n: int, passed: bool) -> EeeSample:
    return EeeSample(task="capitals", sample_id=str(n), metric="exact_match,strict-match",
                     raw=f"Q: capital {n}?\nA:", reference=["Paris"], output=" Paris.",
                     answer="Paris", extraction="strict-match", passed=passed,
                     usage={"input_tokens": 5, "output_tokens": 2})


def test_written_records_are_valid_and_read_back(tmp_path: Path) -> None:
    side = EeeSide(label="fp8", model="org/model-fp8", library="lm-evaluation-harness",
                   library_version="0.4.13", organization="tests")
    scores = [EeeTaskScore("capitals", "exact_match,strict-match", passed=2, checked=3,
                           few_shot=3)]
    written = write_eee(tmp_path, side, scores, [sample(0, True), sample(1, False),
                                                  sample(2, True)], seed="report/b")
    aggregate = json.loads(written.aggregate.read_text())
    assert not list(schema("eval.schema.json").iter_errors(aggregate))
    lines = [json.loads(line) for line in written.samples.read_text().splitlines()]
    for line in lines:
        assert not list(schema("instance_level_eval.schema.json").iter_errors(line))
    assert aggregate["detailed_evaluation_results"]["file_path"] == \
        written.samples.relative_to(tmp_path).as_posix()
    assert aggregate["evaluation_results"][0]["score_details"]["score"] == 2 / 3
    log = open_eee(written.aggregate)
    (task,) = log.source.tasks
    assert task.metric == "exact_match,strict-match" and task.few_shot == 3
    assert [s.scores[task.metric] for s in log.samples()] == [1.0, 0.0, 1.0]
    again = write_eee(tmp_path, side, scores, [sample(0, True)], seed="report/b")
    assert again.aggregate == written.aggregate  # the same report and side: one file
