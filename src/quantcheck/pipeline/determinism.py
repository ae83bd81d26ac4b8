"""Is one endpoint deterministic? Its runs, one per repeat mode (collected in one event
loop), analyzed into determinism.csv, determinism.json and the page; `quantcheck
determinism` is this plus printing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import msgspec

from ..fetch.collect import CollectSettings, Reporter, collect_async
from ..present.determinism_page import render_determinism
from ..store.files import CSV_WRITTEN_WITH, csv_rows, make_directory, write_atomic
from ..store.folders.folder_kinds import DETERMINISM, DETERMINISM_CSV, DETERMINISM_JSON, claim
from ..store.folders.run_dir import Parameters, load_run, write_json_atomic
from ..store.records.report_records import DeterminismReport, DeterminismRow, ModeCounts
from ..store.redaction import public_url
from ..triage.determinism import analyze_side
from ..triage.sides import load_side
from .event_loop import run_blocking


@dataclass
class DeterminismRun:
    """One endpoint asked the same prompts once per repeat mode, each run in OUT/MODE."""

    endpoint: str
    modes: Sequence[str]  # repeat modes (fetch.collect.REPEAT_MODES), in order
    prompt_files: Sequence[Path]
    out: Path
    parameters: Parameters = field(default_factory=Parameters)  # its repeat_mode unused
    force: bool = False
    sig_digits: int = 12

    def settings(self, mode: str, first: bool) -> CollectSettings:
        """A mode's collection; the endpoint is checked once, before the first mode:
        the same server answers all."""
        parameters = msgspec.structs.replace(self.parameters, repeat_mode=mode,
                                             preflight=self.parameters.preflight and first,
                                             cache_off=False)  # the server as it serves
        return CollectSettings(endpoint=self.endpoint, label=mode,
                               **msgspec.structs.asdict(parameters))


class ModeProgress(Protocol):
    """Hears where the determinism flow is: which mode it collects (and takes that
    mode's Reporter), and when it analyzes the runs."""

    def collecting(self, mode: str, run_dir: Path) -> Reporter | None: ...
    def analyzing(self) -> None: ...


def run_determinism(job: DeterminismRun, progress: ModeProgress | None = None
                    ) -> tuple[DeterminismReport, Path]:
    """Collect a run per mode (resumable, like collect), then `determinism_report`."""
    claim(job.out, DETERMINISM)
    runs = run_blocking(_collect_modes(job, progress))
    if progress is not None:
        progress.analyzing()
    served = load_run(runs[job.modes[0]]).manifest.model
    return determinism_report(runs, job.out, public_url(job.endpoint),
                              job.parameters.model or served or "", job.sig_digits)


async def _collect_modes(job: DeterminismRun, progress: ModeProgress | None
                         ) -> dict[str, Path]:
    runs = {}
    for number, mode in enumerate(job.modes):
        run_dir = job.out / mode
        reporter = progress.collecting(mode, run_dir) if progress is not None else None
        await collect_async(job.prompt_files, run_dir, job.settings(mode, number == 0),
                            reporter, job.force)
        runs[mode] = run_dir
    return runs


def determinism_report(run_dirs: dict[str, Path], out: Path, endpoint: str, model: str,
                       sig_digits: int = 12) -> tuple[DeterminismReport, Path]:
    """Analyze one run per mode; write determinism.csv, determinism.json and the page
    (its path is returned with the report)."""
    rows: list[DeterminismRow] = []
    for mode, run_dir in run_dirs.items():
        with load_side(run_dir, sig_digits) as side:
            rows += analyze_side(side, mode, sig_digits)
    modes: dict[str, ModeCounts] = {}
    for mode in dict.fromkeys(row.mode for row in rows):
        in_mode = [row for row in rows if row.mode == mode]
        verdicts = [row.verdict for row in in_mode]
        routings = [row.routing for row in in_mode]
        modes[mode] = ModeCounts(prompts=len(verdicts),
                                 text_varies=verdicts.count("text varies"),
                                 logprobs_vary=verdicts.count("logprobs vary"),
                                 deterministic=verdicts.count("deterministic"),
                                 routing={kind: routings.count(kind) for kind in
                                          dict.fromkeys(routings) if kind},
                                 only_first_differs=sum(r.only_first_differs for r in in_mode))
    report = DeterminismReport(sig_digits=sig_digits, modes=modes, prompts=rows)
    claim(out, DETERMINISM)
    make_directory(out)
    import pandas as pd  # here alone: importing this module (the CLI does) stays light

    frame = pd.DataFrame([msgspec.structs.asdict(row) for row in rows],
                         columns=list(DeterminismRow.__struct_fields__))
    text = csv_rows(frame.to_csv(index=False, lineterminator=CSV_WRITTEN_WITH))
    write_atomic(out / DETERMINISM_CSV, text.encode("utf-8"))
    write_json_atomic(out / DETERMINISM_JSON, msgspec.to_builtins(report))
    return report, render_determinism(out, report, endpoint, model)
