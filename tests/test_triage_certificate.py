"""The certificate's numbers: what differed between two answers, what a match meant
(bit for bit, or the texts alone), levels not tested left out, and a control judged
only where it can show something."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from quantcheck.store.certificate_records import Answer, Certificate, Round, Untested
from quantcheck.triage.certificate import (
    answer_key,
    certify,
    compared,
    comparisons,
    control_note,
    control_result,
    difference,
    untested_control,
)
from quantcheck.triage.certify_plan import make_plan


def answer(tokens: list[str], logprobs: list[float | None] | None = None,
           top: list[list[tuple[str, float]]] | None = None, factor: str = "batch",
           level: str = "batch=2", baseline: bool = False, text: str | None = None) -> Answer:
    said = [-1.0] * len(tokens) if logprobs is None else logprobs
    return Answer(prompt_id="p", factor=factor, level=level, trial=0,  # type: ignore[arg-type]
                  baseline=baseline, text="".join(tokens) if text is None else text,
                  tokens=tokens, logprobs=list(said), top=top or [])


def test_what_differed_is_said_with_its_place() -> None:
    token = difference(answer([" a", " b"]), answer([" a", " c"]))
    assert (token.said, token.position, token.baseline_token, token.other_token) == (
        "token 1: ' b' against ' c'", 1, " b", " c")
    moved = difference(answer([" a", " b"], [-0.5, -0.25]),
                       answer([" a", " b"], [-0.5, -0.2500001]))
    assert moved.said == "logprob of token 1 ' b': -0.25 against -0.2500001"
    assert (moved.position, moved.baseline_logprob, moved.other_logprob) == (
        1, -0.25, -0.2500001)
    longer = difference(answer([" a"]), answer([" a", " b"]))
    assert longer.said == "the other answer goes on at token 1 with ' b'"
    alternatives = difference(answer([" a"], top=[[(" a", -1.0), (" x", -2.0)]]),
                              answer([" a"], top=[[(" a", -1.0), (" y", -2.0)]]))
    assert alternatives.said == ("the alternatives at token 0 ' a': ' a' -1.0, ' x' -2.0 "
                                 "against ' a' -1.0, ' y' -2.0")
    text = difference(answer([], text="Paris is big"), answer([" Paris"], text="Paris was big"))
    assert text.said == "text at character 6: 'is big' against 'was big' (texts compared: no " \
        "logprobs)"


tokens = st.lists(st.sampled_from([" a", " b"]), max_size=4)
numbers = st.lists(st.sampled_from([-1.0, -0.5]), min_size=4, max_size=4)


@given(tokens, tokens, numbers, numbers)
def test_something_is_said_to_differ_exactly_when_the_answers_differ(
        first: list[str], second: list[str], first_logprobs: list[float],
        second_logprobs: list[float]) -> None:
    a = answer(first, list(first_logprobs[:len(first)]))
    b = answer(second, list(second_logprobs[:len(second)]))
    said = difference(a, b)
    if not first or not second:  # a side without logprobs: the texts
        assert (said.said.startswith("nothing differs")) == (a.text == b.text)
    else:
        assert (said.said == "nothing differs") == (answer_key(a) == answer_key(b))
    assert said.position is None or said.position >= 0


def test_a_factor_compared_on_texts_says_so() -> None:
    baseline = answer([" a"], factor="repeat", level="alone", baseline=True)
    with_logprobs = answer([" a"])
    texts_only = answer([], text=" a")
    found = comparisons([baseline, with_logprobs, texts_only])
    assert [c.by_text for c in found] == [False, True]
    assert compared(found[:1]) == "tokens, logprobs and top-k alternatives, bit for bit"
    assert compared(found[1:]) == "text only (the answers carried no logprobs)"
    assert compared(found) == ("text only in 1 of 2 comparisons (answers without logprobs); "
                               "tokens, logprobs and top-k alternatives, bit for bit in the "
                               "others")


def test_answers_of_a_level_not_tested_are_not_compared() -> None:
    plan = make_plan(["p"], 2, 2, 0, 8192, 16)
    ladder = [answer([" a"], factor="prefix", level="prefix=2048", baseline=True),
              answer([" b"], factor="prefix", level="prefix=2048"),
              answer([" a"], factor="repeat", level="alone", baseline=True),
              answer([" a"], factor="repeat", level="alone")]
    refused = {("prefix", "prefix=2048"): "the server refused it"}
    certificate = certify(ladder, plan, 0, "http://x/v1", "m", None, "", "", refused)
    assert certificate.mismatches == 0 and certificate.comparisons == 1
    prefix = next(f for f in certificate.factors if f.factor == "prefix")
    said = {level.level: level.not_tested for level in prefix.levels}
    assert said["prefix=2048"] == "the server refused it"
    assert said["prefix=1"] == "no answer could be compared"


def certificate_of(comparisons: int, mismatches: int, failed: int) -> Certificate:
    plan = make_plan(["p"], 2, 2, 0, 8192, 16)
    made = certify([], plan, failed, "http://control/v1", "m", None, "")
    return msgspec.structs.replace(made, comparisons=comparisons, mismatches=mismatches,
                                   not_tested=[Untested(factor="cache", levels=["prefix=1"],
                                                        reason="off")])


def test_a_control_is_judged_only_where_it_can_show_something() -> None:
    nothing = control_result(certificate_of(0, 0, 40))
    assert not nothing.tested and not nothing.detected
    assert nothing.statement.startswith("it made no comparison (not certified: 40 requests")
    note = control_note(nothing)
    assert note.startswith("control not tested: http://control/v1: it made no comparison")
    assert "NOT detected" not in note and "was detected" not in note
    unanswered = control_result(certificate_of(10, 0, 3))
    assert not unanswered.tested and unanswered.statement.startswith("3 of its requests failed")
    varied = control_result(certificate_of(10, 2, 3))  # a mismatch shows variation is seen
    assert varied.tested and varied.detected
    assert control_note(varied).endswith("; the control's levels not tested: cached shared "
                                         "prefixes of 1 word (off)")
    clean = control_result(certificate_of(10, 0, 0))
    assert clean.tested and not clean.detected and "NOT detected" in control_note(clean)
    stopped = untested_control("http://control/v1", "its run stopped: HTTP 400")
    assert control_note(stopped).startswith("control not tested: http://control/v1: its run "
                                            "stopped: HTTP 400")


def test_rounds_of_a_plan_name_their_levels_in_order() -> None:
    plan = make_plan(["p", "q"], 2, 8, 0, 8192, 16)
    assert plan.levels("batch") == ["batch=2", "batch=4", "batch=8"]
    assert plan.levels("cache") == ["prefix=1", "prefix=511", "prefix=2048", "prefix=4097"]
    assert plan.levels("repeat") == ["alone"]
    assert isinstance(plan.rounds[0], Round)


levels = st.sampled_from(["prefix=1", "prefix=511", "prefix=2048", "batch=2", "alone", "seeded"])
factors = st.sampled_from(["repeat", "stream", "batch", "prefix", "cache", "seed"])


@given(st.dictionaries(st.tuples(factors, levels), st.text(max_size=30), max_size=6))
def test_a_certificate_with_any_levels_untested_reads_back_as_written(
        untested: dict[tuple[str, str], str]) -> None:
    import tempfile
    from pathlib import Path

    from quantcheck.store.certificate_records import read_certificate

    plan = make_plan(["p"], 2, 2, 0, 8192, 16)
    made = certify([answer([" a"], factor="repeat", level="alone", baseline=True),
                    answer([" a"], factor="repeat", level="alone")], plan, 0, "http://x/v1",
                   "m", None, "", "", untested)  # type: ignore[arg-type]
    assert made.verdict == ("not certified" if not made.certified else
                            "certified in part" if made.not_tested else "certified")
    assert all(u.reason for u in made.not_tested)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "certificate.json").write_bytes(msgspec.json.encode(made))
        assert read_certificate(Path(folder)) == made
