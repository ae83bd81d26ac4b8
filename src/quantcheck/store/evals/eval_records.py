"""What quantcheck keeps of an eval harness's log (lm-evaluation-harness, Inspect AI,
Every Eval Ever): the harness and each task's settings (`EvalSource`, a run's manifest
`evaluation`), and each sample as a reader gives it (`EvalSample`) before it becomes a
run's prompt and record (store/evals/eval_runs.py).

manifest.json's `evaluation`:

    harness          "lm-evaluation-harness", "inspect_ai" or "every_eval_ever"
    harness_version  the version the log names ("unknown" when it names none)
    format           the log format read, in words (its version where it changed)
    path             the log as it was given to `quantcheck import`
    model            the model the log names
    tasks            one EvalTask per task, in the log's order
    notes            what the import noticed (a metric that is not pass/fail, documents
                     that appear twice), each one sentence

An EvalTask: `name`; `version` (the task's own version); `few_shot`; `filter` (the
filter whose answers the metric scored: lm-eval's `strict-match`, ...); `metric` (the
pass/fail metric each sample's verdict is read from, None when no metric of the task
scores every sample 0 or 1); `metrics` (every metric the log holds per sample);
`limit` (a sample limit given to the harness); `samples` (the samples imported);
`dataset_samples` (the task's whole dataset, when the log says); `reported` (the
harness's own figure for each metric over the task); `settings` (whatever else two
logs must share to be paired, by name: generation settings, the prompt template, the
dataset, each as the log gives it); `higher_is_better`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import orjson

from ...errors import EvalLogError
from ..files import UnreadableFile, read_regular
from ..records.run_records import Tokens

HARNESS_LM_EVAL = "lm-evaluation-harness"
HARNESS_INSPECT = "inspect_ai"
HARNESS_EEE = "every_eval_ever"


class EvalTask(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One task of an eval log (see the module docstring)."""

    name: str
    version: str | None = None
    few_shot: int | None = None
    filter: str | None = None
    metric: str | None = None
    metrics: list[str] = []
    limit: float | None = None
    samples: int = 0
    dataset_samples: int | None = None
    reported: dict[str, float] = {}
    settings: dict[str, str] = {}
    higher_is_better: bool = True


class EvalSource(msgspec.Struct, kw_only=True, omit_defaults=True):
    """manifest.json's `evaluation`: the log a run was imported from."""

    harness: str
    harness_version: str = "unknown"
    format: str = ""
    path: str = ""
    model: str = ""
    tasks: list[EvalTask] = []
    notes: list[str] = []

    def task(self, name: str) -> EvalTask | None:
        return next((task for task in self.tasks if task.name == name), None)


@dataclass
class EvalSample:
    """One sample of a log, one epoch of it (`repeat`): the request the model was sent
    (`api` "completions" with a `prompt`, or "chat" with `messages`), its answer, the
    reference answer, the part of the answer the harness scored (`answer`) and every
    score it gave (`scores`, by metric: 1 full credit, 0 none). `where` names the file
    and line (or archive entry) for a message about it."""

    task: str
    sample_id: str
    request: dict[str, object]
    api: str
    where: str
    repeat: int = 0
    text: str | None = None
    target: str = ""
    answer: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    tokens: Tokens | None = None
    finish_reason: str | None = None
    error: str | None = None
    usage: dict[str, object] | None = None
    # the document's own digest where the log gives one (lm-eval's doc_hash)
    document: str | None = None

    @property
    def prompt_id(self) -> str:
        """The sample's prompt id in the run: TASK/SAMPLE_ID."""
        return f"{self.task}/{self.sample_id}"


def verdict_metric(values: dict[str, list[float]], order: list[str]) -> str | None:
    """The first metric of `order` whose every value is 0 or 1 (a pass/fail verdict),
    None when there is none."""
    return next((name for name in order if values.get(name)
                 and all(value in (0.0, 1.0) for value in values[name])), None)


def score_value(value: object) -> float | None:
    """A per-sample score as a number: a finite number as it is, a boolean as 1 or 0;
    anything else None (not a score)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


# --- reading untrusted logs: one clear error naming the file, the place and the field

MAX_LOG_JSON_BYTES = 1 << 30  # a whole-JSON log (Inspect's .json) holds every sample
MAX_LINE_BYTES = 256 << 20  # one line of a samples file


def log_error(where: str, problem: str, fix: str = "") -> EvalLogError:
    """`WHERE: PROBLEM` and, when there is one, the fix on the same line."""
    return EvalLogError(f"{where}: {problem}" + (f"; {fix}" if fix else ""))


def read_log_json(path: Path, limit: int = MAX_LOG_JSON_BYTES) -> object:
    """A JSON file of a log, read whole: a regular file within `limit` bytes."""
    try:
        data = read_regular(path, limit, "log")
    except UnreadableFile as exc:
        raise EvalLogError(str(exc)) from None
    return parse_json(data, str(path))


def parse_json(data: bytes, where: str) -> object:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise log_error(where, f"not valid JSON ({exc})") from None


def mapping_at(value: object, where: str, field: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise log_error(where, f"`{field}` must be an object, not {_kind(value)}")
    return value


def list_at(value: object, where: str, field: str) -> list[object]:
    if not isinstance(value, list):
        raise log_error(where, f"`{field}` must be a list, not {_kind(value)}")
    return value


def text_at(value: object, where: str, field: str) -> str:
    if not isinstance(value, str):
        raise log_error(where, f"`{field}` must be a string, not {_kind(value)}")
    return value


SETTING_SHOWN = 160  # a setting longer than this is kept as its digest


def setting(value: object) -> str:
    """A setting two logs must share, as text to compare and show: its canonical JSON,
    or `sha256:` and the start of its digest when that is long."""
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = str(value)
    if len(text) <= SETTING_SHOWN:
        return text
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def object_or_empty(value: object) -> dict[str, object]:
    """A JSON object as it is; anything else as an empty one (an optional part)."""
    return value if isinstance(value, dict) else {}


def finite(value: object) -> bool:
    """A finite number (not a boolean)."""
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value)


def shown(value: object) -> str:
    """A log's value as a run keeps it in text (a target that is a number, a list)."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        return str(value)


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")
