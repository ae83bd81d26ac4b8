"""What an endpoint is and whether it can give a meaningful A/B, as plain calls that
each run one event loop: the preflight checks of one or two endpoints (and whether
they tokenize alike), and the probe of a server's facts and serving cell. The
`preflight` and `probe` commands are these plus printing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..fetch.clients import api_key_from_env
from ..fetch.preflight import ProbeShape, check_endpoint
from ..fetch.server_info import ask_server
from ..store.folders.run_dir import Cell, ServerInfo
from ..store.inputs.prompt_sets import GREEDY_FIELDS, RequestOptions, load_prompts
from ..store.records.preflight_records import Check, Preflight
from ..store.records.run_records import DEFAULT_CONTEXT_TOKENS
from ..store.redaction import public_url
from ..triage.cells import cell_from_server, cell_key
from ..triage.templates import template_agreement
from ..triage.tokenizers import tokenizer_agreement
from .event_loop import run_blocking


@dataclass
class PreflightOptions:
    """The endpoints to check (A, and B if given) and how the probes look."""

    endpoints: list[str]
    model: str | None = None
    api_key_env: str | None = None
    prompt_file: Path | None = None  # probes shaped like this set's first prompt
    api: str = "chat"  # without a prompt set
    extra_body: dict[str, object] = field(default_factory=dict)  # the user's JSON, as given
    top_logprobs: int = 20
    context_tokens: int = DEFAULT_CONTEXT_TOKENS


@dataclass
class PreflightResult:
    """Each endpoint's report, in order; with two, whether they tokenize alike."""

    reports: list[Preflight]
    tokenizer_agreement: Check | None
    template_agreement: Check | None = None


def preflight(options: PreflightOptions) -> PreflightResult:
    """Check every endpoint in turn; an unreachable one raises EndpointError."""
    shape = probe_shape(options.prompt_file, options.api, options.extra_body)
    key = api_key_from_env(options.api_key_env)

    async def check_all() -> list[Preflight]:
        return [await check_endpoint(endpoint, options.model, shape, options.top_logprobs,
                                     options.context_tokens, key)
                for endpoint in options.endpoints]

    reports = run_blocking(check_all())
    if len(reports) != 2:
        return PreflightResult(reports, None)
    return PreflightResult(reports, tokenizer_agreement(reports[0].tokenizer,
                                                        reports[1].tokenizer),
                           template_agreement(reports[0].template, reports[1].template))


def probe_shape(prompt_file: Path | None, api: str, extra_body: dict[str, object]
                ) -> ProbeShape:
    """Probes shaped like the first prompt of a set, or plain greedy requests."""
    if prompt_file is None:
        fields = {k: v for k, v in {**GREEDY_FIELDS, **extra_body}.items() if v is not None}
        return ProbeShape(api=api, fields=fields)
    return ProbeShape.like(load_prompts([prompt_file], RequestOptions(extra_body=extra_body))[0])


@dataclass
class Probe:
    """What a server reveals about itself, and its serving cell (with the user's facts)."""

    endpoint: str
    server: ServerInfo
    cell: Cell
    cell_key: str


def probe(endpoint: str, model: str | None, overrides: Cell,
          api_key_env: str | None = None) -> Probe:
    """Everything `quantcheck probe` prints: server facts, the cell and its key."""
    info, chosen = run_blocking(ask_server(endpoint, model, api_key_env))
    cell = {**cell_from_server(info, chosen, 1), **overrides}
    if "concurrency" not in overrides:
        cell.pop("concurrency")  # a property of a collection, not of the server
    return Probe(public_url(endpoint), info, cell, cell_key(cell))
