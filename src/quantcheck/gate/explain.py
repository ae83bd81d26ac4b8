"""Why a pair fails the gate, in words a pull request's reviewer reads without opening
anything: the rule and its limit, what broke it (the check that flipped and why B
fails it, the degenerate answer, ...), A's and B's answers cut to a readable length,
and the pair's link in the review sheet (`index.html#pair-ID`, the id the sheet gives
each pair's card). junit.xml and the Markdown step summary say it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

from ..store.folders.report_dir import read_pair_rows
from ..store.records.pair_records import FLIP_CAUSE_WORDS, PairRow
from .limits import counted_rules

JUNIT_ANSWER_CHARS = 400  # of each answer, in junit.xml
MARKDOWN_ANSWER_CHARS = 120  # in the step summary's table
MARKDOWN_FAILURES = 20  # rows of that table; the rest are counted
STATUS_WORDS = {"not_comparable": "the prompt differs between A and B (another hash)",
                "only_a": "only A has this prompt", "only_b": "only B has this prompt",
                "a_failed": "A has no answer", "b_failed": "B has no answer"}


REVIEW = "flips_to_review"  # the flips listed for review (gate.json's flips_to_review)
UNSURE_WORDS = {"a": "A unsure, B sure", "b": "A sure, B unsure", "both": "both unsure",
                "neither": "both sure"}


class Listed(Protocol):
    """A flip listed for review (verdict.FlipToReview)."""

    @property
    def prompt_id(self) -> str: ...


class BrokenRule(Protocol):
    """What is read of a gate rule (verdict.Rule)."""

    @property
    def name(self) -> str: ...
    @property
    def limit(self) -> int | float | None: ...
    @property
    def passed(self) -> bool: ...
    @property
    def prompts(self) -> list[str]: ...


@dataclass
class Failure:
    """One prompt breaking one rule, explained."""

    prompt_id: str
    rule: str
    limit: int | float | None
    what: str  # what broke it, in words
    a_answer: str | None
    b_answer: str | None
    link: str  # the pair in the review sheet, relative to the report directory


def sheet_anchor(prompt_id: str) -> str:
    """The fragment of a pair's card in the review sheet (percent-encoded)."""
    return "pair-" + quote(prompt_id, safe="")


def sheet_link(prompt_id: str, report: str = "") -> str:
    """`index.html#pair-ID` (under `report/` when given)."""
    return f"{report.rstrip('/') + '/' if report else ''}index.html#{sheet_anchor(prompt_id)}"


def failures(rules: Iterable[BrokenRule], rows: Sequence[PairRow], report: str = ""
             ) -> list[Failure]:
    """Each prompt of each broken rule, in the rules' order."""
    by_id = {row.prompt_id: row for row in rows}
    found = []
    for rule in rules:
        if rule.passed:
            continue
        for prompt_id in rule.prompts:
            row = by_id.get(prompt_id)
            if row is None:  # a rule that names something other than a prompt
                continue
            found.append(Failure(
                prompt_id, rule.name, rule.limit, what_broke(rule.name, row),
                answer(row.a_text, row.a_tool_calls) if row.compared else None,
                answer(row.b_text, row.b_tool_calls) if row.compared else None,
                sheet_link(prompt_id, report)))
    return found


def reviews(listed: Iterable[Listed], rows: Sequence[PairRow], report: str = ""
            ) -> list[Failure]:
    """Each flip listed for review, explained as a failure is (rule `flips_to_review`)."""
    by_id = {row.prompt_id: row for row in rows}
    return [Failure(flip.prompt_id, REVIEW, None, what_broke(REVIEW, row),
                    answer(row.a_text, row.a_tool_calls), answer(row.b_text, row.b_tool_calls),
                    sheet_link(flip.prompt_id, report))
            for flip in listed if (row := by_id.get(flip.prompt_id)) is not None]


def report_failures(report_dir: Path, rules: Iterable[BrokenRule], report: str = "",
                    listed: Iterable[Listed] = ()) -> list[Failure]:
    """The flips listed for review (first), then the failures, of a report gated
    earlier, its pairs read back."""
    rows = read_pair_rows(report_dir)
    return reviews(listed, rows, report) + failures(rules, rows, report)


def what_broke(rule: str, row: PairRow) -> str:
    """In words, what makes this pair break this rule (or be listed for review)."""
    if rule in ("factual_flips", REVIEW):
        if row.flip == "regression" and row.flipped_checks:
            checks = row.flipped_checks.split()
            reasons = [reason for reason in (row.b_expect_failures or "").split("; ")
                       if reason.split(":", 1)[0] in checks]
            because = f": {'; '.join(reasons)}" if reasons else ""
            said = (f"check {checks[0]} passes on A, fails on B" if len(checks) == 1
                    else f"checks {', '.join(checks)} pass on A, fail on B")
            cause = (f"; flip cause: {FLIP_CAUSE_WORDS[row.flip_cause]}"
                     if row.flip_cause in FLIP_CAUSE_WORDS else "")
            return said + because + cause + fork_words(row)
        return "a reviewer labelled it a factual flip"
    if rule == "new_degenerate_on_b":
        return f"B's answer is degenerate ({row.b_degenerate}), A's is not"
    if rule in ("nondeterministic_a", "nondeterministic_b"):
        side = rule[-1]
        texts, signatures = (row.a_texts, row.a_signatures) if side == "a" else (
            row.b_texts, row.b_signatures)
        return (f"{side.upper()}'s repeats gave {texts or 0} texts and {signatures or 0} "
                "logprob signatures")
    if rule == "unreviewed":
        return "not identical, with no reviewer's verdict and no approval"
    if rule == "not_compared":
        return f"not compared: {STATUS_WORDS.get(row.status, row.status)}"
    if rule == "skipped_checks":
        skipped = sorted({check.split("=")[0] for cell in (row.a_checks, row.b_checks)
                          for check in (cell or "").split() if check.endswith("=skipped")})
        return f"check {' '.join(skipped)} did not run (compare with --allow-code-exec)"
    if rule == "routing_determinism":
        return "B's repeats were routed to other MoE experts"
    if rule == "collapsed_on_b":
        return ("B answers this prompt as it answers another prompt (the same first 512 "
                "characters), where A's answers to them differ")
    if (limit := counted_rules().get(rule)) is not None and limit.counts is not None:
        return f"a prompt {limit.counts.what}"
    return rule.replace("_", " ")


def fork_words(row: PairRow) -> str:
    """'; fork at token 0 (A " Amsterdam", B " 100"): 0.005 nats apart on A, 0.690 on B
    (A unsure, B sure)', or "" where the streams were not compared by token."""
    if row.first_divergence is None or row.divergence_a_token is None:
        return ""
    gaps = [f"{row.divergence_gap:.3f} nats apart on A" if row.divergence_gap is not None
            else "B's token not in A's top-k"]
    if row.divergence_b_gap is not None:
        gaps.append(f"{row.divergence_b_gap:.3f} on B")
    unsure = UNSURE_WORDS.get(row.unsure_side or "")
    return (f"; fork at token {row.first_divergence} (A {row.divergence_a_token!r}, B "
            f"{row.divergence_b_token!r})" + (f": {', '.join(gaps)}" if gaps else "")
            + (f" ({unsure})" if unsure else ""))


def answer(text: str | None, tool_calls: str | None) -> str:
    """A side's answer as read: its text, and its tool calls when it made any."""
    return (text or "") + (f" [tool calls: {tool_calls}]" if tool_calls else "")


def cut(text: str | None, chars: int) -> str:
    """At most `chars` characters of an answer, said to be cut; "(none)" where the pair
    was not compared, "(empty)" for an empty answer."""
    if text is None:
        return "(none)"
    if not text:
        return "(empty)"
    return text if len(text) <= chars else f"{text[:chars]}... ({len(text)} characters)"


def junit_text(failure: Failure, a_label: str, b_label: str) -> str:
    """The body of a junit failure: the rule, what broke it, both answers, the link."""
    limit = "" if failure.limit is None else f" (limit {failure.limit:g})"
    return "\n".join([
        f"{failure.prompt_id}: breaks rule {failure.rule}{limit}",
        f"why: {failure.what}",
        f"A ({a_label}): {cut(failure.a_answer, JUNIT_ANSWER_CHARS)}",
        f"B ({b_label}): {cut(failure.b_answer, JUNIT_ANSWER_CHARS)}",
        f"review sheet: {failure.link}"])


def junit_message(failure: Failure) -> str:
    """The short message of a junit failure: the rule and what broke it."""
    return f"{failure.rule.replace('_', ' ')}: {failure.what}"


def markdown_table(found: Sequence[Failure], a_label: str, b_label: str,
                   title: str = "Why") -> list[str]:
    """The failures as a Markdown table (the first MARKDOWN_FAILURES, the rest counted);
    no lines when nothing failed on a prompt."""
    if not found:
        return []
    lines = ["", f"### {title}", "",
             f"| prompt | rule | why | A ({markdown_text(a_label)}) | "
             f"B ({markdown_text(b_label)}) | sheet |",
             "|---|---|---|---|---|---|"]
    for failure in found[:MARKDOWN_FAILURES]:
        lines.append(f"| {code_cell(failure.prompt_id)} | {failure.rule} | "
                     f"{markdown_text(failure.what)} | "
                     f"{markdown_text(cut(failure.a_answer, MARKDOWN_ANSWER_CHARS))} | "
                     f"{markdown_text(cut(failure.b_answer, MARKDOWN_ANSWER_CHARS))} | "
                     f"{code_cell(failure.link)} |")
    if len(found) > MARKDOWN_FAILURES:
        lines += ["", f"and {len(found) - MARKDOWN_FAILURES} more in junit.xml"]
    return lines


def code_cell(text: str) -> str:
    """Text as code inside one Markdown table cell (an empty one as a space: two
    backticks would open a longer code span)."""
    flat = " ".join(text.split()).replace("`", "'").replace("|", "\\|")
    return f"`{flat or ' '}`"


# What Markdown reads as markup in a line of text (GitHub's renderer: cmark-gfm with
# tables, autolinks and strikethrough): each is written after a backslash, which every
# CommonMark renderer shows as the character itself. A text never starts a line (its
# line breaks become spaces), so what opens a heading, a list or a quote there is left.
MARKDOWN_SPECIAL = "\\`*_~<>[]|&"
# A bare URL (`https://...`, `www.`...) the renderer would link unasked: its ":" or
# "." is escaped too, which stops it.
_SPECIAL = re.compile("[" + re.escape(MARKDOWN_SPECIAL) + "]|:(?=//)|(?i:(?<![a-z0-9])www)\\.")


def markdown_text(text: str) -> str:
    """Any text (a server's model id, a label, a sentence read from a file) as Markdown
    that shows it as written, on one line: no tag, image, link, heading, table cell or
    row, details block or emphasis can open from it. Every Markdown writer (the step
    summaries of an A/B, of several candidates and of a certificate) puts each string
    it did not write itself through this."""
    flat = " ".join(text.split())  # every line break: a text never starts a line
    return _SPECIAL.sub(lambda m: m.group()[:-1] + "\\" + m.group()[-1], flat)
