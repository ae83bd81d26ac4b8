"""Progress on stderr while a flow sends requests: a live bar on a terminal, periodic
lines in a log, the reporters the library tells its progress to (failures said once,
then counted), and the flows that send requests run under them."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol

import click

from ..fetch.collect import CollectResult, CollectSettings
from ..pipeline.ab import ABRun, run_all
from ..pipeline.collecting import collect
from ..pipeline.determinism import DeterminismRun, run_determinism
from ..store.records.preflight_records import Preflight
from ..store.records.report_records import DeterminismReport, Overview, Summary
from ..store.records.run_records import Completion
from .guard import redacted, run_guarded, say
from .printing import echo_preflight


class Bar(Protocol):
    """click's progress bar, or PlainProgress in a log."""

    @property
    def length(self) -> int | None: ...
    @length.setter
    def length(self, count: int) -> None: ...

    def __enter__(self) -> object: ...
    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None, /) -> None: ...
    def update(self, count: int, /) -> None: ...


class PlainProgress:
    """Progress for logs (stderr is not a terminal): a line at every tenth, with ETA."""

    def __init__(self, length: int, label: str) -> None:
        self.label = label
        self.done = 0
        self.started = time.monotonic()
        self.length = length

    @property
    def length(self) -> int:
        return self._length

    @length.setter
    def length(self, count: int) -> None:
        """Also a bar that grows (the next side of a run starts when the last is done):
        the next line comes at the next tenth of the new length, not after all of it."""
        self._length = count
        share = self.done / count if count else 1.0
        self.next_report = math.floor(share * 10 + 1e-9) / 10 + 0.1

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, count: int) -> None:
        if not count:  # throughput's clock, past its window, waiting for the last answers
            return
        self.done += count
        share = self.done / self.length if self.length else 1.0
        if share + 1e-9 < self.next_report and self.done != self.length:
            return
        while self.next_report <= share + 1e-9:
            self.next_report += 0.1
        elapsed = time.monotonic() - self.started
        eta = elapsed / share - elapsed if share else 0.0
        click.echo(f"{self.label}: {self.done}/{self.length} ({share:.0%}), "
                   f"{elapsed:.0f} s elapsed, ETA {eta:.0f} s", err=True)


def progress_bar(length: int, label: str) -> Bar:
    """A live bar on a terminal; periodic lines in a log."""
    if sys.stderr.isatty():
        return click.progressbar(length=length, label=label, show_eta=True, show_pos=True,
                                 file=sys.stderr)
    return PlainProgress(length, label)


class ProgressReporter:
    """Shows a progress bar with ETA on stderr and prints warnings once."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Bar | None = None
        self.failures = 0
        self.causes: dict[str, int] = {}  # error -> requests that failed with it

    def checking(self, endpoint: str) -> None:
        say(f"{self.label}: preflight checks on {endpoint} ...")

    def checked(self, report: Preflight) -> None:
        echo_preflight(report, self.label)

    def started(self, total: int, already_done: int) -> None:
        self.announce_resume(total, already_done)
        self.bar = progress_bar(total - already_done, self.label)
        self.bar.__enter__()

    def announce_resume(self, total: int, already_done: int) -> None:
        if already_done:
            click.echo(f"{self.label}: resuming, {already_done} of {total} requests already "
                       "collected", err=True)

    def completed(self, record: Completion) -> None:
        """A failure is printed the first time its cause is seen; the same cause again
        is only counted (a dead server fails every request alike), and `close` prints
        the counts."""
        if record.error:
            self.failures += 1
            seen = self.causes.get(record.error, 0)
            self.causes[record.error] = seen + 1
            if not seen:
                self._line(f"{self.label}: {record.prompt_id} repeat {record.repeat} failed: "
                           f"{record.error}")
        if self.bar is not None:
            self.bar.update(1)

    def warn(self, message: str) -> None:
        self._line(f"warning: {message}")

    def _line(self, text: str) -> None:
        """A line of its own, also when a live bar holds the terminal's last line."""
        click.echo(("\n" if sys.stderr.isatty() else "") + redacted(text), err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
        if any(count > 1 for count in self.causes.values()):
            for cause, count in sorted(self.causes.items(), key=lambda item: -item[1]):
                say(f"{self.label}: {count} request{'s' * (count != 1)} failed: {cause}")
        self.causes = {}


class SharedBar:
    """One progress bar for both sides of `run`."""

    def __init__(self) -> None:
        self.reporters: list[SideReporter] = []
        self.bar: Bar | None = None

    def side(self, label: str) -> SideReporter:
        reporter = SideReporter(self, label)
        self.reporters.append(reporter)
        return reporter

    def grow(self, count: int) -> Bar:
        if self.bar is None:
            self.bar = progress_bar(count, "collecting")
            self.bar.__enter__()
        else:
            self.bar.length = (self.bar.length or 0) + count
        return self.bar

    def close(self) -> None:
        """The bar, then each side's failures counted by cause."""
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
        for reporter in self.reporters:
            reporter.close()


class SideReporter(ProgressReporter):
    def __init__(self, shared: SharedBar, label: str) -> None:
        super().__init__(label)
        self.shared = shared

    def started(self, total: int, already_done: int) -> None:
        self.announce_resume(total, already_done)
        self.bar = self.shared.grow(total - already_done)

    def close(self) -> None:
        self.bar = None  # the shared bar is closed once, by SharedBar
        super().close()


class ModeReporters:
    """A reporter for each repeat mode of `determinism` in turn: the one before is closed
    (its failures counted) when the next mode starts, or the analysis."""

    def __init__(self) -> None:
        self.reporter: ProgressReporter | None = None
        self.hint = ""  # what Ctrl-C leaves behind, where the flow is now
        self.failures = 0  # requests that failed after retries, every mode

    def collecting(self, mode: str, run_dir: Path) -> ProgressReporter:
        self.close()
        self.reporter = ProgressReporter(mode)
        self.hint = f"Records so far are kept in {run_dir}; rerun the same command to resume."
        return self.reporter

    def analyzing(self) -> None:
        self.close()
        self.hint = ""

    def close(self) -> None:
        if self.reporter is not None:
            self.failures += self.reporter.failures
            self.reporter.close()
            self.reporter = None


def collect_with_progress(prompt_files: Sequence[Path], out: Path, settings: CollectSettings,
                          force: bool) -> CollectResult:
    reporter = ProgressReporter(settings.label)
    try:
        return run_guarded(
            lambda: collect(prompt_files, out, settings, reporter, force),
            f"Records so far are kept in {out}; rerun the same command to resume.")
    finally:
        reporter.close()


def run_with_progress(ab: ABRun) -> Summary | Overview:
    """`pipeline.ab.run_all` with one progress bar for every side, its stages on stderr."""
    bar = SharedBar()
    reporters = [bar.side(settings.label) for settings, _ in ab.sides()]
    try:
        result = run_guarded(
            lambda: run_all(ab, reporters, notify=say),
            f"Records so far are kept in {ab.out}; rerun the same command to resume.")
    finally:
        bar.close()
    if any(r.failures for r in bar.reporters):
        click.echo("some requests failed after retries; the comparison skips them. Rerun the "
                   "same command to retry.", err=True)
    return result


def determinism_with_progress(job: DeterminismRun) -> tuple[DeterminismReport, Path, int]:
    """`pipeline.determinism.run_determinism` with each mode's progress; the report, its
    page, and how many requests failed after retries."""
    modes = ModeReporters()
    try:
        report, page = run_guarded(lambda: run_determinism(job, modes), lambda: modes.hint)
    finally:
        modes.close()
    return report, page, modes.failures
