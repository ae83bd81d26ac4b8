"""Aggregate pairs, chunk by chunk, into summary.json (the sentences people read of it
are in present/sentences.py)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence

import msgspec
import numpy as np

from .._version import __version__
from ..store.folders.run_dir import Throughput, prompt_key, read_throughput
from ..store.records.pair_records import (
    FLIP_CAUSES,
    PairRow,
    logprobs_only,
    nondeterministic,
    only_first_differs,
    text_varies,
)
from ..store.records.report_records import (
    Cells,
    CheckCounts,
    Collapse,
    CollapseGroup,
    Comparison,
    Counts,
    DriftSpreads,
    FirstDivergence,
    Flips,
    Performance,
    PerSide,
    PreflightPair,
    RoutingCounts,
    SideIdentity,
    SidePerformance,
    Spread,
    Stats,
    Summary,
    TemplateSigns,
    ThroughputPair,
    ToolSession,
)
from ..store.records.run_records import CHECKS, DEGENERATE_KINDS, LENGTH_CAPPED, new_on_b
from .cells import confound_warning, differing_axes
from .collapse import SHOWN_GROUPS, collapsed_groups, collapsed_prompts, row_keys
from .determinism import side_determinism
from .expects import FAIL, PASS, SKIPPED
from .sessions import TurnResult, tool_sessions
from .sides import Side, prompt_id_of
from .stats import BOOTSTRAPPED, paired_statistics, pass_rate_of, row_pass_counts
from .templates import template_agreement
from .tokenizers import tokenizer_agreement

DRIFT_COLUMNS = ["top1_agreement", "logprob_mean_abs_diff", "logprob_max_abs_diff",
                 "kl_topk_mean", "kl_topk_max"]


def drift_values(compared: Sequence[PairRow]) -> dict[str, np.ndarray]:
    """Each drift column's values, and first_divergence's, over the pairs that have one."""
    columns: dict[str, list[float | None]] = {
               "top1_agreement": [row.top1_agreement for row in compared],
               "logprob_mean_abs_diff": [row.logprob_mean_abs_diff for row in compared],
               "logprob_max_abs_diff": [row.logprob_max_abs_diff for row in compared],
               "kl_topk_mean": [row.kl_topk_mean for row in compared],
               "kl_topk_max": [row.kl_topk_max for row in compared],
               "first_divergence": [row.first_divergence for row in compared]}
    return {column: np.array([v for v in values if v is not None and v == v], float)
            for column, values in columns.items()}


class PairTotals:
    """What summary.json says of the pairs, gathered chunk by chunk (compare forgets a
    chunk once it is written): counts, the ids of the prompts not compared, the
    compared pairs' drift values (48 bytes a pair: percentiles need every value) and
    their answers' collapse keys (40 bytes a pair: collapse.py)."""

    def __init__(self) -> None:
        self.prompts = self.compared = 0
        self.counts: Counter[str] = Counter()  # identical, flips, approved, ...
        self.values: dict[str, Counter[str]] = defaultdict(Counter)  # a column's values
        self.not_compared: dict[str, list[str]] = defaultdict(list)  # ids by status
        self.checks: dict[str, CheckCounts] = {}
        self.pass_counts = np.zeros(4, np.int64)  # see stats.row_pass_counts
        self.category_counts: dict[str, np.ndarray] = {}  # the same, per category
        self.numbers: dict[str, list[np.ndarray]] = defaultdict(list)
        self.routing: Counter[str] | None = None
        self.collapse_keys: list[np.ndarray] = []  # a chunk's (prompt key, row_keys...)
        self.tool_turns: list[tuple[str, str, str, str]] = []  # with a tool_call check

    def add(self, rows: Sequence[PairRow]) -> PairTotals:
        """Count the next pairs in prompt order."""
        self.prompts += len(rows)
        self.values["status"].update(row.status for row in rows)
        for row in rows:
            if not row.compared:
                self.not_compared[row.status].append(row.prompt_id)
        for side in "ab":
            self.counts[f"{side}_nondeterministic"] += sum(
                nondeterministic(row, side) for row in rows)
            self.counts[f"{side}_text_varies"] += sum(text_varies(row, side) for row in rows)
            self.counts[f"{side}_logprobs_only"] += sum(
                logprobs_only(row, side) for row in rows)
            self.counts[f"{side}_only_first_differs"] += sum(
                nondeterministic(row, side) and only_first_differs(row, side) for row in rows)
        compared = [row for row in rows if row.compared]
        self.compared += len(compared)
        self._count(compared)
        for column, values in drift_values(compared).items():
            self.numbers[column].append(values)
        self.pass_counts += row_pass_counts(compared)
        for category in {row.category for row in compared}:
            counts = self.category_counts.setdefault(category, np.zeros(4, np.int64))
            counts += row_pass_counts(row for row in compared if row.category == category)
        _add_checks(self.checks, compared)
        self._add_routing(compared)
        self._add_tool_turns(compared)
        self.collapse_keys.append(np.array(
            [(prompt_key(row.prompt_id), *row_keys(row)) for row in compared], np.int64
        ).reshape(-1, 5))
        return self

    def _count(self, compared: list[PairRow]) -> None:
        counts = self.counts
        counts["identical"] += sum(bool(row.identical) for row in compared)
        for label in ("wording", "factual_flip"):
            counts[label] += sum(row.suggested_label == label for row in compared)
        for flip in ("regression", "improvement"):
            counts[flip] += sum(row.flip == flip for row in compared)
        counts["approved"] += sum(bool(row.approved_label) for row in compared)
        counts["noise"] += sum(bool(row.noise) for row in compared)
        for row in compared:
            if row.flip and row.flip_cause:
                self.values[f"{row.flip}_causes"][row.flip_cause] += 1
        for row in compared:
            a_reason, b_reason = row.a_degenerate or "", row.b_degenerate or ""
            if new_on_b(a_reason, b_reason, DEGENERATE_KINDS):
                self.values["new_on_b"][b_reason] += 1
            counts["length_capped_new_on_b"] += new_on_b(a_reason, b_reason, (LENGTH_CAPPED,))
        for side, tokens in (("a", [row.a_tokens for row in compared]),
                             ("b", [row.b_tokens for row in compared])):
            counted = [n for n in tokens if n is not None]
            counts[f"{side}_tokens"] += sum(counted)
            counts[f"{side}_with_tokens"] += len(counted)
        for side, signs in (("a", [row.a_template_signs for row in compared]),
                            ("b", [row.b_template_signs for row in compared])):
            for found in filter(None, signs):
                self.values["template"].update(f"{side}_{sign}" for sign in found.split(","))
        for column, values in (("a_degenerate", [row.a_degenerate for row in compared]),
                               ("b_degenerate", [row.b_degenerate for row in compared]),
                               ("divergence_kind", [row.divergence_kind for row in compared]),
                               ("tool_call_change", [row.tool_call_change for row in compared])):
            self.values[column].update(value for value in values if value)

    def _add_routing(self, compared: list[PairRow]) -> None:
        if not any(row.a_routing or row.b_routing for row in compared):
            return
        routing = self.routing = self.routing or Counter()
        routing["pairs"] += sum(bool(row.a_routing and row.b_routing) for row in compared)
        for kind in ("gating", "after_routing"):
            routing[f"a_{kind}"] += sum(row.a_routing == kind for row in compared)
            routing[f"b_{kind}"] += sum(row.b_routing == kind for row in compared)
        routing["ab_differs"] += sum(row.routing_first_token is not None for row in compared)

    def _add_tool_turns(self, compared: list[PairRow]) -> None:
        """Each pair with a tool_call check: its id, both statuses and B's reason (the
        session turns among them are found once the prompts are at hand)."""
        for row in compared:
            a, b = _statuses(row.a_checks), _statuses(row.b_checks)
            if "tool_call" in a or "tool_call" in b:
                reason = (row.b_expect_failures or "").removeprefix("tool_call: ")
                self.tool_turns.append((row.prompt_id, a.get("tool_call", ""),
                                        b.get("tool_call", ""), reason))

    def sessions(self, a: Side, b: Side) -> list[ToolSession]:
        """The tool sessions among the compared prompts, each with its first broken turn."""
        found = []
        for prompt_id, a_status, b_status, reason in self.tool_turns:
            key = prompt_key(prompt_id)
            prompt = a.prompt_by_key(key) or b.prompt_by_key(key)
            if prompt is not None and prompt.session is not None:
                found.append(TurnResult(prompt.session, prompt_id, a_status, b_status, reason))
        return tool_sessions(found)

    def collapse(self, a: Side, b: Side) -> Collapse:
        """Cross-prompt collapse over every compared pair: B's groups (the first
        SHOWN_GROUPS, each named by its first ids and answer) and the counts."""
        table = np.concatenate(self.collapse_keys).tolist() if self.collapse_keys else []
        on_b = collapsed_groups((key, a_key, b_key if b_long else None)
                                for key, a_key, b_key, _, b_long in table)
        on_a = collapsed_groups((key, b_key, a_key if a_long else None)
                                for key, a_key, b_key, a_long, _ in table)
        return Collapse(new_on_b=len(collapsed_prompts(on_b)),
                        new_on_a=len(collapsed_prompts(on_a)),
                        groups=[_group(a, b, group) for group in on_b[:SHOWN_GROUPS]])

    def number_column(self, column: str) -> np.ndarray:
        """A drift column's values over the compared pairs that have one, in order; one
        that is not finite (a run made by hand can hold an infinite logprob) counts as
        none, so the summary stays JSON its reader takes."""
        values = np.concatenate(self.numbers[column]) if self.numbers[column] else \
            np.zeros(0)
        return values[np.isfinite(values)]

    def summary(self, a: Side, b: Side, statistics: bool = True) -> Summary:
        """The summary; without `statistics`, `stats` is left empty for statistics()
        to fill once the sides are let go (compare: the bootstrap holds 32 MB a while)."""
        performance = Performance(a=_side_stats(a, self, "a"), b=_side_stats(b, self, "b"))
        _throughput_verdict(performance)
        return Summary(
            quantcheck_version=__version__, a=_identity(a), b=_identity(b),
            counts=self._counts(a, b), comparison=comparison_notes(self, a, b),
            cells=_cells(a, b),
            determinism={name: side_determinism(side, self.counts[f"{name}_nondeterministic"],
                                                self.counts[f"{name}_only_first_differs"])
                         for name, side in (("a", a), ("b", b))},
            drift=self._drift(), stats=self.statistics() if statistics else Stats(None, {}),
            performance=performance, preflight=_preflight(a, b), throughput=_throughput(a, b),
            sessions=self.sessions(a, b),
            backends={name: side.backends for name, side in (("a", a), ("b", b))
                      if side.backends is not None})

    def statistics(self) -> Stats:
        stats = paired_statistics(self.pass_counts.tolist(),
                                  {c: self.number_column(c) for c in BOOTSTRAPPED})
        for category in sorted(self.category_counts):
            change = pass_rate_of(*self.category_counts[category].tolist())
            if change is not None:
                stats.categories[category] = change
        return stats

    def _counts(self, a: Side, b: Side) -> Counts:
        counts, new = self.counts, self.values["new_on_b"]
        wording = counts["wording"]
        return Counts(
            prompts=self.prompts, pairs=self.compared, identical=counts["identical"],
            wording_similar=wording, divergent=self.compared - counts["identical"] - wording,
            flips=Flips(regression=counts["regression"], improvement=counts["improvement"]),
            suggested_factual_flip=counts["factual_flip"], approved=counts["approved"],
            noise=counts["noise"],
            degenerate={side: _ranked(self.values[f"{side}_degenerate"]) for side in "ab"},
            degenerate_new_on_b=sum(new.values()),
            degenerate_new_on_b_kinds={kind: new[kind] for kind in DEGENERATE_KINDS},
            length_capped_new_on_b=counts["length_capped_new_on_b"],
            nondeterministic=PerSide(counts["a_nondeterministic"],
                                     counts["b_nondeterministic"]),
            text_varies=PerSide(counts["a_text_varies"], counts["b_text_varies"]),
            logprobs_only=PerSide(counts["a_logprobs_only"], counts["b_logprobs_only"]),
            only_first_differs=PerSide(counts["a_only_first_differs"],
                                       counts["b_only_first_differs"]),
            divergence_kinds=_ranked(self.values["divergence_kind"]),
            status=_ranked(self.values["status"]),
            unanswered=PerSide(a.unanswered, b.unanswered),
            checks={check: self.checks[check] for check in CHECKS if check in self.checks},
            tool_calls=_ranked(self.values["tool_call_change"]),
            routing=RoutingCounts(**self.routing) if self.routing is not None else None,
            template=TemplateSigns(**self.values["template"]) if self.values["template"]
            else None,
            flip_causes={cause: self.values["regression_causes"][cause]
                         for cause in FLIP_CAUSES},
            improvement_causes={cause: self.values["improvement_causes"][cause]
                                for cause in FLIP_CAUSES},
            collapse=self.collapse(a, b))

    def _drift(self) -> DriftSpreads:
        drift = DriftSpreads()
        for column in DRIFT_COLUMNS:
            values = self.number_column(column)
            if len(values):
                setattr(drift, column, Spread(
                    mean=float(values.mean()), median=float(np.median(values)),
                    p99=float(np.percentile(values, 99)), max=float(values.max())))
        divergence = self.number_column("first_divergence")
        if len(divergence):
            drift.first_divergence = FirstDivergence(median=float(np.median(divergence)),
                                                     min=int(divergence.min()))
        return drift


def _group(a: Side, b: Side, keys: list[int]) -> CollapseGroup:
    """A group of prompts B answers alike: its size, first ids, and that answer's start."""
    ids = [prompt_id_of(a, b, key) or "" for key in keys[:SHOWN_GROUPS]]
    first = next((r for r in b.records(ids[0], keys[0]) or [] if r.repeat == 0
                  and r.error is None), None)
    return CollapseGroup(prompts=len(keys), ids=ids, answer=first.text[:80] if first else "")


def _ranked(counts: Counter[str]) -> dict[str, int]:
    """Values by count, most common first (ties by name: the same for any chunking)."""
    return {key: n for key, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


def _add_checks(counts: dict[str, CheckCounts], compared: list[PairRow]) -> None:
    """Per check kind, from pairs.csv's a_checks / b_checks cells."""
    for row in compared:
        a, b = _statuses(row.a_checks), _statuses(row.b_checks)
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


def _statuses(cell: str | None) -> dict[str, str]:
    return dict(token.split("=", 1) for token in (cell or "").split())


def comparison_notes(totals: PairTotals, a: Side, b: Side) -> Comparison:
    """How many prompts were compared, and in plain words why the others were not."""
    ids = totals.not_compared
    notes = []
    if ids.get("not_comparable"):
        notes.append(f"{_prompts(len(ids['not_comparable']))} not comparable: "
                     + _request_differences(ids["not_comparable"], a, b))
    only_a, only_b = ids.get("only_a", []), ids.get("only_b", [])
    if only_a or only_b:
        disjoint = totals.compared == 0 and set(ids) <= {"only_a", "only_b"}
        notes.append(f"{_prompts(len(only_a))} only in A, "
                     f"{_prompts(len(only_b))} only in B"
                     + (" (the two runs share no prompt id)" if disjoint else ""))
    for side, name in ((a, "a"), (b, "b")):
        failed = ids.get(f"{name}_failed", [])
        if failed:
            error = side.first_error(failed) or "never sent (the collection was interrupted)"
            notes.append(f"{_prompts(len(failed))} without an answer on {name.upper()} "
                         f"({side.label}): {error}")
    return Comparison(compared=totals.compared, prompts=totals.prompts, notes=notes,
                      sentence=_comparison_sentence(totals.compared, totals.prompts, notes))


def _prompts(n: int) -> str:
    """'1 prompt', '2 prompts': the notes summary.json records."""
    return f"{n} prompt{'s' * (n != 1)}"


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
    failed = [f"on {side} ({measured.error})" for side, measured in (("A", a), ("B", b))
              if measured is not None and measured.error]
    if failed:
        pair.note = f"throughput not measured {' and '.join(failed)}"
        return pair
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
    """Each side's recorded preflight, whether their tokenizers agree, and whether they
    render a conversation alike."""
    agreement = tokenizer_agreement(a.fingerprint, b.fingerprint)
    rendered = [side.preflight.template if side.preflight else None for side in (a, b)]
    return PreflightPair(a=a.preflight, b=b.preflight, tokenizer=agreement,
                         token_metrics_withheld=agreement.message
                         if agreement.status == "warn" else None,
                         template=template_agreement(*rendered) if any(rendered) else None)


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
    return "; ".join(f"{phrase} ({_prompts(n)})" if len(prompt_ids) > 1
                     else phrase for phrase, n in ranked[:3])


def _short(value: object) -> str:
    if value is None:
        return "none"
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, int | float) \
        else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


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


def _side_stats(side: Side, totals: PairTotals, prefix: str) -> SidePerformance:
    """The side's request counts and timings, and the tokens of its compared answers."""
    with_tokens = totals.counts[f"{prefix}_with_tokens"]
    return msgspec.structs.replace(
        side.performance,
        compared_output_tokens=totals.counts[f"{prefix}_tokens"] if with_tokens else None)


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
