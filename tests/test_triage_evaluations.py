"""Two imported runs: refused in one line naming the first difference, or paired; the
figures per task and their average as model cards give it. (The same refusals from
real lm-eval logs, end to end: tests/test_pipeline_evals.py.)"""

from __future__ import annotations

import msgspec
import pytest

from quantcheck.errors import EvalLogError
from quantcheck.store.evals.eval_records import EvalSource, EvalTask
from quantcheck.store.folders.run_dir import Manifest
from quantcheck.store.records.report_records import Stats
from quantcheck.triage.evaluations import (
    add_averages,
    check_pairing,
    evaluation_of,
    pairing_refusal,
)
from quantcheck.triage.stats import pass_rate_of


def task(**changes: object) -> EvalTask:
    base = EvalTask(name="gsm8k", version="3.0", few_shot=5, filter="strict-match",
                    metric="exact_match,strict-match", limit=None, samples=40,
                    reported={"exact_match,strict-match": 0.5},
                    settings={"generation_kwargs": '{"max_gen_toks":256}'})
    return msgspec.structs.replace(base, **changes)


def manifest(*tasks: EvalTask, harness: str = "lm-evaluation-harness",
             hashes: dict[str, str] | None = None) -> Manifest:
    return Manifest(evaluation=EvalSource(harness=harness, tasks=list(tasks or [task()])),
                    prompt_hashes=hashes or {"gsm8k/0": "a", "gsm8k/1": "b"})


@pytest.mark.parametrize(("b", "said"), [
    (manifest(task(few_shot=8)), "task gsm8k: another few-shot count (A 5, B 8)"),
    (manifest(task(limit=10.0)), "task gsm8k: another sample limit (A none, B 10)"),
    (manifest(task(version="2.0")), "task gsm8k: another task version (A 3.0, B 2.0)"),
    (manifest(task(filter="flexible-extract", metric="exact_match,flexible-extract")),
     "task gsm8k: another filter (A strict-match, B flexible-extract)"),
    (manifest(task(name="arc")), "another set of tasks: gsm8k only in A, arc only in B"),
    (manifest(task(settings={"generation_kwargs": '{"max_gen_toks":32}'})),
     'task gsm8k: another generation_kwargs (A {"max_gen_toks":256}, B {"max_gen_toks":32})'),
    (manifest(harness="inspect_ai"), "A is a log of lm-evaluation-harness, B of inspect_ai"),
    (manifest(hashes={"gsm8k/0": "a", "gsm8k/1": "c"}),
     "sample gsm8k/1 holds another prompt in B than in A (1 of 2 shared samples differ): "
     "another document order"),
    (Manifest(), "A was imported from an eval log and B was not"),
], ids=["few-shot", "limit", "version", "filter", "task", "setting", "harness", "order",
        "collected"])
def test_what_does_not_pair_is_refused_naming_it(b: Manifest, said: str) -> None:
    refusal = pairing_refusal(manifest(), b)
    assert refusal is not None and refusal.startswith(said), refusal
    with pytest.raises(EvalLogError, match="^A and B do not pair: ") as raised:
        check_pairing(manifest(), b)
    assert "\n" not in str(raised.value)


def test_samples_one_log_lacks_pair_on_the_rest() -> None:
    """A sample missing on B (it failed in the eval, the run stopped): not a refusal;
    compare leaves it out and counts it (`only_a`)."""
    assert pairing_refusal(manifest(), manifest(hashes={"gsm8k/0": "a"})) is None
    assert pairing_refusal(Manifest(), Manifest()) is None


def test_the_figures_per_task_and_the_model_card_average() -> None:
    a = manifest(task(), task(name="arc", metric="acc,none", reported={"acc,none": 0.8}))
    b = manifest(task(reported={"exact_match,strict-match": 0.25}),
                 task(name="arc", metric="acc,none", reported={"acc,none": 0.6}))
    evaluation = evaluation_of(a, b)
    assert evaluation is not None
    assert [(t.task, t.a_reported, t.b_reported) for t in evaluation.tasks] == [
        ("gsm8k", 0.5, 0.25), ("arc", 0.8, 0.6)]
    gsm8k, arc = pass_rate_of(1, 1, 0, 2), pass_rate_of(3, 1, 0, 1)  # A 2/4, B 1/4; 4/5, 3/5
    assert gsm8k is not None and arc is not None
    stats = Stats(pass_rate=None, drift={}, categories={"gsm8k": gsm8k, "arc": arc})
    add_averages(evaluation, stats)
    assert evaluation.a_average == pytest.approx((0.5 + 0.8) / 2)
    assert evaluation.b_average == pytest.approx((0.25 + 0.6) / 2)
    assert evaluation.recovery_percent == pytest.approx(100 * 0.425 / 0.65)
    assert evaluation_of(a, Manifest()) is None
