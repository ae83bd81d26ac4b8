"""Triage one prompt: A's and B's records of it in, its row of pairs.csv (`PairRow`) and
its line of details.jsonl (`PairDetails`) out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np
from msgspec import UNSET

from ..store.records.pair_records import (
    CheckCells,
    PairDetails,
    PairRow,
    RoutingDetails,
    RoutingGrid,
)
from ..store.records.run_records import Prompt
from . import routing
from .determinism import cached_prompt_tokens, first_request_cached
from .expects import CheckResult, CodeRunner, Graded, check_answer, parse_calls
from .sides import Side, SideRecord
from .signals import (
    classify_divergence,
    degenerate_reason,
    disputed_checks,
    drift,
    expectation_columns,
    flip_cause,
    numbers_changed,
    repeats_disagree,
    similarity,
    suggested_label,
    tool_call_change,
    with_calls,
)
from .templates import last_user_message, template_signs


def triage_pair(prompt_id: str, prompt: Prompt | None, a: Side, b: Side,
                a_records: list[SideRecord] | None, b_records: list[SideRecord] | None,
                token_level: bool, run_code: CodeRunner | None) -> tuple[PairRow, PairDetails]:
    """The pair's row and details; only a `compared` pair (both sides answered repeat
    0 of the same prompt) is triaged."""
    row = PairRow(prompt_id=prompt_id, category=prompt.category if prompt else "",
                  a_repeat_mode=a.repeat_mode, b_repeat_mode=b.repeat_mode)
    details = PairDetails(prompt_id=prompt_id)
    if prompt is not None:
        details.request = _shown_request(prompt.request)
        details.expect = prompt.expect.to_json() if prompt.expect else None
    a_ok, b_ok = _successful(a_records), _successful(b_records)
    row.a_repeats, row.a_texts, row.a_signatures = _repeat_counts(a_ok)
    row.b_repeats, row.b_texts, row.b_signatures = _repeat_counts(b_ok)
    row.a_only_first_differs, row.b_only_first_differs = _first_alone(a_ok), _first_alone(b_ok)
    details.a_variants, details.b_variants = _variants(a_ok), _variants(b_ok)
    a_first, b_first = _repeat_zero(a_ok), _repeat_zero(b_ok)
    row.status = _status(a_records, b_records, a_first, b_first)
    first = a_first if a_first is not None else b_first
    row.prompt_hash = first.prompt_hash if first is not None else (
        prompt.hash if prompt else None)
    if row.status == "compared":
        assert a_first is not None and b_first is not None and a_ok and b_ok
        _compare_answers(row, details, a_first, b_first, prompt, run_code)
        if token_level:
            _compare_tokens(a, b, a_first, b_first, row, details)
        if a.routed or b.routed:
            _compare_routing(a.routing_of(a_ok), b.routing_of(b_ok), row, details, token_level,
                             _unusable(a_first, b_first) if a.routed and b.routed else [])
        if row.flip is not None:
            row.flip_cause = _flip_cause(row, details, prompt, a_ok, b_ok, run_code)
        # Nondeterminism, not regression: a side's own repeats also show the other's text.
        row.noise = not row.identical and bool(
            {r.text_hash for r in a_ok} & {r.text_hash for r in b_ok})
    return row, details


def _compare_answers(row: PairRow, details: PairDetails, a_first: SideRecord,
                     b_first: SideRecord, prompt: Prompt | None, run_code: CodeRunner | None
                     ) -> None:
    """Repeat 0 of A against repeat 0 of B: texts, tool calls, numbers, loops, template
    signs, expect."""
    expect = prompt.expect if prompt else None
    question = last_user_message(prompt.request) if prompt and prompt.api == "chat" else None
    a_text, b_text = a_first.text, b_first.text
    a_calls, b_calls = _calls(a_first), _calls(b_first)
    a_content, b_content = with_calls(a_text, a_calls), with_calls(b_text, b_calls)
    identical = a_text == b_text and a_calls == b_calls
    similar = similarity(a_content, b_content)
    numbers_differ = numbers_changed(a_content, b_content)
    row.a_text, row.b_text, row.a_tool_calls, row.b_tool_calls = a_text, b_text, a_calls, b_calls
    row.identical, row.similarity, row.numbers_changed = identical, similar, numbers_differ
    row.tool_call_change = tool_call_change(a_calls, b_calls)
    row.a_tokens, row.b_tokens = a_first.n_tokens, b_first.n_tokens
    a_finish, b_finish = a_first.finish_reason, b_first.finish_reason
    row.a_finish_reason, row.b_finish_reason = a_finish, b_finish
    row.a_degenerate = degenerate_reason(a_content, a_finish, b_finish)
    row.b_degenerate = row.a_degenerate if (b_content, b_finish) == (a_content, a_finish) \
        else degenerate_reason(b_content, b_finish, a_finish)  # the same answer: once
    row.a_template_signs = template_signs(question, a_text or "")
    row.b_template_signs = template_signs(question, b_text or "")
    row.divergence_kind = ""  # until the tokens say where the streams part
    if expect is not None:
        a_results = check_answer(expect, a_text, parse_calls(a_calls), run_code,
                                 _graded(a_first))
        b_results = check_answer(expect, b_text, parse_calls(b_calls), run_code,
                                 _graded(b_first))
        _set_expectations(row, a_results, b_results)
        details.checks = _check_cells(a_results), _check_cells(b_results)
    row.suggested_label = suggested_label(
        identical, similar, numbers_differ, row.flip or "", row.a_expect or "",
        row.b_expect or "", row.a_degenerate, row.b_degenerate, row.tool_call_change)


def _set_expectations(row: PairRow, a_results: list[CheckResult],
                      b_results: list[CheckResult]) -> None:
    found = expectation_columns(a_results, b_results)
    row.a_expect, row.b_expect = found.a_expect, found.b_expect
    row.a_checks, row.b_checks = found.a_checks, found.b_checks
    row.a_expect_failures, row.b_expect_failures = found.a_expect_failures, \
        found.b_expect_failures
    row.flip, row.flipped_checks = found.flip, found.flipped_checks


def _flip_cause(row: PairRow, details: PairDetails, prompt: Prompt | None,
                a_ok: list[SideRecord], b_ok: list[SideRecord], run_code: CodeRunner | None
                ) -> str:
    """What can explain the pair's flip (triage.flip_cause); "" without one. Each side's
    other repeats are checked as repeat 0 was, one per distinct answer."""
    if not row.flip or prompt is None or prompt.expect is None or details.checks is UNSET:
        return ""
    a_first, b_first = disputed_checks(*details.checks)
    expect = prompt.expect

    def unstable(ok: list[SideRecord], first: dict[str, str]) -> bool:
        return repeats_disagree([check_answer(expect, r.text, parse_calls(_calls(r)), run_code,
                                              _graded(r))
                                 for r in _other_answers(ok)], first)

    return flip_cause(unstable(a_ok, a_first), unstable(b_ok, b_first), row.divergence_kind)


def _graded(record: SideRecord) -> Graded | None:
    """What an eval harness said of the record's answer (an imported run), or None."""
    line = record.line
    return Graded(line.scores, line.answer) if line.scores is not None else None


def _other_answers(ok: list[SideRecord]) -> list[SideRecord]:
    """A side's repeats whose answer differs from repeat 0's, one per distinct answer."""
    seen = {r.text_hash for r in ok if r.repeat == 0}
    others = []
    for record in ok:
        if record.text_hash not in seen:
            seen.add(record.text_hash)
            others.append(record)
    return others


def _check_cells(results: list[CheckResult]) -> CheckCells:
    return [(r.check, r.status, r.reason) for r in results]


def _successful(records: list[SideRecord] | None) -> list[SideRecord] | None:
    return None if records is None else [r for r in records if r.error is None]


def _repeat_zero(records: list[SideRecord] | None) -> SideRecord | None:
    return next((r for r in records or [] if r.repeat == 0), None)


def _status(a_records: list[SideRecord] | None, b_records: list[SideRecord] | None,
            a_first: SideRecord | None, b_first: SideRecord | None) -> str:
    if a_records is None:
        return "only_b"
    if b_records is None:
        return "only_a"
    a_hash = a_first.prompt_hash if a_first is not None else None
    b_hash = b_first.prompt_hash if b_first is not None else None
    if a_hash is not None and b_hash is not None and a_hash != b_hash:
        return "not_comparable"
    if a_first is None:
        return "a_failed"
    if b_first is None:
        return "b_failed"
    return "compared"


def _repeat_counts(ok: list[SideRecord] | None) -> tuple[int | None, int | None, int | None]:
    """A side's successful repeats, distinct texts and distinct signatures (None for a
    side without records, or without token signatures)."""
    if ok is None:
        return None, None, None
    signatures = {r.signature for r in ok if r.signature is not None}
    return len(ok), len({r.text_hash for r in ok}), len(signatures) if signatures else None


def _first_alone(ok: list[SideRecord] | None) -> bool | None:
    """Whether repeat 0 alone differs, the later repeats agree (by signature, or by text
    where a repeat has none) and a warm prefix cache explains it
    (determinism.first_request_cached); None below two repeats or without repeat 0."""
    if not ok or len(ok) < 2:
        return None
    ordered = sorted(ok, key=lambda r: r.repeat)
    if ordered[0].repeat != 0:
        return None
    signed = all(r.signature is not None for r in ordered)
    return first_request_cached([r.signature if signed else r.text_hash for r in ordered],
                                [cached_prompt_tokens(r.line.usage) for r in ordered])


# A prompt longer than this (a long-context haystack) is shown in the sheet by its
# start and end: the reviewer needs the question, not 60 KB of filler per pair.
SHOWN_PROMPT_CHARS = 4000


def _shown_request(request: Mapping[str, object]) -> dict[str, object]:
    """The messages (or text) and max_tokens of a request, long texts shortened."""
    shown = {k: v for k, v in request.items() if k in ("messages", "prompt", "max_tokens")}
    if "prompt" in shown:
        shown["prompt"] = _shown_text(shown["prompt"])
    messages = shown.get("messages")
    if isinstance(messages, list):
        shown["messages"] = [{**m, "content": _shown_text(m.get("content"))}
                             if isinstance(m, dict) else m for m in messages]
    return shown


def _shown_text(text: object) -> object:
    if not isinstance(text, str) or len(text) <= SHOWN_PROMPT_CHARS:
        return text
    half = SHOWN_PROMPT_CHARS // 2
    return (f"{text[:half]}\n[... {len(text) - 2 * half:,} characters not shown ...]\n"
            f"{text[-half:]}")


def _calls(record: SideRecord) -> str | None:
    return record.tool_calls or None


def _variants(ok: list[SideRecord] | None) -> list[tuple[str, int]] | None:
    """Distinct texts across repeats with their counts, when there is more than one."""
    counts = Counter(record.text for record in ok or ())
    return sorted(counts.items(), key=lambda kv: -kv[1]) if len(counts) > 1 else None


def _compare_tokens(a: Side, b: Side, a_first: SideRecord, b_first: SideRecord,
                    row: PairRow, details: PairDetails) -> None:
    """Where the token streams part and how, and the logprob drift before that."""
    a_tokens, b_tokens = a.tokens_at(a_first.offset), b.tokens_at(b_first.offset, a)
    if not a_tokens or not b_tokens:
        return
    divergence = classify_divergence(a_tokens, b_tokens, a_first.text, b_first.text)
    position = divergence.position
    if position is not None and position < len(a_tokens):
        details.a_top = a_tokens.top(position)
    if position is not None and position < len(b_tokens):
        details.b_top = b_tokens.top(position)
    row.first_divergence, row.divergence_kind = position, divergence.kind
    row.unsure_side = divergence.unsure
    row.divergence_gap, row.divergence_b_gap = divergence.gap, divergence.b_gap
    row.divergence_a_token, row.divergence_b_token = divergence.a_token, divergence.b_token
    measured = drift(a_tokens, b_tokens, position)
    row.top1_agreement = measured.top1_agreement
    row.logprob_mean_abs_diff = measured.logprob_mean_abs_diff
    row.logprob_max_abs_diff = measured.logprob_max_abs_diff
    row.kl_topk_mean, row.kl_topk_max = measured.kl_topk_mean, measured.kl_topk_max


def _unusable(a_first: SideRecord, b_first: SideRecord) -> list[str]:
    """Why a side's repeat 0 has no routing to set against the other's: it was unusable
    when collected (its record says why)."""
    return [f"{name}'s routing is unusable ({first.line.routing_unusable})"
            for name, first in (("A", a_first), ("B", b_first)) if first.line.routing_unusable]


def _compare_routing(a_routings: dict[int, np.ndarray], b_routings: dict[int, np.ndarray],
                     row: PairRow, details: PairDetails, token_level: bool,
                     unusable: list[str]) -> None:
    """Each side's routing across its repeats, and A's against B's (repeat 0), or why
    they are not compared: a side's was unusable, or their shapes differ."""
    shown = RoutingDetails()
    if a_routings:
        repeats = routing.across_repeats(list(a_routings.values()), row.a_signatures)
        row.a_routings, row.a_routing = repeats.distinct, repeats.kind
        shown.a_repeats = routing.shown(repeats.sentence, repeats.grid)
    if b_routings:
        repeats = routing.across_repeats(list(b_routings.values()), row.b_signatures)
        row.b_routings, row.b_routing = repeats.distinct, repeats.kind
        shown.b_repeats = routing.shown(repeats.sentence, repeats.grid)
    reasons = list(unusable)
    if 0 in a_routings and 0 in b_routings:
        reasons += filter(None, [routing.incomparable(a_routings[0], b_routings[0])])
    if token_level and reasons:
        shown.ab = RoutingGrid(f"not compared: {'; '.join(reasons)}", 0, 0, [])
    elif token_level and 0 in a_routings and 0 in b_routings:
        pair = routing.between(a_routings[0], b_routings[0], row.first_divergence)
        row.routing_first_token, row.routing_first_layer = pair.first_token, pair.first_layer
        row.routing_diff_share = round(pair.share, 6)
        shown.ab = routing.shown(pair.sentence, pair.grid)
    if any(part is not UNSET for part in (shown.a_repeats, shown.b_repeats, shown.ab)):
        details.routing = shown
