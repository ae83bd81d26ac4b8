"""Review files (REPORT_DIR/reviews/NAME.json) and the local server that writes them.

A review file carries the identity of the report it belongs to; a file made for
another run is never applied to this one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from .errors import RunFormatError
from .files import make_directory
from .rubric import Rubric
from .runstore import read_json, write_json_atomic

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
    labels = {label.id for label in rubric.labels}
    for prompt_id, verdict in verdicts.items():
        where = f"{source}: verdict for {prompt_id!r}"
        if prompt_id not in prompt_ids:
            raise RunFormatError(f"{where}: no such prompt in this report")
        if not isinstance(verdict, dict):
            raise RunFormatError(f"{where}: must be a mapping")
        if verdict.get("label") is not None and verdict["label"] not in labels:
            raise RunFormatError(f"{where}: label {verdict['label']!r} is not in rubric "
                                 f"{rubric.name!r} ({', '.join(sorted(labels))})")
        if verdict.get("right_side") not in (None, "a", "b"):
            raise RunFormatError(f"{where}: right_side must be 'a', 'b' or null")
        if not isinstance(verdict.get("notes", ""), str):
            raise RunFormatError(f"{where}: notes must be text")
    return document


def load_reviews(report_dir: Path, identity: str) -> dict[str, dict[str, Any]]:
    """Every review file of this report that belongs to this run, by reviewer."""
    reviews = {}
    for path in sorted((report_dir / "reviews").glob("*.json")):
        try:
            document = read_json(path)
        except RunFormatError:
            continue
        if isinstance(document, dict) and document.get("identity") == identity:
            reviews[path.stem] = document
    return reviews


def review_app(report_dir: Path, reviewer: str, rubric_path: str | Path | None = None
               ) -> web.Application:
    """Serve the sheet and accept its review; nothing outside REPORT_DIR is touched."""
    from .report import read_pairs, render_sheet
    from .rubric import load_rubric

    rubric = load_rubric(rubric_path)
    target = review_path(report_dir, reviewer)
    identity = read_json(report_dir / "summary.json").get("identity", "")
    prompt_ids = set(read_pairs(report_dir)["prompt_id"].astype(str))
    live = {"endpoint": "/api/review", "reviewer": reviewer}

    async def sheet(request: web.Request) -> web.Response:
        html = render_sheet(report_dir, rubric_path, live)
        return web.Response(text=html, content_type="text/html",
                            headers={"Cache-Control": "no-store"})

    async def save(request: web.Request) -> web.Response:
        try:
            document = orjson.loads(await request.read())
            document["reviewer"] = reviewer
            validate_review(document, identity, rubric, prompt_ids, "posted review")
        except (orjson.JSONDecodeError, RunFormatError) as exc:
            return web.Response(status=400, text=str(exc))
        make_directory(target.parent)
        write_json_atomic(target, document, report_dir)
        return web.json_response({"path": str(target.relative_to(report_dir))})

    app = web.Application(client_max_size=16 * 2**20)
    app.router.add_get("/", sheet)
    app.router.add_post("/api/review", save)
    return app
