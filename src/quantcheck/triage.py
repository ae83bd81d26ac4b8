"""Pure functions that judge one pair: divergence, drift, degenerate output, flips."""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass
from typing import Any

from rapidfuzz.distance import Indel

from .records import numbers_in

WORDING_SIMILARITY = 0.8
NO_DIVERGENCE = "none"


def similarity(a: str, b: str) -> float:
    """0..1 normalized Indel similarity (what difflib's ratio() approximates, much faster)."""
    return float(Indel.normalized_similarity(a, b))


def numbers_changed(a: str, b: str) -> bool:
    return numbers_in(a) != numbers_in(b)


# --- degenerate output ---------------------------------------------------------------

_WORD = re.compile(r"\S+")


def degenerate_reason(text: str | None, finish_reason: str | None,
                      other_finish_reason: str | None) -> str:
    """`empty`, `repetition`, `length` (capped while the other side stopped), or ""."""
    if text is None:
        return ""
    if not text.strip():
        return "empty"
    if is_repetition_loop(text):
        return "repetition"
    if finish_reason == "length" and other_finish_reason == "stop":
        return "length"
    return ""


def is_repetition_loop(text: str) -> bool:
    """A phrase repeated back to back until it fills a good part of the answer.

    "need analysis there need analysis there ..." is a loop; "very very good" or a
    list whose items share a prefix is not: the repeated run must hold at least four
    copies, at least 12 words, and at least 30% of the answer. Texts that do not
    compress well cannot hold such a run and are passed over cheaply.
    """
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) > 128 and len(zlib.compress(encoded)) > 0.5 * len(encoded):
        return False
    words = _WORD.findall(text)
    for period in range(1, min(50, len(words) // 4) + 1):
        if _longest_periodic_run(words, period) >= max(4 * period, 12, 0.3 * len(words)):
            return True
    return _character_loop(text)


def _longest_periodic_run(items: list[str], period: int) -> int:
    best = run = 0
    for index in range(len(items) - period):
        run = run + 1 if items[index] == items[index + period] else 0
        best = max(best, run)
    return best + period if best else 0


def _character_loop(text: str) -> bool:
    """Loops without spaces (CJK, symbols): a short period filling the tail of the text."""
    tail = text[-512:]
    for period in range(1, 65):
        if len(tail) < max(8 * period, 48):
            break
        same = sum(1 for i in range(len(tail) - period) if tail[i] == tail[i + period])
        if same >= 0.95 * (len(tail) - period):
            return True
    return False


# --- token streams -----------------------------------------------------------------

def token_keys(tokens: dict[str, Any]) -> list[Any]:
    """Token identities: the raw bytes where the string alone is lossy (U+FFFD)."""
    raw = tokens.get("raw_bytes")
    if not raw:
        return list(tokens["text"])
    return [tuple(b) if b is not None else t for t, b in zip(tokens["text"], raw, strict=True)]


def first_divergence(a_keys: list[Any], b_keys: list[Any]) -> int | None:
    """Index of the first differing generated token; None when the streams agree."""
    for index, (a, b) in enumerate(zip(a_keys, b_keys, strict=False)):
        if a != b:
            return index
    return None if len(a_keys) == len(b_keys) else min(len(a_keys), len(b_keys))


@dataclass
class Divergence:
    position: int | None
    kind: str  # none | near_tie | confident | ended
    gap: float | None = None
    a_token: str | None = None
    b_token: str | None = None


def classify_divergence(a: dict[str, Any], b: dict[str, Any]) -> Divergence:
    """vLLM's check_logprobs_close rule at the first differing token.

    A near tie: each side's token is in the other side's top-k there. A confident
    flip: it is not. `ended`: one side stopped where the other went on.
    """
    position = first_divergence(token_keys(a), token_keys(b))
    if position is None:
        return Divergence(None, NO_DIVERGENCE)
    if position >= len(a["text"]) or position >= len(b["text"]):
        return Divergence(position, "ended")
    a_token, b_token = a["text"][position], b["text"][position]
    a_top = dict(zip(a["top_text"][position], a["top_logprob"][position], strict=True))
    b_top = dict(zip(b["top_text"][position], b["top_logprob"][position], strict=True))
    kind = "near_tie" if b_token in a_top and a_token in b_top else "confident"
    gap = None
    if b_token in a_top and a["logprob"][position] is not None:
        gap = a["logprob"][position] - a_top[b_token]
    return Divergence(position, kind, gap, a_token, b_token)


@dataclass
class Drift:
    top1_agreement: float | None = None
    logprob_mean_abs_diff: float | None = None
    logprob_max_abs_diff: float | None = None
    kl_topk_mean: float | None = None
    kl_topk_max: float | None = None


def drift(a: dict[str, Any], b: dict[str, Any], divergence: int | None) -> Drift:
    """Logprob drift over the common prefix (and top-1 agreement up to the divergence)."""
    length = min(len(a["text"]), len(b["text"]))
    prefix = length if divergence is None else min(divergence, length)
    compared = min(prefix + 1, length) if divergence is not None else length
    if compared == 0:
        return Drift()
    agreement = [a["top_text"][i][:1] == b["top_text"][i][:1] for i in range(compared)]
    diffs = [abs(a["logprob"][i] - b["logprob"][i]) for i in range(prefix)
             if a["logprob"][i] is not None and b["logprob"][i] is not None]
    kls = [kl_lower_bound(a["top_text"][i], a["top_logprob"][i], b["top_text"][i],
                          b["top_logprob"][i]) for i in range(prefix)]
    return Drift(
        top1_agreement=sum(agreement) / len(agreement),
        logprob_mean_abs_diff=sum(diffs) / len(diffs) if diffs else None,
        logprob_max_abs_diff=max(diffs) if diffs else None,
        kl_topk_mean=sum(kls) / len(kls) if kls else None,
        kl_topk_max=max(kls) if kls else None,
    )


def kl_lower_bound(a_tokens: list[str], a_logprobs: list[float], b_tokens: list[str],
                   b_logprobs: list[float]) -> float:
    """KL(A || B) over the tokens both top-k lists hold plus one bucket for the rest.

    Merging outcomes never increases KL divergence, so this is a lower bound on the
    full-vocabulary KL, computed from the top-k alone.
    """
    b_logprob_of = dict(zip(b_tokens, b_logprobs, strict=True))
    total = p_shared = q_shared = 0.0
    for token, logprob in zip(a_tokens, a_logprobs, strict=True):
        other = b_logprob_of.get(token)
        if other is None:
            continue
        p = math.exp(logprob)
        p_shared += p
        q_shared += math.exp(other)
        total += p * (logprob - other)
    p_rest, q_rest = max(1.0 - p_shared, 0.0), max(1.0 - q_shared, 1e-12)
    if p_rest > 1e-12:
        total += p_rest * math.log(p_rest / q_rest)
    return max(total, 0.0)


# --- expectations and labels ------------------------------------------------------

def flip(a_expect: str, b_expect: str) -> str:
    if a_expect == "pass" and b_expect == "fail":
        return "regression"
    if a_expect == "fail" and b_expect == "pass":
        return "improvement"
    return ""


def suggested_label(identical: bool, similar: float, numbers_differ: bool, flip_kind: str,
                    a_expect: str, b_expect: str, a_degenerate: str, b_degenerate: str) -> str:
    if identical:
        return "identical"
    if flip_kind:
        return "factual_flip"
    if (similar >= WORDING_SIMILARITY and not numbers_differ and a_expect == b_expect
            and not a_degenerate and not b_degenerate):
        return "wording"
    return ""
