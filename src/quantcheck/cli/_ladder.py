"""`quantcheck ladder`: the context ladder's options, its plan and progress lines,
the onset and the exit status."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import ExitCode
from ..fetch.collect import CollectSettings
from ..pipeline.ladder import LadderRun, run_ladder
from ..pipeline.ladder_progress import RungCost
from ..present.sentences import plural
from ..store.inputs.haystack import LANGUAGES
from ..store.inputs.prompt_sets import APIS, RequestOptions
from ..store.records.ladder_records import NEEDLE, Ladder, LadderPlan, ProbeResult, Rung
from ..triage.cells import parse_cell_options
from ..triage.ladder_plan import DEFAULT_DEPTHS
from ._group import (
    COMPARE,
    FORCED,
    OUTPUT,
    POLICY,
    PROMPTS,
    SEND,
    cli,
    section,
)
from .guard import run_guarded, say
from .options import FiniteFloat, json_object_option


def lengths_option(context: click.Context, parameter: click.Parameter, value: str | None
                   ) -> list[int] | None:
    """`1k,2k,4k,8k` (k: 1,024) or `1024,3000` -> token counts."""
    if not value:
        return None
    lengths = []
    for part in value.replace(" ", "").split(","):
        number = part[:-1] if part.lower().endswith("k") else part
        if not number.isdigit() or int(number) <= 0:
            raise click.BadParameter(f"{part!r}: expected token counts such as 1k,2k,4k or "
                                     "1024,3000", context, parameter)
        lengths.append(int(number) * (1024 if number != part else 1))
    return lengths


def depths_option(context: click.Context, parameter: click.Parameter, value: str
                  ) -> list[float]:
    try:
        depths = [float(part) for part in value.replace(" ", "").split(",") if part]
    except ValueError:
        depths = []
    if not depths or not all(0.0 <= d <= 1.0 for d in depths):
        raise click.BadParameter(f"{value!r}: expected depths from 0 (the start) to 1 (the "
                                 "end), e.g. 0,0.5", context, parameter)
    return sorted(set(depths))


def _side(url: str, label: str, model: str | None, api_key_env: str | None,
          cell: tuple[str, ...], timeout: float, retries: int,
          extra_body: dict[str, object]) -> CollectSettings:
    return CollectSettings(endpoint=url, label=label, model=model, api_key_env=api_key_env,
                           cell=run_guarded(lambda: parse_cell_options(cell), ""),
                           timeout=timeout, retries=retries,
                           request=RequestOptions(extra_body=extra_body))


class LadderLines:
    """The plan and each rung's cost before it is sent, then a line per probe and rung
    (stderr)."""

    def planned(self, plan: LadderPlan, costs: list[RungCost],
                rates: dict[str, float | None]) -> None:
        settings = plan.settings
        probes = ", ".join([f"a needle at depth {d:g}" for d in settings.depths]
                           + (["an absent needle"] if settings.absent else []))
        say(f"ladder: {len(plan.rungs)} rungs of {', '.join(f'{r.tokens:,}' for r in plan.rungs)}"
            f" tokens; at each, {probes}; lengths {plan.length_measure}")
        speeds = ", ".join(f"{side.upper()} {rate:,.0f} prompt tokens/s" for side, rate
                           in rates.items() if rate)
        if speeds:
            say(f"prefill on a short prompt: {speeds} (longer prompts are slower per token)")
        for cost in costs:
            say("  " + _cost_line(cost))
        total = sum(c.tokens_sent for c in costs if not c.measured)
        seconds = [c.seconds for c in costs if not c.measured]
        if None not in seconds:
            say(f"  to send: {total:,} tokens, about {_duration(sum(s or 0 for s in seconds))}")

    def rung_starting(self, cost: RungCost) -> None:
        say(("rung " if not cost.measured else "rung (measured before) ") + _cost_line(cost))

    def probe_done(self, tokens: int, result: ProbeResult, seconds: float) -> None:
        probe = result.probe
        what = (f"needle at depth {probe.depth:g}" if probe.kind == NEEDLE
                else "absent needle")
        kl = f"; KL {result.kl_mean:.3g}" if result.kl_mean is not None else ""
        if result.kl_needle is not None:
            kl += f" (code {result.kl_needle:.3g})"
        say(f"  {what}: A {_verdict(result.a_passed)} ({result.a_repeats_passed}/"
            f"{result.a_repeats} repeats), B {_verdict(result.b_passed)}"
            f"{' - departs' if result.departs else ''}{kl} [{seconds:.0f} s]")

    def rung_done(self, rung: Rung) -> None:
        say(f"  {rung.tokens:,} tokens: recall A {_share(rung.a_recall)}, B "
            f"{_share(rung.b_recall)}; A's floor {rung.a_floor}, departures "
            f"{rung.departures}{': departs' if rung.departs else ''}")

    def note(self, text: str) -> None:
        say(text)


def _cost_line(cost: RungCost) -> str:
    time = f", about {_duration(cost.seconds)}" if cost.seconds is not None else ""
    return (f"{cost.tokens:,} tokens: {plural(cost.probes, 'probe')}, {cost.tokens_sent:,} "
            f"tokens to send{time}")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _verdict(passed: bool | None) -> str:
    return "no answer" if passed is None else "pass" if passed else "fail"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def echo_ladder(ladder: Ladder, page: Path) -> None:
    click.echo(f"{ladder.a.label} (A) vs {ladder.b.label} (B): {ladder.axes}")
    for rung in ladder.rungs:
        kl = f", KL {rung.kl_mean:.3g}" if rung.kl_mean is not None else ""
        code = f" (code {rung.kl_needle:.3g})" if rung.kl_needle is not None else ""
        floor = f", A's own {rung.a_floor_kl:.3g}" if rung.a_floor_kl is not None else ""
        click.echo(f"  {rung.tokens:>7,} tokens: recall A {_share(rung.a_recall)}, B "
                   f"{_share(rung.b_recall)}, flips {rung.flips}{kl}{code}{floor}"
                   f"{'  <- departs' if rung.departs else ''}")
    click.echo(f"onset: {ladder.onset_sentence}")
    click.echo(ladder.floor_sentence)
    for line in ladder.not_tested:
        click.echo(f"not tested: {line}")
    click.echo(f"gate: {'pass' if ladder.gate.passed else 'FAIL'}: {ladder.gate.reason}")
    click.echo(f"ladder: {page.parent / 'ladder.json'}, {page}")


@cli.command("ladder")
@section(COMPARE)
@click.option("--a", "a_url", required=True, help="Reference endpoint (e.g. an f16 KV cache).")
@click.option("--b", "b_url", required=True, help="Candidate endpoint (e.g. a q4_0 KV cache).")
@section(OUTPUT)
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The ladder's folder: ladder.json, index.html, plan.json, and each "
                   "probe's runs and report in OUT/rungs/TOKENS/PROBE/.")
@section(COMPARE)
@click.option("--a-label", default="a", show_default=True, help="Label of A.")
@click.option("--b-label", default="b", show_default=True, help="Label of B.")
@click.option("--a-model", help="Model name on A (default: the one it lists).")
@click.option("--b-model", help="Model name on B (default: the one it lists).")
@click.option("--a-cell", multiple=True, metavar="KEY=VALUE",
              help="Cell facts for A, e.g. kv_cache_dtype=f16.")
@click.option("--b-cell", multiple=True, metavar="KEY=VALUE",
              help="Cell facts for B, e.g. kv_cache_dtype=q4_0.")
@click.option("--api-key-env", metavar="VAR", help="Environment variable holding the API key.")
@section(PROMPTS)
@click.option("--lengths", callback=lengths_option, metavar="1k,2k,...",
              help="The rungs in tokens (k: 1,024). Default: 1k, 2k, 4k, ... as long as "
                   "both servers' context holds.")
@click.option("--max-length", type=click.IntRange(1), metavar="TOKENS",
              help="The longest default rung.")
@click.option("--depths", default=",".join(f"{d:g}" for d in DEFAULT_DEPTHS),
              show_default=True, callback=depths_option,
              help="Where the needles are planted, 0 (the start) to 1 (the end).")
@click.option("--absent/--no-absent", default=True, show_default=True,
              help="An absent-needle probe at every rung (the answer must say none).")
@click.option("--language", type=click.Choice(list(LANGUAGES)), default="en",
              show_default=True, help="The filler's language.")
@section(SEND)
@click.option("--api", type=click.Choice(APIS), default="completions", show_default=True,
              help="The probes' API (chat for an instruction model).")
@click.option("--max-tokens", default=16, show_default=True, type=click.IntRange(1),
              help="Answer length.")
@click.option("--repeats", default=2, show_default=True, type=click.IntRange(1),
              help="A's repeats of each probe: A's own floor (B answers once).")
@click.option("--top-logprobs", default=20, show_default=True, type=click.IntRange(1),
              help="Alternatives per position, for the KL.")
@section(FORCED)
@click.option("--forced/--no-forced", default=True, show_default=True,
              help="Score A's answers on B by teacher forcing (the KL).")
@section(POLICY)
@click.option("--served-tokens", type=click.IntRange(1), metavar="TOKENS",
              help="The longest prompt you serve: the gate fails on an onset at or below "
                   "it (default: anywhere on the ladder).")
@section(PROMPTS)
@click.option("--seed", default=1, show_default=True, type=int,
              help="Picks the codes and the filler.")
@section(SEND)
@click.option("--timeout", default=3600.0, show_default=True, type=FiniteFloat(1),
              help="Seconds per request (a long prefill on a CPU takes minutes).")
@click.option("--retries", default=4, show_default=True, type=click.IntRange(0))
@click.option("--extra-body", callback=json_object_option,
              help="JSON merged into every request on both sides.")
def ladder_command(a_url: str, b_url: str, out: Path, a_label: str, b_label: str,
                   a_model: str | None, b_model: str | None, a_cell: tuple[str, ...],
                   b_cell: tuple[str, ...], api_key_env: str | None,
                   lengths: list[int] | None, max_length: int | None, depths: list[float],
                   absent: bool, language: str, api: str, max_tokens: int, repeats: int,
                   top_logprobs: int, forced: bool, served_tokens: int | None, seed: int,
                   timeout: float, retries: int, extra_body: dict[str, object]) -> None:
    """Find the prompt length from which B stops doing what A does: the same
    needle-recall probes at a ladder of lengths (1K, 2K, 4K, ... tokens, measured on
    A's tokenizer, up to what both servers' context holds), A's repeats for its own
    floor, B's teacher-forced KL on A's answers, and the onset: the shortest length at
    which B departs from A beyond A's floor.

    Each rung's cost is printed before it is sent; rerun the same command to resume.
    Exit 1 when the onset lies within the lengths served (--served-tokens).

    \b
    Example:
      quantcheck ladder --a http://127.0.0.1:8080/v1 --a-cell kv_cache_dtype=f16 \\
          --b http://127.0.0.1:8081/v1 --b-cell kv_cache_dtype=q4_0 \\
          --lengths 1k,2k,4k,8k --out reports/kv-ladder
      quantcheck ladder --a http://gpu:8000/v1 --b http://gpu:8001/v1 --api chat \\
          --depths 0.1,0.5,0.9 --served-tokens 32768 --out reports/fp8-kv-ladder
    """
    job = LadderRun(
        a=_side(a_url, a_label, a_model, api_key_env, a_cell, timeout, retries, extra_body),
        b=_side(b_url, b_label, b_model, api_key_env, b_cell, timeout, retries, extra_body),
        out=out, lengths=lengths, max_length=max_length, depths=depths, absent=absent,
        language=language, api=api, max_tokens=max_tokens, repeats=repeats,
        top_logprobs=top_logprobs, forced=forced, seed=seed, served_tokens=served_tokens)
    ladder, page = run_guarded(lambda: run_ladder(job, LadderLines()),
                               "Rerun the same command to resume the ladder.")
    echo_ladder(ladder, page)
    if not ladder.gate.passed:
        sys.exit(ExitCode.FAIL)
