"""Several candidates against one reference: one row each, and the decision.

The recommendation is the fastest candidate (by measured throughput where B's may be
compared with A's, else the first in the order given) that passes the gate, with a
sentence for every other candidate saying why it was not picked.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from xml.etree import ElementTree

import msgspec

from .._version import __version__
from ..errors import RunFormatError
from ..store.files import write_atomic
from ..store.folders.report_dir import GATE_JSON, JUNIT_XML, OVERVIEW, read_overview
from ..store.folders.run_dir import CellValue, Throughput, write_json_atomic
from ..store.inputs.rubric import Rubric
from ..store.records.formats import CANDIDATES_GATE_FORMAT, CandidatesGateFormat
from ..store.records.report_records import (
    CandidateRow,
    Overview,
    Recommendation,
    SideIdentity,
    Summary,
)
from .explain import REVIEW, Failure, junit_text, report_failures
from .verdict import GateResult, Policy, gate_report, review_phrase, xml_text


def candidate_row(label: str, report: str, summary: Summary, result: GateResult
                  ) -> CandidateRow:
    rules = {rule.name: rule for rule in result.rules}
    forced = summary.forced.overall if summary.forced else None
    return CandidateRow(
        label=label, report=report, endpoint=summary.b.endpoint, cell=summary.cells.b,
        cell_key=summary.cells.b_key, compared=summary.counts.pairs,
        prompts=summary.counts.prompts, identical=summary.counts.identical,
        factual_flips=int(rules["factual_flips"].count or 0),
        degenerate_new_on_b=summary.counts.degenerate_new_on_b,
        nondeterministic_b=summary.counts.nondeterministic.b,
        pass_rate=summary.stats.pass_rate,
        forced_kl_mean=forced.kl.mean if forced and forced.kl else None,
        forced_top1=forced.top1_agreement if forced else None,
        throughput=summary.throughput, gate=result.verdict, gate_reasons=result.reasons())


def recommend(rows: list[CandidateRow]) -> Recommendation:
    """The fastest passing candidate, and why each other one was not picked."""
    not_picked = {r.label: "; ".join(r.gate_reasons) or "fails the gate"
                  for r in rows if r.gate != "pass"}
    passing = [r for r in rows if r.gate == "pass"]
    if not passing:
        return Recommendation(label=None, reason="no candidate passes the gate",
                              not_picked=not_picked)
    if not any(r.throughput and r.throughput.a and r.throughput.b for r in passing):
        for later in passing[1:]:
            not_picked[later.label] = "passes too, but comes later in the order given " \
                                      "(throughput not measured: --throughput)"
        return Recommendation(label=passing[0].label, not_picked=not_picked,
                              reason="the first candidate, in the order given, that passes "
                                     "the gate (throughput not measured: --throughput)")
    comparable = [r for r in passing if r.throughput and r.throughput.comparable]
    for row in passing:
        if row not in comparable:
            not_picked[row.label] = row.throughput.note if row.throughput else \
                "throughput not measured"
    if not comparable:
        first = passing[0]
        not_picked.pop(first.label, None)
        return Recommendation(label=first.label, not_picked=not_picked,
                              reason="passes the gate; no candidate's throughput could be "
                                     "compared with A's, so the first in the order given")
    best = max(comparable, key=_ratio)
    for row in comparable:
        if row is not best:
            not_picked[row.label] = (f"passes too, but slower: {_ratio(row):.2f}x A's "
                                     f"throughput against {_ratio(best):.2f}x")
    return Recommendation(label=best.label, not_picked=not_picked,
                          reason=f"the fastest candidate that passes the gate: "
                                 f"{_ratio(best):.2f}x A's throughput, with the same "
                                 "generated token counts")


def _ratio(row: CandidateRow) -> float:
    return row.throughput.ratio_b_over_a or 0.0 if row.throughput else 0.0


def build_overview(reference: SideIdentity, reference_cell: Mapping[str, CellValue],
                   reference_throughput: Throughput | None,
                   rows: list[CandidateRow]) -> Overview:
    return Overview(quantcheck_version=__version__, reference=reference,
                    reference_cell=dict(reference_cell),
                    reference_throughput=reference_throughput, candidates=rows,
                    recommendation=recommend(rows))


class CandidatesGate(msgspec.Struct, kw_only=True):
    """DIR/gate.json of an overview: every candidate's verdict, and the decision."""

    format: CandidatesGateFormat = CANDIDATES_GATE_FORMAT
    verdict: str  # pass when every candidate gated passes
    candidates: dict[str, GateResult]
    recommendation: Recommendation


def gate_candidates(folder: Path, policy: Policy | None = None, rubric: Rubric | None = None,
                    only: str | None = None) -> tuple[CandidatesGate, Overview]:
    """Gate every candidate of an overview (or `only` one) under one policy; write each
    candidate's gate files, and DIR/gate.json and DIR/junit.xml with one test case per
    candidate and rule."""
    overview = read_overview(folder)
    rows = [row for row in overview.candidates if only in (None, row.label)]
    if not rows:
        raise RunFormatError(f"{folder / OVERVIEW}: no candidate {only!r} (candidates: "
                             f"{', '.join(r.label for r in overview.candidates)})")
    results = {}
    for row in rows:
        results[row.label], _ = gate_report(folder / row.report, policy, rubric)
        row.gate, row.gate_reasons = results[row.label].verdict, results[row.label].reasons()
    decision = CandidatesGate(
        verdict="pass" if all(r.passed for r in results.values()) else "fail",
        candidates=results, recommendation=recommend(rows))
    write_json_atomic(folder / GATE_JSON, msgspec.to_builtins(decision))
    explained = {row.label: report_failures(folder / row.report, results[row.label].rules,
                                            row.report)
                 for row in rows if not results[row.label].passed}
    write_atomic(folder / JUNIT_XML, candidates_junit(results, explained,
                                                      overview.reference.label))
    return decision, overview


def candidates_junit(results: dict[str, GateResult],
                     explained: Mapping[str, list[Failure]] | None = None,
                     reference: str = "A") -> bytes:
    """One test case per candidate and rule; a failing one says why for each prompt
    (explain.py), linking the pair in the candidate's own sheet."""
    suite = ElementTree.Element("testsuite", name="quantcheck candidates")
    failures = 0
    for label, result in results.items():
        for rule in result.rules:
            case = ElementTree.SubElement(suite, "testcase", name=xml_text(f"{label}: {rule.name}"),
                                          classname=xml_text(f"quantcheck.{label}"))
            if not rule.passed:
                failures += 1
                failure = ElementTree.SubElement(case, "failure", type=rule.name,
                                                 message=xml_text(rule.description))
                why = [junit_text(found, reference, label) for found in
                       (explained or {}).get(label, []) if found.rule == rule.name]
                failure.text = xml_text("\n\n".join([f"{label}: {rule.description}", *why]))
        if result.flips_to_review:  # not counted, never passed unseen: a skipped case
            case = ElementTree.SubElement(suite, "testcase", name=xml_text(f"{label}: {REVIEW}"),
                                          classname=xml_text(f"quantcheck.{label}"))
            said = review_phrase(result.flips_to_review)
            ElementTree.SubElement(case, "skipped", type=REVIEW, message=xml_text(said)).text = \
                xml_text(f"{label}: {said}")
    suite.set("tests", str(len(suite)))
    suite.set("failures", str(failures))
    return b'<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(suite)
