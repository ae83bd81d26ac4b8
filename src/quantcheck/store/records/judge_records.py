"""The records of the judge's second opinion (`compare --judge`): a reply as the cache
keeps it, a judged pair's replies as details.jsonl keeps them, and the summary's
`judge` part with its agreement with reviewers. Field by field: docs/formats.md."""

from __future__ import annotations

import msgspec


class JudgeReply(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One answer of the judge to one question to the judge request: a line of the judge's cache,
    found again by `key` (a hash of the model, the prompt version, the question and
    both answers in their roles). `reply` is the text the judge sent, cut to a bound
    (`chars` is its whole length); `error`, an answer that cannot be read and that
    another attempt would repeat (one beyond the size cap)."""

    key: str
    model: str
    prompt_version: str
    reply: str = ""
    chars: int = 0
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float | None = None
    at: str = ""


class OrderVerdict(msgspec.Struct, kw_only=True):
    """What the judge said with one side's answer as the reference: `reference` is
    "a" or "b", `judge_class` the class read off the reply (None: no verdict), `reason` its
    reason (or why there is no verdict), `reply` the raw reply (bounded)."""

    reference: str
    judge_class: str | None = msgspec.field(default=None, name="class")
    reason: str = ""
    reply: str = ""


class JudgeDetails(msgspec.Struct, kw_only=True):
    """A judged pair in details.jsonl: the judge's model, the judge's prompt's version
    and both orders' verdicts (A as the reference first)."""

    model: str
    prompt_version: str
    orders: list[OrderVerdict]


class Agreement(msgspec.Struct, kw_only=True):
    """How often the judge's label matched reviewers' labels: every reviewer's label on
    a pair the judge labelled is one observation. `confusion[judge][human]` counts them
    over `labels` (the rubric's order); `kappa` is Cohen's kappa, None when chance
    agreement is already certain (every label the same) or nothing was observed."""

    observations: int
    pairs: int
    reviewers: list[str]
    agreed: int
    labels: list[str]
    confusion: dict[str, dict[str, int]]
    kappa: float | None = None


class JudgeFigures(msgspec.Struct, kw_only=True):
    """summary.json's `judge`: who judged with which prompt, the pairs it was asked
    about by label and class, what it cost (requests sent, replies from the cache,
    failures, wall time, tokens), why it stopped if it did, and its agreement with
    the reviewers whose files the report had when this was written."""

    endpoint: str
    model: str | None = None
    prompt_version: str
    cache: str
    pairs: int = 0
    labels: dict[str, int] = {}
    classes: dict[str, int] = {}
    requests: int = 0
    cached: int = 0
    failed: int = 0
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    agreement: Agreement | None = None
