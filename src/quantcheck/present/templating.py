"""The package's HTML templates, loaded with autoescape, and JSON safe inside <script>."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

import orjson
from markupsafe import Markup

if TYPE_CHECKING:
    import jinja2


def template(name: str) -> jinja2.Template:
    """One of the package's templates (`sheet.html`), rendered with autoescape."""
    return _environment().get_template(name)


@cache
def _environment() -> jinja2.Environment:
    import jinja2  # here: a command that renders no page never loads it

    return jinja2.Environment(
        loader=jinja2.PackageLoader("quantcheck.present", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined)


def embed_json(data: object) -> Markup:
    """JSON that can sit inside <script>: no '<', '>' or '&' can close or open a tag."""
    text = orjson.dumps(data).decode()
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return Markup(text)
