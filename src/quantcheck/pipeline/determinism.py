"""Is one endpoint deterministic? Its runs, one per repeat mode, analyzed into
determinism.csv, determinism.json and the page; `quantcheck determinism` is this plus
collecting and printing."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pandas as pd

from ..judge.determinism import analyze_side
from ..judge.sides import load_side
from ..present.determinism_page import render_determinism
from ..store.files import make_directory, write_atomic
from ..store.report_records import DeterminismReport, DeterminismRow, ModeCounts
from ..store.run_dir import write_json_atomic


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
        verdicts = [row.verdict for row in rows if row.mode == mode]
        routings = [row.routing for row in rows if row.mode == mode]
        modes[mode] = ModeCounts(prompts=len(verdicts),
                                 text_varies=verdicts.count("text varies"),
                                 logprobs_vary=verdicts.count("logprobs vary"),
                                 deterministic=verdicts.count("deterministic"),
                                 routing={kind: routings.count(kind) for kind in
                                          dict.fromkeys(routings) if kind})
    report = DeterminismReport(sig_digits=sig_digits, modes=modes, prompts=rows)
    make_directory(out)
    frame = pd.DataFrame([msgspec.structs.asdict(row) for row in rows],
                         columns=list(DeterminismRow.__struct_fields__))
    write_atomic(out / "determinism.csv", frame.to_csv(index=False).encode("utf-8"))
    write_json_atomic(out / "determinism.json", msgspec.to_builtins(report))
    return report, render_determinism(out, report, endpoint, model)
