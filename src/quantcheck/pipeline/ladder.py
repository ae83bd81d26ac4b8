"""`quantcheck ladder`: the same recall probes at a ladder of prompt lengths on A and
B, and the length from which B departs from A (the onset).

Before the first request: both servers' context (the rungs that fit), each probe's
filler sized on A's tokenizer (OUT/plan.json, kept for a rerun), each side's prefill
speed on a short prompt, and the cost of every rung (progress.planned). Then rung by
rung, shortest first, probe by probe: A's repeats, B's answer, B's teacher-forced
scoring of A's first answer right after B's own (a llama-server slot still holds the
prompt then, so scoring costs no second prefill), and the probe's report (pairs,
summary, sheet) in OUT/rungs/TOKENS/PROBE/; ladder.json after each probe, the page
(index.html) at the end. A probe measured in an earlier pass is read back, not sent
again: a rerun of the same command resumes where the last one stopped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import msgspec

from .._version import __version__
from ..errors import EndpointError, QuantcheckError, RunFormatError, RunMismatch
from ..fetch.collect import CollectSettings, collect_async
from ..fetch.forced_scoring import ForcedSettings, score_run_async
from ..fetch.ladder import (
    WARM_UP_TOKENS,
    LadderServer,
    Tokenizer,
    ladder_server,
    prefill_rate,
    probe_text,
    size_probe,
)
from ..gate.ladder_gate import decide_ladder
from ..present.ladder_page import render_ladder
from ..store.files import make_directory, read_regular, write_atomic
from ..store.haystack import sentences_for
from ..store.ladder_records import (
    Ladder,
    LadderPlan,
    LadderProbe,
    LadderSettings,
    LadderSide,
    PlannedRung,
    ProbeResult,
    Rung,
)
from ..store.preflight_records import Preflight
from ..store.prompt_sets import load_prompts
from ..store.prompt_writer import entries_yaml
from ..store.report_dir import read_forced, read_pair_rows
from ..store.report_records import Cells
from ..store.run_dir import COMPLETIONS, MANIFEST, Cell, load_run
from ..store.run_records import Completion, Expect
from ..triage.cells import axes_sentence, confound_warning, differing_axes
from ..triage.ladder import (
    estimate_seconds,
    floor_sentence,
    measured_reach,
    onset,
    onset_sentence,
    probe_result,
    rung_figures,
)
from ..triage.ladder_plan import (
    DEFAULT_DEPTHS,
    probes_of,
    prompt_entry,
    rung_lengths,
    too_long,
)
from ..wire.client import EndpointClient, api_key_from_env
from .comparing import CompareOptions, compare_runs
from .event_loop import run_blocking

PLAN, LADDER = "plan.json", "ladder.json"
PROMPT_HEADING = "One probe of a context ladder (quantcheck ladder); plan.json holds the ladder."
MAX_PLAN_BYTES = 16 << 20


@dataclass
class LadderRun:
    """Two sides (their endpoint, label, model, key, cell, timeout, retries and extra
    body; the ladder sets the rest) and the ladder's settings."""

    a: CollectSettings
    b: CollectSettings
    out: Path
    lengths: Sequence[int] | None = None  # None: 1,024, 2,048, ... as the context allows
    max_length: int | None = None
    depths: Sequence[float] = DEFAULT_DEPTHS
    absent: bool = True
    language: str = "en"
    api: str = "completions"
    max_tokens: int = 16
    repeats: int = 2
    top_logprobs: int = 20
    forced: bool = True
    seed: int = 1
    served_tokens: int | None = None


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


class _Notes:
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
class _Clock:
    """What each phase of a probe took, (prompt tokens, seconds) per measured probe (read
    from its runs and scoring, so a resumed ladder has them too), for the estimates;
    before any, each side's prefill rate on a short prompt."""

    rates: dict[str, float | None]
    repeats: int
    forced: bool
    points: dict[str, list[tuple[int, float]]] = field(
        default_factory=lambda: {"a": [], "b": [], "forced": []})

    def add(self, unit: Path, tokens: int) -> None:
        for side in "ab":
            seconds = sum(r.e2e_s or 0.0 for r in _records(unit / side))
            if seconds > 0:
                self.points[side].append((tokens, seconds))
        if (unit / "forced" / "forced.json").exists():
            seconds = read_forced(unit / "forced")[0].seconds or 0.0
            if seconds > 0:
                self.points["forced"].append((tokens, seconds))

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


def run_ladder(job: LadderRun, progress: LadderProgress | None = None
               ) -> tuple[Ladder, Path]:
    """Measure the ladder (resuming one stopped before); ladder.json and the page."""
    progress = progress or SilentProgress()
    started = time.monotonic()
    plan, servers, rates = run_blocking(_prepare(job))
    clock = _Clock(rates, plan.settings.repeats, plan.settings.forced)
    for planned in plan.rungs:
        for probe in planned.probes:
            if _measured(_unit(job, planned.tokens, probe), plan.settings.forced):
                clock.add(_unit(job, planned.tokens, probe), probe.prompt_tokens or 0)
    progress.planned(plan, [_cost(job, rung, clock) for rung in plan.rungs], rates)
    rungs: list[Rung] = []
    for number, planned in enumerate(plan.rungs):
        progress.rung_starting(_cost(job, planned, clock))
        results: list[ProbeResult] = []
        for probe in planned.probes:
            began = time.monotonic()
            results.append(_probe(job, plan, planned.tokens, probe, clock, progress,
                                  first=number == 0 and not results))
            progress.probe_done(planned.tokens, results[-1], time.monotonic() - began)
            partial = [*rungs, _rung(job, planned.tokens, results)]
            _write(job, _ladder(job, plan, servers, partial, started))
        rungs.append(_rung(job, planned.tokens, results))
        progress.rung_done(rungs[-1])
    ladder = _ladder(job, plan, servers, rungs, started)
    _write(job, ladder)
    return ladder, render_ladder(job.out, ladder)


def settings_of(job: LadderRun, lengths: list[int]) -> LadderSettings:
    return LadderSettings(lengths=lengths, depths=[float(d) for d in job.depths],
                          absent=job.absent, language=job.language, api=job.api,
                          max_tokens=job.max_tokens, repeats=job.repeats,
                          top_logprobs=job.top_logprobs, forced=job.forced, seed=job.seed)


async def _prepare(job: LadderRun
                   ) -> tuple[LadderPlan, dict[str, LadderServer], dict[str, float | None]]:
    """Both servers, the plan (read back, or made and written), each side's prefill."""
    async with _client(job.a) as a_client, _client(job.b) as b_client:
        servers = {"a": await ladder_server(a_client, job.a.model),
                   "b": await ladder_server(b_client, job.b.model)}
        lengths = _lengths(job, servers)
        settings = settings_of(job, lengths)
        plan = _stored_plan(job.out, settings)
        if plan is None:
            tokenizer = Tokenizer(a_client, servers["a"], job.language)
            plan = LadderPlan(settings=settings, length_measure=tokenizer.describe(),
                              rungs=[await _sized(settings, n, tokenizer) for n in lengths])
            make_directory(job.out)
            write_atomic(job.out / PLAN, msgspec.json.format(msgspec.json.encode(plan)))
        warm_up = probe_text(LadderProbe(id="warm-up", kind="absent"),
                             sentences_for(WARM_UP_TOKENS, job.language, job.seed + 1),
                             job.seed + 1, job.language)
        rates: dict[str, float | None] = {"a": None, "b": None}
        if not any(_measured(_unit(job, rung.tokens, probe), settings.forced)
                   for rung in plan.rungs for probe in rung.probes):
            rates = {side: await prefill_rate(client, servers[side], WARM_UP_TOKENS, warm_up)
                     for side, client in (("a", a_client), ("b", b_client))}
    return plan, servers, rates


def _client(side: CollectSettings) -> EndpointClient:
    return EndpointClient(side.endpoint, api_key_from_env(side.api_key_env), side.timeout)


def _lengths(job: LadderRun, servers: dict[str, LadderServer]) -> list[int]:
    """The rungs asked, or those the smaller context holds; refused when one does not
    fit a server's context (nothing is sent)."""
    known = [s.context for s in servers.values() if s.context]
    context = min(known) if known else None
    if job.lengths:
        lengths = sorted(set(job.lengths))
        over = too_long(lengths, context, job.max_tokens)
        if over:
            raise QuantcheckError(
                f"--lengths {', '.join(f'{n:,}' for n in over)}: a prompt that long and "
                f"its {job.max_tokens}-token answer do not fit the servers' context of "
                f"{context:,} tokens; give shorter lengths")
        return lengths
    lengths = rung_lengths(context, job.max_tokens, job.max_length)
    if not lengths:
        raise QuantcheckError(f"the servers' context ({context} tokens) holds no rung of "
                              "1,024 tokens: give --lengths")
    return lengths


def _stored_plan(out: Path, settings: LadderSettings) -> LadderPlan | None:
    """The plan an earlier pass wrote, when its settings are these; refused when they
    are not (its runs were asked otherwise)."""
    path = out / PLAN
    if not path.exists():
        return None
    try:
        plan = msgspec.json.decode(read_regular(path, MAX_PLAN_BYTES, "ladder plan"),
                                   type=LadderPlan)
    except (OSError, ValueError, msgspec.ValidationError) as exc:
        raise RunFormatError(f"{path}: not a ladder plan ({exc}); use another --out") from None
    if plan.settings != settings:
        old, new = msgspec.structs.asdict(plan.settings), msgspec.structs.asdict(settings)
        changed = ", ".join(f"{key} {old[key]!r} (now {new[key]!r})"
                            for key in old if old[key] != new[key])
        raise RunMismatch(f"{out} holds a ladder made with other settings: {changed}. "
                          "Rerun with those, or use another --out")
    return plan


async def _sized(settings: LadderSettings, tokens: int, tokenizer: Tokenizer) -> PlannedRung:
    probes = [await size_probe(tokenizer.count, probe, tokens, settings.seed,
                               settings.language) for probe in probes_of(settings, tokens)]
    return PlannedRung(tokens=tokens, probes=probes)


def _unit(job: LadderRun, tokens: int, probe: LadderProbe) -> Path:
    return job.out / "rungs" / str(tokens) / probe.id


def _cost(job: LadderRun, planned: PlannedRung, clock: _Clock) -> RungCost:
    requests = clock.repeats + 1 + (1 if clock.forced else 0)
    sent = sum((p.prompt_tokens or planned.tokens) * requests for p in planned.probes)
    estimates = [clock.probe(p.prompt_tokens or planned.tokens) for p in planned.probes
                 if not _measured(_unit(job, planned.tokens, p), clock.forced)]
    measured = not estimates
    seconds = None if None in estimates else sum(e for e in estimates if e is not None)
    return RungCost(planned.tokens, len(planned.probes), sent, seconds, measured)


def _measured(unit: Path, forced: bool) -> bool:
    """A probe measured whole in an earlier pass: both runs complete, scored (when
    asked), compared."""
    if not (unit / "summary.json").exists() or (forced and not
                                                (unit / "forced" / "forced.json").exists()):
        return False
    try:
        return all(load_run(unit / side).manifest.status == "complete" for side in "ab")
    except QuantcheckError:
        return False


def _probe(job: LadderRun, plan: LadderPlan, tokens: int, probe: LadderProbe,
           clock: _Clock, progress: LadderProgress, first: bool) -> ProbeResult:
    """Collect, score and compare one probe (unless measured before); its figures."""
    unit = _unit(job, tokens, probe)
    make_directory(unit)
    prompt_file = unit / "prompt.yaml"
    entry = prompt_entry(plan.settings, tokens, probe)
    write_atomic(prompt_file, entries_yaml([entry], PROMPT_HEADING).encode("utf-8"))
    forced_note = ""
    if not _measured(unit, plan.settings.forced):
        forced_note = run_blocking(_fetch(job, plan.settings, prompt_file, unit, progress,
                                          first))
        forced = unit / "forced"
        compare_runs(unit / "a", unit / "b", unit, CompareOptions(
            forced=forced if (forced / "forced.json").exists() else None))
        clock.add(unit, probe.prompt_tokens or tokens)
    return _figures(unit, job.out, probe, prompt_file, forced_note)


async def _fetch(job: LadderRun, settings: LadderSettings, prompt_file: Path, unit: Path,
                 progress: LadderProgress, first: bool) -> str:
    """A's repeats, B's answer, then B's scoring of A's tokens (unless scored since A's
    run last changed); why scoring was not done ("" when it was)."""
    for side, folder, repeats in ((job.a, "a", settings.repeats), (job.b, "b", 1)):
        await collect_async([prompt_file], unit / folder, _side(side, settings, repeats, first),
                            _Notes(progress, folder.upper()))
    scored = unit / "forced" / "forced.json"
    if not settings.forced or (scored.exists() and scored.stat().st_mtime_ns >= (
            unit / "a" / COMPLETIONS).stat().st_mtime_ns):
        return ""
    try:
        await score_run_async(unit / "a", unit / "forced", ForcedSettings(
            endpoint=job.b.endpoint, model=job.b.model, top_k=settings.top_logprobs,
            concurrency=1, timeout=job.b.timeout, api_key_env=job.b.api_key_env,
            retries=job.b.retries, extra_body=job.b.request.extra_body))
    except RunFormatError:
        return "not scored: A's answers carry no logprobs"
    except EndpointError as exc:
        return f"not scored: {exc}"
    return ""


def _side(side: CollectSettings, settings: LadderSettings, repeats: int, first: bool
          ) -> CollectSettings:
    """One side's collection of a probe: its repeats, one request at a time, whole
    answers; the preflight (its context probe off: the ladder is that probe) only on the
    first probe, where nothing was asked yet."""
    return msgspec.structs.replace(
        side, repeats=repeats, concurrency=1, stream=False, preflight=first,
        context_tokens=0, top_logprobs=settings.top_logprobs)


def _figures(unit: Path, out: Path, probe: LadderProbe, prompt_file: Path, note: str
             ) -> ProbeResult:
    """A measured probe's figures, read from its runs, pairs and forced lines."""
    prompt = load_prompts([prompt_file])[0]
    a, b = _records(unit / "a"), _records(unit / "b")
    rows = read_pair_rows(unit) if (unit / "pairs.csv").exists() else []
    forced_lines = read_forced(unit / "forced")[1] \
        if (unit / "forced" / "forced.json").exists() else {}
    result = probe_result(probe, str(unit.relative_to(out)), prompt.expect or Expect(), a, b,
                          rows[0] if rows else None, forced_lines.get(prompt.id))
    if note:
        result.note = note
    return result


def _records(run_dir: Path) -> list[Completion]:
    if not (run_dir / MANIFEST).exists():
        return []
    return list(load_run(run_dir).completions())


def _rung(job: LadderRun, tokens: int, results: list[ProbeResult]) -> Rung:
    """A rung's figures, with its tokens sent and the seconds its requests took (each
    request's own time, from the runs and the scoring: a resumed rung keeps them)."""
    sent, seconds = 0, 0.0
    for result in results:
        unit = job.out / result.report
        length = result.probe.prompt_tokens or tokens
        for side in "ab":
            records = _records(unit / side)
            sent += length * len(records)
            seconds += sum(r.e2e_s or 0.0 for r in records)
        if (unit / "forced" / "forced.json").exists():
            sent += length
            seconds += read_forced(unit / "forced")[0].seconds or 0.0
    return rung_figures(tokens, results, sent, round(seconds, 3))


def _ladder(job: LadderRun, plan: LadderPlan, servers: dict[str, LadderServer],
            rungs: list[Rung], started: float) -> Ladder:
    a_cell, b_cell, a_key, b_key = _cells(job, plan)
    differing = differing_axes(a_cell, b_cell)
    planned = [r.tokens for r in plan.rungs]
    return Ladder(
        quantcheck_version=__version__,
        a=_side_record(job.a, servers["a"]), b=_side_record(job.b, servers["b"]),
        cells=Cells(a=a_cell, b=b_cell, a_key=a_key, b_key=b_key, differs=differing,
                    warning=confound_warning(differing)),
        axes=axes_sentence(a_cell, b_cell, differing), settings=plan.settings,
        length_measure=plan.length_measure, rungs=rungs, onset=onset(rungs),
        onset_sentence=onset_sentence(rungs, planned),
        floor_sentence=floor_sentence(rungs, plan.settings.repeats),
        tested_up_to=measured_reach(rungs), not_tested=_not_tested(rungs, planned),
        complete=len(rungs) == len(planned) and all(
            r.checked == len(r.probes) for r in rungs),
        gate=decide_ladder(rungs, job.served_tokens),
        seconds=round(time.monotonic() - started, 3))


def _side_record(side: CollectSettings, server: LadderServer) -> LadderSide:
    return LadderSide(label=side.label, endpoint=server.endpoint, model=server.model,
                      runtime=server.runtime, context_len=server.context)


def _cells(job: LadderRun, plan: LadderPlan) -> tuple[Cell, Cell, str | None, str | None]:
    """Each side's serving cell and key as its first probe's run recorded them."""
    unit = _unit(job, plan.rungs[0].tokens, plan.rungs[0].probes[0])
    a, b = (load_run(unit / side).manifest if (unit / side / MANIFEST).exists() else None
            for side in "ab")
    return (a.cell if a else {}, b.cell if b else {}, a.cell_key if a else None,
            b.cell_key if b else None)


def _not_tested(rungs: list[Rung], planned: list[int]) -> list[str]:
    """Every probe not measured on both sides, or not scored, with the reason."""
    said = []
    for rung in rungs:
        for result in rung.probes:
            name = f"{rung.tokens:,} tokens, {result.probe.id}"
            if result.a_passed is None or result.b_passed is None:
                said.append(f"{name}: " + ("A gave no answer" if result.a_passed is None
                                           else f"B gave no answer ({result.b_answer})"))
            elif result.note:
                said.append(f"{name}: teacher-forced KL {result.note}")
    reached = {rung.tokens for rung in rungs}
    said += [f"{n:,} tokens: not reached" for n in planned if n not in reached]
    return said


def _write(job: LadderRun, ladder: Ladder) -> None:
    write_atomic(job.out / LADDER, msgspec.json.format(msgspec.json.encode(ladder),
                                                       indent=2) + b"\n")


def read_ladder(out: Path) -> Ladder:
    """OUT/ladder.json read back."""
    try:
        return msgspec.json.decode(read_regular(out / LADDER, MAX_PLAN_BYTES, "ladder"),
                                   type=Ladder)
    except (OSError, ValueError, msgspec.ValidationError) as exc:
        raise RunFormatError(f"{out / LADDER}: not a ladder ({exc})") from None


