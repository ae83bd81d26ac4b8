"""The determinism certificate's page (`quantcheck determinism --certify`: DIR/index.html):
the statement, the control, the sweep as an inline SVG (the unique outputs per prompt
at each level of each factor), each factor's levels with the control's figures beside
them (its mismatches, first differing token and largest logprob difference at the same
level), and the examples that differed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..store.files import write_atomic
from ..store.records.certificate_records import Certificate, FactorResult, LevelResult
from .templating import template

BAR_WIDTH, BAR_GAP, GROUP_GAP, PLOT_HEIGHT = 26, 6, 30, 120


@dataclass(frozen=True)
class Bar:
    """One level's bar: its height shows the mean unique outputs per prompt (1: every
    answer the same)."""

    factor: str
    level: str
    x: int
    y: float
    height: float
    mean: float
    most: int
    varies: bool


@dataclass(frozen=True)
class Sweep:
    bars: list[Bar]
    groups: list[tuple[str, int, int]]  # factor, x of its first bar, x after its last
    width: int
    height: int
    top: int  # the largest count the axis shows


def sweep(factors: list[FactorResult]) -> Sweep:
    """The bars, factor by factor, scaled so the largest mean fills the plot."""
    shown = [f for f in factors if any(level.comparisons for level in f.levels)]
    top = max([2] + [level.most_unique_outputs for f in shown for level in f.levels])
    bars: list[Bar] = []
    groups: list[tuple[str, int, int]] = []
    x = 40
    for factor in shown:
        start = x
        for level in factor.levels:
            if not level.comparisons:
                continue
            height = PLOT_HEIGHT * level.mean_unique_outputs / top
            bars.append(Bar(factor.factor, level.level, x, 20 + PLOT_HEIGHT - height, height,
                            level.mean_unique_outputs, level.most_unique_outputs,
                            level.mismatches > 0))
            x += BAR_WIDTH + BAR_GAP
        groups.append((factor.factor, start, x - BAR_GAP))
        x += GROUP_GAP
    return Sweep(bars, groups, max(x, 200), PLOT_HEIGHT + 80, top)


def control_levels(certificate: Certificate) -> dict[tuple[str, str], LevelResult]:
    """The control's figures by factor and level (none without a control that ran)."""
    control = certificate.control
    return {(f.factor, level.level): level for f in (control.factors if control else [])
            for level in f.levels}


def render_certificate(out: Path, certificate: Certificate) -> Path:
    html = template("certificate.html").render(
        certificate=certificate, sweep=sweep(certificate.factors), bar_width=BAR_WIDTH,
        plot_height=PLOT_HEIGHT, control=control_levels(certificate))
    write_atomic(out / "index.html", html.encode("utf-8"))
    return out / "index.html"
