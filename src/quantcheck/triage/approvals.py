"""Approved known differences: reviewed pairs with approvable labels that need no second
review (`approvals.json`).

An approval is keyed by the prompt hash and both texts' hashes, so it applies again
only when exactly the same pair recurs; any new difference still needs a review.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import msgspec

from ..errors import ConfigFileError
from ..store.files import make_directory
from ..store.folders.reviews import ReviewVerdict
from ..store.folders.run_dir import MAX_SMALL_JSON_BYTES, read_json, write_json_atomic
from ..store.records.formats import APPROVALS_FORMAT, ApprovalsFormat
from ..store.records.pair_records import PairRow
from .sides import text_hash

APPROVALS = "approvals.json"


class Approval(msgspec.Struct, kw_only=True):
    prompt_id: str
    label: str
    labels: list[str] = []
    reviewers: list[str] = []
    notes: str = ""
    approved_at: str


class ApprovalsFile(msgspec.Struct):
    """approvals.json."""

    format: ApprovalsFormat
    approvals: dict[str, Approval]


def approval_key(prompt_hash: str, a_text: str, b_text: str, a_calls: str | None = None,
                 b_calls: str | None = None) -> str:
    return f"{prompt_hash}:{text_hash(a_text, a_calls)}:{text_hash(b_text, b_calls)}"


def _key(row: PairRow) -> str | None:
    """The approval key of a pair that needs a review, else None."""
    if not row.needs_review or row.prompt_hash is None:
        return None
    return approval_key(row.prompt_hash, row.a_text or "", row.b_text or "", row.a_tool_calls,
                        row.b_tool_calls)


def default_approvals_path(report_dir: Path) -> Path:
    """Approvals live in the report directory unless --approvals names a shared file."""
    return report_dir / APPROVALS


def load_approvals(path: Path | None) -> dict[str, Approval]:
    if path is None or not path.exists():
        return {}
    try:
        stored = msgspec.convert(read_json(path, MAX_SMALL_JSON_BYTES), ApprovalsFile)
    except msgspec.ValidationError as exc:
        raise ConfigFileError(f"{path}: not a quantcheck approvals file "
                              f"(format {APPROVALS_FORMAT}): {exc}") from None
    if stored.format != APPROVALS_FORMAT:
        raise ConfigFileError(f"{path}: not a quantcheck approvals file "
                              f"(format {APPROVALS_FORMAT})")
    return stored.approvals


def apply_approvals(rows: Iterable[PairRow], approvals: Mapping[str, Approval]) -> None:
    """Fill `approved_label` and `approved_at` where a non-identical pair recurs exactly."""
    for row in rows:
        entry = approvals.get(_key(row) or "")
        row.approved_label = entry.label if entry else ""
        row.approved_at = entry.approved_at if entry else ""


def approve(rows: Iterable[PairRow], verdicts: dict[str, list[ReviewVerdict]],
            approvable: set[str], path: Path) -> int:
    """Add every reviewed pair whose reviewers all chose labels the rubric marks
    approvable (the default rubric: wording only, ambiguous; never a regression)."""
    approvals = load_approvals(path)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    added = 0
    for row in rows:
        given = [v for v in verdicts.get(row.prompt_id, []) if v.label]
        key = _key(row)
        if key is None or key in approvals or not given \
                or any(v.label not in approvable for v in given):
            continue
        approvals[key] = Approval(
            prompt_id=row.prompt_id, label=str(given[0].label),
            labels=sorted({str(v.label) for v in given}),
            reviewers=sorted({v.reviewer for v in given}),
            notes="; ".join(v.notes for v in given if v.notes), approved_at=now)
        added += 1
    make_directory(path.parent)
    write_json_atomic(path, msgspec.to_builtins(ApprovalsFile(APPROVALS_FORMAT, approvals)))
    return added
