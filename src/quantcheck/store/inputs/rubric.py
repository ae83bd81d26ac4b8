"""Rubrics: the review question and its labels, loaded and validated from YAML, in time
linear in the file; a rubric holds at most MAX_LABELS labels."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...errors import ConfigFileError
from .yamlfile import read_yaml, reject_unknown, require_bools, require_text

LABEL_KEYS = {"id", "name", "description", "key", "blocking", "automatic", "asks_side",
              "approvable"}
RUBRIC_KEYS = {"name", "question", "labels", "judge"}
RESERVED_KEYS = {"j", "k", "n", "/", "?"}  # the sheet's own shortcuts
MAX_LABELS = 100  # a reviewer picks one at a glance (the default rubric has 5)


@dataclass
class Label:
    """One answer a reviewer can give."""

    id: str
    name: str
    description: str = ""
    key: str | None = None
    blocking: bool = False
    automatic: bool = False
    asks_side: bool = False
    approvable: bool = False  # `quantcheck approve` may store it: no second review


@dataclass
class Rubric:
    """The question every non-identical pair is read against, and its labels."""

    name: str
    question: str
    labels: list[Label] = field(default_factory=list)
    # the judge's factuality classes -> label ids (`compare --judge`; triage/judging.py
    # says which classes there are)
    judge: dict[str, str] = field(default_factory=dict)

    @property
    def blocking(self) -> list[str]:
        return [label.id for label in self.labels if label.blocking]

    @property
    def approvable(self) -> list[str]:
        return [label.id for label in self.labels if label.approvable and not label.blocking]

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "question": self.question,
                "labels": [asdict(label) for label in self.labels]}


def default_rubric_path() -> Path:
    for folder in (Path(__file__).parents[2] / "_rubrics", Path(__file__).parents[4] / "rubrics"):
        if (folder / "default.yaml").is_file():
            return folder / "default.yaml"
    raise ConfigFileError("the default rubric is missing from this installation")


def load_rubric(path: str | Path | None = None) -> Rubric:
    """Load and validate a rubric; errors name the file and the field."""
    path = Path(path) if path else default_rubric_path()
    data = read_yaml(path, "rubric")
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path}: a rubric is a mapping with 'question' and 'labels'")
    reject_unknown(str(path), data, RUBRIC_KEYS)
    require_text(str(path), data, ["question"])
    question = str(data["question"])
    entries = data.get("labels")
    if not isinstance(entries, list) or not entries:
        raise ConfigFileError(f"{path}: field 'labels': required, a non-empty list")
    if len(entries) > MAX_LABELS:
        raise ConfigFileError(f"{path}: field 'labels': {len(entries):,} labels; a rubric "
                              f"holds at most {MAX_LABELS} (a reviewer picks one at a "
                              "glance): merge the labels that mean the same")
    labels = [_label(path, n, entry) for n, entry in enumerate(entries, 1)]
    _check_unique(path, labels)
    return Rubric(name=str(data.get("name") or path.stem), question=question.strip(),
                  labels=labels, judge=_judge_mapping(path, data.get("judge"), labels))


def _judge_mapping(path: Path, mapping: object, labels: list[Label]) -> dict[str, str]:
    """`judge:`, each of the judge's classes -> the id of a label a reviewer can give."""
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise ConfigFileError(f"{path}: field 'judge': a mapping of the judge's class to a "
                              "label id, e.g. contradiction: factual_flip")
    askable = {label.id: None for label in labels if not label.automatic}
    chosen = {}
    for judge_class, label in mapping.items():
        if not isinstance(judge_class, str) or not isinstance(label, str) or label not in askable:
            raise ConfigFileError(f"{path}: field 'judge': {judge_class!r}: {label!r} is not a "
                                  f"label a reviewer can give ({', '.join(askable)})")
        chosen[judge_class] = label
    return chosen


def _label(path: Path, position: int, entry: object) -> Label:
    where = f"{path}: labels[{position}]"
    if not isinstance(entry, dict):
        raise ConfigFileError(f"{where}: each label is a mapping with 'id' and 'name'")
    reject_unknown(where, entry, LABEL_KEYS)
    require_text(where, entry, ["id", "name"])
    key = entry.get("key")
    if key is not None and (not isinstance(key, str) or len(key) != 1 or key in RESERVED_KEYS):
        raise ConfigFileError(f"{where}: field 'key': one character, not one of "
                              f"{' '.join(sorted(RESERVED_KEYS))}")
    require_bools(where, entry, ["blocking", "automatic", "asks_side", "approvable"])
    return Label(**{k: entry[k] for k in entry})


def _check_unique(path: Path, labels: list[Label]) -> None:
    for attribute in ("id", "key"):
        counts = Counter(getattr(label, attribute) for label in labels
                         if getattr(label, attribute))
        duplicates = {value for value, count in counts.items() if count > 1}
        if duplicates:
            raise ConfigFileError(f"{path}: labels: {attribute} {sorted(duplicates)[0]!r} is "
                                  "used twice")
