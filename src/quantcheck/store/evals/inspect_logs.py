"""Inspect AI's eval logs read as eval samples: the `.eval` archive and the `.json` log
(`inspect eval ... --log-format eval|json`; log format `version` 2).

A `.eval` file is a zip archive: `header.json` (the log without its samples: `eval`,
`plan`, `results`, `stats`, `status`), one `samples/ID_epoch_N.json` per sample and
epoch, and `_journal/start.json` (`eval` and `plan`, written first: a log whose eval
never finished has no header, and is read from it). Inspect 0.3.285 compresses the
entries with Zstandard (zip method 93); earlier versions (read here as 0.3.150 writes
them) with deflate. A `.json` log is the same log in one object, its samples under
`samples`.

Read from `eval`: `task`, `task_version`, `task_args` (`fewshot` is the few-shot count
where a task takes one), `model`, `dataset` (`samples`, `sample_ids`, `shuffled`),
`config` (`limit`, `epochs`), `model_generate_config`, `scorers`; from `plan` its
steps and generation config; from `results.scores` each score's `accuracy` (the
harness's own figure); the `packages` version of inspect_ai.

A sample (`id`, `epoch`) becomes a record of prompt TASK/ID, its epoch a repeat: the
request is the messages the model was first sent (the sample's `messages` before the
first assistant message), the text `output.completion`, the tokens
`output.choices[0].logprobs` when the eval asked for them (`--logprobs
--top-logprobs K`), the finish reason the choice's `stop_reason`, an `error` a failed
record. Each scorer's `value` (or each key of a value that is a mapping: `SCORER/KEY`)
is a score, read as Inspect's `value_to_float` reads it: "C" 1, "I" 0, "P" 0.5, "N" 0,
numbers as they are, "yes"/"true" 1, "no"/"false" 0, a number in text as that number,
anything else 0. The verdict is the first scorer (in the results' order) whose every
sample scores 0 or 1; the answer is its `answer`. Content Inspect moved to the
sample's `attachments` (`attachment://HASH`) is read back from there."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..files import UnreadableFile, open_regular
from ..records.run_records import Tokens
from ..redaction import redact
from .eval_records import (
    HARNESS_INSPECT,
    EvalSample,
    EvalSource,
    EvalTask,
    finite,
    list_at,
    log_error,
    mapping_at,
    object_or_empty,
    setting,
    shown,
    verdict_metric,
)
from .inspect_archive import Entries, open_entries

ATTACHMENT = "attachment://"
_STOP_REASONS = {"max_tokens": "length", "model_length": "length", "stop": "stop",
                 "tool_calls": "tool_calls", "content_filter": "content_filter"}


@dataclass
class InspectLog:
    """An Inspect log: `source` complete once opened, `samples()` each sample and
    epoch, in the log's order."""

    path: Path
    source: EvalSource
    entries: Entries
    scores: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)
    verdict: str | None = None

    def samples(self) -> Iterator[EvalSample]:
        header = self.entries.header()
        task = self.source.tasks[0].name
        max_tokens = _max_tokens(header)
        for where, sample in self.entries.samples():
            yield _sample(task, sample, where, self.verdict, max_tokens)


def is_inspect(path: Path) -> bool:
    """An `.eval` archive, or a `.json` file that is an Inspect log (its start names
    `eval` and `version`)."""
    if not path.is_file():
        return False
    if path.suffix == ".eval":
        return True
    return path.suffix == ".json" and _looks_like_log(path)


def _looks_like_log(path: Path) -> bool:
    try:
        with open_regular(path, "log") as handle:
            head = handle.read(4096)
    except UnreadableFile:
        return False
    return head.lstrip().startswith(b"{") and b'"version"' in head and b'"eval"' in head


def open_inspect(path: Path, metric: str | None = None) -> InspectLog:
    """An Inspect log, its samples read once to choose the verdict."""
    entries = open_entries(path)
    header = entries.header()
    where = entries.where("header.json")
    spec = mapping_at(header.get("eval"), where, "eval")
    task_name = str(spec.get("task") or "task")
    log = InspectLog(path, EvalSource(harness=HARNESS_INSPECT,
                                      harness_version=_version(spec),
                                      format=entries.format, path=str(path),
                                      model=redact(str(spec.get("model") or ""))),
                     entries)
    values: dict[str, list[float]] = {}
    order: dict[str, None] = {name: None for name in _scorer_names(header)}
    samples = 0
    for sample_where, sample in entries.samples():
        scores = _scores(sample, sample_where)
        epoch = _epoch(sample, sample_where)
        samples += epoch == 1
        for key, value in scores.items():
            order.setdefault(key, None)
            if epoch == 1:
                values.setdefault(key, []).append(value)
    ranked = [key for key in order if key in values]
    log.verdict = _chosen(path, task_name, metric, values, ranked)
    task = EvalTask(name=task_name, version=shown(spec.get("task_version", 0)),
                    few_shot=_few_shot(spec), filter=None, metric=log.verdict,
                    metrics=ranked, limit=_limit(spec), samples=samples,
                    dataset_samples=_dataset_samples(spec), reported=_reported(header),
                    settings=_settings(header, spec))
    log.source.tasks = [task]
    log.source.notes = _notes(header, task)
    return log


# --- the header ---------------------------------------------------------------------


def _version(spec: dict[str, object]) -> str:
    packages = spec.get("packages")
    version = packages.get("inspect_ai") if isinstance(packages, dict) else None
    return str(version) if version else "unknown"


def _scorer_names(header: dict[str, object]) -> list[str]:
    results = header.get("results")
    scores = results.get("scores") if isinstance(results, dict) else None
    return [str(s.get("name")) for s in scores if isinstance(s, dict) and s.get("name")] \
        if isinstance(scores, list) else []


def _reported(header: dict[str, object]) -> dict[str, float]:
    results = header.get("results")
    scores = results.get("scores") if isinstance(results, dict) else None
    reported: dict[str, float] = {}
    for score in scores if isinstance(scores, list) else []:
        metrics = score.get("metrics") if isinstance(score, dict) else None
        accuracy = metrics.get("accuracy") if isinstance(metrics, dict) else None
        value = accuracy.get("value") if isinstance(accuracy, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and score.get("name"):
            reported[str(score["name"])] = float(value)
    return reported


def _few_shot(spec: dict[str, object]) -> int | None:
    arguments = spec.get("task_args")
    for key in ("fewshot", "num_fewshot", "few_shot"):
        value = arguments.get(key) if isinstance(arguments, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _limit(spec: dict[str, object]) -> float | None:
    config = spec.get("config")
    limit = config.get("limit") if isinstance(config, dict) else None
    return float(limit) if isinstance(limit, int | float) and not isinstance(limit, bool) \
        else None


def _dataset_samples(spec: dict[str, object]) -> int | None:
    dataset = spec.get("dataset")
    count = dataset.get("samples") if isinstance(dataset, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _settings(header: dict[str, object], spec: dict[str, object]) -> dict[str, str]:
    """What two logs of one task must share: its arguments, the dataset's order, the
    epochs and limits, the solvers and the generation config, the scorers."""
    config = spec.get("config") if isinstance(spec.get("config"), dict) else {}
    assert isinstance(config, dict)
    dataset = spec.get("dataset") if isinstance(spec.get("dataset"), dict) else {}
    assert isinstance(dataset, dict)
    plan = header.get("plan") if isinstance(header.get("plan"), dict) else {}
    assert isinstance(plan, dict)
    chosen = {
        "task_args": spec.get("task_args"), "solver": spec.get("solver"),
        "solver_args": spec.get("solver_args"),
        "dataset": {"name": dataset.get("name"), "samples": dataset.get("samples"),
                    "shuffled": dataset.get("shuffled")},
        "sample_order": dataset.get("sample_ids"),
        "epochs": config.get("epochs"), "epochs_reducer": config.get("epochs_reducer"),
        "sample_id": config.get("sample_id"), "message_limit": config.get("message_limit"),
        "token_limit": config.get("token_limit"), "plan": plan.get("steps"),
        "generate_config": {**object_or_empty(spec.get("model_generate_config")),
                            **object_or_empty(plan.get("config"))},
        "scorers": _scorers(spec.get("scorers")),
    }
    if isinstance(config.get("limit"), list):
        chosen["limit_range"] = config.get("limit")
    return {key: setting(value) for key, value in chosen.items() if value not in (None, {}, [])}


def _scorers(value: object) -> list[object] | None:
    return [s.get("name") for s in value if isinstance(s, dict)] \
        if isinstance(value, list) else None


def _max_tokens(header: dict[str, object]) -> int | None:
    spec = object_or_empty(header.get("eval"))
    plan = object_or_empty(header.get("plan"))
    for config in (object_or_empty(spec.get("model_generate_config")),
                   object_or_empty(plan.get("config"))):
        value = config.get("max_tokens")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _notes(header: dict[str, object], task: EvalTask) -> list[str]:
    notes = []
    status = header.get("status")
    if status not in ("success", None):
        notes.append(f"the eval ended with status {shown(status)}: {task.samples} sample(s) "
                     "are in the log")
    if task.metric is None:
        notes.append(f"task {task.name}: no scorer scores every sample 0 or 1 "
                     f"({', '.join(task.metrics) or 'none'}), so no pass/fail is read from "
                     "it: its pairs are triaged by their texts alone")
    return notes


def _chosen(path: Path, task: str, requested: str | None, values: dict[str, list[float]],
            ranked: list[str]) -> str | None:
    if requested is None:
        return verdict_metric(values, ranked)
    if requested not in values:
        raise log_error(str(path), f"task {task} has no scorer {requested}",
                        f"its scorers: {', '.join(ranked) or 'none'}")
    if verdict_metric(values, [requested]) is None:
        raise log_error(str(path), f"scorer {requested} of task {task} scores some samples "
                        "other than 0 or 1: it is no pass/fail verdict",
                        "choose a scorer that is (includes, match, choice)")
    return requested


# --- a sample -----------------------------------------------------------------------


def value_to_float(value: object) -> float:
    """A score's value as Inspect's `value_to_float` reads it (the module docstring)."""
    if value == "C":
        return 1.0
    if value == "P":
        return 0.5
    if value in ("I", "N"):
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        number = float(value)
        return number if number == number and abs(number) != float("inf") else 0.0
    if isinstance(value, str):
        lowered = value.lower()
        if lowered in ("yes", "true"):
            return 1.0
        if lowered in ("no", "false"):
            return 0.0
        try:
            number = float(lowered)
        except ValueError:
            return 0.0
        return number if number == number and abs(number) != float("inf") else 0.0
    return 0.0


def _scores(sample: dict[str, object], where: str) -> dict[str, float]:
    given = sample.get("scores")
    scores: dict[str, float] = {}
    for name, score in mapping_at(given or {}, where, "scores").items():
        value = score.get("value") if isinstance(score, dict) else None
        if isinstance(value, dict):
            for key, part in value.items():
                scores[f"{name}/{key}"] = value_to_float(part)
        elif not isinstance(value, list):
            scores[name] = value_to_float(value)
    return scores


def _epoch(sample: dict[str, object], where: str) -> int:
    epoch = sample.get("epoch", 1)
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
        raise log_error(where, "`epoch` must be a whole number from 1")
    return epoch


def _sample(task: str, sample: dict[str, object], where: str, verdict: str | None,
            max_tokens: int | None) -> EvalSample:
    attachments = object_or_empty(sample.get("attachments"))
    identifier = sample.get("id")
    if isinstance(identifier, bool) or not isinstance(identifier, int | str) or identifier == "":
        raise log_error(where, "`id` must be a sample's id")
    messages = _first_messages(sample, attachments, where)
    request: dict[str, object] = {"messages": messages}
    if max_tokens is not None:
        request["max_tokens"] = max_tokens
    output = object_or_empty(sample.get("output"))
    choice = _first_choice(output)
    found = EvalSample(task=task, sample_id=str(identifier), request=request, api="chat",
                       where=where, repeat=_epoch(sample, where) - 1,
                       text=_resolved(output.get("completion"), attachments) or "",
                       target=_target(sample.get("target"), attachments),
                       scores=_scores(sample, where), tokens=_tokens(choice),
                       finish_reason=_finish(choice), usage=_usage(output),
                       document=_document(sample, attachments))
    error = sample.get("error")
    if error:
        message = object_or_empty(error).get("message") if isinstance(error, dict) else error
        found.error = f"the sample failed in the eval: {shown(message)[:500]}"
    if verdict is not None:
        scorer = verdict.split("/", 1)[0]
        score = object_or_empty(object_or_empty(sample.get("scores")).get(scorer))
        answer = score.get("answer")
        found.answer = _resolved(answer, attachments) if answer is not None else None
    return found


def _resolved(value: object, attachments: dict[str, object]) -> str | None:
    """A text, read back from the sample's attachments when Inspect moved it there."""
    if isinstance(value, str) and value.startswith(ATTACHMENT):
        value = attachments.get(value[len(ATTACHMENT):], value)
    return value if isinstance(value, str) else None if value is None else shown(value)


def _content(value: object, attachments: dict[str, object]) -> str:
    """A message's content as text: its text parts joined."""
    if isinstance(value, list):
        parts = [_resolved(part.get("text"), attachments) or "" for part in value
                 if isinstance(part, dict) and part.get("type") in ("text", None)]
        return "".join(parts)
    return _resolved(value, attachments) or ""


def _first_messages(sample: dict[str, object], attachments: dict[str, object],
                    where: str) -> list[dict[str, object]]:
    """The messages the model was first sent: the sample's messages before its first
    assistant message (its input as a user message when it has none)."""
    given = sample.get("messages")
    messages: list[dict[str, object]] = []
    for message in list_at(given, where, "messages") if given is not None else []:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role") or "user")
        if role == "assistant":
            break
        messages.append({"role": role, "content": _content(message.get("content"),
                                                           attachments)})
    if messages:
        return messages
    given_input = sample.get("input")
    if isinstance(given_input, list):
        return [{"role": str(object_or_empty(m).get("role") or "user"),
                 "content": _content(object_or_empty(m).get("content"), attachments)}
                for m in given_input]
    return [{"role": "user", "content": _resolved(given_input, attachments) or ""}]


def _target(value: object, attachments: dict[str, object]) -> str:
    if isinstance(value, list):
        return " | ".join(_resolved(v, attachments) or "" for v in value)
    return _resolved(value, attachments) or ""


def _first_choice(output: dict[str, object]) -> dict[str, object]:
    choices = output.get("choices")
    return object_or_empty(choices[0]) if isinstance(choices, list) and choices else {}


def _finish(choice: dict[str, object]) -> str | None:
    reason = choice.get("stop_reason")
    return _STOP_REASONS.get(reason, reason) if isinstance(reason, str) else None


def _usage(output: dict[str, object]) -> dict[str, object] | None:
    usage = object_or_empty(output.get("usage"))
    counts = {"prompt_tokens": usage.get("input_tokens"),
              "completion_tokens": usage.get("output_tokens")}
    kept: dict[str, object] = {k: v for k, v in counts.items()
                               if isinstance(v, int) and not isinstance(v, bool)}
    return kept or None


def _tokens(choice: dict[str, object]) -> Tokens | None:
    """The answer's tokens with their top alternatives (highest first), when the eval
    asked for logprobs; None without them, or when they are not numbers."""
    content = object_or_empty(choice.get("logprobs")).get("content")
    if not isinstance(content, list) or not content:
        return None
    tokens = Tokens()
    for given in content:
        position = object_or_empty(given)
        token, logprob = position.get("token"), position.get("logprob")
        if not isinstance(token, str) or not finite(logprob):
            return None
        alternatives = position.get("top_logprobs")
        top = [(t.get("token"), t.get("logprob")) for t in
               (alternatives if isinstance(alternatives, list) else []) if isinstance(t, dict)]
        kept = sorted(((t, float(v)) for t, v in top if isinstance(t, str)
                       and isinstance(v, int | float) and finite(v)),
                      key=lambda pair: -pair[1])
        assert isinstance(logprob, int | float)
        tokens.append(token, min(0.0, float(logprob)), [t for t, _ in kept],
                      [min(0.0, v) for _, v in kept])
    return tokens


def _document(sample: dict[str, object], attachments: dict[str, object]) -> str:
    given = sample.get("input")
    text = _resolved(given, attachments) if isinstance(given, str) else shown(given)
    data = (text or "") + "\0" + _target(sample.get("target"), attachments)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()

