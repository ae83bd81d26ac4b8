"""The context ladder's result, made from the files its probes left: each probe's folder
(OUT/rungs/TOKENS/PROBE/: the runs, the scoring, the report) read back into its figures,
a rung's figures with the tokens sent and the seconds its requests took (the requests'
own times, so a resumed ladder keeps them), and OUT/ladder.json, written and read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from .._version import __version__
from ..errors import QuantcheckError, RunFormatError
from ..gate.ladder_gate import decide_ladder
from ..store.files import read_regular, write_atomic
from ..store.folders.report_dir import read_forced, read_pair_rows
from ..store.folders.run_dir import MANIFEST, Cell, load_run
from ..store.inputs.prompt_sets import load_prompts
from ..store.records.ladder_records import (
    Ladder,
    LadderPlan,
    LadderProbe,
    LadderSide,
    ProbeResult,
    Rung,
)
from ..store.records.report_records import Cells
from ..store.records.run_records import Completion, Expect
from ..triage.cells import axes_sentence, confound_warning, differing_axes
from ..triage.ladder import (
    floor_sentence,
    measured_reach,
    onset,
    onset_sentence,
    probe_result,
    rung_figures,
)

LADDER = "ladder.json"
MAX_LADDER_BYTES = 16 << 20
FORCED = "forced"


def unit_folder(out: Path, tokens: int, probe: LadderProbe) -> Path:
    """Where one probe's runs, scoring and report live."""
    return out / "rungs" / str(tokens) / probe.id


def measured(unit: Path, forced: bool) -> bool:
    """A probe measured whole in an earlier pass: both runs complete, scored (when
    asked), compared."""
    if not (unit / "summary.json").exists() or (forced and not scored(unit)):
        return False
    try:
        return all(load_run(unit / side).manifest.status == "complete" for side in "ab")
    except QuantcheckError:
        return False


def scored(unit: Path) -> bool:
    return (unit / FORCED / "forced.json").exists()


def scoring_seconds(unit: Path) -> float:
    return (read_forced(unit / FORCED)[0].seconds or 0.0) if scored(unit) else 0.0


def records(run_dir: Path) -> list[Completion]:
    if not (run_dir / MANIFEST).exists():
        return []
    return list(load_run(run_dir).completions())


def probe_figures(unit: Path, out: Path, probe: LadderProbe, prompt_file: Path, note: str
                  ) -> ProbeResult:
    """A measured probe's figures, read from its runs, pairs and forced lines."""
    prompt = load_prompts([prompt_file])[0]
    rows = read_pair_rows(unit) if (unit / "pairs.csv").exists() else []
    lines = read_forced(unit / FORCED)[1] if scored(unit) else {}
    result = probe_result(probe, str(unit.relative_to(out)), prompt.expect or Expect(),
                          records(unit / "a"), records(unit / "b"),
                          rows[0] if rows else None, lines.get(prompt.id))
    if note:
        result.note = note
    return result


def rung_of(out: Path, tokens: int, results: list[ProbeResult]) -> Rung:
    """A rung's figures, with its tokens sent (each request's prompt, the scoring's
    once) and the seconds its requests took."""
    sent, seconds = 0, 0.0
    for result in results:
        unit = out / result.report
        length = result.probe.prompt_tokens or tokens
        for side in "ab":
            answers = records(unit / side)
            sent += length * len(answers)
            seconds += sum(r.e2e_s or 0.0 for r in answers)
        if scored(unit):
            sent += length
            seconds += scoring_seconds(unit)
    return rung_figures(tokens, results, sent, round(seconds, 3))


@dataclass(frozen=True)
class LadderFacts:
    """What the result says besides its rungs: the sides, the gate's lengths, the time."""

    a: LadderSide
    b: LadderSide
    served_tokens: int | None
    seconds: float


def ladder_of(out: Path, plan: LadderPlan, facts: LadderFacts, rungs: list[Rung]) -> Ladder:
    a_cell, b_cell, a_key, b_key = _cells(unit_folder(out, plan.rungs[0].tokens,
                                                      plan.rungs[0].probes[0]))
    differing = differing_axes(a_cell, b_cell)
    planned = [r.tokens for r in plan.rungs]
    return Ladder(
        quantcheck_version=__version__, a=facts.a, b=facts.b,
        cells=Cells(a=a_cell, b=b_cell, a_key=a_key, b_key=b_key, differs=differing,
                    warning=confound_warning(differing)),
        axes=axes_sentence(a_cell, b_cell, differing), settings=plan.settings,
        length_measure=plan.length_measure, rungs=rungs, onset=onset(rungs),
        onset_sentence=onset_sentence(rungs, planned),
        floor_sentence=floor_sentence(rungs, plan.settings.repeats),
        tested_up_to=measured_reach(rungs), not_tested=_not_tested(rungs, planned),
        complete=len(rungs) == len(planned) and all(
            r.checked == len(r.probes) for r in rungs),
        gate=decide_ladder(rungs, facts.served_tokens), seconds=round(facts.seconds, 3))


def _cells(unit: Path) -> tuple[Cell, Cell, str | None, str | None]:
    """Each side's serving cell and key as its first probe's run recorded them."""
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


def write_ladder(out: Path, ladder: Ladder) -> None:
    write_atomic(out / LADDER, msgspec.json.format(msgspec.json.encode(ladder), indent=2)
                 + b"\n")


def read_ladder(out: Path) -> Ladder:
    """OUT/ladder.json read back."""
    try:
        return msgspec.json.decode(read_regular(out / LADDER, MAX_LADDER_BYTES, "ladder"),
                                   type=Ladder)
    except (OSError, ValueError, msgspec.ValidationError) as exc:
        raise RunFormatError(f"{out / LADDER}: not a ladder ({exc})") from None
