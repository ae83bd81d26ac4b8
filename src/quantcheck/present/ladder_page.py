"""The context ladder's page (OUT/index.html): the onset and A's floor in words, the
serving cells side by side, recall and KL against the prompt's length as inline SVG
(no script, nothing fetched), every rung's figures and every probe's answers, each
linked to its own review sheet."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..store.files import write_atomic
from ..store.records.ladder_records import Ladder, Rung
from ..triage.cells import CELL_AXES
from .templating import template

WIDTH, HEIGHT, LEFT, TOP, PLOT_W, PLOT_H = 560, 220, 56, 16, 470, 160


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    tip: str


@dataclass(frozen=True)
class Series:
    name: str
    color: str
    dashed: bool
    points: list[Point]

    @property
    def path(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)


@dataclass(frozen=True)
class Plot:
    title: str
    series: list[Series]
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    onset_x: float | None


def _x_of(rungs: list[Rung]) -> dict[int, float]:
    """Each rung's x: log2 of its length, spread over the plot's width."""
    logs = [math.log2(r.tokens) for r in rungs]
    low, high = min(logs), max(logs)
    span = high - low or 1.0
    return {r.tokens: LEFT + (PLOT_W * (math.log2(r.tokens) - low) / span if high > low
                              else PLOT_W / 2) for r in rungs}


def _y(value: float, top: float) -> float:
    return TOP + PLOT_H - PLOT_H * (value / top if top else 0.0)


def _series(rungs: list[Rung], xs: dict[int, float], top: float, name: str, color: str,
            value: str, dashed: bool = False) -> Series:
    points = []
    for rung in rungs:
        found = getattr(rung, value)
        if found is None:
            continue
        tip = (f"{name} at {rung.tokens:,} tokens: "
               + (f"{found:.0%}" if value.endswith("recall") else f"{found:.3g}"))
        points.append(Point(xs[rung.tokens], _y(min(found, top), top), tip))
    return Series(name, color, dashed, points)


def plots(ladder: Ladder) -> list[Plot]:
    """Recall (A and B) and KL (B against A on the answer and the needle's code, A
    against its own repeats) against the prompt's length."""
    rungs = sorted(ladder.rungs, key=lambda r: r.tokens)
    if not rungs:
        return []
    xs = _x_of(rungs)
    x_ticks = [(xs[r.tokens], f"{r.tokens:,}") for r in rungs]
    onset_x = xs.get(ladder.onset) if ladder.onset is not None else None
    recall = Plot("Recall: the share of probes passed", [
        _series(rungs, xs, 1.0, "A", "#1f77b4", "a_recall"),
        _series(rungs, xs, 1.0, "B", "#d62728", "b_recall", dashed=True)],
        x_ticks, [(_y(v, 1.0), f"{v:.0%}") for v in (0.0, 0.5, 1.0)], onset_x)
    values = [v for r in rungs for v in (r.kl_mean, r.kl_needle, r.a_floor_kl)
              if v is not None and math.isfinite(v)]
    top = _nice(max(values, default=0.0))
    kl = Plot("Teacher-forced KL(A || B) per position", [
        _series(rungs, xs, top, "B on A's answer", "#d62728", "kl_mean"),
        _series(rungs, xs, top, "B on the needle's code", "#ff7f0e", "kl_needle",
                dashed=True),
        _series(rungs, xs, top, "A against its repeats (floor)", "#1f77b4", "a_floor_kl")],
        x_ticks, [(_y(v, top), f"{v:.3g}") for v in (0.0, top / 2, top)], onset_x)
    return [recall, kl]


def _nice(value: float) -> float:
    """A round top for the axis at or above `value` (1e-3 for an empty plot)."""
    if value <= 0:
        return 1e-3
    power = 10 ** math.floor(math.log10(value))
    return float(next(step * power for step in (1, 2, 5, 10) if step * power >= value))


def cell_rows(ladder: Ladder) -> list[dict[str, object]]:
    a, b = ladder.cells.a, ladder.cells.b
    names = [k for k in CELL_AXES if k in a or k in b] + sorted(
        (set(a) | set(b)) - set(CELL_AXES))
    return [{"name": name, "a": "" if a.get(name) is None else a.get(name),
             "b": "" if b.get(name) is None else b.get(name),
             "differs": name in ladder.cells.differs} for name in names]


def render_ladder(out: Path, ladder: Ladder) -> Path:
    html = template("ladder.html").render(
        ladder=ladder, plots=plots(ladder), cells=cell_rows(ladder), width=WIDTH,
        height=HEIGHT, left=LEFT, top=TOP, plot_w=PLOT_W, plot_h=PLOT_H)
    write_atomic(out / "index.html", html.encode("utf-8"))
    return out / "index.html"
