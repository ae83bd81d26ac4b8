"""What differed between two answers: the token, the logprob where the tokens agree,
the alternatives, the length, or the text without logprobs; said exactly when they
differ."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from quantcheck.store.records.certificate_records import Answer
from quantcheck.triage.certificate import answer_key
from quantcheck.triage.certificate_difference import difference


def answer(tokens: list[str], logprobs: list[float | None] | None = None,
           top: list[list[tuple[str, float]]] | None = None, text: str | None = None) -> Answer:
    said = [-1.0] * len(tokens) if logprobs is None else logprobs
    return Answer(prompt_id="p", factor="batch", level="batch=2", trial=0,
                  text="".join(tokens) if text is None else text, tokens=tokens,
                  logprobs=list(said), top=top or [])


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
