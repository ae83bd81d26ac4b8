"""One endpoint's network flows as plain calls, each running one event loop for the
whole flow: collect a run, measure throughput, score A's tokens on B. The public API
(`quantcheck.collect`) and the `collect`, `throughput` and `forced` commands call these;
the flows themselves are async (fetch/)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..fetch.collect import CollectResult, CollectSettings, Reporter, collect_async
from ..fetch.forced_scoring import ForcedSettings, score_run_async
from ..fetch.throughput import DEFAULT_CONCURRENCY, DEFAULT_MIN_SECONDS, measure
from ..store.folders.folder_kinds import RUN, claim
from ..store.folders.run_dir import Throughput, write_throughput
from ..store.inputs.prompt_sets import RequestOptions
from ..store.records.report_records import ForcedSummary
from .event_loop import run_blocking


def collect(prompt_files: Sequence[str | Path], out: str | Path, settings: CollectSettings,
            reporter: Reporter | None = None, force: bool = False) -> CollectResult:
    """Collect a run; blocking wrapper around `collect_async`."""
    return run_blocking(collect_async(prompt_files, out, settings, reporter, force))


def measure_throughput(endpoint: str, prompt_files: Sequence[Path], *, label: str = "",
                       model: str | None = None, concurrency: int = DEFAULT_CONCURRENCY,
                       min_seconds: float = DEFAULT_MIN_SECONDS, warmup: int = 4,
                       request: RequestOptions | None = None,
                       api_key_env: str | None = None, timeout: float = 600.0,
                       retries: int = 4,
                       progress: Callable[[int, float], None] | None = None,
                       out: Path | None = None) -> Throughput:
    """Measure one endpoint's throughput (fetch.throughput.measure, blocking); with
    `out`, write OUT/throughput.json (a run's folder, claimed before anything is sent)."""
    if out is not None:
        claim(out, RUN)
    measured = run_blocking(measure(
        endpoint, prompt_files, label=label, model=model, concurrency=concurrency,
        min_seconds=min_seconds, warmup=warmup, request=request, api_key_env=api_key_env,
        timeout=timeout, retries=retries, progress=progress))
    if out is not None:
        write_throughput(out, measured)
    return measured


def score_run(a_run: str | Path, out: str | Path, settings: ForcedSettings) -> ForcedSummary:
    """Score A's first repeat of every prompt on B; write forced.jsonl and forced.json."""
    return run_blocking(score_run_async(a_run, out, settings))
