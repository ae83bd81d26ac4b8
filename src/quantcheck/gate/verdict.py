"""The CI gate: triage + reviews + policy -> a verdict (pure), and its report files."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree

import msgspec

from ..errors import ConfigFileError, RunFormatError
from ..store.files import write_atomic
from ..store.folders.report_dir import GATE_JSON, JUNIT_XML, require_report
from ..store.folders.reviews import ReviewVerdict, load_verdicts
from ..store.folders.run_dir import write_json_atomic
from ..store.inputs.rubric import Rubric, load_rubric
from ..store.inputs.yamlfile import read_yaml, reject_unknown
from ..store.records.formats import GATE_FORMAT, GateFormat
from ..store.records.judge_records import Agreement
from ..store.records.pair_records import (
    FLIP_CAUSE_WORDS,
    REVIEW_CAUSES,
    PairRow,
    logprobs_only,
    new_degenerate_on_b,
    nondeterministic,
    text_varies,
    to_review,
)
from ..store.records.report_records import Summary
from ..triage.agreement import agreement, agreement_sentence
from ..triage.backends import mixed_sentence
from ..triage.collapse import collapsed_on_b, collapsed_prompts
from ..triage.expects import SKIPPED
from ..triage.stats import pass_rate_of, row_pass_counts
from .explain import (
    REVIEW,
    Failure,
    code_cell,
    failures,
    junit_message,
    junit_text,
    markdown_table,
    markdown_text,
    reviews,
)
from .limits import BY_KEY, LIMITS, Limit, policy_fields, share_rules, value_problem


class NothingCompared(RunFormatError):
    """A report in which no pair was compared: there is nothing to pass."""


@policy_fields
class Policy:
    """Limits; a count above its limit fails the gate (None: the rule is off). Its fields
    are the policy table's rows (gate/limits.py): a policy key each, with its kind's type
    and its default, read as `policy.max_factual_flips`."""

    if TYPE_CHECKING:  # the fields made from the table, as the type checker sees them
        def __init__(self, **limits: int | float | bool | None) -> None: ...

        def __getattr__(self, key: str) -> Any: ...


class Rule(msgspec.Struct):
    """One rule's outcome; `count` is None where the rule does not apply (shown n/a)."""

    name: str
    description: str
    count: int | float | None
    limit: int | float | None
    passed: bool
    prompts: list[str] = []


class ApprovedPair(msgspec.Struct):
    prompt_id: str
    label: str
    approved_at: str


class FlipToReview(msgspec.Struct):
    """An expect regression the reference's own doubt explains, not counted: a person
    decides it (`flip_cause`: unstable_a or near_tie)."""

    prompt_id: str
    flip_cause: str


class ReferenceStability(msgspec.Struct, kw_only=True):
    """What the reference (A) showed of its own instability: its repeats per prompt
    (None: a texts file), the prompts it has, and those whose repeats gave more than one
    text or logprob signature (`varying`), more than one text (`varying_text`)."""

    repeats: int | None
    prompts: int
    varying: int
    varying_text: int

    def sentence(self) -> str:
        """'reference: 2 repeats a prompt, 3 of 40 prompts varied on A (1 in its
        text)', or why its stability is not known."""
        if not self.repeats or self.repeats < 2:
            return ("reference: 1 answer a prompt, its own instability not measured "
                    "(collect it with --repeats 2 or more)")
        return (f"reference: {self.repeats} repeats a prompt, {self.varying} of "
                f"{self.prompts} prompts varied on A ({self.varying_text} in their text)")


class GateResult(msgspec.Struct, kw_only=True):
    """gate.json: the verdict, every rule, who reviewed, which pairs were approved,
    the flips listed for review and the reference's own stability."""

    format: GateFormat = GATE_FORMAT
    verdict: str  # pass | fail
    rules: list[Rule]
    reviewers: list[str] = []
    approved: list[ApprovedPair] = []
    judge_agreement: Agreement | None = None  # a judged report with reviews
    flips_to_review: list[FlipToReview] = []  # not counted, never passed unseen
    reference: ReferenceStability | None = None  # an A/B report's (None: a certificate)

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def reasons(self) -> list[str]:
        return [f"{rule.description} ({', '.join(rule.prompts[:3])}"
                f"{', ...' if len(rule.prompts) > 3 else ''})" if rule.prompts
                else rule.description for rule in self.rules if not rule.passed]


def load_policy(path: Path | None) -> Policy:
    if path is None:
        return Policy()
    data = read_yaml(path, "policy") or {}
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path}: a policy is a mapping of rule to limit")
    reject_unknown(str(path), data, list(BY_KEY))
    for key, value in data.items():
        if (problem := value_problem(key, value)) is not None:
            raise ConfigFileError(f"{path}: field '{key}': {problem}")
    return Policy(**data)


def decide(rows: Sequence[PairRow], verdicts: dict[str, list[ReviewVerdict]],
           blocking: set[str], policy: Policy, summary: Summary) -> GateResult:
    """The verdict. A report where no pair was compared is refused (NothingCompared):
    a gate that passes on nothing would be worse than none."""
    if not any(r.compared for r in rows):
        raise NothingCompared("no pair was compared, so there is nothing to pass: "
                              f"{summary.comparison.sentence}")
    rules = _rules(rows, verdicts, blocking, policy, summary)
    approved = [ApprovedPair(r.prompt_id, r.approved_label, r.approved_at) for r in rows
                if r.needs_review and r.approved_label]
    reviewers = sorted({v.reviewer for given in verdicts.values() for v in given})
    listed = ([FlipToReview(r.prompt_id, r.flip_cause or "") for r in rows
               if r.compared and to_review(r) and not _reviewer_blocks(r, verdicts, blocking)]
              if policy.confident_flips_only else [])
    return GateResult(verdict="pass" if all(rule.passed for rule in rules) else "fail",
                      rules=rules, reviewers=reviewers, approved=approved,
                      flips_to_review=listed, reference=reference_stability(rows, summary))


def reference_stability(rows: Sequence[PairRow], summary: Summary) -> ReferenceStability:
    """The reference's repeats and the prompts whose repeats varied on A."""
    return ReferenceStability(
        repeats=summary.determinism["a"].repeats if "a" in summary.determinism else None,
        prompts=len(rows), varying=sum(nondeterministic(r, "a") for r in rows),
        varying_text=sum(text_varies(r, "a") for r in rows))


def _reviewer_blocks(row: PairRow, verdicts: dict[str, list[ReviewVerdict]],
                     blocking: set[str]) -> bool:
    return any(_blocks(v, blocking) for v in verdicts.get(row.prompt_id, []))


def _rules(rows: Sequence[PairRow], verdicts: dict[str, list[ReviewVerdict]],
           blocking: set[str], policy: Policy, summary: Summary) -> list[Rule]:
    """Apply the policy's rules to the triaged pairs and the reviewers' verdicts."""
    compared = [r for r in rows if r.compared]
    to_review = [r for r in compared if r.needs_review]
    flips = [r.prompt_id for r in compared
             if (r.flip == "regression" and _counted(r, policy.confident_flips_only))
             or _reviewer_blocks(r, verdicts, blocking)]
    unreviewed = [r.prompt_id for r in to_review
                  if not verdicts.get(r.prompt_id) and not r.approved_label]
    identical_share = (len(compared) - len(to_review)) / len(compared) if compared else 1.0
    rules = [
        _flips_rule(flips, compared, policy),
        _rule("new_degenerate_on_b", "degenerate output new on B",
              "degenerate outputs new on B", new_degenerate_on_b(compared),
              policy.max_new_degenerate),
        _rule("collapsed_on_b", *_with("B answers like another prompt while A answers "
                                       "them differently (collapse)"),
              collapsed_prompts(collapsed_on_b(compared)), policy.max_collapsed_on_b),
    ]
    for side in ("a", "b"):
        rules.append(_nondeterminism_rule(rows, side, policy.max_nondeterministic))
    rules.append(_rule("unreviewed", "unreviewed non-identical pair",
                       "unreviewed non-identical pairs", unreviewed,
                       0 if policy.require_review else None))
    rules.append(Rule("identical_share", f"identical share {identical_share:.0%} below "
                      f"{policy.min_identical_share}", identical_share,
                      policy.min_identical_share,
                      policy.min_identical_share is None
                      or identical_share >= policy.min_identical_share))
    rules.append(_rule("not_compared", "prompt not compared", "prompts not compared",
                       [r.prompt_id for r in rows if not r.compared], policy.max_not_compared))
    rules.append(_failed_requests_rule(summary, policy.max_failed_requests))
    rules.append(_mixed_backends_rule(summary, policy.max_mixed_backends))
    skipped = [r.prompt_id for r in compared if SKIPPED in (r.a_expect, r.b_expect)]
    rules.append(_rule("skipped_checks", *_with(
        "with a skipped expect check (its reason says why: code runs with "
        "--allow-code-exec; a stopped pattern search needs its pattern rewritten)"),
        skipped, policy.max_skipped_checks))
    signatures = [f"{side.upper()}: {m.signature}" for side, found in
                  sorted(summary.log_matches.items()) for m in found if m.blocking]
    rules.append(_rule("blocking_log_signatures", "blocking log signature",
                       "blocking log signatures", signatures,
                       policy.max_blocking_log_signatures))
    rules.append(_pass_rate_rule(rows, policy.max_pass_rate_drop))
    rules.append(_forced_kl_rule(rows, policy.max_forced_kl, summary))
    rules.append(_routing_rule(rows, policy.require_routing_determinism))
    rules.append(_rule("template_problems", "sign of a chat template the model does not know",
                       "signs of a chat template the model does not know",
                       template_problems(summary, compared), policy.max_template_problems))
    rules.append(_judge_rule(compared, verdicts, blocking, summary, policy.max_judge_flips))
    return rules + [_counted_rule(limit, getattr(policy, limit.key), compared)
                    for limit in LIMITS if limit.counts is not None]


def _counted_rule(limit: Limit, value: int | float | None, compared: list[PairRow]) -> Rule:
    """The rule a row of the policy table makes whole: the compared prompts its test
    holds for, as a count or a share of those compared."""
    assert limit.counts is not None
    name, what = limit.rules[0], limit.counts.what
    prompts = [r.prompt_id for r in compared if limit.counts.test(r)]
    if limit.kind == "count":
        return _rule(name, *_with(what), prompts, value)
    share = len(prompts) / len(compared)
    return Rule(name, f"{share:.0%} of compared prompts {what} ({len(prompts)} of "
                f"{len(compared)})", share, value, value is None or share <= value, prompts)


def _nondeterminism_rule(rows: Sequence[PairRow], side: str, limit: int | None) -> Rule:
    """Prompts whose texts vary across a side's repeats; those whose logprobs alone moved
    are said beside, not counted."""
    name = side.upper()
    rule = _rule(f"nondeterministic_{side}", f"prompt on {name} whose repeats' texts vary",
                 f"prompts on {name} whose repeats' texts vary",
                 [r.prompt_id for r in rows if text_varies(r, side)], limit)
    moved = sum(logprobs_only(r, side) for r in rows)
    if moved:
        rule.description += f" ({moved} more with logprobs only, not counted)"
    return rule


def _counted(row: PairRow, confident_only: bool) -> bool:
    """Whether an expect regression counts: with confident_flips_only (the default)
    unless the reference's own doubt explains it (REVIEW_CAUSES: A's repeats disagree,
    or a near tie on A's side); every one with --all-flips."""
    return not confident_only or row.flip_cause not in REVIEW_CAUSES


def _flips_rule(flips: list[str], compared: list[PairRow], policy: Policy) -> Rule:
    """Factual flips: "2 confident flips" under the default policy, saying which of them
    are counted for another reason than a sure A (the flips left for review are the
    gate's `flips_to_review`); "2 factual flips" with --all-flips."""
    if not policy.confident_flips_only:
        return _rule("factual_flips", "factual flip", "factual flips", flips,
                     policy.max_factual_flips)
    rule = _rule("factual_flips", "confident flip", "confident flips", flips,
                 policy.max_factual_flips)
    counted = set(flips)
    others = Counter(_why_counted(r) for r in compared if r.prompt_id in counted)
    others.pop("", None)
    if others:
        rule.description += " (of them " + ", ".join(
            f"{n} {what}" for what, n in sorted(others.items())) + ")"
    return rule


def _why_counted(row: PairRow) -> str:
    """Why a counted flip is counted when not for a sure A: its cause's words, or a
    reviewer's label; "" for a confident one."""
    if row.flip == "regression" and _counted(row, True):
        return "" if row.flip_cause == "confident" else FLIP_CAUSE_WORDS.get(
            row.flip_cause or "", "")
    return "labelled by a reviewer"


def review_phrase(listed: Sequence[FlipToReview], prompts: bool = True) -> str:
    """'1 near-tie flip to review (cap-nl)', '2 flips to review (1 A's repeats disagree,
    1 near tie on A: p1, p2)': the flips the reference's own doubt explains, not
    counted; "" without any."""
    if not listed:
        return ""
    causes = Counter(flip.flip_cause for flip in listed)
    ids = ", ".join(flip.prompt_id for flip in listed[:3]) + (", ..." if len(listed) > 3
                                                                else "")
    many = len(listed) != 1
    if set(causes) == {"near_tie"}:
        said = f"{len(listed)} near-tie flip{'s' if many else ''} to review"
        return f"{said} ({ids})" if prompts else said
    kinds = ", ".join(f"{n} {FLIP_CAUSE_WORDS.get(cause, cause)}"
                      for cause, n in sorted(causes.items()))
    said = f"{len(listed)} flip{'s' if many else ''} to review ({kinds}"
    return f"{said}: {ids})" if prompts else f"{said})"


def _judge_rule(compared: list[PairRow], verdicts: dict[str, list[ReviewVerdict]],
                blocking: set[str], summary: Summary, limit: int | None) -> Rule:
    """Pairs the judge gave a blocking label that no person has labelled or approved (a
    person's label always wins); n/a in a report made without --judge (then a failure
    when a limit is set)."""
    if summary.judge is None:
        return Rule("judge_flips", "no judge labels in this report (compare with --judge)"
                    if limit is not None else "no judge labels", None, limit, limit is None)
    flips = [r.prompt_id for r in compared if r.judge_label in blocking
             and not verdicts.get(r.prompt_id) and not r.approved_label]
    return _rule("judge_flips", "unreviewed pair the judge calls a factual flip",
                 "unreviewed pairs the judge calls a factual flip", flips, limit)


def template_problems(summary: Summary, compared: list[PairRow]) -> list[str]:
    """The preflight's template warnings (a side's, and A's against B's), then each
    compared prompt whose answer echoes the question or carries template markers."""
    preflight = summary.preflight
    found = [f"{side.upper()}: preflight template check"
             for side, report in (("a", preflight.a), ("b", preflight.b)) if report
             and any(c.name == "template" and c.status == "warn" for c in report.checks)]
    if preflight.template is not None and preflight.template.status == "warn":
        found.append("A and B render the conversation differently")
    return found + [row.prompt_id for row in compared
                    if row.a_template_signs or row.b_template_signs]


def _routing_rule(rows: Sequence[PairRow], required: bool) -> Rule:
    """Prompts whose B repeats were routed to other experts (gating nondeterminism);
    n/a when B recorded no routing."""
    routed = [r for r in rows if r.b_routing]
    gating = [r.prompt_id for r in routed if r.b_routing == "gating"]
    if not routed:
        return Rule("routing_determinism", "no MoE routing recorded on B (collect with "
                    "--routed-experts)" if required else "no MoE routing recorded", None,
                    0 if required else None, not required)
    return _rule("routing_determinism", *_with(
        "whose B repeats are routed to other experts (gating is not deterministic)"),
        gating, 0 if required else None)


def _failed_requests_rule(summary: Summary, limit: int | None) -> Rule:
    """Requests with no answer on either side (failed after retries, or never sent):
    what they would have shown is unknown, so by default they fail the gate."""
    a, b = summary.counts.unanswered.a, summary.counts.unanswered.b
    count = a + b
    description = (f"{count} request{'' if count == 1 else 's'} without an answer "
                   f"(A {a}, B {b}; failed after retries or never sent: rerun the "
                   "collection to retry them)")
    return Rule("failed_requests", description, count, limit, limit is None or count <= limit)


def _mixed_backends_rule(summary: Summary, limit: int | None) -> Rule:
    """Sides whose answers name more than one backend (two builds behind one URL during
    a rollout, replicas that are not one configuration): what was compared is not one
    server, so by default the gate fails; n/a in a report made before it was counted."""
    if not summary.backends:
        return Rule("mixed_backends", "which backends answered is not in this report "
                    "(compared before it was recorded)", None, limit, True)
    said = [sentence for name, found in sorted(summary.backends.items())
            if (sentence := mixed_sentence(name.upper(), found))]
    count = len(said)
    description = "; ".join(said) if said else "each side answered by one backend"
    return Rule("mixed_backends", description, count, limit, limit is None or count <= limit)


def _forced_kl_rule(rows: Sequence[PairRow], limit: float | None, summary: Summary) -> Rule:
    """Mean teacher-forced KL over every scored position (prompts weighted by length);
    within the scoring-order floor (B's prefix cache left on) it is not called drift."""
    scored = [(r.forced_kl_mean, r.forced_positions or 0) for r in rows
              if r.forced_kl_mean is not None]
    positions = sum(n for _, n in scored)
    if not positions:
        return Rule("forced_kl", "no teacher-forced scores in this report (run with --forced)"
                    if limit is not None else "no teacher-forced scores", None, limit,
                    limit is None)
    mean = sum(kl * n for kl, n in scored) / positions
    description = (f"teacher-forced KL mean {mean:.3g}, above {limit:g}" if limit is not None
                   else f"teacher-forced KL mean {mean:.3g}")
    forced = summary.forced
    if forced is not None and forced.within_order_floor and forced.order_floor is not None \
            and forced.order_floor.kl is not None:
        return Rule("forced_kl", f"teacher-forced KL mean {mean:.3g} lies within the "
                    f"scoring-order floor (KL mean {forced.order_floor.kl.mean:.3g}: B's "
                    "prefix cache stayed on): not called drift", mean, limit, True)
    return Rule("forced_kl", description, mean, limit, limit is None or mean <= limit)


def _pass_rate_rule(rows: Sequence[PairRow], limit: float | None) -> Rule:
    """The worst plausible drop in expect pass rate (the 95% interval's far end), in
    points; n/a while the rule is off or no prompt has an expect."""
    change = pass_rate_of(*row_pass_counts(rows).tolist())
    if change is None or limit is None:
        why = "no expect checks in this report" if change is None else "rule off"
        return Rule("pass_rate_drop", f"pass rate drop: n/a ({why})", None, limit,
                    change is not None or limit is None)
    drop = max(0.0, -100 * change.low)
    description = (f"expect pass rate {change.rates()}: the 95% interval of B minus A "
                   f"reaches {-drop:+.1f} points, beyond -{limit:g}")
    return Rule("pass_rate_drop", description, round(drop, 1), limit, drop <= limit)


def _blocks(verdict: ReviewVerdict, blocking: set[str]) -> bool:
    # A blocking label with B named right means A was wrong: an improvement, not a flip.
    return verdict.label in blocking and verdict.right_side != "b"


def _rule(name: str, one: str, many: str, prompts: list[str],
          limit: int | float | None) -> Rule:
    """A rule counting `prompts`: "1 factual flip" (`one`), "2 factual flips" (`many`)."""
    count = len(prompts)
    return Rule(name, f"{count} {one if count == 1 else many}", count, limit,
                limit is None or count <= limit, [str(p) for p in prompts])


def _with(what: str) -> tuple[str, str]:
    """"prompt WHAT" and "prompts WHAT"."""
    return f"prompt {what}", f"prompts {what}"


def write_gate_json(result: GateResult, path: Path) -> None:
    write_json_atomic(path, msgspec.to_builtins(result))


# Characters XML 1.0 cannot hold at all, even escaped: shown as backslash-x-NN instead.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def junitxml_text(verdict: GateResult, rows: Sequence[PairRow],
                  labels: tuple[str, str] = ("A", "B")) -> bytes:
    """One testcase per prompt; a failure for each rule that prompt breaks, saying why
    (explain.py: the check that flipped, both answers, the pair's link in the sheet).
    Prompt ids, categories and answers come from users' files and models: characters
    XML cannot hold are written as backslash-x and two hex digits, so the file stays
    well-formed."""
    failing: dict[str, list[Failure]] = {}
    for found in failures(verdict.rules, rows):
        failing.setdefault(found.prompt_id, []).append(found)
    listed = {found.prompt_id: found for found in reviews(verdict.flips_to_review, rows)}
    on_prompts = {found.rule for explained in failing.values() for found in explained}
    suite = ElementTree.Element("testsuite", name="quantcheck", tests=str(len(rows)),
                                failures=str(sum(1 for r in rows if r.prompt_id in failing)),
                                skipped=str(len(listed)))
    # the flips listed for review first, each a skipped test saying why: never passed unseen
    for row in sorted(rows, key=lambda r: r.prompt_id not in listed):
        case = ElementTree.SubElement(suite, "testcase", name=xml_text(row.prompt_id),
                                      classname=xml_text(f"quantcheck.{row.category or 'general'}"))
        for explained in failing.get(row.prompt_id, []):
            failure = ElementTree.SubElement(case, "failure", type=explained.rule,
                                             message=xml_text(junit_message(explained)))
            failure.text = xml_text(junit_text(explained, *labels))
        if row.prompt_id in listed and row.prompt_id not in failing:
            review = listed[row.prompt_id]
            skipped = ElementTree.SubElement(case, "skipped", type=REVIEW,
                                             message=xml_text(junit_message(review)))
            skipped.text = xml_text(junit_text(review, *labels))
    for rule in verdict.rules:  # broken by the report as a whole (or by log lines)
        if not rule.passed and rule.name not in on_prompts:
            case = ElementTree.SubElement(suite, "testcase", name=rule.name,
                                          classname="quantcheck.policy")
            failure = ElementTree.SubElement(case, "failure", type=rule.name,
                                             message=xml_text(rule.description))
            if rule.prompts:
                failure.text = xml_text("\n".join(rule.prompts))
            suite.set("tests", str(int(suite.get("tests", "0")) + 1))
            suite.set("failures", str(int(suite.get("failures", "0")) + 1))
    return b'<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(suite)


def rule_table(rules: Sequence[Rule]) -> list[str]:
    """The rules as a Markdown table: count, limit, result and the first 10 prompts (each
    as code, escaped to stay inside its cell)."""
    lines = ["| rule | count | limit | result | prompts |", "|---|---|---|---|---|"]
    for rule in rules:
        limit = "off" if rule.limit is None else rule.limit
        count = ("n/a" if rule.count is None else f"{rule.count:.0%}"
                 if rule.name in share_rules() else rule.count)
        prompts = ", ".join(map(code_cell, rule.prompts[:10]))
        if len(rule.prompts) > 10:
            prompts += f" and {len(rule.prompts) - 10} more"
        lines.append(f"| {rule.name} | {count} | {limit} | "
                     f"{'ok' if rule.passed else '**fail**'} | {prompts} |")
    return lines


def markdown(verdict: GateResult, summary: Summary, found: Sequence[Failure] = ()) -> str:
    """The verdict as the Markdown the step summary gets: the flips counted apart from
    those left for review and the reference's stability, the flips to review, every
    rule, then why each failing prompt fails (`found`, from explain.report_failures)."""
    icon = "PASS" if verdict.passed else "FAIL"
    a, b = summary.a.label, summary.b.label
    lines = [f"## quantcheck: {icon}", "",
             f"**{markdown_text(a)}** (A) vs **{markdown_text(b)}** (B)", "",
             flips_sentence(verdict)]
    lines += markdown_table([f for f in found if f.rule == REVIEW], a, b,
                            "Flips to review (not counted: the reference itself was unsure)")
    lines += ["", *rule_table(verdict.rules)]
    if verdict.approved:
        lines += ["", f"{len(verdict.approved)} pairs approved earlier (no second review): "
                  + ", ".join(f"{code_cell(a.prompt_id)} ({markdown_text(a.label)}, "
                              f"{markdown_text(a.approved_at)})" for a in verdict.approved[:10])]
    if verdict.reviewers:
        lines += ["", "Reviewers: " + markdown_text(", ".join(verdict.reviewers))]
    if summary.judge is not None:
        said = agreement_sentence(verdict.judge_agreement, sum(summary.judge.labels.values()))
        judge = summary.judge.model or summary.judge.endpoint
        lines += ["", f"Judge ({markdown_text(judge)}): {markdown_text(said)}."]
    lines += markdown_table([f for f in found if f.rule != REVIEW], a, b)
    return "\n".join(lines) + "\n"


def flips_sentence(verdict: GateResult) -> str:
    """'Flips: 0 confident flips; 1 near-tie flip to review; reference: 2 repeats a
    prompt, 3 of 40 prompts varied on A (1 in their text).' (escaped: a rule's words
    may quote a file)"""
    rule = next((r for r in verdict.rules if r.name == "factual_flips"), None)
    parts = [rule.description if rule is not None else "",
             review_phrase(verdict.flips_to_review, prompts=False)
             or "no flip to review",
             verdict.reference.sentence() if verdict.reference is not None else ""]
    return "Flips: " + markdown_text("; ".join(filter(None, parts)) + ".")


def one_line(verdict: GateResult) -> str:
    """The verdict in one line: the broken rules, then the flips left for review and
    the reference's own stability (an A/B report's)."""
    said = ("PASS: no rule broken" if verdict.passed
            else "FAIL: " + ", ".join(verdict.reasons()))
    extras = [review_phrase(verdict.flips_to_review),
              verdict.reference.sentence() if verdict.reference is not None else ""]
    return "; ".join([said, *filter(None, extras)])


def write_junit(verdict: GateResult, rows: Sequence[PairRow], path: Path,
                labels: tuple[str, str] = ("A", "B")) -> None:
    write_atomic(path, junitxml_text(verdict, rows, labels))


def append_step_summary(text: str) -> None:
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(text)


def report_verdict(report_dir: Path, policy: Policy | None = None, rubric: Rubric | None = None,
                 review_files: Sequence[Path] = ()) -> tuple[GateResult, Summary]:
    """The verdict on one report with its reviews, writing nothing."""
    result, summary, _ = _decided(report_dir, policy, rubric, review_files)
    return result, summary


def _decided(report_dir: Path, policy: Policy | None, rubric: Rubric | None,
            review_files: Sequence[Path]) -> tuple[GateResult, Summary, list[PairRow]]:
    rubric = rubric or load_rubric()
    rows, summary = require_report(report_dir)
    verdicts = load_verdicts(report_dir, list(review_files), rubric, summary.identity,
                             {row.prompt_id for row in rows})
    result = decide(rows, verdicts, set(rubric.blocking), policy or Policy(), summary)
    if summary.judge is not None:
        result.judge_agreement = agreement({r.prompt_id: r.judge_label for r in rows},
                                           verdicts, [label.id for label in rubric.labels])
    return result, summary, rows


def gate_report(report_dir: Path, policy: Policy | None = None, rubric: Rubric | None = None,
                review_files: Sequence[Path] = ()) -> tuple[GateResult, Summary]:
    """Gate one report with its reviews; write its gate.json and junit.xml."""
    result, summary, rows = _decided(report_dir, policy, rubric, review_files)
    write_gate_json(result, report_dir / GATE_JSON)
    write_junit(result, rows, report_dir / JUNIT_XML, (summary.a.label, summary.b.label))
    return result, summary
