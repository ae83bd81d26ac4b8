"""The records of one pair: a row of pairs.csv (`PairRow`, with the columns' pandas
types) and a line of details.jsonl (`PairDetails`). Where they are read and written:
store/folders/report_dir.py; the columns, field by field: docs/formats.md."""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from .judge_records import JudgeDetails
from .run_records import DEGENERATE_KINDS, LENGTH_CAPPED, TopK, new_on_b


class PairRow(msgspec.Struct, kw_only=True):
    """One row of pairs.csv: one prompt, A against B (docs/formats.md: the pairs.csv table).
    Only `compared` rows have the triage columns filled; None is an empty cell. A judged
    row holds None where judging said nothing (not compared, no expect, no routing) and ""
    where it said "nothing found"; read back from pairs.csv, an empty text cell is ""."""

    prompt_id: str
    category: str = ""
    prompt_hash: str | None = None
    status: str = "compared"
    identical: bool | None = None
    similarity: float | None = None
    first_divergence: int | None = None
    divergence_kind: str | None = None
    divergence_gap: float | None = None
    divergence_b_gap: float | None = None
    divergence_a_token: str | None = None
    divergence_b_token: str | None = None
    a_repeats: int | None = None
    b_repeats: int | None = None
    a_texts: int | None = None
    b_texts: int | None = None
    a_signatures: int | None = None
    b_signatures: int | None = None
    a_repeat_mode: str = ""
    b_repeat_mode: str = ""
    noise: bool | None = None
    a_expect: str | None = None
    b_expect: str | None = None
    a_expect_failures: str | None = None
    b_expect_failures: str | None = None
    flip: str | None = None
    a_checks: str | None = None
    b_checks: str | None = None
    flipped_checks: str | None = None
    tool_call_change: str | None = None
    numbers_changed: bool | None = None
    a_degenerate: str | None = None
    b_degenerate: str | None = None
    a_template_signs: str | None = None  # "echo", "markers": a chat template gone wrong
    b_template_signs: str | None = None
    a_tokens: int | None = None
    b_tokens: int | None = None
    a_finish_reason: str | None = None
    b_finish_reason: str | None = None
    top1_agreement: float | None = None
    logprob_mean_abs_diff: float | None = None
    logprob_max_abs_diff: float | None = None
    kl_topk_mean: float | None = None
    kl_topk_max: float | None = None
    suggested_label: str | None = None
    approved_label: str = ""
    approved_at: str = ""
    judge_label: str = ""  # with --judge: the judge's suggestion, a rubric label
    judge_class: str = ""  # its factuality class, "unclear" or "no_verdict"
    judge_reason: str = ""
    forced_positions: int | None = None
    forced_top1: float | None = None
    forced_kl_mean: float | None = None
    forced_kl_p99: float | None = None
    forced_kl_max: float | None = None
    forced_delta_p_mean: float | None = None
    a_routings: int | None = None
    b_routings: int | None = None
    a_routing: str | None = None
    b_routing: str | None = None
    routing_first_token: int | None = None
    routing_first_layer: int | None = None
    routing_diff_share: float | None = None
    a_text: str | None = None
    b_text: str | None = None
    a_tool_calls: str | None = None
    b_tool_calls: str | None = None
    flip_cause: str | None = None  # a flip's class (FLIP_CAUSES); "" without a flip
    # a side's repeat 0 alone differs, its later repeats agree (two repeats or more): the
    # mark of a prefix cache a repeat finds warm
    a_only_first_differs: bool | None = None
    b_only_first_differs: bool | None = None
    unsure_side: str | None = None  # UNSURE_SIDES at the fork; "" where it cannot be read

    @property
    def compared(self) -> bool:
        return self.status == "compared"

    @property
    def needs_review(self) -> bool:
        """Compared and not identical: a reviewer's question."""
        return self.compared and not self.identical


PAIR_COLUMNS = list(PairRow.__struct_fields__)
# What can explain a flip, in the order it is decided (triage.signals.flip_cause). Only
# the reference's own doubt is noise: A's repeats disagree on the flipped check, or A
# was unsure at the fork (a near tie on A's side). B's repeats disagreeing, a fork that
# cannot be read from tokens that spell the answers, or a sure A: a regression.
FLIP_CAUSES = ("unstable_a", "near_tie", "unstable_b", "unverified", "confident")
REVIEW_CAUSES = ("unstable_a", "near_tie")  # flips listed for review, not counted by default
# Each cause in words, and the sentence the sheet shows over its badge
FLIP_CAUSE_TEXT: dict[str, tuple[str, str]] = {
    "unstable_a": ("A's repeats disagree", "A's own repeats disagree on the flipped check: "
                   "the reference itself gives B's answer at times. Listed for review; the "
                   "default gate does not count it"),
    "near_tie": ("near tie on A", "A was unsure at the fork: on A's side B's token is within "
                 "the near-tie margin of A's own, so a small numeric nudge can cause it. "
                 "Listed for review; the default gate does not count it"),
    "unstable_b": ("B's repeats disagree", "B's own repeats disagree on the flipped check "
                   "while A's agree: B is unstable on a fact A holds. Counted as a "
                   "regression"),
    "unverified": ("fork unverified", "A's margin at the fork cannot be read: no logprobs, "
                   "logprobs whose tokens do not spell the answer, or one side stopped "
                   "there. Counted as a regression"),
    "confident": ("confident", "A was sure at the fork (B's token is beyond the near-tie "
                  "margin on A's side) and A's repeats agree. Counted as a regression"),
}
FLIP_CAUSE_WORDS = {cause: words for cause, (words, _) in FLIP_CAUSE_TEXT.items()}
# Which sides had the other side's token within the near-tie margin at the fork
UNSURE_SIDES = ("a", "b", "both", "neither")


def to_review(row: PairRow) -> bool:
    """An expect regression the reference's own doubt explains: listed for review."""
    return row.flip == "regression" and row.flip_cause in REVIEW_CAUSES


STATUSES = ("compared", "not_comparable", "only_a", "only_b", "a_failed", "b_failed")
_EXPECT_RESULTS = ("", "pass", "fail", "skipped")
_DEGENERATE = ("", *DEGENERATE_KINDS, LENGTH_CAPPED)
_ROUTING = ("", "identical", "after_routing", "gating")
# The columns that hold one of a few values (docs/formats.md; "" is an empty cell): the
# gate and the sheet act on them, so a value outside the set (pairs.csv edited by hand)
# is refused on reading, never taken for another.
ENUMERATED: dict[str, tuple[str, ...]] = {
    "status": STATUSES,
    "divergence_kind": ("", "none", "near_tie", "confident", "unverified", "ended"),
    "unsure_side": ("", *UNSURE_SIDES),
    "a_expect": _EXPECT_RESULTS, "b_expect": _EXPECT_RESULTS,
    "flip": ("", "regression", "improvement"),
    "tool_call_change": ("", "identical", "arguments_changed", "different_tool",
                         "call_vs_no_call"),
    "a_degenerate": _DEGENERATE, "b_degenerate": _DEGENERATE,
    "suggested_label": ("", "identical", "factual_flip", "wording"),
    "judge_class": ("", "same", "immaterial", "subset", "superset", "contradiction",
                    "unclear", "no_verdict"),
    "a_routing": _ROUTING, "b_routing": _ROUTING,
    "flip_cause": ("", *FLIP_CAUSES),
}


def _dtype(annotation: str) -> str:
    """A column's pandas type: nullable integers and booleans stay what they are, so a
    chunk of pairs.csv writes 5, not 5.0, whether or not its column has an empty cell."""
    kind = annotation.split(" ")[0]
    return {"int": "Int64", "float": "float64", "bool": "boolean"}.get(kind, "object")


PAIR_DTYPES = {name: _dtype(PairRow.__annotations__[name]) for name in PAIR_COLUMNS}
TEXT_COLUMNS = [c for c in PAIR_COLUMNS if PAIR_DTYPES[c] == "object"]  # "" for empty
# Figures that cannot be negative as compare writes them (a KL is clamped at 0): a
# negative one in a read pairs.csv was edited, and would pull a gate's mean under its limit
NON_NEGATIVE = ("logprob_mean_abs_diff", "logprob_max_abs_diff", "kl_topk_mean", "kl_topk_max",
                "forced_kl_mean", "forced_kl_p99", "forced_kl_max")


def new_degenerate_on_b(rows: list[PairRow]) -> list[str]:
    """Prompts whose B answer is degenerate (a loop, empty) and A's is not: the one
    definition the summary, the sheet and the gate count."""
    return [r.prompt_id for r in rows if r.compared
            and new_on_b(r.a_degenerate, r.b_degenerate, DEGENERATE_KINDS)]


def nondeterministic(row: PairRow, side: str) -> bool:
    """Whether a side's repeats of the prompt gave more than one text or token signature
    ("a" or "b"): summary.json's `nondeterministic`."""
    return text_varies(row, side) or logprobs_only(row, side)


def text_varies(row: PairRow, side: str) -> bool:
    """Whether a side's repeats of the prompt gave more than one text: the one definition
    the headline and the gate count."""
    return ((row.a_texts if side == "a" else row.b_texts) or 0) > 1


def logprobs_only(row: PairRow, side: str) -> bool:
    """Whether a side's repeats gave one text and more than one token signature: only
    the logprobs moved (said beside the texts that vary, never counted with them)."""
    signatures = row.a_signatures if side == "a" else row.b_signatures
    return not text_varies(row, side) and (signatures or 0) > 1


def only_first_differs(row: PairRow, side: str) -> bool:
    return bool(row.a_only_first_differs if side == "a" else row.b_only_first_differs)


class RoutingGrid(msgspec.Struct):
    """A routing comparison as the sheet shows it: its sentence, and a grid of `tokens`
    x `layers` whose `cells` ([token, layer]) went to other experts (the first 256
    tokens)."""

    sentence: str
    tokens: int
    layers: int
    cells: list[list[int]]


class RoutingDetails(msgspec.Struct):
    """A pair's MoE routing: each side's repeats, and A's against B's (repeat 0)."""

    a_repeats: RoutingGrid | UnsetType = UNSET
    b_repeats: RoutingGrid | UnsetType = UNSET
    ab: RoutingGrid | UnsetType = UNSET


CheckCells = list[tuple[str, str, str]]  # one side's expect results: [check, status, reason]


class PairDetails(msgspec.Struct, kw_only=True):
    """A line of details.jsonl: what the sheet shows of a pair beyond pairs.csv. A field
    left UNSET is not in the line (`request` and `expect` without a prompt, `checks`
    without an expect, `a_top` / `b_top` without a divergence, `routing` without MoE
    routing, `judge` when the judge was not asked)."""

    prompt_id: str
    request: dict[str, object] | UnsetType = UNSET  # the messages or text, and max_tokens
    expect: dict[str, object] | None | UnsetType = UNSET
    a_variants: list[tuple[str, int]] | None = None  # distinct texts across repeats
    b_variants: list[tuple[str, int]] | None = None
    checks: tuple[CheckCells, CheckCells] | UnsetType = UNSET  # A's, then B's
    a_top: TopK | UnsetType = UNSET  # the top-k alternatives at the first divergence
    b_top: TopK | UnsetType = UNSET
    routing: RoutingDetails | UnsetType = UNSET
    judge: JudgeDetails | UnsetType = UNSET  # the judge's raw replies, both orders
