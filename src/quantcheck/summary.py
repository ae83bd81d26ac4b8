"""Aggregate a pairs frame into summary.json and the one-paragraph terminal summary."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from ._version import __version__
from .cells import confound_warning, differing_axes
from .checks import tokenizer_agreement
from .determinism import side_determinism
from .expectations import CHECKS, FAIL, PASS, SKIPPED
from .records import DEGENERATE_KINDS, LENGTH_CAPPED, new_on_b
from .reportrecords import (
    Cells,
    CheckCounts,
    Comparison,
    Counts,
    Drift,
    FirstDivergence,
    Flips,
    Performance,
    PerSide,
    PreflightPair,
    RoutingCounts,
    SideIdentity,
    SidePerformance,
    Spread,
    Summary,
    ThroughputPair,
)
from .runstore import Throughput, read_throughput
from .sides import Side
from .stats import paired_statistics

LONG_TEXT_COLUMNS = ["a_text", "b_text", "a_tool_calls", "b_tool_calls"]
DRIFT_COLUMNS = ["top1_agreement", "logprob_mean_abs_diff", "logprob_max_abs_diff",
                 "kl_topk_mean", "kl_topk_max"]
# The pairs' columns summarize reads: compare keeps only these of every pair (at
# 100,000 pairs the other columns would hold about 40 MB more).
SUMMARY_COLUMNS = [
    "prompt_id", "status", "identical", "first_divergence", "divergence_kind", "noise",
    "suggested_label", "approved_label", "flip", "tool_call_change", "routing_first_token",
    *DRIFT_COLUMNS,
    *(f"{side}_{name}" for side in "ab" for name in (
        "texts", "signatures", "expect", "checks", "degenerate", "tokens", "routing"))]


def summarize(pairs: pd.DataFrame, a: Side, b: Side) -> Summary:
    """Every total of a comparison (the fields compare adds later keep their defaults)."""
    pairs = pairs.drop(columns=LONG_TEXT_COLUMNS, errors="ignore")  # selections copy the rest
    compared = pairs[pairs["status"] == "compared"]
    performance = Performance(a=_side_stats(a, compared, "a"), b=_side_stats(b, compared, "b"))
    _throughput_verdict(performance)
    return Summary(
        quantcheck_version=__version__, a=_identity(a), b=_identity(b),
        counts=_counts(pairs, compared, a, b), comparison=comparison_notes(pairs, a, b),
        cells=_cells(a, b),
        determinism={"a": side_determinism(a), "b": side_determinism(b)},
        drift=_drift(compared), stats=paired_statistics(pairs), performance=performance,
        preflight=_preflight(a, b), throughput=_throughput(a, b))


def _throughput(a: Side, b: Side) -> ThroughputPair | None:
    """The throughput phases the runs hold (run --throughput), if any."""
    measured = [read_throughput(s.run_dir) if s.run_dir else None for s in (a, b)]
    if measured == [None, None]:
        return None
    return throughput_verdict(*measured)


def throughput_verdict(a: Throughput | None, b: Throughput | None) -> ThroughputPair:
    """B's throughput against A's, compared only when every prompt's generated token
    count matches; otherwise by how much they differ, per generated token only."""
    pair = ThroughputPair(a=a, b=b)
    if a is None or b is None:
        pair.note = f"throughput measured on {'A' if a else 'B'} only"
        return pair
    if a.tokens_per_s is None or b.tokens_per_s is None or a.prompt_tokens is None \
            or b.prompt_tokens is None:
        pair.note = "throughput not comparable: the server reports no token counts"
        return pair
    shared = sorted(set(a.prompt_tokens) & set(b.prompt_tokens))
    a_total = sum(a.prompt_tokens[p] for p in shared)
    b_total = sum(b.prompt_tokens[p] for p in shared)
    pair.ratio_b_over_a = b.tokens_per_s / a.tokens_per_s
    if a_total == b_total:
        pair.comparable = True
        pair.note = (f"generated token counts match ({a_total}): B/A = "
                     f"{pair.ratio_b_over_a:.2f}x ({b.tokens_per_s:,.0f} vs "
                     f"{a.tokens_per_s:,.0f} tokens/s)")
    else:
        differ = abs(b_total - a_total) / max(a_total, 1)
        pair.note = (f"throughput not comparable, token counts differ {differ:.0%} "
                     f"(A {a_total}, B {b_total}); per generated token only: B/A = "
                     f"{pair.ratio_b_over_a:.2f}x")
    return pair


def _preflight(a: Side, b: Side) -> PreflightPair:
    """Each side's recorded preflight, and whether their tokenizers agree."""
    agreement = tokenizer_agreement(a.fingerprint, b.fingerprint)
    return PreflightPair(a=a.preflight, b=b.preflight, tokenizer=agreement,
                         token_metrics_withheld=agreement.message
                         if agreement.status == "warn" else None)


def _counts(pairs: pd.DataFrame, compared: pd.DataFrame, a: Side, b: Side) -> Counts:
    identical = int(compared["identical"].sum())
    wording = int((compared["suggested_label"] == "wording").sum())
    a_reasons, b_reasons = (compared[f"{s}_degenerate"].fillna("") for s in "ab")
    new = [y for x, y in zip(a_reasons, b_reasons, strict=True)
           if new_on_b(x, y, DEGENERATE_KINDS)]
    return Counts(
        prompts=len(pairs), pairs=len(compared), identical=identical,
        wording_similar=wording, divergent=len(compared) - identical - wording,
        flips=Flips(regression=int((compared["flip"] == "regression").sum()),
                    improvement=int((compared["flip"] == "improvement").sum())),
        suggested_factual_flip=int((compared["suggested_label"] == "factual_flip").sum()),
        approved=int((compared["approved_label"].fillna("") != "").sum()),
        noise=int(compared["noise"].fillna(False).astype(bool).sum()),
        degenerate={side: _value_counts(compared[f"{side}_degenerate"]) for side in "ab"},
        degenerate_new_on_b=len(new),
        degenerate_new_on_b_kinds={kind: new.count(kind) for kind in DEGENERATE_KINDS},
        length_capped_new_on_b=sum(new_on_b(x, y, (LENGTH_CAPPED,))
                                   for x, y in zip(a_reasons, b_reasons, strict=True)),
        nondeterministic=PerSide(_nondeterministic(pairs, "a"), _nondeterministic(pairs, "b")),
        divergence_kinds=_value_counts(compared["divergence_kind"]),
        status={str(status): int(n) for status, n in pairs["status"].value_counts().items()},
        unanswered=PerSide(unanswered(a), unanswered(b)),
        checks=check_counts(compared), tool_calls=_value_counts(compared["tool_call_change"]),
        routing=routing_counts(compared))


def routing_counts(compared: pd.DataFrame) -> RoutingCounts | None:
    kinds = {side: compared[f"{side}_routing"].astype(object).fillna("") for side in "ab"}
    if not any((kind != "").any() for kind in kinds.values()):
        return None
    both = (kinds["a"] != "") & (kinds["b"] != "")
    return RoutingCounts(
        pairs=int(both.sum()),
        a_gating=int((kinds["a"] == "gating").sum()),
        b_gating=int((kinds["b"] == "gating").sum()),
        a_after_routing=int((kinds["a"] == "after_routing").sum()),
        b_after_routing=int((kinds["b"] == "after_routing").sum()),
        ab_differs=int(compared["routing_first_token"].notna().sum()))


def check_counts(compared: pd.DataFrame) -> dict[str, CheckCounts]:
    """Per check kind, from pairs.csv's a_checks / b_checks cells."""
    counts: dict[str, CheckCounts] = {}
    for a_cell, b_cell in zip(compared["a_checks"], compared["b_checks"], strict=True):
        a, b = _statuses(a_cell), _statuses(b_cell)
        for check in a.keys() | b.keys():
            c = counts.setdefault(check, CheckCounts(checked=0, a_pass=0, b_pass=0,
                                                     regressions=0, improvements=0, skipped=0))
            pair = (a.get(check), b.get(check))
            c.checked += 1
            c.a_pass += pair[0] == PASS
            c.b_pass += pair[1] == PASS
            c.regressions += pair == (PASS, FAIL)
            c.improvements += pair == (FAIL, PASS)
            c.skipped += SKIPPED in pair
    return {check: counts[check] for check in CHECKS if check in counts}


def _statuses(cell: Any) -> dict[str, str]:
    return dict(token.split("=", 1) for token in cell.split()) if isinstance(cell, str) else {}


def unanswered(side: Side) -> int:
    """Requests of the run with no successful record: failed after retries, or never
    sent (an interrupted run)."""
    if side.manifest is None:
        return 0
    repeats = side.manifest.parameters.repeats
    ok = side.index.loc[side.index["error"].isna(), ["prompt_id", "repeat"]].drop_duplicates()
    ids = ok["prompt_id"].cat.categories
    in_prompt_set = np.fromiter((str(i) in side.prompts for i in ids), bool, len(ids))
    codes = ok["prompt_id"].cat.codes.to_numpy()
    answered = in_prompt_set[codes] & (ok["repeat"].to_numpy() < repeats) & (codes >= 0)
    return len(side.prompts) * repeats - int(answered.sum())


def comparison_notes(pairs: pd.DataFrame, a: Side, b: Side) -> Comparison:
    """How many prompts were compared, and in plain words why the others were not."""
    statuses = pairs["status"].value_counts().to_dict()
    ids = {status: pairs.loc[pairs["status"] == status, "prompt_id"].astype(str).tolist()
           for status in statuses}
    notes = []
    if ids.get("not_comparable"):
        notes.append(f"{plural(len(ids['not_comparable']), 'prompt')} not comparable: "
                     + _request_differences(ids["not_comparable"], a, b))
    only_a, only_b = ids.get("only_a", []), ids.get("only_b", [])
    if only_a or only_b:
        disjoint = set(ids) <= {"only_a", "only_b"}
        notes.append(f"{plural(len(only_a), 'prompt')} only in A, "
                     f"{plural(len(only_b), 'prompt')} only in B"
                     + (" (the two runs share no prompt id)" if disjoint else ""))
    for side, name in ((a, "a"), (b, "b")):
        failed = ids.get(f"{name}_failed", [])
        if failed:
            notes.append(f"{plural(len(failed), 'prompt')} without an answer on {name.upper()} "
                         f"({side.label}): {_first_error(side, failed)}")
    compared = int(statuses.get("compared", 0))
    return Comparison(compared=compared, prompts=len(pairs), notes=notes,
                      sentence=_comparison_sentence(compared, len(pairs), notes))


def _comparison_sentence(compared: int, prompts: int, notes: list[str]) -> str:
    if compared == prompts:
        return f"all {prompts} prompts compared"
    head = "nothing was compared" if compared == 0 else f"only {compared} of {prompts} " \
        "prompts were compared"
    return f"{head}: {'; '.join(notes)}"


def _request_differences(prompt_ids: list[str], a: Side, b: Side) -> str:
    """What differs between A's and B's requests, most common first: "B was collected
    with max_tokens 64, A with 256"."""
    seen: dict[str, int] = {}
    for prompt_id in prompt_ids:
        a_prompt, b_prompt = a.prompts.get(prompt_id), b.prompts.get(prompt_id)
        if a_prompt is None or b_prompt is None:
            continue
        a_request, b_request = a_prompt.request, b_prompt.request
        for key in sorted(set(a_request) | set(b_request)):
            if a_request.get(key) != b_request.get(key):
                phrase = (f"B was collected with {key} {_short(b_request.get(key))}, A with "
                          f"{_short(a_request.get(key))}")
                seen[phrase] = seen.get(phrase, 0) + 1
    if not seen:
        return "their prompt hashes differ"
    ranked = sorted(seen.items(), key=lambda item: -item[1])
    return "; ".join(f"{phrase} ({plural(n, 'prompt')})" if len(prompt_ids) > 1
                     else phrase for phrase, n in ranked[:3])


def _short(value: Any) -> str:
    if value is None:
        return "none"
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, int | float) \
        else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _first_error(side: Side, prompt_ids: list[str]) -> str:
    errors = side.index[side.index["prompt_id"].astype(str).isin(prompt_ids)
                        & side.index["error"].notna()]["error"]
    if errors.empty:
        return "never sent (the collection was interrupted)"
    common = errors.astype(str).str.replace(r" \(after \d+ attempts\)$", "", regex=True)
    return str(common.value_counts().index[0])


def _value_counts(column: pd.Series) -> dict[str, int]:
    values = column.fillna("")
    return {str(k): int(v) for k, v in values[values != ""].value_counts().items()}


def _nondeterministic(pairs: pd.DataFrame, side: str) -> int:
    texts = pairs[f"{side}_texts"].fillna(0) > 1
    signatures = pairs[f"{side}_signatures"].fillna(0) > 1
    return int((texts | signatures).sum())


def _cells(a: Side, b: Side) -> Cells:
    a_cell = a.manifest.cell if a.manifest else {}
    b_cell = b.manifest.cell if b.manifest else {}
    differing = differing_axes(a_cell, b_cell)
    return Cells(a=a_cell, b=b_cell, a_key=a.manifest.cell_key if a.manifest else None,
                 b_key=b.manifest.cell_key if b.manifest else None, differs=differing,
                 warning=confound_warning(differing))


def _identity(side: Side) -> SideIdentity:
    if side.manifest is None:
        return SideIdentity(label=side.label, text_only=side.text_only)
    manifest = side.manifest
    return SideIdentity(label=side.label, endpoint=manifest.endpoint, model=manifest.model,
                        runtime=manifest.server.runtime,
                        runtime_version=manifest.server.runtime_version,
                        text_only=side.text_only)


def _drift(compared: pd.DataFrame) -> Drift:
    drift = Drift()
    for column in DRIFT_COLUMNS:
        values = pd.to_numeric(compared[column], errors="coerce").dropna()
        if len(values):
            setattr(drift, column, Spread(
                mean=float(values.mean()), median=float(values.median()),
                p99=float(np.percentile(values, 99)), max=float(values.max())))
    divergence = pd.to_numeric(compared["first_divergence"], errors="coerce").dropna()
    if len(divergence):
        drift.first_divergence = FirstDivergence(median=float(divergence.median()),
                                                 min=int(divergence.min()))
    return drift


def _side_stats(side: Side, compared: pd.DataFrame, prefix: str) -> SidePerformance:
    ok = side.index.loc[side.index["error"].isna(), ["n_tokens", "e2e_s", "ttft_s"]]
    tokens = pd.to_numeric(ok["n_tokens"], errors="coerce")
    e2e = pd.to_numeric(ok["e2e_s"], errors="coerce").dropna()
    ttft = pd.to_numeric(ok["ttft_s"], errors="coerce").dropna()
    first_tokens = pd.to_numeric(compared[f"{prefix}_tokens"], errors="coerce")
    return SidePerformance(
        requests=len(side.index), failed=int(side.index["error"].notna().sum()),
        output_tokens=int(tokens.sum()) if tokens.notna().any() else None,
        compared_output_tokens=int(first_tokens.sum()) if first_tokens.notna().any()
        else None,
        ttft_p50_s=_percentile(ttft, 50), e2e_p50_s=_percentile(e2e, 50),
        e2e_p99_s=_percentile(e2e, 99),
        output_tokens_per_s=(float(tokens[e2e.index].sum() / e2e.sum())
                             if len(e2e) and e2e.sum() > 0 else None))


def _percentile(values: pd.Series, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _throughput_verdict(performance: Performance) -> None:
    """Throughput is only compared when the compared pairs generated as many tokens."""
    a, b = performance.a, performance.b
    a_tokens, b_tokens = a.compared_output_tokens, b.compared_output_tokens
    if a_tokens is None or b_tokens is None or not a.output_tokens_per_s \
            or not b.output_tokens_per_s:
        performance.throughput_note = "no timings on one side"
    elif a_tokens != b_tokens:
        performance.throughput_note = (f"generated token counts differ (A {a_tokens}, "
                                       f"B {b_tokens}): throughput is not compared")
    else:
        ratio = b.output_tokens_per_s / a.output_tokens_per_s
        performance.throughput_comparable = True
        performance.throughput_ratio_b_over_a = ratio
        performance.throughput_note = f"token counts match ({a_tokens}); B/A = {ratio:.2f}x"


KIND_NAMES = {"repetition": ("loop", "loops"), "empty": ("empty", "empty")}


def degenerate_phrase(counts: Counts) -> str:
    """'2 degenerate outputs new on B (1 loop, 1 empty)': the count and its parts."""
    total, kinds = counts.degenerate_new_on_b, counts.degenerate_new_on_b_kinds
    parts = [f"{kinds[kind]} {KIND_NAMES[kind][kinds[kind] != 1]}" for kind in DEGENERATE_KINDS
             if kinds.get(kind)]
    return (f"{plural(total, 'degenerate output')} new on B"
            + (f" ({', '.join(parts)})" if parts else ""))


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """'1 flip', '2 flips' ('1 empty', '2 empty' with nouns='empty')."""
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"


def headline(summary: Summary) -> str:
    """The seeds' style: "7 of 20 identical, 9 wording only, ..."."""
    counts = summary.counts
    parts = [f"{counts.identical} of {counts.pairs} identical",
             f"{counts.wording_similar} wording only (suggested)",
             f"{counts.divergent} to review",
             f"{plural(counts.flips.regression, 'factual flip')} by expect (A pass, B fail)"]
    if counts.flips.improvement:
        parts.append(plural(counts.flips.improvement, "improvement"))
    by_check = [f"{check} {c.regressions}" for check, c in counts.checks.items()
                if c.regressions]
    if len(counts.checks) > 1 and by_check:
        parts.append("flips by check: " + ", ".join(by_check))
    skipped = sum(c.skipped for c in counts.checks.values())
    if skipped:
        parts.append(f"{plural(skipped, 'check')} skipped (code: compare with "
                     "--allow-code-exec to run them)")
    if counts.tool_calls:
        parts.append("tool calls: " + ", ".join(f"{v} {k.replace('_', ' ')}"
                                                for k, v in counts.tool_calls.items()))
    parts.append(degenerate_phrase(counts))
    if counts.length_capped_new_on_b:
        parts.append(f"{plural(counts.length_capped_new_on_b, 'more answer')} on B cut by "
                     "max_tokens where A stopped")
    if counts.nondeterministic.a or counts.nondeterministic.b:
        parts.append(f"nondeterministic prompts: A {counts.nondeterministic.a}, "
                     f"B {counts.nondeterministic.b}")
    if counts.noise:
        parts.append(f"{plural(counts.noise, 'difference')} within repeat noise")
    others = {k: v for k, v in counts.status.items() if k != "compared"}
    if others:
        parts.append("not compared: " + ", ".join(f"{v} {k.replace('_', ' ')}"
                                                  for k, v in others.items()))
    return ", ".join(parts) + "."
