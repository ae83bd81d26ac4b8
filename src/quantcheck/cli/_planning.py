"""`quantcheck plan`: how many paired prompts a decision needs, before anything is sent."""

from __future__ import annotations

import math

import click

from ..triage.stats import detectable_change, paired_prompts_needed
from ._group import cli
from .options import FiniteFloat

# A share of prompts or a change in points: below a thousandth of a percent no suite
# could be sized (a change of 0.001 points already needs billions of prompts)
PERCENT = FiniteFloat(0.001, 100)
MOST_PROMPTS = 10**12
COUNT = click.IntRange(1, MOST_PROMPTS)


@cli.command("plan")
@click.option("--disagreement", required=True, type=PERCENT, metavar="PERCENT",
              help="Share of prompts expected to pass on one side only (A or B), in %: "
                   "an earlier A/B's summary says it (stats.pass_rate.discordant_share).")
@click.option("--detect", type=PERCENT, metavar="POINTS",
              help="The change in pass rate to detect, in points (at most --disagreement).")
@click.option("--count", type=COUNT, metavar="N",
              help="Instead of --detect: the smallest change N paired prompts detect.")
# the count's former name, kept working: every other command's --prompts is a file
@click.option("--prompts", "former_count", type=COUNT, hidden=True)
@click.option("--power", default=80.0, show_default=True, type=FiniteFloat(50, 99.999),
              metavar="PERCENT", help="Chance of detecting the change.")
@click.option("--alpha", default=5.0, show_default=True, type=FiniteFloat(0.001, 50),
              metavar="PERCENT", help="Two-sided significance level.")
def plan_command(disagreement: float, detect: float | None, count: int | None,
                 former_count: int | None, power: float, alpha: float) -> None:
    """Size a suite: the paired prompts an A/B needs to detect a change in expect pass
    rate (--detect), or the smallest change a suite of --count N prompts detects, when a share
    of prompts (--disagreement) pass on one side only. Connor's paired formula for
    McNemar's test, the one the summary's detectable change uses (docs/gate.md).

    \b
    Example:
      quantcheck plan --detect 2 --disagreement 10
      quantcheck plan --count 500 --disagreement 6
    """
    prompts = _count(count, former_count)
    if (detect is None) == (prompts is None):
        raise click.UsageError("give --detect POINTS (prompts needed) or --count N (the "
                               "smallest change N prompts detect)")
    share, level = disagreement / 100, f"{power:g}% power, {alpha:g}% two-sided"
    if detect is not None:
        if detect > disagreement:
            raise click.BadParameter(
                f"{detect:g} points is more than the {disagreement:g}% of prompts that "
                "disagree: a pass rate moves only on prompts that pass on one side only",
                param_hint="--detect")
        needed = math.ceil(paired_prompts_needed(detect / 100, share, power / 100,
                                                 alpha / 100))
        click.echo(f"To detect a change of {detect:g} points in expect pass rate when "
                   f"{disagreement:g}% of prompts pass on one side only ({level}): about "
                   f"{needed:,} paired prompts.")
        return
    assert prompts is not None
    change = detectable_change(prompts, share, power / 100, alpha / 100)
    if change is None:
        least = math.ceil(paired_prompts_needed(share, share, power / 100, alpha / 100))
        click.echo(f"{prompts:,} paired prompts detect no change when {disagreement:g}% of "
                   f"prompts pass on one side only ({level}): even a change of "
                   f"{disagreement:g} points (every disagreement one way) needs {least:,}.")
        return
    click.echo(f"{prompts:,} paired prompts detect a change of {100 * change:.2g} points in "
               f"expect pass rate when {disagreement:g}% of prompts pass on one side only "
               f"({level}).")


def _count(count: int | None, former_count: int | None) -> int | None:
    """--count N, or its former name --prompts N (said once on stderr)."""
    if former_count is None:
        return count
    if count is not None:
        raise click.UsageError("give --count N once (--prompts N is its former name)")
    click.echo("note: plan's --prompts N is now --count N", err=True)
    return former_count
