"""Approved known differences: reviewed, non-blocking pairs that need no second review.

An approval is keyed by the prompt hash and both texts' hashes, so it applies again
only when exactly the same pair recurs; any new difference still needs a review.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd

from .errors import ConfigFileError
from .files import make_directory
from .runstore import frame_rows, read_json, write_json_atomic
from .sides import text_hash

APPROVALS_FORMAT = "quantcheck-approvals/1"
APPROVALS = "approvals.json"


def approval_key(prompt_hash: str, a_text: str, b_text: str) -> str:
    return f"{prompt_hash}:{text_hash(a_text)}:{text_hash(b_text)}"


def _needs_review(row: dict[str, Any]) -> bool:
    return row["status"] == "compared" and not bool(row["identical"]) and isinstance(
        row["prompt_hash"], str)


def _key(row: dict[str, Any]) -> str:
    return approval_key(str(row["prompt_hash"]), str(row["a_text"] or ""),
                        str(row["b_text"] or ""))


def default_approvals_path(report_dir: Path) -> Path:
    """Approvals live in the report directory unless --approvals names a shared file."""
    return report_dir / APPROVALS


def load_approvals(path: Path | None) -> dict[str, dict[str, Any]]:
    if path is None or not path.exists():
        return {}
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != APPROVALS_FORMAT or not isinstance(
            data.get("approvals"), dict):
        raise ConfigFileError(f"{path}: not a quantcheck approvals file "
                              f"(format {APPROVALS_FORMAT})")
    return dict(data["approvals"])


def apply_approvals(pairs: pd.DataFrame, approvals: dict[str, dict[str, Any]]) -> None:
    """Fill `approved_label` and `approved_at` where a non-identical pair recurs exactly."""
    labels, dates = [], []
    for row in frame_rows(pairs):
        entry = approvals.get(_key(row)) if _needs_review(row) else None
        labels.append(entry["label"] if entry else "")
        dates.append(entry["approved_at"] if entry else "")
    pairs["approved_label"] = labels
    pairs["approved_at"] = dates


def approve(pairs: pd.DataFrame, verdicts: dict[str, list[dict[str, Any]]],
            approvable: set[str], path: Path) -> int:
    """Add every reviewed pair whose reviewers all chose labels the rubric marks
    approvable (the default rubric: wording only, ambiguous; never a regression)."""
    approvals = load_approvals(path)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    added = 0
    for row in frame_rows(pairs):
        given = [v for v in verdicts.get(str(row["prompt_id"]), []) if v.get("label")]
        if not _needs_review(row) or not given or any(v["label"] not in approvable
                                                       for v in given):
            continue
        key = _key(row)
        if key in approvals:
            continue
        approvals[key] = {"prompt_id": str(row["prompt_id"]), "label": given[0]["label"],
                          "labels": sorted({v["label"] for v in given}),
                          "reviewers": sorted({v["reviewer"] for v in given}),
                          "notes": "; ".join(v.get("notes", "") for v in given if v.get("notes")),
                          "approved_at": now}
        added += 1
    make_directory(path.parent)
    write_json_atomic(path, {"format": APPROVALS_FORMAT, "approvals": approvals})
    return added
