"""`determinism --certify`: the plan printed before it is sent, progress, the
certificate's lines, and its exit status."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import ExitCode
from ..fetch.certify import CertifySettings
from ..gate.verdict import one_line
from ..pipeline.certify import CertifyRun, run_certify
from ..store.certificate_records import Certificate
from ..store.run_dir import Parameters
from .guard import run_guarded
from .progress import PlainProgress


class CertifyLines:
    """The plan, then a progress line at every tenth of it (stderr)."""

    def __init__(self) -> None:
        self.bar: PlainProgress | None = None

    def planned(self, endpoint: str, requests: int, rounds: int, seconds: float) -> None:
        click.echo(f"plan for {endpoint}: {requests} requests in {rounds} rounds, about "
                   f"{seconds:.0f} s if a batch takes as long as one request", err=True)
        self.bar = PlainProgress(requests, f"certify {endpoint}")

    def sent(self, requests: int) -> None:
        if self.bar is not None:
            self.bar.update(requests)


def certify_settings(endpoint: str, model: str | None, api_key_env: str | None,
                     parameters: Parameters) -> CertifySettings:
    """What a certificate's requests take of the determinism command's options."""
    shape = parameters.routed_experts_shape
    return CertifySettings(
        endpoint=endpoint, model=model, api_key_env=api_key_env,
        top_logprobs=parameters.top_logprobs, timeout=parameters.timeout,
        retries=parameters.retries, max_response_mb=parameters.max_response_mb,
        routed_experts=parameters.routed_experts,
        routed_experts_shape=(shape[0], shape[1]) if shape else None)


def certify_command(job: CertifyRun) -> None:
    """Exit 1 unless CERTIFIED (a CI step that certifies an engine fails on it): when the
    gate's certificate rules fail (a request without an answer, more prompts varying
    than `max_nondeterministic_prompts`), and, with no prompt allowed to vary, whenever
    the certificate says NOT CERTIFIED."""
    certificate, verdict, page = run_guarded(lambda: run_certify(job, CertifyLines()),
                                             "Nothing was written.")
    echo_certificate(certificate, job.out, page)
    if not verdict.passed:
        click.echo(one_line(verdict), err=True)
        sys.exit(ExitCode.FAIL)
    if not certificate.certified and not job.max_nondeterministic_prompts:
        click.echo(f"FAIL: {certificate.statement}", err=True)
        sys.exit(ExitCode.FAIL)


def echo_certificate(certificate: Certificate, out: Path, page: Path) -> None:
    click.echo(("CERTIFIED: " if certificate.certified else "NOT CERTIFIED: ")
               + certificate.statement)
    for factor in certificate.factors:
        if factor.comparisons:
            click.echo(f"  {factor.factor}: {factor.mismatches} mismatches in "
                       f"{factor.comparisons} comparisons, {factor.prompts_varying} of "
                       f"{factor.prompts} prompts vary: {factor.explanation}")
            if factor.routing:
                click.echo(f"    MoE routing: {factor.routing}")
    click.echo(f"prefix cache: {certificate.cache_control}")
    click.echo(f"seeded sampling: {certificate.seed_control}")
    click.echo(f"control: {certificate.control_note}")
    click.echo(f"certificate: {out / 'certificate.json'}, {out / 'junit.xml'}, {page}")
