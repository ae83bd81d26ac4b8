"""Review files (REPORT_DIR/reviews/NAME.json): their names, checks and loading.

A review file carries the identity of the report it belongs to; a file made for
another run is never applied to this one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Container
from pathlib import Path

import msgspec

from ...errors import RunFormatError
from ..files import make_directory, storage_error
from ..inputs.rubric import Rubric
from ..records.formats import REVIEW_FORMAT, ReviewFormat
from .report_dir import REVIEWS
from .run_dir import MAX_SMALL_JSON_BYTES, read_json

REVIEWER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class StaleReview(RunFormatError):
    """A review made for another run (its identity does not match)."""


class ReviewVerdict(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One reviewer's verdict on one pair. `reviewer` is filled in when read (the file
    names the reviewer once, at the top)."""

    label: str | None = None
    right_side: str | None = None  # "a" or "b", for a label that asks which is right
    notes: str = ""
    at: str | None = None
    reviewer: str = ""


class Review(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A review file: REPORT_DIR/reviews/NAME.json, or one exported from the sheet (its
    `format` is always written)."""

    format: ReviewFormat
    identity: str
    rubric: str | None = None
    reviewer: str = ""
    updated_at: str | None = None
    verdicts: dict[str, ReviewVerdict] = {}


def review_path(report_dir: Path, reviewer: str) -> Path:
    if not REVIEWER_NAME.match(reviewer):
        raise RunFormatError(f"reviewer name {reviewer!r}: use letters, digits, '.', '_' "
                             "or '-' (it names the file reviews/NAME.json)")
    return report_dir / REVIEWS / f"{reviewer}.json"


def validate_review(document: object, identity: str, rubric: Rubric,
                    prompt_ids: Container[str], source: str) -> Review:
    """Check a review document; raise RunFormatError (StaleReview) naming what is wrong.
    The gate, the review server and the sheet (in JavaScript) apply the same checks."""
    if not isinstance(document, dict) or document.get("format") != REVIEW_FORMAT:
        raise RunFormatError(f"{source}: not a quantcheck review (format {REVIEW_FORMAT})")
    if document.get("identity") != identity:
        raise StaleReview(f"{source}: made for another run (identity "
                          f"{document.get('identity')!r}, this report is {identity!r})")
    verdicts = document.get("verdicts")
    if not isinstance(verdicts, dict):
        raise RunFormatError(f"{source}: 'verdicts' must be a mapping of prompt id to verdict")
    if not isinstance(document.get("reviewer", ""), str):
        raise RunFormatError(f"{source}: 'reviewer' must be text")
    labels = {label.id for label in rubric.labels}
    for prompt_id, verdict in verdicts.items():
        where = f"{source}: verdict for {prompt_id!r}"
        if prompt_id not in prompt_ids:
            raise RunFormatError(f"{where}: no such prompt in this report")
        if not isinstance(verdict, dict):
            raise RunFormatError(f"{where}: must be a mapping")
        if not isinstance(verdict.get("label", ""), str | None):
            raise RunFormatError(f"{where}: label must be a label id (text) or null")
        if verdict.get("label") is not None and verdict["label"] not in labels:
            raise RunFormatError(f"{where}: label {verdict['label']!r} is not in rubric "
                                 f"{rubric.name!r} ({', '.join(sorted(labels))})")
        if verdict.get("right_side") not in (None, "a", "b"):
            raise RunFormatError(f"{where}: right_side must be 'a', 'b' or null")
        if not isinstance(verdict.get("notes", ""), str):
            raise RunFormatError(f"{where}: notes must be text")
    try:
        return msgspec.convert(document, Review)
    except msgspec.ValidationError as exc:
        raise RunFormatError(f"{source}: {exc}") from None


def load_verdicts(report_dir: Path, extra_files: list[Path], rubric: Rubric,
                  identity: str, prompt_ids: Container[str]) -> dict[str, list[ReviewVerdict]]:
    """Every reviewer's labelled verdicts by prompt, from REPORT_DIR/reviews/*.json and
    exported files; a file the checks refuse (another run's too) is an input error."""
    files = sorted((report_dir / REVIEWS).glob("*.json")) + list(extra_files)
    verdicts: dict[str, list[ReviewVerdict]] = {}
    for path in files:
        review = validate_review(read_json(path, MAX_SMALL_JSON_BYTES), identity, rubric,
                                 prompt_ids, str(path))
        for prompt_id, verdict in review.verdicts.items():
            if verdict.label:
                verdict.reviewer = review.reviewer or path.stem
                verdicts.setdefault(prompt_id, []).append(verdict)
    return verdicts


def load_reviews(report_dir: Path, identity: str, rubric: Rubric, prompt_ids: Container[str]
                 ) -> tuple[dict[str, Review], dict[str, str]]:
    """The review files of this report that belong to this run, by reviewer, and the
    refused ones with the reason, which is the reason the gate would give."""
    reviews, refused = {}, {}
    for path in sorted((report_dir / REVIEWS).glob("*.json")):
        try:
            document = validate_review(read_json(path, MAX_SMALL_JSON_BYTES), identity,
                                       rubric, prompt_ids, str(path))
        except RunFormatError as exc:
            refused[path.name] = str(exc)
            continue
        reviews[path.stem] = document
    return reviews, refused


def set_aside_stale_reviews(report_dir: Path, identity: str) -> list[Path]:
    """Move the review files made for the report this one replaced (another identity)
    to REPORT_DIR/reviews/set-aside-IDENTITY/, where nothing reads them: a rerun into
    the same folder would otherwise leave them to be refused. Where they went, back."""
    moved = []
    for path in sorted((report_dir / REVIEWS).glob("*.json")):
        try:
            old = read_json(path, MAX_SMALL_JSON_BYTES).get("identity")
        except (RunFormatError, AttributeError):
            continue  # not a review at all: left for the gate to name
        if not isinstance(old, str) or old == identity or not old.isalnum():
            continue
        folder = path.parent / f"set-aside-{old}"
        make_directory(folder)
        target = folder / path.name
        try:
            os.replace(path, target)
        except OSError as exc:
            raise storage_error(target, exc) from None
        moved.append(target)
    return moved
