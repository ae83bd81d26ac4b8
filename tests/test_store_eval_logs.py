"""Which harness wrote a log: each reader's form is told apart from the others, from a
run directory and from a texts file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from quantcheck.errors import EvalLogError
from quantcheck.store.evals.eval_logs import EEE, INSPECT, LM_EVAL, log_kind, open_eval_log

from .conftest import FIXTURES

EVALS = FIXTURES / "evals"
INSPECT_DIR = EVALS / "inspect-0.3.150"


@pytest.mark.parametrize(("path", "kind"), [
    (EVALS / "lm-eval-0.4.5", LM_EVAL),
    (EVALS / "lm-eval-0.4.5" / "scripted-model", LM_EVAL),
    (next((EVALS / "lm-eval-0.4.5").rglob("results_*.json")), LM_EVAL),
    (INSPECT_DIR / "default-or-not.eval", INSPECT),
    (INSPECT_DIR / "default-or-not.json", INSPECT),
    (INSPECT_DIR, INSPECT),  # a folder of one .eval archive
    (EVALS / "eee-0.3.0", EEE),
    (next((EVALS / "eee-0.2.0").glob("*-*.json")), EEE),
    (EVALS / "eee-schema-0.3.0" / "eval.schema.json", None),
    (EVALS / "README.md", None),
], ids=lambda value: value if isinstance(value, str | None) else value.name)
def test_each_log_is_told_apart(path: Path, kind: str | None) -> None:
    assert log_kind(path) == kind
    if kind is not None:
        assert open_eval_log(path).source.tasks


def test_a_run_or_a_texts_file_is_no_log(tmp_path: Path) -> None:
    shutil.copytree(EVALS / "lm-eval-0.4.5", tmp_path / "run")
    (tmp_path / "run" / "manifest.json").write_text("{}")
    assert log_kind(tmp_path / "run") is None
    with pytest.raises(EvalLogError, match="a quantcheck run already"):
        open_eval_log(tmp_path / "run")
    (tmp_path / "b.texts.json").write_text(json.dumps(["one", "two"]))
    assert log_kind(tmp_path / "b.texts.json") is None
    with pytest.raises(EvalLogError, match="not an eval log quantcheck reads; give lm_eval's "
                                           "--output_path folder"):
        open_eval_log(tmp_path / "b.texts.json")
