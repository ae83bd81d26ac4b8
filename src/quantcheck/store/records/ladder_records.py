"""The context ladder's records: its plan (OUT/plan.json: the rungs, each probe's
filler and measured length) and its result (OUT/ladder.json, `quantcheck-ladder/1`:
per rung A's and B's recall, A's floor, the departures, the flips and the
teacher-forced KL; the onset and the gate). docs/formats.md says each field; the
pipeline is pipeline/ladder.py, the figures triage/ladder.py."""

from __future__ import annotations

import msgspec

from .formats import LADDER_FORMAT, LADDER_PLAN_FORMAT, LadderFormat, LadderPlanFormat
from .report_records import Cells

NEEDLE, ABSENT = "needle", "absent"  # a probe's kind


class LadderSettings(msgspec.Struct, kw_only=True, frozen=True):
    """What decides the ladder's prompts and requests: a ladder resumed with other
    settings is refused (pipeline/ladder.py)."""

    lengths: list[int]  # the rungs, in tokens
    depths: list[float]  # where each needle is planted (0: the start, 1: the end)
    absent: bool = True  # an absent-needle probe at every rung
    language: str = "en"  # the filler's language (store/inputs/haystack.py)
    api: str = "completions"
    max_tokens: int = 16
    repeats: int = 2  # A's repeats: its floor
    top_logprobs: int = 20
    forced: bool = True  # teacher-forced scoring of A's answers on B
    seed: int = 1


class LadderProbe(msgspec.Struct, kw_only=True):
    """One probe of a rung as planned: a needle planted at `depth` (its `code`), or none
    (`absent`); the filler's sentences, and the prompt's length measured on A's
    tokenizer (None: estimated, see `Ladder.length_measure`)."""

    id: str
    kind: str
    depth: float | None = None
    code: str | None = None
    sentences: int = 0
    prompt_tokens: int | None = None


class PlannedRung(msgspec.Struct, kw_only=True):
    tokens: int
    probes: list[LadderProbe]


class LadderPlan(msgspec.Struct, kw_only=True):
    """OUT/plan.json: written once, before the first request; a rerun reuses it."""

    format: LadderPlanFormat = LADDER_PLAN_FORMAT
    settings: LadderSettings
    length_measure: str
    rungs: list[PlannedRung]


class ProbeResult(msgspec.Struct, kw_only=True):
    """One probe's answers and figures. A verdict is None when that side has no
    answer; `a_stable` is None with one repeat of A (no floor)."""

    probe: LadderProbe
    report: str  # the probe's report folder, relative to the ladder's
    a_passed: bool | None = None
    a_repeats_passed: int = 0
    a_repeats: int = 0
    b_passed: bool | None = None
    a_stable: bool | None = None
    departs: bool = False  # A's repeats agree, B's verdict is not A's
    flip: str = ""  # the pair's flip as triage calls it (regression, improvement)
    a_answer: str = ""
    b_answer: str = ""
    kl_mean: float | None = None  # B against A, teacher-forced, over A's answer
    kl_needle: float | None = None  # the same where A's answer spells the needle's code
    a_floor_kl: float | None = None  # A against its own repeats
    positions: int = 0
    note: str = ""  # what was not measured, and why


class Rung(msgspec.Struct, kw_only=True):
    """One length's figures over its probes (recall: the share of probes passed, A's
    first answer and B's)."""

    tokens: int
    prompt_tokens: int | None  # the longest probe's measured length
    probes: list[ProbeResult]
    checked: int  # probes both sides answered
    a_recall: float | None = None
    b_recall: float | None = None
    a_floor: int = 0  # probes whose A repeats disagree on the verdict
    departures: int = 0  # probes that depart (ProbeResult.departs)
    departs: bool = False  # departures > a_floor
    flips: int = 0
    kl_mean: float | None = None
    kl_needle: float | None = None
    a_floor_kl: float | None = None
    tokens_sent: int = 0  # prompt tokens the servers processed for this rung
    seconds: float | None = None  # wall time of this rung's requests (this pass)


class LadderSide(msgspec.Struct, kw_only=True):
    label: str
    endpoint: str
    model: str
    runtime: str = "unknown"
    context_len: int | None = None


class LadderGate(msgspec.Struct, kw_only=True):
    """Fails when the onset lies within the lengths served (`served_tokens`; None:
    every rung measured)."""

    passed: bool
    served_tokens: int | None = None
    reason: str


class Ladder(msgspec.Struct, kw_only=True):
    """OUT/ladder.json: the whole ladder's result, written after every probe."""

    format: LadderFormat = LADDER_FORMAT
    quantcheck_version: str
    a: LadderSide
    b: LadderSide
    cells: Cells
    axes: str  # which serving-cell axes differ, in a sentence
    settings: LadderSettings
    length_measure: str
    rungs: list[Rung]
    onset: int | None = None  # the shortest rung that departs
    onset_sentence: str
    floor_sentence: str
    tested_up_to: int | None = None  # the longest rung every probe of which was checked
    not_tested: list[str] = []
    complete: bool = False  # every planned probe was measured
    gate: LadderGate
    seconds: float = 0.0  # this pass's wall time
