"""Review files (REPORT_DIR/reviews/NAME.json) and the local server that writes them.

A review file carries the identity of the report it belongs to; a file made for
another run is never applied to this one.
"""

from __future__ import annotations

import hmac
import re
import secrets
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from .errors import RunFormatError
from .files import StorageError, make_directory
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


def review_app(report_dir: Path, reviewer: str, rubric_path: str | Path | None = None
               ) -> web.Application:
    """Serve the sheet and accept its review; nothing outside REPORT_DIR is touched.

    A local server is still reachable from any web page the reviewer opens, so every
    request must name this server in its Host (a DNS-rebinding page names its own), and
    a write must be JSON, come from this origin (or none), and carry the random token
    embedded in the page this server served (another origin cannot read the page)."""
    from .report import render_sheet
    from .reportdir import require_report
    from .rubric import load_rubric

    rubric = load_rubric(rubric_path)
    target = review_path(report_dir, reviewer)
    pairs, summary = require_report(report_dir)
    identity = summary["identity"]
    prompt_ids = set(pairs["prompt_id"].astype(str))
    token = secrets.token_urlsafe(24)
    live = {"endpoint": "/api/review", "reviewer": reviewer, "token": token}

    async def sheet(request: web.Request) -> web.Response:
        html = render_sheet(report_dir, rubric_path, live)
        return web.Response(text=html, content_type="text/html",
                            headers={"Cache-Control": "no-store"})

    async def save(request: web.Request) -> web.Response:
        try:
            document = orjson.loads(await request.read())
            if not isinstance(document, dict):
                raise RunFormatError("posted review: must be a JSON object")
            document["reviewer"] = reviewer
            validate_review(document, identity, rubric, prompt_ids, "posted review")
        except (orjson.JSONDecodeError, RunFormatError) as exc:
            return web.Response(status=400, text=str(exc))
        try:
            make_directory(target.parent)
            write_json_atomic(target, document, report_dir)
        except StorageError as exc:
            return web.Response(status=507, text=str(exc))
        return web.json_response({"path": str(target.relative_to(report_dir))})

    app = web.Application(client_max_size=16 * 2**20, middlewares=[_guard(token)])
    app.router.add_get("/", sheet)
    app.router.add_post("/api/review", save)
    return app


def _guard(token: str) -> Any:
    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        port = sockname[1] if sockname else 0
        names = {f"{sockname[0] if sockname else ''}:{port}", f"127.0.0.1:{port}",
                 f"localhost:{port}", f"[::1]:{port}"}
        if request.headers.get("Host", "") not in names:
            return web.Response(status=403, text="this review server answers only as "
                                                 f"http://127.0.0.1:{port}/")
        if request.method not in ("GET", "HEAD"):
            origin = request.headers.get("Origin")
            if origin is not None and origin not in {f"http://{name}" for name in names}:
                return web.Response(status=403, text=f"writes from {origin} are refused")
            if request.content_type != "application/json":
                return web.Response(status=415, text="send the review as application/json")
            if not hmac.compare_digest(request.headers.get("X-Quantcheck-Token", ""), token):
                return web.Response(status=403, text="missing or wrong X-Quantcheck-Token: "
                                                     "save from the page this server serves")
        response: web.StreamResponse = await handler(request)
        return response

    return guard
