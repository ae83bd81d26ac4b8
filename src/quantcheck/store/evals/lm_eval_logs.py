"""lm-evaluation-harness's output read as eval samples: the results JSON and, beside
it, one samples file per task (`lm_eval ... --output_path OUT --log_samples`).

The layout (0.4.3 and later): OUT/MODEL/results_DATE.json and, for each task,
OUT/MODEL/samples_TASK_DATE.jsonl, DATE the same in every name. `quantcheck import`
takes the results file, or a folder that holds exactly one (OUT or OUT/MODEL).

Read from the results JSON: `configs` (each task's configuration: which tasks there
are), `versions`, `n-shot`, `n-samples` (`original`: the dataset's size), `results`
(each task's own figures, keyed `METRIC,FILTER`), `higher_is_better`, `config.limit`,
`config.gen_kwargs`, `lm_eval_version` (0.4.8 and later: older logs say "unknown"),
`model_name` (else `config.model_args`), `fewshot_as_multiturn`, `chat_template_sha`,
`system_instruction_sha`.

A samples line, one per document and filter:

    doc_id          the document's index in the task's dataset: the sample id
    arguments       {"gen_args_N": {"arg_0": CONTEXT, "arg_1": ...}}, one per request
    resps           each request's responses: [[TEXT]] for a generating task,
                    [[[LOGLIKELIHOOD, IS_GREEDY]]] per choice for multiple choice
    filtered_resps  what the filter kept: what the metrics scored
    filter, metrics the filter's name and the metrics' (0.4.7 and later)
    METRIC          each metric's score of the document (1 or 0 for exact_match, acc)
    target, doc_hash (0.4.3 and later; the document's digest), doc

Before 0.4.7 a line names neither its filter nor its metrics (read here as lm-eval
0.4.5 writes them): a task's lines come filter by filter, every document once per
filter, in its configuration's `filter_list` order, and its metrics are the ones its
results name.

What a sample becomes:
- a generating task (`generate_until`): the prompt is arg_0 (a chat's messages when it
  is their JSON: `--apply_chat_template`), the text the first response, the answer
  the filtered response;
- multiple choice (`multiple_choice`: one loglikelihood request per choice): the prompt
  is the context, the text the chosen continuation (the highest log-likelihood; per
  character for `acc_norm`, as lm-eval chooses), and the tokens one position whose
  alternatives are the choices, their log-likelihoods normalized over the choices:
  the margin by which a flip was decided;
- any other loglikelihood task: the text is the continuation scored, the tokens its
  log-likelihood.
Every metric of a document (each filter's) becomes a score `METRIC,FILTER`; the
verdict is the first metric whose every score is 0 or 1 (or the one asked for), in the
configuration's order (its first filter, its first metric: `exact_match,strict-match`
for gsm8k), and the sample's answer is that metric's filter's."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import EvalLogError
from ..files import UnreadableFile, bounded_lines, open_regular
from ..redaction import redact
from .eval_records import (
    HARNESS_LM_EVAL,
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
from .lm_eval_samples import SampleShape, sample_of

RESULTS_PREFIX = "results_"
MAX_RESULTS_BYTES = 256 << 20
# The results' per-task keys that are not metrics.
_NOT_METRICS = {"alias", "name", "sample_len", "samples", " ", ""}
# Configuration keys that are not settings two logs must share: the model's own
# (metadata holds model_args since 0.4.5), those compared on their own, and where the
# data lives (two machines keep it in two places; the documents themselves are
# compared, by the prompts they make).
_NOT_SETTINGS = {"metadata", "task", "task_alias", "num_fewshot", "dataset_path",
                 "dataset_kwargs"}


@dataclass
class _TaskFile:
    """One task's samples file and what its first pass found."""

    record: EvalTask
    path: Path
    output_type: str
    filters: list[str]  # in the configuration's order: the lines' order before 0.4.7
    delimiter: str
    metric_names: list[str]  # a line's metrics when it does not name them
    scores: dict[str, dict[str, float]] = field(default_factory=dict)  # doc -> scores
    filter: str = "none"  # the filter whose lines become the samples
    names_filters: bool = False  # its lines name their filter (0.4.7 and later)


@dataclass
class LmEvalLog:
    """A results file and its tasks' samples files; `source` is complete when it is
    opened (every samples file read once), `samples()` reads them again."""

    results_path: Path
    source: EvalSource
    tasks: list[_TaskFile]

    def samples(self) -> Iterator[EvalSample]:
        for task in self.tasks:
            yield from _samples(task)


def is_lm_eval(path: Path) -> bool:
    """Whether `path` is an lm-eval results file, or a folder holding one (in it or in
    a folder of it: OUT or OUT/MODEL)."""
    if path.is_file():
        return path.name.startswith(RESULTS_PREFIX) and path.suffix == ".json"
    return bool(_results_files(path)) if path.is_dir() else False


def open_lm_eval(path: Path, metric: str | None = None) -> LmEvalLog:
    """An lm-eval log: its results file (given, or the one in the folder `path`) and
    each task's samples file beside it, read once to choose each task's verdict."""
    results_path = _results_file(path)
    results = mapping_at(read_log_json(results_path, MAX_RESULTS_BYTES), str(results_path),
                         "results file")
    configs = mapping_at(results.get("configs"), str(results_path), "configs")
    if not configs:
        raise log_error(str(results_path), "`configs` names no task",
                        "give the results file of an lm_eval run")
    date = results_path.name[len(RESULTS_PREFIX):-len(".json")]
    source = EvalSource(harness=HARNESS_LM_EVAL,
                        harness_version=str(results.get("lm_eval_version") or "unknown"),
                        path=str(path), model=_model(results))
    tasks = [_task(results, results_path, name, date, metric) for name in configs]
    source.tasks = [task.record for task in tasks]
    source.format = ("lm-eval samples naming their filter (0.4.7 and later)"
                     if any(task.names_filters for task in tasks)
                     else "lm-eval samples without filter names (0.4.3 to 0.4.6)")
    source.notes = [note for task in tasks for note in _notes(task)]
    return LmEvalLog(results_path, source, tasks)


# --- the results file -------------------------------------------------------------


def _results_files(folder: Path) -> list[Path]:
    try:
        found = [p for p in folder.glob(f"{RESULTS_PREFIX}*.json") if p.is_file()]
        found += [p for p in folder.glob(f"*/{RESULTS_PREFIX}*.json") if p.is_file()]
    except OSError:
        return []
    return sorted(found)


def _results_file(path: Path) -> Path:
    if not path.is_dir():
        return path
    found = _results_files(path)
    if not found:
        raise log_error(str(path), f"no {RESULTS_PREFIX}*.json in it or in a folder of it",
                        "give lm_eval's --output_path folder, or its results file")
    if len(found) > 1:
        shown_files = ", ".join(str(p) for p in found[:5])
        raise log_error(str(path), f"{len(found)} results files ({shown_files})",
                        "give the results file of the run to import")
    return found[0]


def _model(results: dict[str, object]) -> str:
    name = results.get("model_name")
    if isinstance(name, str) and name:
        return redact(name)
    config = results.get("config")
    arguments = config.get("model_args") if isinstance(config, dict) else None
    if isinstance(arguments, dict):
        named = arguments.get("model") or arguments.get("pretrained")
        return redact(str(named)) if named else ""
    if isinstance(arguments, str):
        for part in arguments.split(","):
            key, _, value = part.partition("=")
            if key.strip() in ("model", "pretrained"):
                return redact(value.strip())
    return ""


def _task(results: dict[str, object], results_path: Path, name: str, date: str,
          metric: str | None) -> _TaskFile:
    where = f"{results_path}: configs.{name}"
    config = mapping_at(mapping_at(results.get("configs"), where, "configs").get(name),
                        where, name)
    record = EvalTask(name=name, version=_version(results, name, config),
                      few_shot=_few_shot(results, name), limit=_limit(results),
                      dataset_samples=_dataset_samples(results, name),
                      reported=_reported(results, name),
                      settings=_settings(results, config))
    path = results_path.parent / f"samples_{name}_{date}.jsonl"
    task = _TaskFile(record=record, path=path,
                     output_type=str(config.get("output_type") or "generate_until"),
                     filters=_filters(config),
                     delimiter=str(config.get("target_delimiter", " ")),
                     metric_names=_metric_names(config, record.reported))
    _scan(task, metric)
    record.higher_is_better = _higher_is_better(results, name, record.metric)
    return task


def _section(results: dict[str, object], key: str) -> dict[str, object]:
    return object_or_empty(results.get(key))


def _version(results: dict[str, object], name: str, config: dict[str, object]) -> str | None:
    version = _section(results, "versions").get(name)
    if version is None:
        metadata = config.get("metadata")
        version = metadata.get("version") if isinstance(metadata, dict) else None
    return None if version is None else shown(version)


def _few_shot(results: dict[str, object], name: str) -> int | None:
    shots = _section(results, "n-shot").get(name)
    return shots if isinstance(shots, int) and not isinstance(shots, bool) else None


def _limit(results: dict[str, object]) -> float | None:
    limit = _section(results, "config").get("limit")
    return float(limit) if isinstance(limit, int | float) and not isinstance(limit, bool) \
        else None


def _dataset_samples(results: dict[str, object], name: str) -> int | None:
    counts = _section(results, "n-samples").get(name)
    original = counts.get("original") if isinstance(counts, dict) else None
    return original if isinstance(original, int) and not isinstance(original, bool) else None


def _reported(results: dict[str, object], name: str) -> dict[str, float]:
    figures = _section(results, "results").get(name)
    if not isinstance(figures, dict):
        return {}
    reported = {}
    for key, value in figures.items():
        metric = key.split(",", 1)[0]
        number = score_value(value)
        if metric not in _NOT_METRICS and not metric.endswith("_stderr") \
                and number is not None:
            reported[key] = number
    return reported


def _metric_names(config: dict[str, object], reported: dict[str, float]) -> list[str]:
    """The task's metrics in its configuration's order (`metric_list`), then any other
    its results name."""
    listed = config.get("metric_list")
    names = [str(m.get("metric")) for m in listed if isinstance(m, dict) and m.get("metric")] \
        if isinstance(listed, list) else []
    return list(dict.fromkeys([*names, *(key.split(",", 1)[0] for key in reported)]))


def _settings(results: dict[str, object], config: dict[str, object]) -> dict[str, str]:
    settings = {key: setting(value) for key, value in config.items()
                if key not in _NOT_SETTINGS}
    run = _section(results, "config")
    if run.get("gen_kwargs"):
        settings["gen_kwargs"] = setting(run.get("gen_kwargs"))
    for key in ("fewshot_as_multiturn", "chat_template_sha", "system_instruction_sha"):
        if results.get(key) is not None:
            settings[key] = setting(results.get(key))
    return settings


def _filters(config: dict[str, object]) -> list[str]:
    listed = config.get("filter_list")
    names = [str(f.get("name")) for f in listed if isinstance(f, dict) and f.get("name")] \
        if isinstance(listed, list) else []
    return names or ["none"]


def _higher_is_better(results: dict[str, object], name: str, metric: str | None) -> bool:
    flags = _section(results, "higher_is_better").get(name)
    if metric is None or not isinstance(flags, dict):
        return True
    flag = flags.get(metric.split(",", 1)[0])
    return flag if isinstance(flag, bool) else True


# --- the samples files --------------------------------------------------------------


def _lines(task: _TaskFile) -> Iterator[tuple[str, dict[str, object], str]]:
    """(where, line, filter) for each line of a task's samples file: a line's filter as
    it names it, else by its place (the document's n-th line is the n-th filter's)."""
    seen: Counter[str] = Counter()
    for number, raw in _raw_lines(task.path):
        where = f"{task.path}:{number}"
        line = mapping_at(parse_json(raw, where), where, "line")
        doc = _doc_id(line.get("doc_id"), where)
        named = line.get("filter")
        if named is None:
            n = seen[doc]
            if n >= len(task.filters):
                raise log_error(where, f"document {doc} appears {n + 1} times, more than the "
                                f"task's {len(task.filters)} filter(s)",
                                "a samples file lists each document once per filter")
            named = task.filters[n]
        seen[doc] += 1
        yield where, line, text_at(named, where, "filter")


def _raw_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    try:
        handle = open_regular(path, "samples file")
    except UnreadableFile as exc:
        if not os.path.lexists(path):
            raise log_error(str(path), "missing (the task's samples)",
                            "run lm_eval with --log_samples, and keep the samples files "
                            "beside the results file") from None
        raise EvalLogError(str(exc)) from None
    with handle:
        try:
            for number, raw in bounded_lines(handle, path, MAX_LINE_BYTES, "samples file"):
                if raw.strip():
                    yield number, raw
        except UnreadableFile as exc:  # a line past the bound, a read that failed
            raise EvalLogError(str(exc)) from None


def _doc_id(value: object, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str) or value == "":
        raise log_error(where, "`doc_id` must be a document's index or id")
    return str(value)


def _scan(task: _TaskFile, requested: str | None) -> None:
    """The first pass: every document's scores, duplicates refused, the verdict chosen,
    the samples counted."""
    values: dict[str, list[float]] = {}
    places: dict[tuple[str, str], str] = {}
    order: dict[str, None] = {}
    for where, line, filter_name in _lines(task):
        doc = _doc_id(line.get("doc_id"), where)
        task.names_filters = task.names_filters or "filter" in line
        if (doc, filter_name) in places:
            raise log_error(where, f"document {doc} of task {task.record.name} appears twice "
                            f"for filter {filter_name} (first at "
                            f"{places[doc, filter_name].rsplit(':', 1)[-1]})",
                            "give the samples file lm_eval wrote, unedited")
        places[doc, filter_name] = where
        scores = task.scores.setdefault(doc, {})
        for name in _line_metrics(line, task.metric_names, where):
            number = score_value(line.get(name))
            if number is not None:
                key = f"{name},{filter_name}"
                scores[key] = number
                values.setdefault(key, []).append(number)
                order[key] = None
    ranked = sorted(order, key=lambda key: _rank(task, key))
    task.record.metrics = ranked
    task.record.metric = _chosen(task, requested, values, ranked)
    chosen = task.record.metric or (ranked[0] if ranked else None)
    task.filter = chosen.split(",", 1)[1] if chosen and "," in chosen else task.filters[0]
    task.record.filter = task.filter
    task.record.samples = sum(1 for _, f in places if f == task.filter)


def _rank(task: _TaskFile, key: str) -> tuple[int, int]:
    """A metric's place: its filter's in the configuration, then the metric's."""
    metric, _, filter_name = key.partition(",")
    places = len(task.filters) + len(task.metric_names)
    return (task.filters.index(filter_name) if filter_name in task.filters else places,
            task.metric_names.index(metric) if metric in task.metric_names else places)


def _line_metrics(line: dict[str, object], names: list[str], where: str) -> list[str]:
    listed = line.get("metrics")
    if listed is None:
        return names
    return [text_at(name, where, "metrics") for name in list_at(listed, where, "metrics")]


def _chosen(task: _TaskFile, requested: str | None, values: dict[str, list[float]],
            ranked: list[str]) -> str | None:
    if requested is None:
        return verdict_metric(values, ranked)
    matching = [key for key in ranked if key == requested or key.split(",", 1)[0] == requested]
    if not matching:
        raise log_error(str(task.path), f"task {task.record.name} has no metric {requested}",
                        f"its metrics: {', '.join(ranked) or 'none'}")
    if verdict_metric(values, matching[:1]) is None:
        raise log_error(str(task.path), f"{matching[0]} of task {task.record.name} scores "
                        "some samples other than 0 or 1: it is no pass/fail verdict",
                        "choose a metric that is (exact_match, acc)")
    return matching[0]


def _notes(task: _TaskFile) -> list[str]:
    name = task.record.name
    if task.record.metric is None:
        return [f"task {name}: no metric scores every sample 0 or 1 "
                f"({', '.join(task.record.metrics) or 'none'}), so no pass/fail is read "
                "from it: its pairs are triaged by their texts alone"]
    return []


def _samples(task: _TaskFile) -> Iterator[EvalSample]:
    """The second pass: the chosen filter's lines, each a sample with every score of
    its document."""
    for where, line, filter_name in _lines(task):
        if filter_name != task.filter:
            continue
        doc = _doc_id(line.get("doc_id"), where)
        sample = sample_of(SampleShape(task.record.name, task.output_type, task.delimiter,
                                       task.record.metric), line, where, doc)
        sample.scores = task.scores.get(doc, {})
        yield sample
