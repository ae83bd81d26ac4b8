"""`quantcheck determinism --certify`: plan, send and judge one endpoint (and a
control), then write OUT/certificate.json, answers.jsonl, junit.xml and index.html
and requests.jsonl, every request as it was sent (the control's own certificate,
answers and requests in OUT/control/). The verdict is the gate's
(gate/certificate_gate.py), with `max_nondeterministic_prompts` and
`max_untested_levels` as given.

In order: the plan's size is counted (a plan over --max-requests is refused before
anything is built or sent); both endpoints are reached and preflighted (as `collect`
does, unless --no-preflight), so an unreachable control or a fallback template stops
the run before a request of the plan; the plan is made to fit the smaller context of
the two (each side's levels that do not fit its own are said not tested), its `block`
factor's prefixes cut at the target's cache block; the target's
plan is sent and its certificate written whole, saying the control is not run yet;
then the control's plan, and the certificate again with its result. A control that
fails on the way leaves the target's certificate, with "control not tested" and why.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import msgspec

from ..errors import EndpointError, QuantcheckError
from ..fetch.certify import (
    CertifySettings,
    PlanSender,
    Side,
    client_for,
    max_tokens_of,
    send_rounds,
    server_facts,
)
from ..fetch.certify_warm_up import warm_up
from ..fetch.preflight import PreflightFailed, ProbeShape, run_preflight
from ..gate.certificate_gate import certificate_junit, decide_certificate
from ..gate.verdict import GateResult, Policy
from ..present.certificate_page import render_certificate
from ..store.files import AtomicFile, make_directory, write_atomic
from ..store.folders.folder_kinds import CERTIFICATE, claim
from ..store.inputs.prompt_entries import RequestOptions
from ..store.inputs.prompt_sets import load_prompts
from ..store.records.certificate_records import (
    ANSWERS_JSONL,
    REQUESTS_JSONL,
    Answer,
    Certificate,
    ControlResult,
    Plan,
)
from ..store.records.preflight_records import Preflight
from ..store.records.run_records import Prompt
from ..store.redaction import public_url
from ..triage.certificate import certify
from ..triage.certificate_control import control_note, control_result, untested_control
from ..triage.certify_plan import (
    DEFAULT_CACHE_BLOCK,
    Pace,
    estimate_seconds,
    make_plan,
    plan_requests,
)
from .event_loop import run_blocking

DEFAULT_MAX_REQUESTS = 20000
# The largest --max-requests and --trials: a plan holds about 2.2 KB a request (its
# fillers' texts), so 100,000 requests took 277 MiB and 16 s to make on the 2-core
# development machine
MAX_REQUESTS = 100_000
MAX_TRIALS = 1000


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
    max_untested_levels: int | None = 0  # planned levels not tested; None: the rule off


@dataclass(frozen=True)
class Outline:
    """A plan as one endpoint is sent it, before it is sent."""

    endpoint: str
    requests: int  # to be sent
    planned: int  # in the plan
    rounds: int
    seconds: float  # estimated from `pace`
    pace: Pace


class CertifyProgress(Protocol):
    """Hears each endpoint's preflight, its plan before it is sent (requests, rounds,
    the estimated seconds and what they rest on), each round as it is answered, and
    the seconds it took."""

    def checked(self, report: Preflight) -> None: ...
    def planned(self, outline: Outline) -> None: ...
    def sent(self, requests: int) -> None: ...
    def finished(self, endpoint: str, seconds: float, estimated: float) -> None: ...


def run_certify(job: CertifyRun, progress: CertifyProgress | None = None
                ) -> tuple[Certificate, GateResult, Path]:
    """The certificate (with the control's result, if asked), its verdict and its page."""
    for folder in [job.out] + ([job.out / "control"] if job.control is not None else []):
        claim(folder, CERTIFICATE)
    prompts = load_prompts(job.prompt_files, job.request)
    if not prompts:
        raise QuantcheckError("the prompt files hold no prompt")
    check_plan_size(len(prompts), job)
    return run_blocking(_run(job, prompts, progress))


def check_plan_size(prompts: int, job: CertifyRun) -> None:
    """Refuse, by arithmetic, a plan over --max-requests (or options beyond their
    bounds) before anything is built."""
    if not 2 <= job.trials <= MAX_TRIALS:
        raise PlanTooLarge(f"--trials {job.trials}: give 2 to {MAX_TRIALS}")
    if job.max_requests > MAX_REQUESTS:
        raise PlanTooLarge(f"--max-requests {job.max_requests}: give at most {MAX_REQUESTS}")
    requests = plan_requests(prompts, job.trials, job.max_batch)
    if requests > job.max_requests:
        raise PlanTooLarge(
            f"the plan has {requests} requests, more than --max-requests "
            f"{job.max_requests}; lower --trials or --max-batch, use fewer prompts, "
            "or raise --max-requests")


async def _run(job: CertifyRun, prompts: list[Prompt], progress: CertifyProgress | None
               ) -> tuple[Certificate, GateResult, Path]:
    async with AsyncExitStack() as stack:
        target = await _reach(stack, job.settings, prompts, progress)
        control = None
        if job.control is not None:
            control = await _reach(stack, replace(job.settings, endpoint=job.control), prompts,
                                   progress, "the control ")
        contexts = [s.facts.context_tokens for s in (target, control)
                    if s is not None and s.facts.context_tokens]
        plan = make_plan([p.id for p in prompts], job.trials, job.max_batch, job.seed,
                         min(contexts, default=None), max_tokens_of(prompts),
                         target.facts.cache_block[0] or DEFAULT_CACHE_BLOCK)
        certificate, answers = await _certify(target, plan, prompts, progress, job.out)
        if control is not None:
            certificate.control = untested_control(
                public_url(control.settings.endpoint), "not run yet: this file was written "
                "before the control's plan was sent (it stays so if that run stopped)")
        verdict, page = _publish(job, certificate, answers)
        if control is not None:
            certificate.control = await _control(job, control, plan, prompts, progress)
            verdict, page = _publish(job, certificate, None)
    return certificate, verdict, page


async def _reach(stack: AsyncExitStack, settings: CertifySettings, prompts: list[Prompt],
                 progress: CertifyProgress | None, who: str = "") -> Side:
    """The endpoint's client, facts and preflight; an endpoint that cannot be reached
    (or fails its preflight) stops the run before any request of the plan."""
    client = await stack.enter_async_context(client_for(settings))
    try:
        side = Side(settings, client, await server_facts(client, settings.model), None)
        side.preflight = await _preflight(side, prompts, progress)
    except PreflightFailed:
        raise
    except EndpointError as exc:
        if not who:
            raise
        raise EndpointError(f"{who}{public_url(settings.endpoint)}: {exc} (nothing was "
                            "sent to either endpoint)") from None
    return side


async def _preflight(side: Side, prompts: list[Prompt], progress: CertifyProgress | None
                     ) -> Preflight | None:
    """collect's preflight, its probes shaped like the first prompt's request."""
    settings, facts = side.settings, side.facts
    if not settings.preflight or facts.info is None:
        return None
    report = await run_preflight(side.client, facts.model, facts.models, facts.info,
                                 ProbeShape.like(prompts[0]), settings.top_logprobs,
                                 settings.context_tokens)
    if progress is not None:
        progress.checked(report)
    if report.failures():
        raise PreflightFailed(report.explanation())
    return report


async def _certify(side: Side, plan: Plan, prompts: list[Prompt],
                   progress: CertifyProgress | None, out: Path
                   ) -> tuple[Certificate, list[Answer]]:
    """One endpoint's certificate and answers; OUT/requests.jsonl, every request it was
    sent, written as they go (whole once the plan was sent)."""
    make_directory(out)
    with AtomicFile(out / REQUESTS_JSONL) as requests:
        return await _certify_recording(side, plan, prompts, progress, requests)


async def _certify_recording(side: Side, plan: Plan, prompts: list[Prompt],
                             progress: CertifyProgress | None, requests: AtomicFile
                             ) -> tuple[Certificate, list[Answer]]:
    sender = PlanSender(side.client, side.settings, side.facts, prompts)
    encoder = msgspec.json.Encoder()
    sender.log.record = lambda sent: requests.write(encoder.encode(sent) + b"\n")
    cache_control = await sender.check_cache_control()
    seed_control = await sender.check_seed(plan)
    endpoint = public_url(side.settings.endpoint)
    pace = await warm_up(sender)
    rounds = sender.rounds_to_send(plan)
    estimate = estimate_seconds(rounds, pace)
    started = time.perf_counter()
    if progress is not None:
        progress.planned(Outline(endpoint, sum(len(r.probes) for r in rounds), plan.requests,
                                 len(rounds), estimate, pace))
    answers = await send_rounds(sender, rounds, progress.sent if progress else None)
    seconds = time.perf_counter() - started
    if progress is not None:
        progress.finished(endpoint, seconds, estimate)
    certificate = certify(answers, plan, sender.failed, endpoint, side.facts.model,
                          side.facts.runtime, cache_control, seed_control, sender.untested,
                          side.facts.cache_block)
    certificate.requests = sender.sent
    certificate.seconds, certificate.estimated_seconds = round(seconds, 2), round(estimate, 2)
    certificate.preflight = side.preflight
    return certificate, answers


async def _control(job: CertifyRun, control: Side, plan: Plan, prompts: list[Prompt],
                   progress: CertifyProgress | None) -> ControlResult:
    """The control's result; "not tested" and why when its run stops on the way."""
    try:
        certificate, answers = await _certify(control, plan, prompts, progress,
                                              job.out / "control")
    except QuantcheckError as exc:
        return untested_control(public_url(control.settings.endpoint),
                                f"its run stopped: {exc}")
    _write(job.out / "control", certificate, answers)
    return control_result(certificate)


def _publish(job: CertifyRun, certificate: Certificate, answers: list[Answer] | None
             ) -> tuple[GateResult, Path]:
    """Write the certificate (and its answers, when given), its junit.xml and page."""
    certificate.max_nondeterministic_prompts = job.max_nondeterministic_prompts
    certificate.max_untested_levels = job.max_untested_levels
    certificate.control_note = control_note(certificate.control)
    _write(job.out, certificate, answers)
    verdict = decide_certificate(certificate, Policy(
        max_nondeterministic_prompts=job.max_nondeterministic_prompts,
        max_untested_levels=job.max_untested_levels))
    write_atomic(job.out / "junit.xml", certificate_junit(certificate, verdict))
    return verdict, render_certificate(job.out, certificate)


def _write(out: Path, certificate: Certificate, answers: list[Answer] | None) -> None:
    make_directory(out)
    write_atomic(out / "certificate.json", msgspec.json.format(
        msgspec.json.encode(certificate), indent=2) + b"\n")
    if answers is None:
        return
    encoder = msgspec.json.Encoder()
    write_atomic(out / ANSWERS_JSONL,
                 b"".join(encoder.encode(answer) + b"\n" for answer in answers))
