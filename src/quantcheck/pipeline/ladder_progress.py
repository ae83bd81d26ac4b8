"""What the context ladder tells while it runs (the library never prints): the plan and
each rung's cost before it is sent (`RungCost`, from `Clock`: what each phase of a probe
took so far, read from the probes' runs and scoring, or each side's prefill rate on a
short prompt before any), each probe and rung as it is measured, and what collecting a
probe has to say (`Notes`: the preflight's warnings, a request that failed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..store.records.ladder_records import LadderPlan, PlannedRung, ProbeResult, Rung
from ..store.records.preflight_records import Preflight
from ..store.records.run_records import Completion
from ..triage.ladder import estimate_seconds
from .ladder_report import measured, records, scoring_seconds, unit_folder


@dataclass(frozen=True)
class RungCost:
    """What a rung costs, said before it is sent (`seconds`: an estimate from what was
    measured so far; None: nothing measured yet)."""

    tokens: int
    probes: int
    tokens_sent: int
    seconds: float | None
    measured: bool = False  # every probe of it was measured in an earlier pass


class LadderProgress(Protocol):
    """Hears the plan and every rung's cost before they are sent, then each probe and
    rung as it is measured (the library never prints)."""

    def planned(self, plan: LadderPlan, costs: list[RungCost],
                rates: dict[str, float | None]) -> None: ...
    def rung_starting(self, cost: RungCost) -> None: ...
    def probe_done(self, tokens: int, result: ProbeResult, seconds: float) -> None: ...
    def rung_done(self, rung: Rung) -> None: ...
    def note(self, text: str) -> None: ...


class SilentProgress:
    def planned(self, plan: LadderPlan, costs: list[RungCost],
                rates: dict[str, float | None]) -> None:
        pass

    def rung_starting(self, cost: RungCost) -> None:
        pass

    def probe_done(self, tokens: int, result: ProbeResult, seconds: float) -> None:
        pass

    def rung_done(self, rung: Rung) -> None:
        pass

    def note(self, text: str) -> None:
        pass


class Notes:
    """What collecting a probe has to say, passed on as the ladder's notes: the
    preflight's warnings, a request that failed, any other warning."""

    def __init__(self, progress: LadderProgress, side: str) -> None:
        self.progress, self.side = progress, side

    def checking(self, endpoint: str) -> None:
        self.progress.note(f"{self.side}: preflight checks on {endpoint} ...")

    def checked(self, report: Preflight) -> None:
        for check in report.checks:
            if check.status in ("warn", "fail"):
                self.progress.note(f"{self.side}: preflight {check.name} {check.status}: "
                                   f"{check.message}")

    def started(self, total: int, already_done: int) -> None:
        pass

    def completed(self, record: Completion) -> None:
        if record.error:
            self.progress.note(f"{self.side}: {record.prompt_id} repeat {record.repeat} "
                               f"failed: {record.error}")

    def warn(self, message: str) -> None:
        self.progress.note(f"{self.side}: warning: {message}")


@dataclass
class Clock:
    """What each phase of a probe took, (prompt tokens, seconds) per measured probe (read
    from its runs and scoring, so a resumed ladder has them too), for the estimates;
    before any, each side's prefill rate on a short prompt."""

    rates: dict[str, float | None]
    repeats: int
    forced: bool
    points: dict[str, list[tuple[int, float]]] = field(
        default_factory=lambda: {"a": [], "b": [], "forced": []})

    def add(self, unit: Path, tokens: int) -> None:
        for phase, seconds in (("a", _answering(unit / "a")), ("b", _answering(unit / "b")),
                               ("forced", scoring_seconds(unit))):
            if seconds > 0:
                self.points[phase].append((tokens, seconds))

    def phase(self, name: str, tokens: int) -> float | None:
        measured = estimate_seconds(self.points[name], tokens)
        if measured is not None:
            return measured
        side = "b" if name == "forced" else name
        rate = self.rates.get(side)
        if not rate:
            return None
        return tokens / rate * (self.repeats if name == "a" else 1)

    def probe(self, tokens: int) -> float | None:
        phases = ["a", "b"] + (["forced"] if self.forced else [])
        estimates = [self.phase(name, tokens) for name in phases]
        known = [e for e in estimates if e is not None]
        return sum(known) if len(known) == len(estimates) else None


def _answering(run_dir: Path) -> float:
    return sum(r.e2e_s or 0.0 for r in records(run_dir))


def rung_cost(out: Path, planned: PlannedRung, clock: Clock) -> RungCost:
    requests = clock.repeats + 1 + (1 if clock.forced else 0)
    sent = sum((p.prompt_tokens or planned.tokens) * requests for p in planned.probes)
    estimates = [clock.probe(p.prompt_tokens or planned.tokens) for p in planned.probes
                 if not measured(unit_folder(out, planned.tokens, p), clock.forced)]
    seconds = None if None in estimates else sum(e for e in estimates if e is not None)
    return RungCost(planned.tokens, len(planned.probes), sent, seconds, not estimates)
