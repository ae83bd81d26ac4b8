"""Review files (REPORT_DIR/reviews/NAME.json): their names, checks and loading.

A review file carries the identity of the report it belongs to; a file made for
another run is never applied to this one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .errors import RunFormatError
from .rubric import Rubric
from .runstore import read_json

REVIEW_FORMAT = "quantcheck-review/1"
REVIEWER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class StaleReview(RunFormatError):
    """A review made for another run (its identity does not match)."""


def review_path(report_dir: Path, reviewer: str) -> Path:
    if not REVIEWER_NAME.match(reviewer):
        raise RunFormatError(f"reviewer name {reviewer!r}: use letters, digits, '.', '_' "
                             "or '-' (it names the file reviews/NAME.json)")
    return report_dir / "reviews" / f"{reviewer}.json"


def validate_review(document: Any, identity: str, rubric: Rubric,
                    prompt_ids: set[str], source: str) -> dict[str, Any]:
    """Check a review document; raise RunFormatError (StaleReview) naming what is wrong."""
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
    return document


def load_reviews(report_dir: Path, identity: str, rubric: Rubric, prompt_ids: set[str]
                 ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The review files of this report that belong to this run, by reviewer, and the
    refused ones with the reason, which is the reason the gate would give."""
    reviews, refused = {}, {}
    for path in sorted((report_dir / "reviews").glob("*.json")):
        try:
            document = validate_review(read_json(path), identity, rubric, prompt_ids,
                                       str(path))
        except RunFormatError as exc:
            refused[path.name] = str(exc)
            continue
        reviews[path.stem] = document
    return reviews, refused
