"""`determinism --certify`: the plan printed before it is sent, progress, the
certificate's lines, and its exit status."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import ExitCode
from ..fetch.certify import CertifySettings
from ..gate.verdict import one_line
from ..pipeline.certify import CertifyRun, Outline, run_certify
from ..store.folders.run_dir import Parameters
from ..store.records.certificate_records import Certificate, FactorResult
from ..store.records.preflight_records import Preflight
from .guard import run_guarded
from .printing import echo_preflight
from .progress import PlainProgress


class CertifyLines:
    """Each endpoint's preflight, its plan, a progress line at every tenth of it and
    the time it took (stderr)."""

    def __init__(self) -> None:
        self.bar: PlainProgress | None = None

    def checked(self, report: Preflight) -> None:
        echo_preflight(report, report.endpoint)

    def planned(self, outline: Outline) -> None:
        pace = outline.pace
        unsent = outline.planned - outline.requests
        click.echo(f"plan for {outline.endpoint}: {outline.requests} requests in "
                   f"{outline.rounds} rounds"
                   + (f" ({unsent} of the plan's {outline.planned} not sent: their levels "
                      "are not tested here, the certificate says why)" if unsent else "")
                   + f", about {outline.seconds:.0f} s (measured in the warm-up: "
                   f"{pace.answer:.2f} s an answer, {pace.per_word * 1000:.2f} ms a prompt "
                   f"word, {pace.at_once:.1f} of {pace.tried} answered at once)", err=True)
        self.bar = PlainProgress(outline.requests, f"certify {outline.endpoint}")

    def sent(self, requests: int) -> None:
        if self.bar is not None:
            self.bar.update(requests)

    def finished(self, endpoint: str, seconds: float, estimated: float) -> None:
        click.echo(f"{endpoint}: sent in {seconds:.0f} s (estimated {estimated:.0f} s)",
                   err=True)


def certify_settings(endpoint: str, model: str | None, api_key_env: str | None,
                     parameters: Parameters) -> CertifySettings:
    """What a certificate's requests take of the determinism command's options."""
    shape = parameters.routed_experts_shape
    return CertifySettings(
        endpoint=endpoint, model=model, api_key_env=api_key_env,
        top_logprobs=parameters.top_logprobs, timeout=parameters.timeout,
        retries=parameters.retries, max_response_mb=parameters.max_response_mb,
        routed_experts=parameters.routed_experts,
        routed_experts_shape=(shape[0], shape[1]) if shape else None,
        preflight=parameters.preflight, context_tokens=parameters.context_tokens)


def certify_command(job: CertifyRun) -> None:
    """Exit 1 unless CERTIFIED (a CI step that certifies an engine fails on it): when the
    gate's certificate rules fail (a request without an answer, more prompts varying
    than `max_nondeterministic_prompts`, more levels planned and not tested than
    `max_untested_levels`), and, with no prompt allowed to vary, whenever the
    certificate says NOT CERTIFIED."""
    certificate, verdict, page = run_guarded(lambda: run_certify(job, CertifyLines()),
                                             "Nothing was written.")
    echo_certificate(certificate, job.out, page)
    if not verdict.passed:
        click.echo(one_line(verdict), err=True)
        sys.exit(ExitCode.FAIL)
    if not certificate.certified and not job.max_nondeterministic_prompts:
        click.echo(f"FAIL: {certificate.statement}", err=True)
        sys.exit(ExitCode.FAIL)


def levels_figures(factor: FactorResult) -> str:
    """A factor's varying levels in figures ("block=16 2 of 2 mismatch (first token
    0)"), or that none varied."""
    said = []
    for level in factor.levels:
        if not level.mismatches:
            continue
        detail = [f"first token {level.first_divergence}"] if level.first_divergence \
            is not None else []
        if level.max_logprob_delta:
            detail.append(f"max |delta logprob| {level.max_logprob_delta:.3g}")
        said.append(f"{level.level} {level.mismatches} of {level.comparisons} mismatch"
                    + (f" ({', '.join(detail)})" if detail else ""))
    return "; ".join(said) or f"no variation in {factor.comparisons} comparisons"


def echo_certificate(certificate: Certificate, out: Path, page: Path) -> None:
    word = (certificate.verdict or ("certified" if certificate.certified
                                    else "not certified")).upper()
    click.echo(f"{word}: {certificate.statement}")
    control = {f.factor: f for f in (certificate.control.factors if certificate.control
                                     else [])}
    for factor in certificate.factors:
        if factor.comparisons:
            click.echo(f"  {factor.factor}: {factor.mismatches} mismatches in "
                       f"{factor.comparisons} comparisons, {factor.prompts_varying} of "
                       f"{factor.prompts} prompts vary: {factor.explanation}; compared: "
                       f"{factor.compared}")
            if factor.routing:
                click.echo(f"    MoE routing: {factor.routing}")
        beside = control.get(factor.factor)
        if beside is not None and beside.comparisons:
            click.echo(f"    control: {levels_figures(beside)}")
        for untested in (u for u in certificate.not_tested if u.factor == factor.factor):
            click.echo(f"  {factor.factor} NOT TESTED at {', '.join(untested.levels)}: "
                       f"{untested.reason}")
    click.echo(f"prefix cache: {certificate.cache_control}")
    click.echo(f"seeded sampling: {certificate.seed_control}")
    click.echo(f"control: {certificate.control_note}")
    click.echo(f"certificate: {out / 'certificate.json'}, {out / 'junit.xml'}, {page}")
