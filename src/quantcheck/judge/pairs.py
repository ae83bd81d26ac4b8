"""Judge two sides pair by pair: the pairs (pairs.csv's rows), their details, and the
totals the summary is made of."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from ..store.files import AtomicFile, make_directory
from ..store.preflight_records import tokenizer_agreement
from ..store.report_dir import (
    DETAILS,
    PAIR_DTYPES,
    PAIR_FORCED_COLUMNS,
    PAIRS,
    pair_frame,
    read_forced,
)
from ..store.report_records import ForcedSummary, KLHistogram, Summary
from ..store.run_dir import first_seen
from ..store.run_records import Prompt
from . import routing
from .approvals import Approval, apply_approvals, load_approvals
from .expects import CodeRunner, evaluate, parse_calls
from .forced_figures import all_kl
from .forced_figures import pair_columns as forced_pair_columns
from .parallel import ordered_chunks
from .sandbox import Limits, code_execution, code_runner
from .sides import Record, Side, load_side
from .summary import PairTotals
from .triage import (
    NEAR_TIE_NATS,
    Divergence,
    Drift,
    classify_divergence,
    degenerate_reason,
    drift,
    expectation_columns,
    numbers_changed,
    similarity,
    suggested_label,
    tool_call_change,
    with_calls,
)


def compare(a: str | Path | Side, b: str | Path | Side, sig_digits: int = 12,
            prompts: Mapping[str, Prompt] | None = None,
            approvals: str | Path | None = None, code_exec: Limits | None = None,
            jobs: int = 1) -> pd.DataFrame:
    """One row per prompt (PAIR_COLUMNS); A is the reference, B the candidate.
    `code_exec`: run `code` checks within these limits (None: they are skipped).
    `jobs`: processes for the signatures and the pairs (available_cores(): all)."""
    side_a, side_b = resolve_sides(a, b, sig_digits, prompts, jobs)
    with side_a, side_b:
        pairs, _ = pairs_and_details(side_a, side_b, code_runner(code_exec), jobs)
    apply_approvals(pairs, load_approvals(Path(approvals) if approvals else None))
    return pairs


def resolve_sides(a: str | Path | Side, b: str | Path | Side, sig_digits: int,
                   prompts: Mapping[str, Prompt] | None, jobs: int = 1) -> tuple[Side, Side]:
    # A texts file names its prompts after the other side's prompt set (or --prompts).
    side_a = a if isinstance(a, Side) else None
    side_b = b if isinstance(b, Side) else None
    if side_a is None and not _is_texts(a):
        side_a = load_side(a, sig_digits, jobs=jobs)  # type: ignore[arg-type]
    if side_b is None and not _is_texts(b):
        side_b = load_side(b, sig_digits, jobs=jobs)  # type: ignore[arg-type]
    known = prompts or (side_a.prompts if side_a else None) or (
        side_b.prompts if side_b else None)
    side_a = side_a or load_side(a, sig_digits, known)  # type: ignore[arg-type]
    side_b = side_b or load_side(b, sig_digits, known)  # type: ignore[arg-type]
    return side_a, side_b


def _is_texts(source: str | Path | Side) -> bool:
    return not isinstance(source, Side) and Path(source).suffix == ".json"



# Pairs judged, written and forgotten at a time: compare's memory does not grow with
# the prompt count (a chunk is about 1 MB of rows and details at 128-token answers).
CHUNK_PAIRS = 256


def pairs_and_details(a: Side, b: Side, run_code: CodeRunner | None = None, jobs: int = 1
                      ) -> tuple[pd.DataFrame, list[Record]]:
    """The pairs frame, and per prompt what the review sheet shows beyond it, whole."""
    frames: list[pd.DataFrame] = []
    details: list[Record] = []
    for frame, chunk_details in judged_chunks(a, b, run_code, jobs):
        frames.append(frame)
        details += chunk_details
    return (pd.concat(frames, ignore_index=True) if frames else pair_frame([])), details


def judged_chunks(a: Side, b: Side, run_code: CodeRunner | None = None, jobs: int = 1
                  ) -> Iterator[tuple[pd.DataFrame, list[Record]]]:
    """The pairs in prompt order, CHUNK_PAIRS at a time: a frame of PAIR_COLUMNS and
    each pair's details; judged in `jobs` processes."""
    token_level = token_metrics_withheld(a, b) is None

    def judge(keys: Sequence[int]) -> list[tuple[dict[str, Any], Record]]:
        judged = []
        for key in map(int, keys):
            prompt = a.prompt_by_key(key) or b.prompt_by_key(key)
            prompt_id = prompt.id if prompt else _record_id(a, key) or _record_id(b, key)
            assert prompt_id is not None  # every key in the order has a prompt or records
            detail: Record = {"prompt_id": prompt_id}
            judged.append((_pair_row(prompt_id, prompt, a, b, a.records(prompt_id, key),
                                     b.records(prompt_id, key), detail, token_level,
                                     run_code), detail))
        return judged

    a.close()  # each worker opens the runs' files itself (a shared offset would race)
    b.close()
    order: Any = prompt_order(a, b)  # sliced into chunks as a sequence is
    for judged in ordered_chunks(judge, order, jobs, CHUNK_PAIRS):
        yield pair_frame([row for row, _ in judged]), [detail for _, detail in judged]


def prompt_order(a: Side, b: Side) -> np.ndarray:
    """Every prompt's key once: A's prompt set in its order, then prompts only A's
    records name, then B's prompt set, then B's records."""
    keys = np.concatenate([a.prompt_keys(), a.index.order, b.prompt_keys(), b.index.order])
    order: np.ndarray = keys[first_seen(keys)]
    return order


def _record_id(side: Side, key: int) -> str | None:
    """The prompt id of a side's records under this key (a prompt outside the sets)."""
    rows = side.index.rows(key)
    return side.record_id(rows[0]) if rows else None


def update_identity(digest: Any, pairs: pd.DataFrame) -> None:
    """Feed pairs, in order, to a sha256 whose first 20 hex digits are the report's
    identity, what a review belongs to: every prompt's status and both texts."""
    for row in pairs[["prompt_id", "status", "a_text", "b_text"]].itertuples(index=False):
        digest.update(orjson.dumps([None if v is pd.NA or v != v else v for v in row]))


def token_metrics_withheld(a: Side, b: Side) -> str | None:
    """Why token positions of A and B do not correspond (their preflights' tokenizer
    fingerprints differ), or None."""
    agreement = tokenizer_agreement(a.fingerprint, b.fingerprint)
    return agreement.message if agreement.status == "warn" else None


def _pair_row(prompt_id: str, prompt: Prompt | None, a: Side, b: Side,
              a_rows: list[Record] | None, b_rows: list[Record] | None, detail: Record,
              token_level: bool, run_code: CodeRunner | None) -> dict[str, Any]:
    if prompt is not None:
        detail["request"] = _shown_request(prompt.request)
        detail["expect"] = prompt.expect.to_json() if prompt.expect else None
    row: dict[str, Any] = {"prompt_id": prompt_id,
                           "category": prompt.category if prompt else ""}
    a_ok, b_ok = _successful(a_rows), _successful(b_rows)
    row.update(_determinism("a", a_ok), a_repeat_mode=a.repeat_mode)
    row.update(_determinism("b", b_ok), b_repeat_mode=b.repeat_mode)
    detail["a_variants"], detail["b_variants"] = _variants(a_ok), _variants(b_ok)
    a_first, b_first = _repeat_zero(a_ok), _repeat_zero(b_ok)
    row["status"] = _status(a_rows, b_rows, a_first, b_first)
    first = a_first if a_first is not None else b_first
    row["prompt_hash"] = first["prompt_hash"] if first is not None else (
        prompt.hash if prompt else None)
    if row["status"] != "compared":
        return row
    assert a_first is not None and b_first is not None and a_ok and b_ok
    a_text, b_text = a_first["text"], b_first["text"]
    a_calls, b_calls = _calls(a_first), _calls(b_first)
    a_content, b_content = with_calls(a_text, a_calls), with_calls(b_text, b_calls)
    row.update(a_text=a_text, b_text=b_text, a_tool_calls=a_calls, b_tool_calls=b_calls,
               identical=a_text == b_text and a_calls == b_calls,
               similarity=similarity(a_content, b_content),
               numbers_changed=numbers_changed(a_content, b_content),
               tool_call_change=tool_call_change(a_calls, b_calls),
               a_tokens=a_first["n_tokens"], b_tokens=b_first["n_tokens"],
               a_finish_reason=a_first["finish_reason"], b_finish_reason=b_first["finish_reason"])
    row["a_degenerate"] = degenerate_reason(a_content, a_first["finish_reason"],
                                            b_first["finish_reason"])
    row["b_degenerate"] = degenerate_reason(b_content, b_first["finish_reason"],
                                            a_first["finish_reason"])
    if prompt is not None and prompt.expect is not None:
        a_results, b_results = (evaluate(prompt.expect, text, parse_calls(calls), run_code)
                                for text, calls in ((a_text, a_calls), (b_text, b_calls)))
        row.update(expectation_columns(a_results, b_results))
        detail["checks"] = [[r.check, r.status, r.reason] for r in a_results], \
            [[r.check, r.status, r.reason] for r in b_results]
    row.update(_token_comparison(a, b, a_first, b_first, detail) if token_level
               else {"divergence_kind": ""})
    if a.routed or b.routed:
        row.update(_routing_columns(a, b, a_ok, b_ok, row, detail, token_level))
    # Nondeterminism, not regression: a side's own repeats also show the other's text.
    row["noise"] = not row["identical"] and bool(
        {r["text_hash"] for r in a_ok} & {r["text_hash"] for r in b_ok})
    row["suggested_label"] = suggested_label(
        row["identical"], row["similarity"], row["numbers_changed"], row.get("flip", ""),
        row.get("a_expect", ""), row.get("b_expect", ""), row["a_degenerate"],
        row["b_degenerate"], row["tool_call_change"])
    return row


def _successful(rows: list[Record] | None) -> list[Record] | None:
    return None if rows is None else [r for r in rows if not _present(r["error"])]


def _present(value: Any) -> bool:
    return value is not None and value == value  # NaN != NaN


def _repeat_zero(rows: list[Record] | None) -> Record | None:
    return next((r for r in rows or [] if r["repeat"] == 0), None)


def _status(a_rows: list[Record] | None, b_rows: list[Record] | None,
            a_first: Record | None, b_first: Record | None) -> str:
    if a_rows is None:
        return "only_b"
    if b_rows is None:
        return "only_a"
    a_hash = a_first["prompt_hash"] if a_first is not None else None
    b_hash = b_first["prompt_hash"] if b_first is not None else None
    if _present(a_hash) and _present(b_hash) and a_hash != b_hash:
        return "not_comparable"
    if a_first is None:
        return "a_failed"
    if b_first is None:
        return "b_failed"
    return "compared"


def _determinism(side: str, ok: list[Record] | None) -> dict[str, Any]:
    if ok is None:
        return {}
    signatures = {r["signature"] for r in ok if _present(r["signature"])}
    return {f"{side}_repeats": len(ok), f"{side}_texts": len({r["text_hash"] for r in ok}),
            f"{side}_signatures": len(signatures) if signatures else None}


# A prompt longer than this (a long-context haystack) is shown in the sheet by its
# start and end: the reviewer needs the question, not 60 KB of filler per pair.
SHOWN_PROMPT_CHARS = 4000


def _shown_request(request: dict[str, Any]) -> dict[str, Any]:
    """The messages (or text) and max_tokens of a request, long texts shortened."""
    def shown(text: Any) -> Any:
        if not isinstance(text, str) or len(text) <= SHOWN_PROMPT_CHARS:
            return text
        half = SHOWN_PROMPT_CHARS // 2
        return (f"{text[:half]}\n[... {len(text) - 2 * half:,} characters not shown ...]\n"
                f"{text[-half:]}")

    shown_request = {k: v for k, v in request.items() if k in ("messages", "prompt",
                                                                "max_tokens")}
    if "prompt" in shown_request:
        shown_request["prompt"] = shown(shown_request["prompt"])
    if "messages" in shown_request:
        shown_request["messages"] = [{**m, "content": shown(m.get("content"))}
                                     for m in shown_request["messages"]]
    return shown_request


def _calls(record: Record) -> str | None:
    calls = record.get("tool_calls")
    return calls if isinstance(calls, str) and calls else None


def _variants(ok: list[Record] | None) -> list[tuple[str, int]] | None:
    """Distinct texts across repeats with their counts, when there is more than one."""
    counts = Counter(record["text"] for record in ok or ())
    return sorted(counts.items(), key=lambda kv: -kv[1]) if len(counts) > 1 else None


def _token_comparison(a: Side, b: Side, a_first: Record, b_first: Record,
                      detail: Record) -> dict[str, Any]:
    a_tokens = a.tokens_at(int(a_first["offset"]))
    b_tokens = b.tokens_at(int(b_first["offset"]))
    if not a_tokens or not b_tokens:
        return {"divergence_kind": ""}
    divergence: Divergence = classify_divergence(a_tokens, b_tokens)
    position = divergence.position
    if position is not None:
        for side, tokens in (("a", a_tokens), ("b", b_tokens)):
            if position < len(tokens):
                detail[f"{side}_top"] = tokens.top(position)
    measured: Drift = drift(a_tokens, b_tokens, divergence.position)
    return {"first_divergence": divergence.position, "divergence_kind": divergence.kind,
            "divergence_gap": divergence.gap, "divergence_b_gap": divergence.b_gap,
            "divergence_a_token": divergence.a_token,
            "divergence_b_token": divergence.b_token, **asdict(measured)}


def _routing_columns(a: Side, b: Side, a_ok: list[Record], b_ok: list[Record],
                     row: dict[str, Any], detail: Record, token_level: bool
                     ) -> dict[str, Any]:
    """Each side's routing across its repeats, and A's against B's (repeat 0)."""
    columns: dict[str, Any] = {}
    shown: dict[str, Any] = {}
    firsts = {}
    for name, side, ok in (("a", a, a_ok), ("b", b, b_ok)):
        routings = side.routing_of(ok)
        if not routings:
            continue
        repeats = routing.across_repeats(list(routings.values()),
                                         row.get(f"{name}_signatures"))
        columns[f"{name}_routings"], columns[f"{name}_routing"] = repeats.distinct, repeats.kind
        shown[f"{name}_repeats"] = {"sentence": repeats.sentence,
                                    **routing.grid_cells(repeats.grid)}
        if 0 in routings:
            firsts[name] = routings[0]
    reason = _routing_not_compared(firsts, a_ok, b_ok) if a.routed and b.routed else None
    if token_level and reason:
        shown["ab"] = {"sentence": f"not compared: {reason}"}
    elif token_level and len(firsts) == 2:
        pair = routing.between(firsts["a"], firsts["b"], row.get("first_divergence"))
        columns.update(routing_first_token=pair.first_token,
                       routing_first_layer=pair.first_layer,
                       routing_diff_share=round(pair.share, 6))
        shown["ab"] = {"sentence": pair.sentence, **routing.grid_cells(pair.grid)}
    if shown:
        detail["routing"] = shown
    return columns


def _routing_not_compared(firsts: dict[str, Any], a_ok: list[Record], b_ok: list[Record]
                          ) -> str | None:
    """Why A's repeat 0 routing is not set against B's: a side's was unusable when
    collected (its record says why), or the two do not have the same shape."""
    reasons = []
    for name, ok in (("a", a_ok), ("b", b_ok)):
        unusable = next((r.get("routing_unusable") for r in ok if r["repeat"] == 0), None)
        if name not in firsts and unusable:
            reasons.append(f"{name.upper()}'s routing is unusable ({unusable})")
    if len(firsts) == 2:
        reasons += [r for r in [routing.incomparable(firsts["a"], firsts["b"])] if r]
    return "; ".join(reasons) or None


def _forced(folder: str | Path) -> tuple[ForcedSummary, dict[str, dict[str, Any]]]:
    """The run's forced figures, with a KL histogram, and each prompt's columns."""
    forced, lines = read_forced(Path(folder))
    values = np.fromiter(all_kl(lines), float)
    high = float(np.percentile(values, 99)) if len(values) else 0.0
    counts = np.histogram(np.minimum(values, high), bins=20, range=(0.0, high or 1.0))[0]
    forced.source = str(folder)
    forced.kl_histogram = KLHistogram(high, counts.tolist())
    return forced, {prompt_id: forced_pair_columns(line) for prompt_id, line in lines.items()}


def _add_forced(pairs: pd.DataFrame, by_prompt: dict[str, dict[str, Any]]) -> None:
    found = [by_prompt.get(str(prompt_id), {}) for prompt_id in pairs["prompt_id"]]
    for column in PAIR_FORCED_COLUMNS:
        pairs[column] = pd.Series([row.get(column) for row in found], index=pairs.index,
                                  dtype=PAIR_DTYPES[column])


def write_pairs(side_a: Side, side_b: Side, out: Path, approvals: dict[str, Approval],
                 forced: str | Path | None, code_exec: Limits | None, jobs: int
                 ) -> tuple[Summary, PairTotals]:
    """pairs.csv and details.jsonl written chunk by chunk, in place once the summary
    of what they hold is made (a failure leaves the report as it was); that summary
    but its statistics, and the totals gathered as the chunks passed."""
    forced_summary, forced_columns = _forced(forced) if forced is not None else (None, {})
    identity = hashlib.sha256()
    totals = PairTotals()
    make_directory(out)
    with side_a, side_b, AtomicFile(out / PAIRS) as table, AtomicFile(out / DETAILS) as lines:
        for frame, details in judged_chunks(side_a, side_b, code_runner(code_exec), jobs):
            apply_approvals(frame, approvals)
            if forced_summary is not None:
                _add_forced(frame, forced_columns)
            table.write(frame.to_csv(index=False, header=not totals.prompts).encode("utf-8"))
            lines.write(b"".join(orjson.dumps(detail) + b"\n" for detail in details))
            update_identity(identity, frame)
            totals.add(frame)
        if not totals.prompts:
            table.write(pair_frame([]).to_csv(index=False).encode("utf-8"))
        table.flush()  # both written before either replaces the old report's
        lines.flush()
        summary = totals.summary(side_a, side_b, statistics=False)
        summary.forced = forced_summary
        summary.near_tie_nats = NEAR_TIE_NATS
        summary.identity = identity.hexdigest()[:20]
        if any(p.expect and p.expect.code for side in (side_a, side_b)
               for p in side.prompts.values()):
            summary.code_execution = code_execution(code_exec)
    return summary, totals
