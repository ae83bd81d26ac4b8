"""The whole A/B as one library call: collect both sides, score teacher-forced drift if
asked, compare, write the report; `quantcheck run` is this plus printing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .client import run_blocking
from .collect import CollectSettings, Reporter, collect_async
from .compare import compare_to_dir
from .forced import ForcedSettings, score_run
from .records import Prompt
from .reportdir import Summary


@dataclass
class CompareOptions:
    """What a comparison reads besides the two sides (`compare` and `run` options)."""

    sig_digits: int = 12
    approvals: Path | None = None
    a_log: Path | None = None
    b_log: Path | None = None
    signature_files: tuple[Path, ...] = ()
    forced: Path | None = None  # a folder written by `quantcheck forced`


def compare_runs(a: Path, b: Path, out: Path, options: CompareOptions | None = None,
                 prompts: dict[str, Prompt] | None = None) -> Summary:
    """Compare two sides into a report directory; its summary."""
    options = options or CompareOptions()
    return compare_to_dir(a, b, out, sig_digits=options.sig_digits, prompts=prompts,
                          approvals=options.approvals,
                          logs={"a": options.a_log, "b": options.b_log},
                          signature_files=options.signature_files, forced=options.forced)[1]


@dataclass
class ABRun:
    """One A/B: the two sides' settings and where everything goes."""

    a: CollectSettings
    b: CollectSettings
    prompt_files: Sequence[Path]
    out: Path  # runs in OUT/a and OUT/b, the report in OUT
    one_side_at_a_time: bool = False
    force: bool = False
    compare: CompareOptions = field(default_factory=CompareOptions)
    forced: ForcedSettings | None = None  # score A's tokens on B into OUT/forced


def run_ab(ab: ABRun, reporters: tuple[Reporter, Reporter] | None = None,
           notify: Callable[[str], None] | None = None) -> Summary:
    """Collect both sides (together, or one after the other), score forced drift when
    asked, compare; the summary of the report written to `ab.out`. `notify` hears
    which stage starts (the library never prints)."""

    async def both() -> None:
        jobs = [collect_async(ab.prompt_files, ab.out / side, settings,
                              reporters[n] if reporters else None, ab.force)
                for n, (side, settings) in enumerate((("a", ab.a), ("b", ab.b)))]
        if ab.one_side_at_a_time:
            for job in jobs:
                await job
        else:
            await asyncio.gather(*jobs)

    run_blocking(both())
    options = ab.compare
    if ab.forced is not None:
        if notify:
            notify(f"scoring A's tokens on {ab.forced.endpoint} (teacher forcing) ...")
        score_run(ab.out / "a", ab.out / "forced", ab.forced)
        options = CompareOptions(**{**options.__dict__, "forced": ab.out / "forced"})
    return compare_runs(ab.out / "a", ab.out / "b", ab.out, options)
