"""`quantcheck determinism --certify`: plan, send and judge one endpoint (and a
control), then write OUT/certificate.json, answers.jsonl, junit.xml and index.html
(the control's own certificate and answers in OUT/control/). The verdict is the
gate's (gate/certificate_gate.py), with `max_nondeterministic_prompts` as given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import msgspec

from ..errors import QuantcheckError
from ..fetch.certify import (
    CertifySettings,
    PlanSender,
    ServerFacts,
    client_for,
    requests_turn_cache_off,
    send_plan,
    server_facts,
    warm_up,
)
from ..gate.certificate_gate import certificate_junit, decide_certificate
from ..gate.verdict import GateResult, Policy
from ..present.certificate_page import render_certificate
from ..store.certificate_records import Answer, Certificate, Plan
from ..store.files import make_directory, write_atomic
from ..store.folder_kinds import CERTIFICATE, claim
from ..store.prompt_entries import RequestOptions
from ..store.prompt_sets import load_prompts
from ..store.run_records import Prompt
from ..triage.certificate import certify, control_note, control_result
from ..triage.certify_plan import make_plan
from ..wire.client import public_url
from .event_loop import run_blocking

DEFAULT_MAX_REQUESTS = 20000


class PlanTooLarge(QuantcheckError):
    """A plan over --max-requests: it is refused before anything is sent."""


@dataclass
class CertifyRun:
    settings: CertifySettings
    prompt_files: Sequence[Path]
    out: Path
    request: RequestOptions
    trials: int = 3
    max_batch: int = 32
    seed: int = 0
    max_requests: int = DEFAULT_MAX_REQUESTS
    control: str | None = None
    max_nondeterministic_prompts: int | None = 0  # None: the rule off


class CertifyProgress(Protocol):
    """Hears the plan before it is sent (its endpoint, requests, rounds and estimated
    seconds) and each round as it is answered."""

    def planned(self, endpoint: str, requests: int, rounds: int, seconds: float) -> None: ...
    def sent(self, requests: int) -> None: ...


def run_certify(job: CertifyRun, progress: CertifyProgress | None = None
                ) -> tuple[Certificate, GateResult, Path]:
    """The certificate (with the control's result, if asked), its verdict and its page."""
    for folder in [job.out] + ([job.out / "control"] if job.control is not None else []):
        claim(folder, CERTIFICATE)
    prompts = load_prompts(job.prompt_files, job.request)
    if not prompts:
        raise QuantcheckError("the prompt files hold no prompt")
    certificate, plan, answers = run_blocking(_certify(job, job.settings, prompts, None,
                                                        progress))
    control = None
    if job.control is not None:
        control, _, control_answers = run_blocking(_certify(
            job, replace(job.settings, endpoint=job.control), prompts, plan, progress))
        _write(job.out / "control", control, control_answers)
    certificate.max_nondeterministic_prompts = job.max_nondeterministic_prompts
    certificate.control = control_result(control) if control is not None else None
    certificate.control_note = control_note(certificate.control)
    _write(job.out, certificate, answers)
    verdict = decide_certificate(certificate, Policy(
        max_nondeterministic_prompts=job.max_nondeterministic_prompts))
    write_atomic(job.out / "junit.xml", certificate_junit(certificate, verdict))
    return certificate, verdict, render_certificate(job.out, certificate)


def _max_tokens(prompts: list[Prompt]) -> int:
    asked = [p.request.get("max_tokens") for p in prompts]
    return max([v for v in asked if isinstance(v, int)] or [64])


async def _certify(job: CertifyRun, settings: CertifySettings, prompts: list[Prompt],
                   plan: Plan | None, progress: CertifyProgress | None
                   ) -> tuple[Certificate, Plan, list[Answer]]:
    async with client_for(settings) as client:
        facts: ServerFacts = await server_facts(client, settings.model)
        if plan is None:
            plan = make_plan([p.id for p in prompts], job.trials, job.max_batch, job.seed,
                             facts.context_tokens, _max_tokens(prompts),
                             cache_factor=not requests_turn_cache_off(prompts, facts.runtime))
        if plan.requests > job.max_requests:
            raise PlanTooLarge(
                f"the plan has {plan.requests} requests, more than --max-requests "
                f"{job.max_requests}; lower --trials or --max-batch, use fewer prompts, "
                "or raise --max-requests")
        sender = PlanSender(client, settings, facts, prompts)
        seconds = await warm_up(sender)
        if progress is not None:
            progress.planned(public_url(settings.endpoint), plan.requests, len(plan.rounds),
                             seconds * len(plan.rounds))
        sent = await send_plan(sender, plan, progress.sent if progress is not None else None)
    certificate = certify(sent.answers, plan, sent.failed, public_url(settings.endpoint),
                          facts.model,
                          facts.runtime, sent.cache_control, sent.seed_control)
    return certificate, plan, sent.answers


def _write(out: Path, certificate: Certificate, answers: list[Answer]) -> None:
    make_directory(out)
    write_atomic(out / "certificate.json", msgspec.json.format(
        msgspec.json.encode(certificate), indent=2) + b"\n")
    encoder = msgspec.json.Encoder()
    write_atomic(out / "answers.jsonl",
                 b"".join(encoder.encode(answer) + b"\n" for answer in answers))
