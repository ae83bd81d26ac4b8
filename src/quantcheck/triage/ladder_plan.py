"""The context ladder's plan, a pure function of its settings: the rungs that fit the
servers' context, each rung's probes (a needle at each depth, an absent-needle probe),
their codes and prompt texts, and each probe as a prompt set entry.

A probe is one prompt: a record of filler sentences about an invented town
(store/inputs/haystack.py) with `The secret code is NNNNN. Remember it.` planted at its depth
(nothing in an absent-needle probe), then the question. The wording is the preflight's
context probe's, which the demo's small base model recalls on an f16 cache (with a
heading before the record, the same model on a 4-bit cache lost codes at 1K tokens
that it kept without one: the probe would measure the heading). A needle probe passes
when the answer holds the code; an absent-needle probe when it says there is none
(ABSENT_PATTERN) and names no five-digit number. Every probe of a rung has the same
filler, so probes differ only in the needle; a shorter rung's filler is the start of a
longer one's.
"""

from __future__ import annotations

import hashlib

from ..store.inputs.haystack import LANGUAGES, PLACEHOLDER
from ..store.records.ladder_records import ABSENT, NEEDLE, LadderProbe, LadderSettings

POWERS_FROM = 1024  # the default ladder: 1K, 2K, 4K, ... up to what the context allows
UNKNOWN_CONTEXT_TOP = 8192  # ... or up to this when no server says its context
# Room left in the context beyond the prompt and the answer: a chat template's markers
CONTEXT_MARGIN = 64
DEFAULT_DEPTHS = (0.0, 0.5)
QUESTION = ("What is the secret code given in the record? Answer with the code only. If "
            "the record gives no secret code, answer \"none\".")
# An answer that says the record holds no code, and names no five-digit number
ABSENT_PATTERN = (r"(?is)^(?!.*\d{5}).*\b(none|no (secret )?code|not (given|there|"
                  r"mentioned|found|stated|present|in the record)|(do not|don't|cannot) "
                  r"(know|find|see))\b")


def rung_lengths(context: int | None, max_tokens: int, top: int | None = None) -> list[int]:
    """1,024, 2,048, ... while a prompt of that length and the answer fit `context`
    (and `top`, when given); without a known context, up to UNKNOWN_CONTEXT_TOP."""
    limit = (context - max_tokens - CONTEXT_MARGIN) if context else UNKNOWN_CONTEXT_TOP
    if top is not None:
        limit = min(limit, top)
    lengths, length = [], POWERS_FROM
    while length <= limit:
        lengths.append(length)
        length *= 2
    return lengths


def too_long(lengths: list[int], context: int | None, max_tokens: int) -> list[int]:
    """The lengths a prompt and its answer would not fit in `context` (none: unknown)."""
    if not context:
        return []
    return [n for n in lengths if n + max_tokens + CONTEXT_MARGIN > context]


def code_for(seed: int, tokens: int, depth: float) -> str:
    """The needle's five-digit code at this rung and depth (10000-99999), the same on
    every machine."""
    digest = hashlib.sha256(f"ladder:{seed}:{tokens}:{depth}".encode()).digest()
    return str(10000 + int.from_bytes(digest[:8], "big") % 90000)


def probes_of(settings: LadderSettings, tokens: int) -> list[LadderProbe]:
    """A rung's probes as planned, before their filler is sized."""
    probes = [LadderProbe(id=f"needle-d{depth:g}", kind=NEEDLE, depth=depth,
                          code=code_for(settings.seed, tokens, depth))
              for depth in settings.depths]
    if settings.absent:
        probes.append(LadderProbe(id="absent", kind=ABSENT))
    return probes


def needle_sentence(probe: LadderProbe) -> str:
    return f"The secret code is {probe.code}. Remember it." if probe.code else ""


def prompt_template() -> str:
    """The prompt's text around the filler."""
    return f"{PLACEHOLDER}\n\n{QUESTION}"


def expect_of(probe: LadderProbe) -> dict[str, object]:
    if probe.kind == NEEDLE:
        return {"contains": [probe.code]}
    return {"regex": ABSENT_PATTERN}


def prompt_entry(settings: LadderSettings, tokens: int, probe: LadderProbe
                 ) -> dict[str, object]:
    """The probe as an entry of a prompt set (store/inputs/prompt_entries.py reads it back)."""
    haystack: dict[str, object] = {"sentences": max(probe.sentences, 1),
                                   "seed": settings.seed, "language": settings.language}
    if probe.kind == NEEDLE:
        haystack.update(needle=needle_sentence(probe), depth=probe.depth)
    text_key = "messages" if settings.api == "chat" else "prompt"
    text: object = prompt_template()
    if settings.api == "chat":
        text = [{"role": "user", "content": text}]
    return {"id": f"ladder-{tokens}-{probe.id}", "category": f"{tokens} tokens",
            text_key: text, "haystack": haystack, "max_tokens": settings.max_tokens,
            "expect": expect_of(probe)}


def check_language(language: str) -> str | None:
    """Why `language` is not a filler language (None: it is)."""
    if language in LANGUAGES:
        return None
    return f"the filler's language must be one of {', '.join(LANGUAGES)}, not {language!r}"
