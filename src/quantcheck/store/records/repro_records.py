"""The records of a repro folder (`quantcheck repro`): repro.json (`Repro`, format
"quantcheck-repro/1") beside the files it names.

A repro is requests, each sent to its endpoint with curl by replay.sh and its answer
compared with the one recorded: `name` ("a" and "b" for an A/B; more names fit, such
as a certificate's "alone" and "batch=8"), the public `url` it goes to (no
credentials, no query), the `body` file (the exact JSON body sent, streaming fields
included when the request streamed), the `answer` file (the recorded answer's text,
its exact UTF-8 bytes), `together` (body files of the other requests sent at the same
moment, as a batch's other members), `before` (a request to send first and wait for,
as "POST /flush_cache"), `preceded` (body files sent one after another after `before`
and before it, their answers set aside: what wrote the prefix cache it reads, as a
certificate's cold request before its warm one), and the serving `cell`. `divergence`
says where the recorded answers of the first two requests part.
"""

from __future__ import annotations

import msgspec

from ...errors import QuantcheckError
from ..folders.run_dir import Cell
from .formats import REPRO_FORMAT, ReproFormat

REPRO_JSON = "repro.json"


class ReproUnavailable(QuantcheckError):
    """What a repro needs is not there (a run, the prompt, its answer, a certificate's
    recorded requests), or is not what quantcheck writes."""


class ReproRequest(msgspec.Struct, kw_only=True):
    """One request of a repro, and the answer it was given."""

    name: str
    url: str
    body: str
    answer: str
    stream: bool = False
    together: list[str] = []
    before: str = ""
    preceded: list[str] = []
    model: str = ""
    runtime: str | None = None
    cell: Cell = {}
    redacted: bool = False  # a credential-shaped value was cut out of the body


class ReproDivergence(msgspec.Struct, kw_only=True):
    """Where two recorded answers part: the first generated token that differs (None
    when their tokens agree or are not recorded), both tokens there, and the first
    character that differs (None when the texts are equal)."""

    token: int | None = None
    a_token: str | None = None
    b_token: str | None = None
    char: int | None = None
    sentence: str


class Repro(msgspec.Struct, kw_only=True):
    """repro.json."""

    format: ReproFormat = REPRO_FORMAT
    source: str  # the report (or certificate) folder it was made from
    prompt_id: str
    requests: list[ReproRequest]
    divergence: ReproDivergence
