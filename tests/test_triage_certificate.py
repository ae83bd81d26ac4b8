"""The certificate's numbers: what a match meant (bit for bit, or the texts alone),
levels not tested left out, and a certificate with any levels untested read back."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from quantcheck.store.records.certificate_records import Answer, LevelResult, Round
from quantcheck.triage.certificate import (
    certify,
    compared,
    comparisons,
    explain_factor,
)
from quantcheck.triage.certify_plan import make_plan


def answer(tokens: list[str], logprobs: list[float | None] | None = None,
           top: list[list[tuple[str, float]]] | None = None, factor: str = "batch",
           level: str = "batch=2", baseline: bool = False, text: str | None = None) -> Answer:
    said = [-1.0] * len(tokens) if logprobs is None else logprobs
    return Answer(prompt_id="p", factor=factor, level=level, trial=0,  # type: ignore[arg-type]
                  baseline=baseline, text="".join(tokens) if text is None else text,
                  tokens=tokens, logprobs=list(said), top=top or [])


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


def varying(*levels: tuple[str, int]) -> list[LevelResult]:
    return [LevelResult(level=name, prompts=2, prompts_varying=min(mismatches, 2),
                        comparisons=4, mismatches=mismatches, most_unique_outputs=2,
                        mean_unique_outputs=1.5) for name, mismatches in levels]


def test_each_cache_factor_explains_its_variation_by_its_levels() -> None:
    assert explain_factor("warm", varying(("cold", 0), ("warm", 2))) == (
        "varies only when a request is served warm, from its own cached prompt")
    assert explain_factor("warm", varying(("cold", 1), ("warm", 2))).startswith(
        "cold requests differ from each other")
    assert explain_factor("block", varying(("block=15", 0), ("block=16", 2),
                                           ("block=17", 0))) == (
        "varies when a cached prefix of 16 tokens is read (not at 15, 17)")
    assert explain_factor("cobatch", varying(("prefix=1", 0), ("prefix=511", 1),
                                             ("prefix=2048", 1))) == (
        "varies when a sibling writing the shared prefix into the cache is sent at once "
        "(prefix >= 511 words)")
    assert explain_factor("cobatch", varying(("prefix=511", 1)),
                          varying(("prefix=511", 1))).endswith(
        ", and with the prefix cache off")
    assert explain_factor("order", varying(("reordered", 1))).startswith(
        "varies with the requests' order")
    assert explain_factor("order", varying(("reordered", 0))) == "no variation"


def test_rounds_of_a_plan_name_their_levels_in_order() -> None:
    plan = make_plan(["p", "q"], 2, 8, 0, 8192, 16)
    assert plan.levels("batch") == ["batch=2", "batch=4", "batch=8"]
    assert plan.levels("cache") == ["prefix=1", "prefix=511", "prefix=2048", "prefix=4097"]
    assert plan.levels("repeat") == ["alone"]
    assert isinstance(plan.rounds[0], Round)


levels = st.sampled_from(["prefix=1", "prefix=511", "prefix=2048", "batch=2", "alone", "seeded",
                          "cold", "warm", "block=16", "reordered"])
factors = st.sampled_from(["repeat", "stream", "batch", "prefix", "cache", "seed", "warm",
                           "block", "cobatch", "order"])


@given(st.dictionaries(st.tuples(factors, levels), st.text(max_size=30), max_size=6))
def test_a_certificate_with_any_levels_untested_reads_back_as_written(
        untested: dict[tuple[str, str], str]) -> None:
    import tempfile
    from pathlib import Path

    from quantcheck.store.records.certificate_records import read_certificate

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
