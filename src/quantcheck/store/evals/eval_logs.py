"""Which eval harness wrote a log, and its reader: lm-evaluation-harness
(store/evals/lm_eval_logs.py), Inspect AI (store/evals/inspect_logs.py), Every Eval Ever
(store/evals/eee_records.py). A path is a log when it is one of:

- lm-eval: a `results_*.json` file, or a folder holding exactly one (in it or in a
  folder of it: `--output_path OUT` or OUT/MODEL), its samples files beside it;
- Inspect: an `.eval` archive, an Inspect `.json` log, or a folder holding exactly
  one `.eval` file;
- EEE: an aggregate `UUID.json` with `UUID_samples.jsonl` beside it, or a folder
  holding exactly one such pair.

A quantcheck run directory (it has manifest.json) is never a log."""

from __future__ import annotations

from pathlib import Path

from ...errors import EvalLogError
from ..folders.run_dir import MANIFEST
from .eee_records import is_eee, open_eee
from .eval_runs import EvalLog
from .inspect_logs import is_inspect, open_inspect
from .lm_eval_logs import is_lm_eval, open_lm_eval

LM_EVAL, INSPECT, EEE = "lm-eval", "inspect", "eee"
KINDS = (LM_EVAL, INSPECT, EEE)


def log_kind(path: Path) -> str | None:
    """The harness whose log `path` is, or None (a run, a texts file, anything else)."""
    try:
        if path.is_dir() and (path / MANIFEST).exists():
            return None
        if is_lm_eval(path):
            return LM_EVAL
        if is_inspect(path) or (path.is_dir() and _one_eval_archive(path) is not None):
            return INSPECT
        if is_eee(path):
            return EEE
    except OSError:
        return None
    return None


def _one_eval_archive(folder: Path) -> Path | None:
    found = sorted(p for p in folder.glob("*.eval") if p.is_file())
    return found[0] if len(found) == 1 else None


def open_eval_log(path: Path, metric: str | None = None) -> EvalLog:
    """The log at `path`, read by its harness's reader (`metric`: the verdict metric
    to read, instead of the first pass/fail one); an EvalLogError when it is none."""
    kind = log_kind(path)
    if kind == LM_EVAL:
        return open_lm_eval(path, metric)
    if kind == INSPECT:
        archive = _one_eval_archive(path) if path.is_dir() else path
        assert archive is not None
        return open_inspect(archive, metric)
    if kind == EEE:
        return open_eee(path, metric)
    if path.is_dir() and (path / MANIFEST).exists():
        raise EvalLogError(f"{path}: a quantcheck run already (it has {MANIFEST}); compare "
                           "it as it is")
    raise EvalLogError(f"{path}: not an eval log quantcheck reads; give lm_eval's "
                       "--output_path folder or results_*.json, an Inspect .eval or .json "
                       "log, or an Every Eval Ever UUID.json beside its UUID_samples.jsonl")
