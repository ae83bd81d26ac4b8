"""Pure functions that read one pair: divergence, drift, degenerate output, flips."""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, islice

import msgspec
import numpy as np
import orjson
from rapidfuzz.distance import Indel

from ..store.records.run_records import Tokens, numbers_in
from .expects import FAIL, PASS, CheckResult, overall

WORDING_SIMILARITY = 0.8
NO_DIVERGENCE = "none"
# A near tie: on each side the other side's token is within this many nats of the one
# chosen (at least 78% of its probability). Measured on the demo model (Gemma 3 270M,
# bf16 vs fp8, 116 positions of common prefix): FP8 moves a chosen token's logprob by
# 0.05 nats at the median and 0.15 at the 90th percentile, and the four forks it caused
# had gaps of 0.01 to 0.08 nats. A fork past 0.25 nats took more than such a nudge.
NEAR_TIE_NATS = 0.25


def similarity(a: str, b: str) -> float:
    """0..1 normalized Indel similarity (what difflib's ratio() approximates, much faster)."""
    return float(Indel.normalized_similarity(a, b))


def numbers_changed(a: str, b: str) -> bool:
    return numbers_in(a) != numbers_in(b)


# --- degenerate output ---------------------------------------------------------------

def degenerate_reason(text: str | None, finish_reason: str | None,
                      other_finish_reason: str | None) -> str:
    """`empty`, `repetition`, `length` (capped while the other side stopped), or ""."""
    if text is None:
        return ""
    if not text.strip():
        return "empty"
    if is_repetition_loop(text, capped=finish_reason == "length"):
        return "repetition"
    if finish_reason == "length" and other_finish_reason == "stop":
        return "length"
    return ""


def is_repetition_loop(text: str, capped: bool = False) -> bool:
    """A loop (see `_ends_in_loop`); for a short answer cut by max_tokens also a short
    one (see `_short_capped_loop`): a loop that hit the cap early has had no room to
    repeat many times, and being cut is itself the sign that it never ended."""
    return _ends_in_loop(text, capped) or (capped and _short_capped_loop(text))


# Measured on the broken-FP8-head garbage of the demo (`--fault lmhead-noscale`, caps of
# 8 to 24 tokens): "Yes yes yes yes yes yes yes yes", "Answer given here because its
# given here because its given here", "real estate—real estate—where real estate—...",
# "<i><b><i><b>...". Prose, lists, numbers, tables and code cut by the cap are not.
CAPPED_LOOP_COPIES = 2.5  # the tail repeats its period at least this often,
CAPPED_LOOP_SHARE = 0.5  # and covers at least half of the answer
CAPPED_DISTINCT_SHARE = 0.3  # or: at most this share of the words are distinct
# Those looser rules are for answers the cap cut short: a long answer cut by the cap
# (2,000 words of similar functions) repeats its shape without being a loop.
SHORT_ANSWER_WORDS = 64
_WORD = re.compile(r"\w+")


def _short_capped_loop(text: str) -> bool:
    words = [w.group().casefold() for w in islice(_WORD.finditer(text), SHORT_ANSWER_WORDS + 1)]
    if not 4 <= len(words) <= SHORT_ANSWER_WORDS:
        return False
    for period in _candidate_periods(words, len(words) // 2):
        if _tail_repeats(words, period, max(CAPPED_LOOP_COPIES * period, 4,
                                            CAPPED_LOOP_SHARE * len(words))):
            return True
    if len(words) >= 6 and len(set(words)) <= max(2, CAPPED_DISTINCT_SHARE * len(words)):
        return True
    return _near_loop(text.rstrip()[-512:], short=True)


# Long answers: a loop that starts late (after 3,000 good tokens of a 4,096-token cap)
# covers a small share of the answer, so past this many repeated words it is a loop
# whatever its share; a passage of LONG_PERIOD words or more repeated three times back
# to back is one (a paragraph loop), a shorter phrase needs four copies.
LATE_LOOP_WORDS = 200
LONGEST_PERIOD_WORDS = 256
LONG_PERIOD = 16


def _ends_in_loop(text: str, capped: bool = False) -> bool:
    """The answer ends in a phrase repeated back to back (greedy decoding, once in a
    loop, stays in it): "need analysis there need analysis there ...".

    "very very good" or a list whose items share a prefix is not a loop: the repeated
    tail must hold at least four copies (three of a passage of 16 words or more), at
    least 12 words and 30% of the answer, or LATE_LOOP_WORDS words. Loops without
    spaces (CJK, symbols: `!!!!` to the length limit) are found the same way over the
    last 512 characters. An answer cut by max_tokens is read without its last word,
    which the cap may have cut in two (a loop of the question cut at "`1" of "`12:").
    Linear in the text: each candidate period is followed back at most as far as it
    needs to count.
    """
    words = text.split()
    if capped and not text[-1:].isspace():
        words = words[:-1]
    for period in _candidate_periods(words, min(LONGEST_PERIOD_WORDS, len(words) // 3)):
        copies = 3 if period >= LONG_PERIOD else 4
        if _tail_repeats(words, period, max(copies * period, 12,
                                            min(0.3 * len(words), LATE_LOOP_WORDS))):
            return True
    tail = text.rstrip()[-512:]
    for period in _candidate_periods(tail, min(64, len(tail) // 8)):
        if _tail_repeats(tail, period, max(8 * period, 48, 0.3 * len(tail))):
            return True
    return _near_loop(tail)


_FILLER = re.compile(r"[^\W_]+")


def _near_loop(tail: str, short: bool = False) -> bool:
    """A loop whose few words alternate: "<em><u>na</u></em><em><u>mi</u></em>...".

    The text's shape (every run of letters or digits replaced by one placeholder) must
    end, give or take a few closing characters, in a periodic run, and the words inside
    that run (markup names included) must repeat: at most a quarter of them distinct,
    and at most one in its second half that its first half does not hold. A table or a list
    repeats its shape too, but with many different words; code or a list that counts
    (`def step_78`, `def step_79`) brings a new word with each copy.
    """
    encoded = tail.encode("utf-8", "surrogatepass")
    if not short and (len(encoded) < 96 or len(zlib.compress(encoded)) > 0.4 * len(encoded)):
        return False  # cheap gate: such a loop compresses far better than prose does
    full_shape = _FILLER.sub("\0", tail)
    words = _FILLER.findall(tail)
    # a short (capped) answer: three periods and half the answer are enough
    copies, least, share = (3, 12, CAPPED_LOOP_SHARE) if short else (4, 48, 0.3)
    shortest = max(least, share * len(full_shape))  # the run, whatever its period
    trims, longest = min(16, len(full_shape) // 2), min(64, len(full_shape) // copies)
    if not _may_repeat(full_shape, math.ceil(shortest), longest, trims):
        return False
    # what `_tail_repeats` asks of each period, asked once here: this loop runs up to
    # 16 cuts times 64 periods on every capped answer
    needed = [0] + [max(math.ceil(max(copies * period, shortest)) - period, 1)
                    for period in range(1, longest + 1)]
    for trimmed in range(trims):
        shape = full_shape[:len(full_shape) - trimmed]
        size = len(shape)
        for period in _candidate_periods(shape, min(64, size // copies)):
            repeated = needed[period]
            if repeated <= size - period and \
                    shape[size - repeated:] == shape[size - repeated - period:size - period]:
                run = _periodic_tail(shape, period)
                inside = shape[-run:].count("\0")
                after = full_shape[len(shape):].count("\0")
                region = words[len(words) - after - inside:len(words) - after]
                half = len(region) // 2
                return len(region) >= 3 and len(set(region)) <= max(3, len(region) // 4) \
                    and len(set(region[half:]) - set(region[:half])) <= 1
    return False


def _may_repeat(shape: str, least: int, longest: int, trims: int) -> bool:
    """False when no period up to `longest` can repeat over the last `least` characters
    of `shape` cut by fewer than `trims` (what `_near_loop` looks for): each such run
    covers positions len - least + period to len - trims, so they must repeat there.
    One slice comparison a period, where `_near_loop` would try every cut and period
    (it took most of `compare`'s loop checks on capped answers)."""
    size = len(shape)
    for period in range(1, longest + 1):
        start, end = size - least + period, size - trims + 1
        if start >= end or start < period or \
                shape[start:end] == shape[start - period:end - period]:
            return True
    return False


def _candidate_periods(items: str | list[str], longest: int) -> list[int]:
    """Periods p whose last item equals the item p places before it (cheap filter)."""
    if longest < 1:
        return []
    last = items[-1]
    return [p for p in range(1, longest + 1) if items[-1 - p] == last]


def _periodic_tail(items: str | list[str], period: int, enough: float = math.inf) -> int:
    """How many trailing items repeat the item `period` places before them (plus one
    period), counted no further than `enough`."""
    index = len(items) - 1
    stop = max(period, len(items) - 1 - enough)  # the run reaches `enough` there
    while index >= stop and items[index] == items[index - period]:
        index -= 1
    run = len(items) - 1 - index
    return run + period if run else 0


def _tail_repeats(items: str | list[str], period: int, least: float) -> bool:
    """Whether `_periodic_tail(items, period) >= least` (`least` above 0), with one slice
    comparison: a tail that repeats, repeats in every shorter tail too. Counting the run
    item by item for every candidate period took a third of `compare`'s time."""
    size = len(items)
    needed = max(math.ceil(least) - period, 1)  # trailing items that must repeat
    return needed <= size - period and \
        items[size - needed:] == items[size - needed - period:size - period]


# --- token streams -----------------------------------------------------------------

TokenKey = str | tuple[int, ...]  # a token's string, or its bytes where the string is lossy


def token_keys(tokens: Tokens) -> list[TokenKey]:
    """Token identities: the raw bytes where the string alone is lossy (U+FFFD)."""
    if not tokens.raw_bytes:
        return list(tokens.text)
    return [tuple(b) if b is not None else t
            for t, b in zip(tokens.text, tokens.raw_bytes, strict=True)]


def _occurrences(tokens: list[str]) -> list[tuple[str, int]]:
    """(token, n-th time it appears): repeated strings stay distinct outcomes."""
    seen: dict[str, int] = {}
    keyed = []
    for token in tokens:
        seen[token] = seen.get(token, 0) + 1
        keyed.append((token, seen[token]))
    return keyed


def first_divergence(a_keys: Sequence[TokenKey], b_keys: Sequence[TokenKey]) -> int | None:
    """Index of the first differing generated token; None when the streams agree."""
    for index, (a, b) in enumerate(zip(a_keys, b_keys, strict=False)):
        if a != b:
            return index
    return None if len(a_keys) == len(b_keys) else min(len(a_keys), len(b_keys))


@dataclass
class Divergence:
    position: int | None
    kind: str  # none | near_tie | confident | unverified | ended
    gap: float | None = None  # on A: A's token's logprob minus B's token's
    a_token: str | None = None
    b_token: str | None = None
    b_gap: float | None = None  # on B: B's token's logprob minus A's token's
    unsure: str = ""  # the sides unsure at the fork: a | b | both | neither | "" (unread)


def classify_divergence(a: Tokens, b: Tokens, a_text: str | None = None,
                        b_text: str | None = None) -> Divergence:
    """How sure the reference (A) was at the first token where the streams part.

    `near_tie`: on A, B's token is in the top-k and within NEAR_TIE_NATS of A's (A was
    unsure: a small numeric nudge can cause such a fork); `confident`: it is not (B's
    token is further down A's top-k, or below all of it); `unverified`: that cannot be
    read from tokens that spell the answers (a side's tokens up to the fork do not spell
    the start of its text, or A's top-k does not reach far enough); `ended`: one side
    stopped where the other went on. `unsure` says which sides had the other's token
    within the margin (B's side is shown, never decides).
    """
    position = first_divergence(token_keys(a), token_keys(b))
    if position is None:
        return Divergence(None, NO_DIVERGENCE)
    if position >= len(a) or position >= len(b):
        return Divergence(position, "ended")
    a_token, b_token = a.text[position], b.text[position]
    gap = _gap(a, position, a_token, b_token)
    b_gap = _gap(b, position, b_token, a_token)
    found = Divergence(position, "unverified", gap, a_token, b_token, b_gap)
    spelled = all(text is None or spells(tokens, text, position + 1)
                  for tokens, text in ((a, a_text), (b, b_text)))
    a_unsure = _unsure(a, position, gap)
    if spelled:
        b_unsure = _unsure(b, position, b_gap)
        found.unsure = _sides(a_unsure, b_unsure)
        if a_unsure is not None:
            found.kind = "near_tie" if a_unsure else "confident"
    return found


def spells(tokens: Tokens, text: str, count: int) -> bool:
    """Whether the first `count` tokens spell the start of `text`, byte for byte (a
    server's logprobs that do not belong to its answer say nothing about it)."""
    if tokens.raw_bytes is None:  # encoded a code point at a time: the joined texts' bytes
        spelled = "".join(tokens.text[:count]).encode("utf-8", "surrogatepass")
    else:
        spelled = b"".join(_token_bytes(tokens, index) for index in range(count))
    return text.encode("utf-8", "surrogatepass").startswith(spelled)


def _token_bytes(tokens: Tokens, index: int) -> bytes:
    raw = tokens.raw_bytes[index] if tokens.raw_bytes else None
    return bytes(raw) if raw is not None else tokens.text[index].encode("utf-8",
                                                                         "surrogatepass")


def _unsure(tokens: Tokens, position: int, gap: float | None) -> bool | None:
    """Whether a side had the other side's token within NEAR_TIE_NATS of its own; None
    when its figures cannot tell (no top-k, or the other token missing from a top-k
    whose last entry is itself within the margin)."""
    if gap is not None:
        return gap <= NEAR_TIE_NATS
    own, top = tokens.logprob[position], tokens.top_logprob[position]
    if own is None or not top:
        return None
    return False if own - min(top) > NEAR_TIE_NATS else None


def _sides(a_unsure: bool | None, b_unsure: bool | None) -> str:
    """"a", "b", "both" or "neither"; "" when A's side cannot tell (B's figures that
    cannot tell count as sure: B did not list A's token near its own)."""
    if a_unsure is None:
        return ""
    return {(True, True): "both", (True, False): "a", (False, True): "b",
            (False, False): "neither"}[(a_unsure, bool(b_unsure))]


def _gap(tokens: Tokens, position: int, chosen: str, other: str) -> float | None:
    """The chosen token's logprob minus the other token's, on one side; None when the
    other token is not in that side's top-k."""
    top = _best_logprobs(tokens.top_text[position], tokens.top_logprob[position])
    if other not in top:
        return None
    own = tokens.logprob[position]
    own = top.get(chosen) if own is None else own
    return None if own is None else float(own - top[other])


def _best_logprobs(tokens: list[str], logprobs: list[float]) -> dict[str, float]:
    """Token string -> its highest logprob (strings repeat: distinct ids, same text)."""
    best: dict[str, float] = {}
    for token, logprob in zip(tokens, logprobs, strict=True):
        best.setdefault(token, logprob)
    return best


@dataclass
class PairDrift:
    """One pair's logprob drift over the common prefix: pairs.csv's drift columns
    (summary.json's spreads of them over all pairs: DriftSpreads)."""

    top1_agreement: float | None = None
    logprob_mean_abs_diff: float | None = None
    logprob_max_abs_diff: float | None = None
    kl_topk_mean: float | None = None
    kl_topk_max: float | None = None


def drift(a: Tokens, b: Tokens, divergence: int | None) -> PairDrift:
    """Logprob drift over the common prefix (and top-1 agreement up to the divergence)."""
    length = min(len(a), len(b))
    prefix = length if divergence is None else min(divergence, length)
    compared = min(prefix + 1, length) if divergence is not None else length
    if compared == 0:
        return PairDrift()
    if a is b and _finite(a):  # one answer read for both sides: what the sums below give
        sent = any(value is not None for value in a.logprob[:prefix])
        return PairDrift(top1_agreement=1.0, logprob_mean_abs_diff=0.0 if sent else None,
                         logprob_max_abs_diff=0.0 if sent else None,
                         kl_topk_mean=0.0 if prefix else None,
                         kl_topk_max=0.0 if prefix else None)
    agreement = [a.top_text[i][:1] == b.top_text[i][:1] for i in range(compared)]
    diffs = [abs(x - y) for x, y in zip(a.logprob[:prefix], b.logprob[:prefix], strict=True)
             if x is not None and y is not None]
    kls = kl_per_position(a, b, prefix)
    return PairDrift(
        top1_agreement=sum(agreement) / len(agreement),
        logprob_mean_abs_diff=sum(diffs) / len(diffs) if diffs else None,
        logprob_max_abs_diff=max(diffs) if diffs else None,
        kl_topk_mean=sum(kls) / len(kls) if kls else None,
        kl_topk_max=max(kls) if kls else None,
    )


def _finite(tokens: Tokens) -> bool:
    """Whether every logprob the arrays hold is a finite number (a NaN or an infinity
    makes a sum one)."""
    return math.isfinite(sum(value for value in tokens.logprob if value is not None)) \
        and math.isfinite(sum(chain.from_iterable(tokens.top_logprob)))


def kl_per_position(a: Tokens, b: Tokens, positions: int) -> list[float]:
    """kl_lower_bound at each of the first `positions` positions.

    Where both sides list the same alternatives in the same order (most of a common
    prefix) the bound is computed for all such positions at once with numpy.
    """
    same = [i for i in range(positions) if a.top_text[i] == b.top_text[i]]
    widths = {len(a.top_text[i]) for i in same}
    values: dict[int, float] = {}
    if same and len(widths) == 1 and widths != {0}:
        width = widths.pop()
        aligned: list[float] = _kl_aligned(_rows([a.top_logprob[i] for i in same], width),
                                           _rows([b.top_logprob[i] for i in same],
                                                 width)).tolist()
        if len(same) == positions:  # every position aligned
            return aligned
        values = dict(zip(same, aligned, strict=True))
    return [values[i] if i in values else kl_lower_bound(
        a.top_text[i], a.top_logprob[i], b.top_text[i], b.top_logprob[i])
        for i in range(positions)]


def _rows(rows: list[list[float]], width: int) -> np.ndarray:
    """Rows of `width` values as a 2-D float array, made from one flat list: numpy
    reads nested lists at half the speed (this runs for every compared pair)."""
    flat = list(chain.from_iterable(rows))
    if len(flat) != len(rows) * width:  # rows of other lengths: as numpy reads them
        return np.array(rows, dtype=float)
    return np.array(flat, dtype=float).reshape(len(rows), width)


# A probability is at most 1 (logprob 0); below this floor (vLLM sends -9999 for -inf)
# a logprob is read as the floor, so a KL stays finite whatever a run holds
LOGPROB_FLOOR = -1e5


def _bounded(logprob: float) -> float:
    return min(max(logprob, LOGPROB_FLOOR), 0.0)


def _kl_aligned(a_lp: np.ndarray, b_lp: np.ndarray) -> np.ndarray:
    a_lp, b_lp = (np.clip(a_lp, LOGPROB_FLOOR, 0.0),
                  np.clip(b_lp, LOGPROB_FLOOR, 0.0))
    p, q = np.exp(a_lp), np.exp(b_lp)
    body = (p * (a_lp - b_lp)).sum(axis=1)
    p_rest = np.clip(1.0 - p.sum(axis=1), 0.0, None)
    q_rest = np.clip(1.0 - q.sum(axis=1), 1e-12, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        rest = np.where(p_rest > 1e-12, p_rest * np.log(p_rest / q_rest), 0.0)
    return np.asarray(np.maximum(body + rest, 0.0))


def kl_lower_bound(a_tokens: list[str], a_logprobs: list[float], b_tokens: list[str],
                   b_logprobs: list[float]) -> float:
    """KL(A || B) over the tokens both top-k lists hold plus one bucket for the rest.

    Merging outcomes never increases KL divergence, so this is a lower bound on the
    full-vocabulary KL, computed from the top-k alone.
    """
    b_logprob_of = dict(zip(_occurrences(b_tokens), b_logprobs, strict=True))
    total = p_shared = q_shared = 0.0
    for token, logprob in zip(_occurrences(a_tokens), a_logprobs, strict=True):
        other = b_logprob_of.get(token)
        if other is None:
            continue
        logprob, other = _bounded(logprob), _bounded(other)
        p = math.exp(logprob)
        p_shared += p
        q_shared += math.exp(other)
        total += p * (logprob - other)
    p_rest, q_rest = max(1.0 - p_shared, 0.0), max(1.0 - q_shared, 1e-12)
    if p_rest > 1e-12:
        total += p_rest * math.log(p_rest / q_rest)
    return max(total, 0.0)


# --- tool calls ---------------------------------------------------------------------

TOOL_CALL_CHANGES = ("identical", "arguments_changed", "different_tool", "call_vs_no_call")


def with_calls(text: str, calls: str | None) -> str:
    """An answer's content for similarity and the degenerate check: its text, then its
    tool calls (pairs.csv's JSON), so that a call is content too."""
    return f"{text}\n{calls}" if calls else text


def tool_call_change(a_calls: str | None, b_calls: str | None) -> str:
    """How B's tool calls differ from A's (TOOL_CALL_CHANGES), "" when neither side
    called one. Arguments compare as JSON values (whitespace and key order aside),
    the calls as a set (parallel calls may come in any order)."""
    if not a_calls and not b_calls:
        return ""
    if not a_calls or not b_calls:
        return "call_vs_no_call"
    a, b = _canonical_calls(a_calls), _canonical_calls(b_calls)
    if sorted(name for name, _ in a) != sorted(name for name, _ in b):
        return "different_tool"
    return "identical" if sorted(a) == sorted(b) else "arguments_changed"


def _canonical_calls(calls: str) -> list[tuple[str, str]]:
    canonical = []
    for call in orjson.loads(calls):
        arguments = call.get("arguments") or ""
        try:  # msgspec keeps integers beyond 64 bits exact (orjson reads them as floats)
            arguments = msgspec.json.encode(msgspec.json.decode(arguments), order="sorted"
                                            ).decode()
        except (msgspec.DecodeError, RecursionError):
            pass  # not JSON, or nested too deeply to read: compared as sent
        canonical.append((str(call.get("name")), arguments))
    return canonical


# --- expectations and labels ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ExpectationColumns:
    """A pair's expect results as pairs.csv's columns of the same names."""

    a_expect: str
    b_expect: str
    flip: str  # regression | improvement | ""
    flipped_checks: str
    a_checks: str
    b_checks: str
    a_expect_failures: str
    b_expect_failures: str


def expectation_columns(a_results: list[CheckResult], b_results: list[CheckResult]
                        ) -> ExpectationColumns:
    """Each side's checks, overall result and failures; the flip: a regression when any
    check passed on A and fails on B, an improvement when one went the other way only."""
    a_status = {r.check: r.status for r in a_results}
    flipped = [r.check for r in b_results if r.status == FAIL and a_status[r.check] == PASS]
    improved = any(r.status == PASS and a_status[r.check] == FAIL for r in b_results)
    return ExpectationColumns(
        a_expect=overall(a_results), b_expect=overall(b_results),
        flip="regression" if flipped else "improvement" if improved else "",
        flipped_checks=" ".join(flipped),
        a_checks=checks_cell(a_results), b_checks=checks_cell(b_results),
        a_expect_failures=_reasons(a_results), b_expect_failures=_reasons(b_results))


def checks_cell(results: list[CheckResult]) -> str:
    """pairs.csv's a_checks / b_checks: `check=status` for each check, space-separated."""
    return " ".join(f"{r.check}={r.status}" for r in results)


def _reasons(results: list[CheckResult]) -> str:
    return "; ".join(f"{r.check}: {r.reason}" for r in results if r.status != PASS)


def suggested_label(identical: bool, similar: float, numbers_differ: bool, flip_kind: str,
                    a_expect: str, b_expect: str, a_degenerate: str, b_degenerate: str,
                    calls_change: str = "") -> str:
    if identical:
        return "identical"
    if flip_kind:
        return "factual_flip"
    if (similar >= WORDING_SIMILARITY and not numbers_differ and a_expect == b_expect
            and not a_degenerate and not b_degenerate
            and calls_change in ("", "identical")):
        return "wording"
    return ""


def flip_cause(unstable_a: bool, unstable_b: bool, divergence_kind: str | None) -> str:
    """What can explain a flip (pair_records.FLIP_CAUSES), the first that holds. Only
    the reference's own doubt is noise: A's repeats disagree on a flipped check
    (`unstable_a`), or A was unsure at the fork (`near_tie`, read on A's side). Then,
    counted as regressions: B's repeats disagree (`unstable_b`: B's instability is B's
    regression), the fork cannot be read from tokens that spell the answers
    (`unverified`: no logprobs, another stream, one side ended there), or A was sure
    (`confident`)."""
    if unstable_a:
        return "unstable_a"
    if divergence_kind == "near_tie":
        return "near_tie"
    if unstable_b:
        return "unstable_b"
    return "confident" if divergence_kind == "confident" else "unverified"


def disputed_checks(a_cells: Sequence[tuple[str, str, str]],
                    b_cells: Sequence[tuple[str, str, str]]
                    ) -> tuple[dict[str, str], dict[str, str]]:
    """The checks that passed on one side and failed on the other (a flip's checks),
    with A's statuses, then B's, on repeat 0."""
    a_status = {check: status for check, status, _ in a_cells}
    b_status = {check: status for check, status, _ in b_cells}
    disputed = [check for check in a_status if {a_status[check], b_status.get(check)}
                == {PASS, FAIL}]
    return ({check: a_status[check] for check in disputed},
            {check: b_status[check] for check in disputed})


def repeats_disagree(statuses: Sequence[Sequence[CheckResult]],
                     first: dict[str, str]) -> bool:
    """Whether any repeat's result on a disputed check (`first`: check -> the status on
    repeat 0) passes where repeat 0 failed or fails where it passed."""
    return any(result.check in first and result.status in (PASS, FAIL)
               and result.status != first[result.check]
               for results in statuses for result in results)
