"""Every Eval Ever records written: one side of a report as an aggregate `UUID.json`
and its `UUID_samples.jsonl`, schema 0.3.0, in the shape store/evals/eee_records.py
describes (and reads back)."""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ..._version import __version__
from ..files import AtomicFile, make_directory
from ..labels import label_from_name
from .eee_records import SAMPLES_SUFFIX, SCHEMA_VERSION

Z95 = 1.959963984540054


@dataclass
class EeeSample:
    """One side's answer to one prompt, as a per-sample line says it."""

    task: str
    sample_id: str
    metric: str  # the metric of the task's result this sample belongs to
    raw: str
    reference: list[str]
    output: str
    answer: str
    extraction: str  # how the answer was taken from the output
    passed: bool
    formatted: str | None = None
    usage: dict[str, int] | None = None  # input_tokens, output_tokens
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class EeeTaskScore:
    """One task's figure on one side: its metric and the share of samples passed."""

    task: str
    metric: str
    passed: int
    checked: int
    few_shot: int | None = None


@dataclass
class EeeSide:
    """Who one side of a report is, for its records."""

    label: str
    model: str
    library: str
    library_version: str
    organization: str = "unknown"


@dataclass
class EeeWritten:
    aggregate: Path
    samples: Path
    rows: int


def write_eee(folder: Path, side: EeeSide, scores: list[EeeTaskScore],
              samples: Iterable[EeeSample], seed: str) -> EeeWritten:
    """One side's aggregate and per-sample records under FOLDER/data/quantcheck/
    DEVELOPER/MODEL/ (the datastore's layout, so `file_path` names them as its schema
    requires); `seed` makes the UUID (the same report and side: the same files)."""
    record_id = str(uuid.UUID(bytes=hashlib.sha256(seed.encode()).digest()[:16], version=4))
    model_id = side.model or side.label
    developer, _, name = model_id.rpartition("/")
    relative = Path("data", "quantcheck", label_from_name(developer or "unknown"),
                    label_from_name(name or side.label))
    target = folder / relative
    make_directory(target)
    now = str(int(time.time()))
    evaluation_id = f"quantcheck/{model_id}/{now}"
    samples_path = target / f"{record_id}{SAMPLES_SUFFIX}"
    rows = 0
    digest = hashlib.sha256()
    with AtomicFile(samples_path) as out:
        for sample in samples:
            line = orjson.dumps(_instance(sample, evaluation_id, model_id)) + b"\n"
            digest.update(line)
            out.write(line)
            rows += 1
    aggregate = _aggregate_record(side, scores, evaluation_id, model_id, now)
    aggregate["detailed_evaluation_results"] = {
        "format": "jsonl", "file_path": (relative / samples_path.name).as_posix(),
        "hash_algorithm": "sha256", "checksum": digest.hexdigest(), "total_rows": rows}
    aggregate_path = target / f"{record_id}.json"
    with AtomicFile(aggregate_path) as out:
        out.write(orjson.dumps(aggregate, option=orjson.OPT_INDENT_2) + b"\n")
    return EeeWritten(aggregate_path, samples_path, rows)


def _aggregate_record(side: EeeSide, scores: list[EeeTaskScore], evaluation_id: str,
                      model_id: str, now: str) -> dict[str, object]:
    return {
        "schema_version": SCHEMA_VERSION, "evaluation_id": evaluation_id,
        "retrieved_timestamp": now,
        "source_metadata": {"source_name": f"quantcheck {__version__}",
                            "source_type": "evaluation_run",
                            "source_organization_name": side.organization,
                            "evaluator_relationship": "other"},
        "eval_library": {"name": side.library, "version": side.library_version},
        "model_info": {"name": side.label, "id": model_id,
                       "additional_details": {"deployment_type": "self_deployed",
                                              "model_availability": "unknown"}},
        "evaluation_results": [_result(score) for score in scores],
    }


def _result(score: EeeTaskScore) -> dict[str, object]:
    share = score.passed / score.checked if score.checked else 0.0
    low, high = _wilson(score.passed, score.checked)
    result: dict[str, object] = {
        "evaluation_result_id": f"{score.task}/{score.metric}",
        "evaluation_name": score.task,
        "source_data": {"dataset_name": score.task, "source_type": "other"},
        "metric_config": {"metric_id": score.metric, "metric_name": score.metric,
                          "metric_unit": "proportion", "lower_is_better": False,
                          "score_type": "continuous", "min_score": 0.0, "max_score": 1.0},
        "score_details": {"score": share, "uncertainty": {
            "num_samples": score.checked,
            "confidence_interval": {"lower": low, "upper": high, "confidence_level": 0.95,
                                    "method": "Wilson score interval"}}},
    }
    if score.few_shot is not None:
        result["generation_config"] = {"additional_details": {
            "num_fewshot": str(score.few_shot)}}
    return result


def _wilson(passed: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    share = passed / n
    denominator = 1 + Z95**2 / n
    centre = (share + Z95**2 / (2 * n)) / denominator
    half = Z95 * math.sqrt(share * (1 - share) / n + Z95**2 / (4 * n**2)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _instance(sample: EeeSample, evaluation_id: str, model_id: str) -> dict[str, object]:
    hashed = orjson.dumps({"raw": sample.raw, "reference": sample.reference},
                          option=orjson.OPT_SORT_KEYS)
    line: dict[str, object] = {
        "schema_version": SCHEMA_VERSION, "evaluation_id": evaluation_id,
        "model_id": model_id, "evaluation_name": sample.task,
        "evaluation_result_id": f"{sample.task}/{sample.metric}",
        "sample_id": sample.sample_id, "sample_hash": hashlib.sha256(hashed).hexdigest(),
        "interaction_type": "single_turn",
        "input": {"raw": sample.raw, "formatted": sample.formatted,
                  "reference": sample.reference},
        "output": {"raw": [sample.output]},
        "answer_attribution": [{"turn_idx": 0, "source": "output.raw",
                                "extracted_value": sample.answer,
                                "extraction_method": sample.extraction,
                                "is_terminal": True}],
        "evaluation": {"score": 1.0 if sample.passed else 0.0, "is_correct": sample.passed},
    }
    if sample.usage:
        line["token_usage"] = {**sample.usage, "total_tokens": sum(sample.usage.values())}
    if sample.metadata:
        line["metadata"] = sample.metadata
    return line
