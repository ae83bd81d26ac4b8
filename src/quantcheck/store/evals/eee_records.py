"""Every Eval Ever (EEE) records, read here and written by store/evals/eee_export.py: an
aggregate JSON (`UUID.json`, schema `eval.schema.json`) and its per-sample file
(`UUID_samples.jsonl`, schema `instance_level_eval.schema.json`), as
evaleval/every_eval_ever defines them.

Written: schema version 0.3.0 (every_eval_ever 0.2.3rc1, whose instance schema reads
as 0.2.1 to 0.2.3 did); read: 0.3.0 and 0.2.x, including 0.2.0 (before `eval_library`,
`evaluation_result_id` and `messages`, then named `interactions`).

The aggregate, as read and written here:
    schema_version, evaluation_id, retrieved_timestamp (Unix seconds, as text),
    source_metadata {source_name, source_type "evaluation_run",
                     source_organization_name, evaluator_relationship},
    eval_library {name, version},
    model_info {name, id, additional_details {deployment_type, model_availability}},
    evaluation_results [{evaluation_result_id, evaluation_name, source_data,
                         metric_config {metric_id, metric_name, lower_is_better,
                                        score_type "continuous", min_score 0,
                                        max_score 1, metric_unit "proportion"},
                         score_details {score, uncertainty {num_samples,
                                        confidence_interval (Wilson, 95%)}},
                         generation_config {additional_details {num_fewshot}}}],
    detailed_evaluation_results {format "jsonl", file_path
        "data/SOURCE/DEVELOPER/MODEL/UUID_samples.jsonl", hash_algorithm "sha256",
        checksum, total_rows}
A per-sample line:
    schema_version, evaluation_id, model_id, evaluation_name, evaluation_result_id,
    sample_id, sample_hash (sha256 of the input and the reference), interaction_type
    "single_turn", input {raw, formatted, reference}, output {raw}, answer_attribution
    [{turn_idx 0, source "output.raw", extracted_value, extraction_method,
    is_terminal}], evaluation {score, is_correct}, token_usage, error, metadata

Read as eval samples: a task per `evaluation_name`; a sample per line (its `sample_id`),
the prompt `input.formatted` (else `input.raw`), the text `output.raw[0]` (a
multi-turn sample's last assistant message), the answer the last
`answer_attribution`'s `extracted_value`, the target `input.reference` joined; its
scores `evaluation.score` under the result's metric id (`metric_config.metric_id`,
else its `metric_name`, else `score`) and `is_correct` (1 or 0): the verdict is the
metric when every sample scores 0 or 1, else `is_correct`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import EvalLogError
from ..files import UnreadableFile, bounded_lines, open_regular
from ..redaction import redact
from .eval_records import (
    HARNESS_EEE,
    MAX_LINE_BYTES,
    EvalSample,
    EvalSource,
    EvalTask,
    list_at,
    log_error,
    mapping_at,
    object_or_empty,
    parse_json,
    read_log_json,
    score_value,
    setting,
    shown,
    text_at,
    verdict_metric,
)

SCHEMA_VERSION = "0.3.0"
SAMPLES_SUFFIX = "_samples.jsonl"
IS_CORRECT = "is_correct"


# --- reading ------------------------------------------------------------------------


@dataclass
class EeeLog:
    """An EEE aggregate and its per-sample file; `source` complete once opened."""

    path: Path
    samples_path: Path
    source: EvalSource
    metrics: dict[str, str] = field(default_factory=dict)  # task -> its first metric key
    result_metrics: dict[str, str] = field(default_factory=dict)  # result id -> metric key
    # each sample's scores, every result's line of it merged
    merged: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)

    def samples(self) -> Iterator[EvalSample]:
        """One sample per task and id (its first line), with the scores of all its lines
        (a line per aggregate result, as the schema asks when a sample counts in several)."""
        yielded: set[tuple[str, str]] = set()
        for where, line in _lines(self.samples_path):
            sample = _sample(line, where, self)
            key = (sample.task, sample.sample_id)
            if key not in yielded:
                yielded.add(key)
                sample.scores = self.merged.get(key, sample.scores)
                yield sample


def is_eee(path: Path) -> bool:
    """An aggregate JSON beside its `_samples.jsonl`, or a folder holding exactly one."""
    return _aggregate(path) is not None


def _aggregate(path: Path) -> Path | None:
    if path.is_file():
        return path if path.suffix == ".json" and _samples_beside(path).exists() else None
    if not path.is_dir():
        return None
    try:
        found = [p for p in path.glob("*.json") if _samples_beside(p).exists()]
    except OSError:
        return None
    return found[0] if len(found) == 1 else None


def _samples_beside(aggregate: Path) -> Path:
    return aggregate.with_name(aggregate.stem + SAMPLES_SUFFIX)


def open_eee(path: Path, metric: str | None = None) -> EeeLog:
    """An EEE record: the aggregate (given, or the one in the folder) and its samples
    file, read once to choose each task's verdict."""
    aggregate = _aggregate(path)
    if aggregate is None:
        raise log_error(str(path), f"no EEE aggregate JSON with its {SAMPLES_SUFFIX} beside it",
                        "give the UUID.json whose UUID_samples.jsonl is in the same folder")
    where = str(aggregate)
    record = mapping_at(read_log_json(aggregate), where, "record")
    version = text_at(record.get("schema_version"), where, "schema_version")
    library = record.get("eval_library")
    library_name = str(library.get("name")) if isinstance(library, dict) else "unknown"
    library_version = str(library.get("version")) if isinstance(library, dict) else "unknown"
    model = mapping_at(record.get("model_info"), where, "model_info")
    source = EvalSource(harness=HARNESS_EEE, harness_version=version,
                        format=f"Every Eval Ever {version} (from {library_name} "
                               f"{library_version})",
                        path=str(path), model=redact(str(model.get("id") or model.get("name")
                                                          or "")))
    results = list_at(record.get("evaluation_results"), where, "evaluation_results")
    log = EeeLog(aggregate, _samples_beside(aggregate), source)
    tasks = _tasks(results, where, log)
    _scan(log, tasks, metric)
    source.tasks = list(tasks.values())
    source.notes = [f"task {t.name}: no metric scores every sample 0 or 1, so no pass/fail "
                    "is read from it" for t in tasks.values() if t.metric is None]
    return log


def _tasks(results: list[object], where: str, log: EeeLog) -> dict[str, EvalTask]:
    tasks: dict[str, EvalTask] = {}
    for n, given in enumerate(results):
        at = f"{where}: evaluation_results[{n}]"
        result = mapping_at(given, at, "result")
        name = text_at(result.get("evaluation_name"), at, "evaluation_name")
        config = result.get("metric_config")
        config = config if isinstance(config, dict) else {}
        key = str(config.get("metric_id") or config.get("metric_name") or "score")
        task = tasks.setdefault(name, EvalTask(name=name))
        log.metrics.setdefault(name, key)
        if isinstance(result.get("evaluation_result_id"), str):
            log.result_metrics[str(result["evaluation_result_id"])] = key
        score = score_value(object_or_empty(result.get("score_details")).get("score"))
        if score is not None:
            task.reported[key] = score
        task.higher_is_better = not bool(config.get("lower_is_better", False))
        generation = object_or_empty(result.get("generation_config"))
        shots = object_or_empty(generation.get("additional_details")).get("num_fewshot")
        if isinstance(shots, str) and shots.isdigit():
            task.few_shot = int(shots)
        elif isinstance(shots, int) and not isinstance(shots, bool):  # 0.2.0: a number
            task.few_shot = shots
        task.settings.update({f"{key}.metric_config": setting(config),
                              "source_data": setting(result.get("source_data")),
                              "generation_config": setting(generation)})
    return tasks


def _scan(log: EeeLog, tasks: dict[str, EvalTask], requested: str | None) -> None:
    places: dict[tuple[str, str, str], str] = {}
    for where, line in _lines(log.samples_path):
        sample = _sample(line, where, log)
        if sample.task not in tasks:
            raise log_error(where, f"`evaluation_name` {sample.task!r} names no result of "
                            f"the aggregate {log.path.name}")
        metric = _metric_of(line, sample.task, log)
        place = (sample.task, sample.sample_id, metric)
        if place in places:
            raise log_error(where, f"sample {sample.sample_id} of {sample.task} ({metric}) "
                            f"appears twice (first at {places[place].rsplit(':', 1)[-1]})",
                            "give the records as they were written, unedited")
        places[place] = where
        scores = log.merged.setdefault((sample.task, sample.sample_id), {})
        for key, value in sample.scores.items():
            scores.setdefault(key, value)
    values: dict[str, dict[str, list[float]]] = {}
    for (task_name, _), scores in log.merged.items():
        tasks[task_name].samples += 1
        for key, value in scores.items():
            values.setdefault(task_name, {}).setdefault(key, []).append(value)
    for name, task in tasks.items():
        found = values.get(name, {})
        task.metrics = list(found)
        order = [log.metrics[name], IS_CORRECT] if requested is None else [requested]
        task.metric = verdict_metric(found, order)
        if requested is not None and task.metric is None:
            raise log_error(str(log.samples_path), f"task {name} has no pass/fail metric "
                            f"{requested}", f"its metrics: {', '.join(found) or 'none'}")


def _lines(path: Path) -> Iterator[tuple[str, dict[str, object]]]:
    try:
        handle = open_regular(path, "samples file")
    except UnreadableFile as exc:
        raise EvalLogError(str(exc)) from None
    with handle:
        try:
            for number, raw in bounded_lines(handle, path, MAX_LINE_BYTES, "samples file"):
                if raw.strip():
                    where = f"{path}:{number}"
                    yield where, mapping_at(parse_json(raw, where), where, "line")
        except UnreadableFile as exc:  # a line past the bound, a read that failed
            raise EvalLogError(str(exc)) from None


def _metric_of(line: dict[str, object], task: str, log: EeeLog) -> str:
    """The metric a line's score is: its result's (by `evaluation_result_id`, 0.2.1 and
    later), else its task's first."""
    result = line.get("evaluation_result_id")
    if isinstance(result, str) and result in log.result_metrics:
        return log.result_metrics[result]
    return log.metrics.get(task, "score")


def _sample(line: dict[str, object], where: str, log: EeeLog) -> EvalSample:
    task = text_at(line.get("evaluation_name"), where, "evaluation_name")
    identifier = line.get("sample_id")
    if not isinstance(identifier, str | int) or isinstance(identifier, bool) or identifier == "":
        raise log_error(where, "`sample_id` must be a sample's id")
    given = mapping_at(line.get("input"), where, "input")
    prompt = given.get("formatted") or given.get("raw")
    reference = given.get("reference")
    evaluation = mapping_at(line.get("evaluation"), where, "evaluation")
    scores: dict[str, float] = {}
    score = score_value(evaluation.get("score"))
    if score is not None:
        scores[_metric_of(line, task, log)] = score
    correct = evaluation.get(IS_CORRECT)
    if isinstance(correct, bool):
        scores[IS_CORRECT] = 1.0 if correct else 0.0
    usage = object_or_empty(line.get("token_usage"))
    error = line.get("error")
    return EvalSample(
        task=task, sample_id=str(identifier), where=where, api="completions",
        request={"prompt": prompt if isinstance(prompt, str) else shown(prompt)},
        text=_output(line), target=" | ".join(map(shown, reference))
        if isinstance(reference, list) else shown(reference or ""),
        answer=_answer(line), scores=scores,
        usage={k: v for k, v in (("prompt_tokens", usage.get("input_tokens")),
                                 ("completion_tokens", usage.get("output_tokens")))
               if isinstance(v, int)} or None,
        error=f"the sample failed in the eval: {shown(error)[:500]}" if error else None,
        document=_text_or_none(line.get("sample_hash")))


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _output(line: dict[str, object]) -> str:
    output = object_or_empty(line.get("output")).get("raw")
    if isinstance(output, list) and output:
        return shown(output[0])
    if isinstance(output, str):  # 0.2.0 wrote one string
        return output
    turns = line.get("messages", line.get("interactions"))  # `interactions` before 0.2.1
    for turn in reversed(turns if isinstance(turns, list) else []):
        if isinstance(turn, dict) and turn.get("role") == "assistant":
            return shown(turn.get("content") or "")
    return ""


def _answer(line: dict[str, object]) -> str | None:
    attributions = line.get("answer_attribution")
    if isinstance(attributions, list) and attributions and isinstance(attributions[-1], dict):
        value = attributions[-1].get("extracted_value")
        return None if value is None else shown(value)
    return None
