"""The determinism report's page (`quantcheck determinism`: DIR/index.html)."""

from __future__ import annotations

from pathlib import Path

from ..store.files import write_atomic
from ..store.records.report_records import DeterminismReport
from .sentences import PROMPT_CACHE_HINT
from .templating import template


def render_determinism(out: Path, report: DeterminismReport, endpoint: str,
                       model: str) -> Path:
    html = template("determinism.html").render(
        rows=report.prompts, modes=report.modes, sig_digits=report.sig_digits,
        endpoint=endpoint, model=model, routed=any(row.routing for row in report.prompts),
        cache_hint=PROMPT_CACHE_HINT)
    write_atomic(out / "index.html", html.encode("utf-8"))
    return out / "index.html"
