"""Cross-prompt collapse: distinct prompts B answers alike while A answers them
differently, counted in the summary, named in the terminal and the sheet, and failed
by the gate; quiet on A against itself and on short answers that are alike."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from quantcheck import CollectSettings, collect, compare_runs
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.store.inputs.haystack import haystack
from quantcheck.store.records.pair_records import PairRow
from quantcheck.triage.collapse import (
    MIN_COLLAPSE_CHARS,
    collapse_key,
    collapsed_groups,
    collapsed_on_b,
    collapsed_prompts,
    fold,
)

from .conftest import Serve, WritePrompts, invoke

LONG = "The harbour master counted forty barrels of salt before the long rain came in."


def row(prompt_id: str, a_text: str, b_text: str) -> PairRow:
    return PairRow(prompt_id=prompt_id, a_text=a_text, b_text=b_text)


def test_answers_alike_are_the_same_first_512_characters_folded() -> None:
    assert collapse_key(LONG) == collapse_key("  " + LONG.upper().replace(" ", " \n "))
    assert collapse_key(LONG) != collapse_key(LONG.replace("forty", "fifty"))
    long_a, long_b = "x" * 512 + " then one thing", "x" * 512 + " then another"
    assert collapse_key(long_a) == collapse_key(long_b)  # near identical: the same opening
    assert collapse_key("Paris") is None and collapse_key(None) is None
    assert collapse_key("Paris", minimum=0) == collapse_key(" paris ", minimum=0)
    assert len(fold(LONG)) >= MIN_COLLAPSE_CHARS


def test_prompts_b_answers_alike_while_a_differs_are_a_group() -> None:
    rows = [row("p1", "One long answer about the harbour and its barrels of salt.", LONG),
            row("p2", "Another long answer, about the mill and the winter wool.", LONG),
            row("p3", LONG, LONG + " And more."),
            row("same-on-a", LONG, "x" * 70), row("same-on-a-too", LONG, "x" * 70),
            row("paris-1", "Paris.", "Paris"), row("paris-2", "Lyon", "Paris")]
    assert collapsed_on_b(rows) == [["p1", "p2"]]
    assert collapsed_prompts(collapsed_on_b(rows)) == ["p1", "p2"]


@given(st.lists(st.tuples(st.text(max_size=3), st.text(max_size=200)), max_size=30))
def test_a_against_itself_never_collapses(answers: list[tuple[str, str]]) -> None:
    rows = [row(f"{n}-{name}", text, text) for n, (name, text) in enumerate(answers)]
    assert collapsed_on_b(rows) == []


@given(st.lists(st.tuples(st.text(max_size=300), st.text(max_size=300)), max_size=30))
def test_any_answers_group_without_an_exception(answers: list[tuple[str, str]]) -> None:
    groups = collapsed_on_b([row(str(n), a, b) for n, (a, b) in enumerate(answers)])
    assert all(len(group) > 1 for group in groups)
    assert len(set(collapsed_prompts(groups))) == len(collapsed_prompts(groups))


def test_grouping_is_linear_in_the_prompts() -> None:
    """The keys are compared a bounded number of times per prompt: 100,000 prompts in
    4 groups cost at most 11x the key comparisons 10,000 take (a pairwise pass costs
    100x). Counted, not timed: a timing would fail on a busy machine."""
    def comparisons(count: int) -> int:
        tally = [0]

        class Key(int):
            def __eq__(self, other: object) -> bool:
                tally[0] += 1
                return int(self) == other

            def __hash__(self) -> int:
                tally[0] += 1
                return int.__hash__(self)

        entries = [(n, Key(n), Key(n % 4)) for n in range(count)]
        assert len(collapsed_groups(entries)) == 4
        return tally[0]

    assert 0 < comparisons(100_000) <= 11 * comparisons(10_000)


def _long_answers(count: int) -> dict[str, str]:
    return {f"topic {n}?": " " + haystack(200, 0.5, f"Topic {n} is settled.", seed=n)
            for n in range(count)}


PROMPTS = "prompts:\n" + "".join(
    f'  - {{id: topic-{n}, prompt: "Tell me about topic {n}?", max_tokens: 400}}\n'
    for n in range(4)) + '  - {id: short, prompt: "Q: capital of France", max_tokens: 8}\n'


def _collect(url: str, prompts: Path, out: Path) -> Path:
    collect([prompts], out, CollectSettings(endpoint=url, label=out.name, top_logprobs=2,
                                            preflight=False))
    return out


def test_a_collapsed_b_is_counted_named_and_failed(serve: Serve, write_prompts: WritePrompts,
                                                   tmp_path: Path) -> None:
    """B answers every prompt with one sentence (the lab's collapse fault) while A's
    long answers differ: the four prompts collapse on B; the summary counts them, the
    terminal and the sheet name them, and the gate fails on them by default."""
    prompts = write_prompts(PROMPTS)
    model = ScriptedModel(_long_answers(4))
    a = _collect(serve(model).url, prompts, tmp_path / "a")
    b = _collect(serve(model, faults=Faults(collapse=True)).url, prompts, tmp_path / "b")
    out = tmp_path / "report"
    printed = invoke("compare", a, b, "--out", out)  # gated with the default policy
    assert printed.exit_code == 1, printed.output
    collapse = json.loads((out / "summary.json").read_text())["counts"]["collapse"]
    # "short" is cut at 8 tokens on B: too short to collapse with anything
    assert collapse["new_on_b"] == 4 and collapse["new_on_a"] == 0
    group, = collapse["groups"]
    assert group["prompts"] == 4 and group["ids"] == [f"topic-{n}" for n in range(4)]
    assert group["answer"].startswith(" I am unable to answer this one")
    assert "4 prompts collapsed on B" in printed.output
    assert ('warning: B gives 4 distinct prompts the same answer while A answers them '
            'differently (collapse): 4 prompts (topic-0, topic-1, topic-2, topic-3) answer '
            '"I am unable to answer this one') in printed.output
    sheet = (out / "index.html").read_text()
    assert 'id="collapse-warning"' in sheet and "<b>4</b><span>collapsed on B</span>" in sheet
    gate = invoke("gate", out)
    assert gate.exit_code == 1 and "4 prompts B answers like another prompt" in gate.output
    rule, = [r for r in json.loads((out / "gate.json").read_text())["rules"]
             if r["name"] == "collapsed_on_b"]
    assert rule["count"] == 4 and rule["prompts"] == [f"topic-{n}" for n in range(4)]
    junit = (out / "junit.xml").read_text()
    assert junit.count('type="collapsed_on_b"') == 4
    assert "B answers this prompt as it answers another prompt" in junit
    allowed = invoke("gate", out, "--max-collapsed-on-b", "4")
    assert allowed.exit_code == 0, allowed.output


def test_a_against_itself_and_short_answers_alike_stay_quiet(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """A against a second collection of itself: no collapse. Short answers that are the
    same ("Paris" to two questions, on B only) are no collapse either."""
    prompts = write_prompts(PROMPTS + '  - {id: short-2, prompt: "Q: where is the Louvre",'
                            ' max_tokens: 8}\n')
    a_model = ScriptedModel({**_long_answers(4), "France": " Paris", "Louvre": " In Paris."})
    b_model = ScriptedModel({**_long_answers(4), "France": " Paris", "Louvre": " Paris"})
    a = _collect(serve(a_model).url, prompts, tmp_path / "a")
    again = _collect(serve(a_model).url, prompts, tmp_path / "again")
    b = _collect(serve(b_model).url, prompts, tmp_path / "b")
    for other, name in ((again, "self"), (b, "short")):
        summary = compare_runs(a, other, tmp_path / name)
        assert summary.counts.collapse is not None
        assert (summary.counts.collapse.new_on_b, summary.counts.collapse.new_on_a) == (0, 0)
        assert "collapsed on B" not in (tmp_path / name / "index.html").read_text()
        invoke("gate", tmp_path / name, "--max-factual-flips", "9")
        rule, = [r for r in json.loads((tmp_path / name / "gate.json").read_text())["rules"]
                 if r["name"] == "collapsed_on_b"]
        assert rule["count"] == 0 and rule["passed"]
