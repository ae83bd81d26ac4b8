"""`quantcheck review`: the local server that serves the sheet and writes the review.

A local server is still reachable from any web page the reviewer opens, so every
request must name this server in its Host (a DNS-rebinding page names its own), and a
write must be JSON, come from this origin (or none), and carry the random token
embedded in the page this server served (another origin cannot read that page).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Iterator
from pathlib import Path

import msgspec
import orjson
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from ..errors import RunFormatError
from ..store.files import StorageError, make_directory
from ..store.folders.report_dir import PromptIds, read_summary
from ..store.folders.reviews import review_path, validate_review
from ..store.folders.run_dir import write_json_atomic
from ..store.inputs.rubric import load_rubric
from .sheet import sheet_pieces


def review_app(report_dir: Path, reviewer: str, rubric_path: str | Path | None = None
               ) -> web.Application:
    """Serve the sheet and accept its review; nothing outside REPORT_DIR is touched."""
    rubric = load_rubric(rubric_path)
    target = review_path(report_dir, reviewer)
    identity = read_summary(report_dir).identity
    # the ids alone: all of a 100,000-pair table would take several hundred MB
    prompt_ids = PromptIds.read(report_dir)
    token = secrets.token_urlsafe(24)
    live = {"endpoint": "/api/review", "reviewer": reviewer, "token": token}

    async def sheet(request: web.Request) -> web.StreamResponse:
        # streamed (a 100,000-pair sheet is about 120 MB). A report that cannot be read
        # (pairs.csv broken, the summary missing) is a 500 naming the file, before any
        # byte is sent; a file changed under the server mid-page cuts the connection,
        # so the browser shows a failed load, never a page cut short as if whole
        pieces = sheet_pieces(report_dir, rubric_path, live)
        try:
            head = next(pieces)  # pairs.csv is read through once before this is made
        except RunFormatError as exc:
            return web.Response(status=500, text=str(exc))
        response = web.StreamResponse(headers={"Cache-Control": "no-store"})
        response.content_type, response.charset = "text/html", "utf-8"
        await response.prepare(request)
        await response.write(head.encode("utf-8"))
        for part in _batched(pieces):
            await response.write(part)
        await response.write_eof()
        return response

    async def save(request: web.Request) -> web.Response:
        try:
            document = orjson.loads(await request.read())
            if not isinstance(document, dict):
                raise RunFormatError("posted review: must be a JSON object")
            document["reviewer"] = reviewer
            review = validate_review(document, identity, rubric, prompt_ids, "posted review")
        except (orjson.JSONDecodeError, RunFormatError) as exc:
            return web.Response(status=400, text=str(exc))
        try:
            make_directory(target.parent)
            write_json_atomic(target, msgspec.to_builtins(review), report_dir)
        except StorageError as exc:
            return web.Response(status=507, text=str(exc))
        return web.json_response({"path": str(target.relative_to(report_dir))})

    app = web.Application(client_max_size=16 * 2**20, middlewares=[_guard(token)])
    app.router.add_get("/", sheet)
    app.router.add_post("/api/review", save)
    return app


def _batched(pieces: Iterator[str], size: int = 2**20) -> Iterator[bytes]:
    """The sheet's pieces (one a pair) joined into writes of about `size` bytes."""
    batch: list[bytes] = []
    held = 0
    for piece in pieces:
        batch.append(piece.encode("utf-8"))
        held += len(batch[-1])
        if held >= size:
            yield b"".join(batch)
            batch, held = [], 0
    yield b"".join(batch)


def _guard(token: str) -> Middleware:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
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
