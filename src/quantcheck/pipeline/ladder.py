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
from dataclasses import dataclass
from pathlib import Path

import msgspec

from ..errors import EndpointError, QuantcheckError, RunFormatError, RunMismatch
from ..fetch.collect import CollectSettings, collect_async
from ..fetch.forced_scoring import ForcedSettings, score_run_async
from ..fetch.ladder import (
    WARM_UP_TOKENS,
    LadderServer,
    Tokenizer,
    ladder_client,
    ladder_server,
    prefill_rate,
    probe_text,
    size_probe,
)
from ..present.ladder_page import render_ladder
from ..store.engines import profile_of
from ..store.files import make_directory, read_regular, write_atomic
from ..store.folders.run_dir import COMPLETIONS
from ..store.inputs.haystack import sentences_for
from ..store.inputs.prompt_writer import entries_yaml
from ..store.records.ladder_records import (
    Ladder,
    LadderPlan,
    LadderProbe,
    LadderSettings,
    LadderSide,
    PlannedRung,
    ProbeResult,
    Rung,
)
from ..triage.ladder_plan import (
    DEFAULT_DEPTHS,
    probes_of,
    prompt_entry,
    rung_lengths,
    too_long,
)
from .comparing import CompareOptions, compare_runs
from .event_loop import run_blocking
from .ladder_progress import Clock, LadderProgress, Notes, SilentProgress, rung_cost
from .ladder_report import (
    FORCED,
    LadderFacts,
    ladder_of,
    measured,
    probe_figures,
    rung_of,
    unit_folder,
    write_ladder,
)

PLAN = "plan.json"
PROMPT_HEADING = "One probe of a context ladder (quantcheck ladder); plan.json holds the ladder."
MAX_PLAN_BYTES = 16 << 20  # a plan holds a line per probe
MAX_SENTENCES = 1_000_000  # the haystack key's own limit


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


def run_ladder(job: LadderRun, progress: LadderProgress | None = None
               ) -> tuple[Ladder, Path]:
    """Measure the ladder (resuming one stopped before); ladder.json and the page."""
    progress = progress or SilentProgress()
    started = time.monotonic()
    plan, servers, rates = run_blocking(_prepare(job))
    clock = Clock(rates, plan.settings.repeats, plan.settings.forced)
    for planned in plan.rungs:
        for probe in planned.probes:
            if measured(unit_folder(job.out, planned.tokens, probe), plan.settings.forced):
                clock.add(unit_folder(job.out, planned.tokens, probe), probe.prompt_tokens or 0)
    progress.planned(plan, [rung_cost(job.out, rung, clock) for rung in plan.rungs], rates)
    sides = {"a": _side_record(job.a, servers["a"]), "b": _side_record(job.b, servers["b"])}
    scoring_body = _scoring_body(job.b, servers["b"])

    def result(rungs: list[Rung]) -> Ladder:
        facts = LadderFacts(sides["a"], sides["b"], job.served_tokens,
                            time.monotonic() - started)
        return ladder_of(job.out, plan, facts, rungs)

    rungs: list[Rung] = []
    for number, planned in enumerate(plan.rungs):
        progress.rung_starting(rung_cost(job.out, planned, clock))
        results: list[ProbeResult] = []
        for probe in planned.probes:
            began = time.monotonic()
            results.append(_probe(job, plan, planned.tokens, probe, clock, progress,
                                  scoring_body, first=number == 0 and not results))
            progress.probe_done(planned.tokens, results[-1], time.monotonic() - began)
            write_ladder(job.out, result([*rungs, rung_of(job.out, planned.tokens, results)]))
        rungs.append(rung_of(job.out, planned.tokens, results))
        progress.rung_done(rungs[-1])
    ladder = result(rungs)
    write_ladder(job.out, ladder)
    return ladder, render_ladder(job.out, ladder)


def _scoring_body(side: CollectSettings, server: LadderServer) -> dict[str, object]:
    """B's extra body for teacher forcing, its engine's prompt cache kept on (llama.cpp:
    `cache_prompt: true`, unless --extra-body says otherwise): B's slot still holds the
    prompt B just answered, so scoring costs no second prefill (with it off, every
    position evaluates the whole prompt: 16 prefills of 8K tokens for one answer). The
    scoring then also runs in the reverse order, and forced.json's order floor says how
    much the reuse moves the KL."""
    profile = profile_of(server.runtime)
    field = profile.cache_off_field if profile else None
    if field is None or field in side.request.extra_body:
        return side.request.extra_body
    return {**side.request.extra_body, field: True}


def _side_record(side: CollectSettings, server: LadderServer) -> LadderSide:
    return LadderSide(label=side.label, endpoint=server.endpoint, model=server.model,
                      runtime=server.runtime, context_len=server.context)


def settings_of(job: LadderRun, lengths: list[int]) -> LadderSettings:
    return LadderSettings(lengths=lengths, depths=[float(d) for d in job.depths],
                          absent=job.absent, language=job.language, api=job.api,
                          max_tokens=job.max_tokens, repeats=job.repeats,
                          top_logprobs=job.top_logprobs, forced=job.forced, seed=job.seed)


async def _prepare(job: LadderRun
                   ) -> tuple[LadderPlan, dict[str, LadderServer], dict[str, float | None]]:
    """Both servers, the plan (read back, or made and written), each side's prefill."""
    async with ladder_client(job.a) as a_client, ladder_client(job.b) as b_client:
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
        if not any(measured(unit_folder(job.out, rung.tokens, probe), settings.forced)
                   for rung in plan.rungs for probe in rung.probes):
            rates = {side: await prefill_rate(client, servers[side], WARM_UP_TOKENS, warm_up)
                     for side, client in (("a", a_client), ("b", b_client))}
    return plan, servers, rates


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
    if not _as_planned(plan):
        raise RunFormatError(f"{path}: its rungs and probes are not the ones its settings "
                             "make (an edited file?); use another --out")
    return plan


def _as_planned(plan: LadderPlan) -> bool:
    """Whether a plan read back holds the rungs and probes its settings make (ids,
    kinds, depths and codes: a probe's id names its folder), with sizes in range."""
    if [rung.tokens for rung in plan.rungs] != plan.settings.lengths:
        return False
    for rung in plan.rungs:
        expected = [(p.id, p.kind, p.depth, p.code) for p in probes_of(plan.settings,
                                                                       rung.tokens)]
        if [(p.id, p.kind, p.depth, p.code) for p in rung.probes] != expected:
            return False
        if not all(0 < p.sentences <= MAX_SENTENCES and 0 < (p.prompt_tokens or 1) <= 2**31
                   for p in rung.probes):
            return False
    return True


async def _sized(settings: LadderSettings, tokens: int, tokenizer: Tokenizer) -> PlannedRung:
    probes = [await size_probe(tokenizer.count, probe, tokens, settings.seed,
                               settings.language) for probe in probes_of(settings, tokens)]
    return PlannedRung(tokens=tokens, probes=probes)


def _probe(job: LadderRun, plan: LadderPlan, tokens: int, probe: LadderProbe,
           clock: Clock, progress: LadderProgress, scoring_body: dict[str, object],
           first: bool) -> ProbeResult:
    """Collect, score and compare one probe (unless measured before); its figures."""
    unit = unit_folder(job.out, tokens, probe)
    make_directory(unit)
    prompt_file = unit / "prompt.yaml"
    entry = prompt_entry(plan.settings, tokens, probe)
    write_atomic(prompt_file, entries_yaml([entry], PROMPT_HEADING).encode("utf-8"))
    forced_note = ""
    if not measured(unit, plan.settings.forced):
        forced_note = run_blocking(_fetch(job, plan.settings, prompt_file, unit, progress,
                                          scoring_body, first))
        forced = unit / FORCED
        compare_runs(unit / "a", unit / "b", unit, CompareOptions(
            forced=forced if (forced / "forced.json").exists() else None))
        clock.add(unit, probe.prompt_tokens or tokens)
    return probe_figures(unit, job.out, probe, prompt_file, forced_note)


async def _fetch(job: LadderRun, settings: LadderSettings, prompt_file: Path, unit: Path,
                 progress: LadderProgress, scoring_body: dict[str, object], first: bool
                 ) -> str:
    """A's repeats, B's answer (each with the prompt cache off, as collect asks them),
    then B's scoring of A's tokens (unless scored since A's run last changed); why
    scoring was not done ("" when it was)."""
    for side, folder, repeats in ((job.a, "a", settings.repeats), (job.b, "b", 1)):
        await collect_async([prompt_file], unit / folder, _side(side, settings, repeats, first),
                            Notes(progress, folder.upper()))
    scored = unit / FORCED / "forced.json"
    if not settings.forced or (scored.exists() and scored.stat().st_mtime_ns >= (
            unit / "a" / COMPLETIONS).stat().st_mtime_ns):
        return ""
    try:
        await score_run_async(unit / "a", unit / FORCED, ForcedSettings(
            endpoint=job.b.endpoint, model=job.b.model, top_k=settings.top_logprobs,
            concurrency=1, timeout=job.b.timeout, api_key_env=job.b.api_key_env,
            retries=job.b.retries, extra_body=scoring_body))
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


