"""Pure triage functions on hand-built inputs."""

from __future__ import annotations

import copy
import difflib
import math
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantcheck.store.folders.run_dir import Blobs
from quantcheck.store.folders.token_columns import round_significant
from quantcheck.store.inputs.haystack import haystack
from quantcheck.store.records.run_records import Tokens
from quantcheck.triage.expects import CheckResult
from quantcheck.triage.sides import signature
from quantcheck.triage.signals import (
    _FILLER,
    NEAR_TIE_NATS,
    _near_loop,
    _periodic_tail,
    _tail_repeats,
    classify_divergence,
    degenerate_reason,
    drift,
    expectation_columns,
    first_divergence,
    is_repetition_loop,
    kl_lower_bound,
    similarity,
    spells,
    suggested_label,
)


def tokens(*steps: tuple[str, float, dict[str, float]], raw: list[Any] | None = None
           ) -> Tokens:
    """Token arrays from (token, logprob, {alternative: logprob}) steps."""
    arrays = Tokens()
    for token, logprob, alternatives in steps:
        top = sorted({token: logprob, **alternatives}.items(), key=lambda kv: -kv[1])
        arrays.append(token, logprob, [t for t, _ in top], [v for _, v in top])
    arrays.raw_bytes = raw
    return arrays


def test_similarity_tracks_difflib() -> None:
    a, b = "The capital of Canada is Ottawa.", "Ottawa is the capital of Canada."
    assert similarity(a, a) == 1.0
    assert similarity("", "") == 1.0
    assert similarity(a, b) == pytest.approx(difflib.SequenceMatcher(None, a, b).ratio(),
                                             abs=0.15)


@pytest.mark.parametrize(
    ("text", "loop"),
    [
        ("need analysis there " * 40, True),
        ("The capital is Canberra. " * 8, True),
        ("你好" * 60, True),
        ("=" * 200, True),
        ("This is very very very very good, and the rest of the answer is ordinary text.", False),
        ("- apple\n- banana\n- cherry\n- date\n- elderberry\n- fig\n- grape\n- kiwi\n", False),
        ("1. Preheat the oven.\n2. Mix the flour.\n3. Add the eggs.\n4. Bake for 20 minutes.\n"
         "5. Let it cool.\n6. Serve.\n", False),
        ("def f(x):\n    return x\n\n\ndef g(x):\n    return x + 1\n", False),
        ("Yes. " * 3, False),
        ("", False),
        # the broken-FP8-head output of the lab model on "capital of Italy"
        ("  <em><strong><em><u>italia</u></em></strong></em>"
         + "<em><u><em><u>mi</u></em></em></em><em><u><em><u>na</u></em></em></em>" * 2
         + "</em>", True),
        ("| name | value |\n|---|---|\n" + "".join(f"| row{n} | {n} |\n" for n in range(9)),
         False),
        ("<ul>" + "".join(f"<li>{city}</li>" for city in
                          ("Paris", "Berlin", "Rome", "Madrid", "Lisbon", "Vienna")) + "</ul>",
         False),
        ("".join(f"{n},{n + 1},{n + 2}\n" for n in range(1, 22, 3)), False),
    ],
    ids=["seed-phrase", "sentence-loop", "cjk", "symbols", "repeated-word", "list",
         "numbered-steps", "code", "short", "empty", "markup-near-loop", "table", "html-list",
         "csv"],
)
def test_repetition_loops(text: str, loop: bool) -> None:
    assert is_repetition_loop(text) is loop


@given(st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=9),
                min_size=5, max_size=200, unique=True))
def test_distinct_words_are_never_a_loop(words: list[str]) -> None:
    assert not is_repetition_loop(" ".join(words))


@given(st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=8),
                min_size=1, max_size=6, unique=True), st.integers(min_value=12, max_value=40))
def test_a_phrase_repeated_many_times_is_a_loop(phrase: list[str], copies: int) -> None:
    text = ("Intro. " + " ".join(phrase) + " ") * 1 + (" ".join(phrase) + " ") * copies
    assert is_repetition_loop(text)


@pytest.mark.parametrize(
    ("text", "finish", "other", "reason"),
    [
        ("  \n", "stop", "stop", "empty"),
        ("need analysis there " * 30, "length", "stop", "repetition"),
        ("A long but fine answer", "length", "stop", "length"),
        ("A long but fine answer", "length", "length", ""),
        ("Canberra.", "stop", "stop", ""),
    ],
)
def test_degenerate_reason(text: str, finish: str, other: str, reason: str) -> None:
    assert degenerate_reason(text, finish, other) == reason


# What the broken FP8 head (`demo --fault lmhead-noscale`) wrote, cut by max_tokens of 8
# to 24; before capped answers were judged as such, most were flagged only `length`.
CAPPED_GARBAGE = [
    "  where there once once once once once once once once once once once once once",
    "   <i><b><i><b><i><b><i><b><i><b><i><b><i><b><i>",
    "  red<start_of_image>    because  red  light  light  light  light  ",
    "  Yes  yes  yes  yes  yes  yes  yes  yes",
    " number days include number days include number days include number days include",
    "  Answer given here  because  its given here  because  its given here",
    " \u2018off\u2019.<start_of_image><start_of_image><start_of_image><start_of_image>"
    "<start_of_image>",
    " lot about real estate\u2014real estate\u2014where real estate\u2014real estate\u2014where"
    " real estate\u2014real estate\u2014real estate",
    " set aside enough room so enough room enough room enough room enough room enough",
]
CAPPED_FINE = [
    "1, 2, 3, 4, 5, 6, 7, 8", "Monday, Tuesday, Wednesday, Thursday",
    "The capital of France is Paris, which is known for",
    "for i in range(10): print(i)", "| a | b | c |\n|---|---|---|\n| 1 | 2 | 3 |",
    "---|---|---|---|", "def f(x):\n    return x + x * x",
    "- item one\n- item two\n- item three\n- item", "x = 1\ny = 2\nz = 3\nw = 4",
    "He said no, no, and then he left the room quietly",
]


@pytest.mark.parametrize("text", CAPPED_GARBAGE)
def test_short_loops_cut_by_the_cap_are_degenerate(text: str) -> None:
    assert degenerate_reason(text, "length", "stop") == "repetition"


@pytest.mark.parametrize("text", CAPPED_FINE)
def test_answers_cut_by_the_cap_are_not_loops(text: str) -> None:
    assert degenerate_reason(text, "length", "stop") == "length"


# Long answers: 3,000 good tokens, then a fault that runs to the length limit
GOOD = haystack(3000, 0.5, "The ledger closed at dusk.", seed=3)
PARAGRAPH = " " + haystack(80, 0, "A gull called.", seed=9).replace("\n\n", " ")
LATE_FAULTS = {
    "phrase-loop": GOOD + " and then the ship sailed on" * 100,
    "paragraph-loop": GOOD + PARAGRAPH * 10,
    "bang-run": GOOD + "!" * 1000,
    "spaced-bang-run": GOOD + " !" * 400,
    "bang-only": "!" * 4000,
    "cjk-loop": GOOD + "好的" * 300,
}
LONG_FINE = {
    "prose": haystack(16000, 0.5, "The ledger closed at dusk.", seed=4),
    "counting-code": "\n\n".join(f'def step_{n}(x):\n    """Return x times {n} plus {n}."""\n'
                                  f"    return x * {n} + {n}" for n in range(1, 400)),
    "squares": "\n".join(f"{n}: {n * n}" for n in range(1, 2000)),
    "table": "| n | square |\n|---|---|\n" + "\n".join(f"| {n} | {n * n} |"
                                                   for n in range(1, 1000)),
    "dict-literal": "NUMBERS = {\n" + "\n".join(f"    {n}: 'word{n}'," for n in range(1, 900)),
    "counting": " ".join(str(n) for n in range(5000)),
}


@pytest.mark.parametrize("finish", ["length", "stop"])
@pytest.mark.parametrize("text", LATE_FAULTS.values(), ids=LATE_FAULTS.keys())
def test_a_loop_that_starts_late_is_degenerate(text: str, finish: str) -> None:
    """A loop after 3,000 good tokens covers a small share of the answer: past 200
    repeated words (or 154 characters of one symbol) it is a loop whatever its share."""
    assert degenerate_reason(text, finish, "stop") == "repetition"


def test_a_loop_the_cap_cuts_mid_word_is_a_loop() -> None:
    """Seen on llama-server (Gemma 3 270M behind the ChatML fallback): the question
    repeated to the cap, which cut its last copy at "`1" of "`12:"."""
    question = ("Write the squares of the whole numbers from 1 to 200, one per line, in the "
                "form `N: N squared` (for example `12: 144`). Write all 200 lines and nothing "
                "else.<|im_end|>\n<|im_start|>user\n")
    text = (question * 30)[:-len(question) + question.index("`12") + 2]
    assert text.endswith("(for example `1")
    assert degenerate_reason(text, "length", "stop") == "repetition"


@pytest.mark.parametrize("text", LONG_FINE.values(), ids=LONG_FINE.keys())
def test_long_answers_cut_by_the_cap_are_not_loops(text: str) -> None:
    """Prose, and code, lists and tables whose items repeat their shape while they
    count on, are no loop however long they run."""
    assert degenerate_reason(text, "length", "stop") == "length"
    assert degenerate_reason(text, "stop", "stop") == ""


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**16), st.lists(st.integers(0, 10**9), min_size=16, max_size=80,
                                       unique=True))
def test_any_late_loop_past_two_hundred_words_is_found(seed: int, numbers: list[int]) -> None:
    """A passage of 16 to 80 distinct words repeated back to back for 200 words or
    more, after 3,000 good tokens."""
    phrase = [f"w{number}" for number in numbers]
    copies = max(3, -(-201 // len(phrase)))
    text = haystack(3000, 0.5, "x.", seed) + (" " + " ".join(phrase)) * copies
    assert is_repetition_loop(text)


def _fastest(check: Any, text: str) -> float:
    """The least CPU time of 3 calls (the wall clock counts other work on a busy machine)."""
    best = math.inf
    for _ in range(3):
        started = time.process_time()
        check(text)
        best = min(best, time.process_time() - started)
    return best


@settings(max_examples=30, deadline=None)
@given(st.text(min_size=1, max_size=60), st.text(max_size=60), st.booleans())
def test_the_check_is_linear_on_16k_token_answers(piece: str, ending: str, capped: bool) -> None:
    """Any piece repeated to a 16,000-token answer (about 64,000 characters) and any
    ending: checked in at most 25 times the CPU time of a plain pass over its words,
    plus 5 ms (the benchmark, bench/degenerate_long.py, measures 0.4x to 1.9x)."""
    text = (piece * (64_000 // len(piece) + 1))[:64_000] + ending
    check = _fastest(lambda t: is_repetition_loop(t, capped), text)
    assert check <= 25 * _fastest(lambda t: set(t.split()), text) + 0.005


# Loop checks: the fast forms against their definitions, item by item

LOOP_PIECES = ["yes ", "Yes", " given here because its", "<i>", "<b>", "</i>", "na", "mi",
               "—", " ", "\n", ",", "1,200", "3.5", "的", "。", "x", "ab", "| a | b |\n"]
loop_texts = (st.lists(st.sampled_from(LOOP_PIECES), max_size=90).map("".join)
              | st.builds(lambda head, piece, copies, end: head + piece * copies + end,
                          st.text(max_size=40), st.sampled_from(LOOP_PIECES),
                          st.integers(1, 90), st.text(alphabet=" .,)>]\n", max_size=15)))


def near_loop_by_definition(tail: str, short: bool) -> bool:
    """`_near_loop` as its docstring defines it: every cut of up to 15 closing characters,
    every period, the periodic run counted item by item."""
    encoded = tail.encode("utf-8", "surrogatepass")
    if not short and (len(encoded) < 96 or len(zlib.compress(encoded)) > 0.4 * len(encoded)):
        return False
    full_shape, words = _FILLER.sub("\0", tail), _FILLER.findall(tail)
    copies, least, share = (3, 12, 0.5) if short else (4, 48, 0.3)
    for trimmed in range(min(16, len(full_shape) // 2)):
        shape = full_shape[:len(full_shape) - trimmed]
        for period in range(1, min(64, len(shape) // copies) + 1):
            run = _periodic_tail(shape, period)
            if run >= max(copies * period, least, share * len(full_shape)):
                inside = shape[-run:].count("\0")
                after = full_shape[len(shape):].count("\0")
                region = words[len(words) - after - inside:len(words) - after]
                half = len(region) // 2
                return len(region) >= 3 and len(set(region)) <= max(3, len(region) // 4) \
                    and len(set(region[half:]) - set(region[:half])) <= 1
    return False


@settings(max_examples=600)
@given(loop_texts, st.booleans())
def test_near_loops_are_found_as_defined(text: str, short: bool) -> None:
    tail = text.rstrip()[-512:]
    assert _near_loop(tail, short=short) is near_loop_by_definition(tail, short)


@given(st.text(alphabet="ab\0 ", max_size=80) | st.lists(st.sampled_from("xyz"), max_size=80),
       st.integers(1, 90), st.floats(0.5, 120))
def test_a_tail_repeats_as_its_run_counted_item_by_item(items: str | list[str], period: int,
                                                        least: float) -> None:
    assert _tail_repeats(items, period, least) is (_periodic_tail(items, period) >= least)


def test_first_divergence() -> None:
    assert first_divergence(["a", "b"], ["a", "b"]) is None
    assert first_divergence(["a", "b"], ["a", "c"]) == 1
    assert first_divergence(["a"], ["a", "b"]) == 1
    assert first_divergence([], []) is None


def test_near_tie_and_confident_flip() -> None:
    a = tokens(("The", -0.5, {"Ottawa": -0.7}), (" capital", -0.2, {}))
    near = tokens(("Ottawa", -0.5, {"The": -0.6}))
    result = classify_divergence(a, near)
    assert (result.position, result.kind, result.a_token, result.b_token) == (
        0, "near_tie", "The", "Ottawa")
    assert result.gap == pytest.approx(0.2) and result.b_gap == pytest.approx(0.1)
    assert result.unsure == "both"
    # A's token is not in B's top-k: read on A's side, A was unsure all the same
    far = tokens(("Ottawa", -0.5, {"Paris": -0.9}))
    assert (classify_divergence(a, far).kind, classify_divergence(a, far).unsure) == (
        "near_tie", "a")
    unseen = tokens(("Quebec", -0.5, {"The": -0.9}))
    result = classify_divergence(a, unseen)  # B's token below all of A's top-k
    assert result.kind == "unverified" and result.gap is None  # ... which ends 0.2 down
    assert classify_divergence(a, a).kind == "none"
    assert classify_divergence(a, tokens(("The", -0.1, {}))).kind == "ended"


def test_a_token_below_all_of_a_deep_top_k_is_a_sure_a() -> None:
    a = tokens(("The", -0.1, {"It": -2.0, "A": -3.0}))
    result = classify_divergence(a, tokens(("Quebec", -0.5, {"The": -0.6})))
    assert (result.kind, result.gap, result.unsure) == ("confident", None, "b")
    bare = Tokens()  # no top-k on A: nothing to read
    bare.append("The", -0.1, [], [])
    assert classify_divergence(bare, tokens(("Quebec", -0.5, {}))).kind == "unverified"


@pytest.mark.parametrize(("a_gap", "b_gap", "kind", "unsure"), [
    (0.0, 0.0, "near_tie", "both"), (0.25, 0.25, "near_tie", "both"),
    (0.24, 0.01, "near_tie", "both"), (0.26, 0.01, "confident", "b"),
    (0.012, 0.69, "near_tie", "a"), (0.69, 0.012, "confident", "b"),
    (0.48, 0.48, "confident", "neither"), (2.3, 0.4, "confident", "neither"),
], ids=["tie", "at-the-margin", "inside", "a-beyond", "a-unsure-b-sure", "a-sure-b-unsure",
        "0.48-nats", "far"])
def test_the_reference_side_decides_a_near_tie(a_gap: float, b_gap: float, kind: str,
                                               unsure: str) -> None:
    """A near tie is read on A's side (the reference): A unsure is noise a small nudge
    can cause, whatever B's margin; A sure is never one. `unsure` names the sides."""
    assert NEAR_TIE_NATS == 0.25
    a = tokens(("The", -0.5, {"Ottawa": -0.5 - a_gap}))
    b = tokens(("Ottawa", -0.5, {"The": -0.5 - b_gap}))
    result = classify_divergence(a, b, "The", "Ottawa")
    assert (result.kind, result.unsure) == (kind, unsure)


def test_logprobs_that_do_not_spell_the_answer_leave_the_fork_unverified() -> None:
    """A server whose logprob tokens are not its answer's (here B's text says Sydney,
    its tokens a near tie on A's second choice) gives no near tie: unverified."""
    a = tokens((" The", -0.5, {" Yes": -0.55}), (" capital", -0.1, {}))
    b = tokens((" Yes", -0.5, {" The": -0.55}), (",", -0.1, {}))
    assert classify_divergence(a, b, " The capital", " Yes,").kind == "near_tie"
    assert classify_divergence(a, b, " The capital", " Sydney.").kind == "unverified"
    assert classify_divergence(a, b, " It is Canberra", " Yes,").kind == "unverified"
    assert classify_divergence(a, b, " The capital", " Sydney.").unsure == ""
    # the tokens after the fork need not spell anything: only those up to it are read
    assert classify_divergence(a, b, " The", " Yes").kind == "near_tie"
    # bytes split across tokens spell the text by their bytes
    split = tokens(("\ufffd", -0.1, {"x": -0.2}), ("\ufffd", -0.1, {}), raw=[[195], [169]])
    other = tokens(("x", -0.1, {"\ufffd": -0.2}))
    assert classify_divergence(split, other, "é", "x").kind == "near_tie"
    assert classify_divergence(split, other, "a", "x").kind == "unverified"


@given(st.lists(st.sampled_from(["a", "b", " c", "dd"]), min_size=1, max_size=6),
       st.lists(st.sampled_from(["a", "b", " c", "dd"]), min_size=1, max_size=6),
       st.text(max_size=12), st.floats(0, 3), st.floats(0, 3))
def test_a_label_comes_from_tokens_that_spell_the_answers(
        a_pieces: list[str], b_pieces: list[str], b_text: str, a_gap: float,
        b_gap: float) -> None:
    def side(pieces: list[str], other: list[str], gap: float) -> Tokens:
        steps = []
        for n, piece in enumerate(pieces):
            rival = other[n] if n < len(other) and other[n] != piece else "zz"
            steps.append((piece, -0.5, {rival: -0.5 - gap}))
        return tokens(*steps)

    a, b = side(a_pieces, b_pieces, a_gap), side(b_pieces, a_pieces, b_gap)
    unread = classify_divergence(a, b)
    found = classify_divergence(a, b, "".join(a_pieces), b_text)
    fork = unread.position
    if fork is None or unread.kind == "ended":
        assert found.kind == unread.kind
    elif b_text.startswith("".join(b_pieces[:fork + 1])):
        assert found.kind == unread.kind and found.kind in ("near_tie", "confident")
        assert (found.kind == "near_tie") == (a_gap <= NEAR_TIE_NATS)
    else:
        assert found.kind == "unverified" and found.unsure == ""


def test_split_bytes_are_compared_by_bytes() -> None:
    a = tokens(("\ufffd", -0.1, {}), ("\ufffd", -0.1, {}), raw=[[195], [169]])
    b = tokens(("\ufffd", -0.1, {}), ("\ufffd", -0.1, {}), raw=[[195], [168]])
    assert classify_divergence(a, b).position == 1
    assert classify_divergence(a, a).position is None


def test_drift_over_the_common_prefix() -> None:
    a = tokens(("x", -0.1, {"y": -3.0}), ("y", -0.2, {"z": -2.0}), ("z", -0.3, {}))
    b = tokens(("x", -0.15, {"y": -2.9}), ("y", -0.4, {"z": -1.9}), ("q", -0.3, {}))
    measured = drift(a, b, divergence=2)
    assert measured.top1_agreement == pytest.approx(2 / 3)
    assert measured.logprob_mean_abs_diff == pytest.approx((0.05 + 0.2) / 2)
    assert measured.logprob_max_abs_diff == pytest.approx(0.2)
    assert measured.kl_topk_mean is not None and measured.kl_topk_mean > 0
    identical = drift(a, a, divergence=None)
    assert identical.kl_topk_max == 0.0 and identical.top1_agreement == 1.0


def test_kl_lower_bound_by_hand() -> None:
    p, q = [0.7, 0.2], [0.5, 0.3]
    expected = (0.7 * math.log(0.7 / 0.5) + 0.2 * math.log(0.2 / 0.3)
                + 0.1 * math.log(0.1 / 0.2))
    value = kl_lower_bound(["a", "b"], [math.log(v) for v in p], ["a", "b"],
                           [math.log(v) for v in q])
    assert value == pytest.approx(expected)


@given(st.lists(st.floats(min_value=0.01, max_value=10), min_size=30, max_size=30),
       st.lists(st.floats(min_value=0.01, max_value=10), min_size=30, max_size=30),
       st.integers(min_value=1, max_value=30))
def test_kl_from_top_k_never_exceeds_the_full_kl(p_raw: list[float], q_raw: list[float],
                                                  k: int) -> None:
    p = np.array(p_raw) / sum(p_raw)
    q = np.array(q_raw) / sum(q_raw)
    full = float(np.sum(p * np.log(p / q)))
    names = [f"t{i}" for i in range(30)]

    def top(dist: np.ndarray) -> tuple[list[str], list[float]]:
        order = np.argsort(-dist)[:k]
        return [names[i] for i in order], [float(np.log(dist[i])) for i in order]

    bound = kl_lower_bound(*top(p), *top(q))
    assert bound <= full + 1e-9


def test_flip_and_labels() -> None:
    def results(*statuses: str) -> list[CheckResult]:
        return [CheckResult(check, status, "" if status == "pass" else "why")
                for check, status in zip(("contains", "number"), statuses, strict=False)]

    def flip(a: list[CheckResult], b: list[CheckResult]) -> tuple[str, str]:
        columns = expectation_columns(a, b)
        return columns.flip, columns.flipped_checks

    assert flip(results("pass"), results("fail")) == ("regression", "contains")
    assert flip(results("fail"), results("pass")) == ("improvement", "")
    assert flip(results("pass"), results("pass")) == ("", "")
    # per check: one check regressing is a flip even when another one improved
    assert flip(results("pass", "fail"), results("fail", "pass")) == ("regression", "contains")
    assert flip(results("skipped"), results("fail")) == ("", "")
    assert suggested_label(True, 1.0, False, "", "", "", "", "") == "identical"
    assert suggested_label(False, 0.95, False, "regression", "pass", "fail", "", "") == \
        "factual_flip"
    assert suggested_label(False, 0.95, False, "", "pass", "pass", "", "") == "wording"
    assert suggested_label(False, 0.95, True, "", "", "", "", "") == ""
    assert suggested_label(False, 0.5, False, "", "", "", "", "") == ""
    assert suggested_label(False, 0.95, False, "", "", "", "", "repetition") == ""


def test_signature_rounds_to_significant_digits() -> None:
    base = tokens(("a", -0.123456789012345, {"b": -2.5})).to_json()  # as stored inline
    close = tokens(("a", -0.123456789012399, {"b": -2.5})).to_json()
    far = tokens(("a", -0.1234567, {"b": -2.5})).to_json()
    here = Blobs(Path("."))
    assert signature(base, here, 12) == signature(close, here, 12)
    assert signature(base, here, 14) != signature(close, here, 14)
    assert signature(base, here, 12) != signature(far, here, 12)
    assert signature(None, here, 12) is None


def test_round_significant() -> None:
    values = np.array([-0.000123456789, -123456.789, 0.0, float("nan")])
    rounded = round_significant(values, 3)
    assert rounded[0] == pytest.approx(-0.000123)
    assert rounded[1] == pytest.approx(-123000.0)
    assert rounded[2] == 0.0 and math.isnan(rounded[3])


def test_repeated_token_strings_stay_distinct_outcomes() -> None:
    # Two vocabulary entries can print the same (e.g. U+FFFD for different bytes).
    a_tokens, a_logprobs = ["\ufffd", "\ufffd", "x"], [-0.5, -1.5, -2.5]
    assert kl_lower_bound(a_tokens, a_logprobs, a_tokens, a_logprobs) == 0.0
    a = tokens(("x", -0.1, {}))
    a.top_text[0] += ["y", "y"]
    a.top_logprob[0] += [-1.0, -3.0]
    b = tokens(("y", -0.2, {"x": -0.3}))
    assert classify_divergence(a, b).gap == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("It costs 1,200 dollars, not 1,100.", [1200.0, 1100.0]),
        ("Pick 3,4 or 5", [3.0, 4.0, 5.0]),
        ("well-known -5 and +2.5e3", [-5.0, 2500.0]),
        ("9.11 vs 9.9.", [9.11, 9.9]),
        ("no digits - here", []),
        # a sign only before a digit, a comma only between digits; never inf
        ("id 123e4567-e89b-12d3-a456-426614174000", [89.0, -12.0, 3.0, 456.0, -426614174000.0]),
        ("hash a-e5 b+e3, /v1/x-E7", [5.0, 3.0, 1.0, 7.0]),
        ("1e999 is no float, 2e3 is", [2000.0]),
        ("-.5 and 1,,2 and 3,e4", [-0.5, 1.0, 2.0, 3.0, 4.0]),
    ],
)
def test_numbers_in(text: str, numbers: list[float]) -> None:
    from quantcheck.store.records.run_records import numbers_in

    assert numbers_in(text) == numbers


PIECES = st.text(st.characters(codec="utf-8") | st.sampled_from(["\ud83d", "\ude00", "é"]),
                 max_size=3)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(PIECES, st.none() | st.lists(st.integers(0, 255), max_size=4)),
                max_size=8), st.booleans(), st.data())
def test_tokens_spell_an_answer_exactly_when_their_bytes_start_it(
        pieces: list[tuple[str, list[int] | None]], with_bytes: bool,
        data: st.DataObject) -> None:
    """The first tokens spell the answer when their bytes (the server's where they
    differ, else each token's text in UTF-8, lone surrogates kept) start the answer's,
    however the texts split characters."""
    texts = [text for text, _ in pieces]
    raws = [raw for _, raw in pieces] if with_bytes else None
    tokens = Tokens(text=texts, logprob=[0.0] * len(texts), top_text=[[]] * len(texts),
                    top_logprob=[[]] * len(texts), raw_bytes=raws)
    count = data.draw(st.integers(0, len(texts)))
    whole = "".join(texts)
    answer = data.draw(st.sampled_from([whole, whole[:-1], whole + "x", "x" + whole]))
    own = [bytes(raw) if raws and raw is not None else text.encode("utf-8", "surrogatepass")
           for text, raw in zip(texts, raws or [None] * len(texts), strict=True)]
    assert spells(tokens, answer, count) == answer.encode("utf-8", "surrogatepass").startswith(
        b"".join(own[:count]))


LOGPROB = st.sampled_from([0.0, -0.0, -1e-9, -0.5, -2.0, -30.0, -1e6, -9999.0]) \
    | st.floats(-50, 0)
POSITION = st.tuples(st.none() | LOGPROB, st.lists(st.tuples(st.sampled_from(
    [" a", " b", " a", "", "\0"]), LOGPROB), max_size=4))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(POSITION, max_size=6), st.none() | st.integers(0, 7))
def test_an_answer_read_once_for_both_sides_has_the_drift_of_two_copies(
        positions: list[tuple[float | None, list[tuple[str, float]]]],
        divergence: int | None) -> None:
    """A pair whose two answers are one stored blob reads one Tokens for both sides: its
    drift is what two equal copies give, value for value (no drift, or none to measure)."""
    answer = Tokens(text=[top[0][0] if top else "x" for _, top in positions],
                    logprob=[chosen for chosen, _ in positions],
                    top_text=[[t for t, _ in top] for _, top in positions],
                    top_logprob=[sorted((v for _, v in top), reverse=True)
                                 for _, top in positions])
    once, twice = drift(answer, answer, divergence), drift(answer, copy.deepcopy(answer),
                                                          divergence)
    assert repr(once) == repr(twice)
