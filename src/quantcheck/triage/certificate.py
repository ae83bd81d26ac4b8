"""The determinism certificate's numbers: every answer held to its baseline, counted
per prompt, factor and level, the factor that explains the variation, and the
statement with its statistics.

A comparison is one answer against its baseline: a prompt's first answer alone (for
`repeat`, `stream`, `batch`), or its first answer after a shared prefix with the
cache off (for `prefix` and `cache` at that length). Two answers match when their
tokens, chosen logprobs and top-k alternatives are equal bit for bit (the text, when
the server sent no logprobs). With no mismatch in N comparisons, the mismatch rate is
below 3/N at 95% confidence (the rule of three); the exact binomial bound
1 - 0.05^(1/N) is given beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..store.certificate_records import (
    FACTORS,
    Answer,
    Certificate,
    ControlResult,
    Example,
    Factor,
    FactorResult,
    LevelResult,
    Plan,
    PromptResult,
)

EXAMPLES_PER_FACTOR = 3
EXAMPLE_CHARS = 300


@dataclass(frozen=True)
class Comparison:
    """One answer held to its baseline."""

    prompt_id: str
    factor: Factor
    level: str
    same: bool
    first_divergence: int | None
    max_logprob_delta: float | None
    key: object  # the answer's identity: equal keys, equal answers
    baseline_key: object
    baseline_text: str
    text: str


def answer_key(answer: Answer) -> object:
    if not answer.tokens:
        return answer.text
    return (tuple(answer.tokens), tuple(answer.logprobs),
            tuple(tuple(map(tuple, top)) for top in answer.top))


def compare_answers(baseline: Answer, other: Answer
                    ) -> tuple[bool, int | None, float | None]:
    """(equal, first token index that differs, largest |delta logprob| where the
    tokens are the same so far)."""
    same = answer_key(baseline) == answer_key(other)
    if not baseline.tokens or not other.tokens:
        first = None if baseline.text == other.text else 0
        return same, first, None
    first = next((n for n, (a, b) in enumerate(zip(baseline.tokens, other.tokens,
                                                   strict=False)) if a != b), None)
    if first is None and len(baseline.tokens) != len(other.tokens):
        first = min(len(baseline.tokens), len(other.tokens))
    end = first if first is not None else len(baseline.tokens)
    deltas = [abs(a - b) for a, b in zip(baseline.logprobs[:end], other.logprobs[:end],
                                         strict=False) if a is not None and b is not None]
    return same, first, max(deltas, default=None)


def comparisons(answers: Iterable[Answer]) -> list[Comparison]:
    """Every answered probe that is not a baseline, against its baseline."""
    listed = [a for a in answers if a.error is None]
    alone = {a.prompt_id: a for a in listed if a.factor == "repeat" and a.baseline}
    ladder = {(a.prompt_id, a.level): a for a in listed if a.factor == "prefix" and a.baseline}
    found = []
    for answer in listed:
        if answer.baseline:
            continue
        baseline = ladder.get((answer.prompt_id, answer.level)) \
            if answer.factor in ("prefix", "cache") else alone.get(answer.prompt_id)
        if baseline is None:
            continue
        same, first, delta = compare_answers(baseline, answer)
        found.append(Comparison(answer.prompt_id, answer.factor, answer.level, same, first,
                                delta, answer_key(answer), answer_key(baseline),
                                baseline.text, answer.text))
    return found


def _min(values: Iterable[int | None]) -> int | None:
    return min((v for v in values if v is not None), default=None)


def _max(values: Iterable[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


def _unique(found: Sequence[Comparison]) -> int:
    return len({c.key for c in found} | {c.baseline_key for c in found})


def level_results(found: Sequence[Comparison], levels: Sequence[str]) -> list[LevelResult]:
    results = []
    for level in levels:
        at = [c for c in found if c.level == level]
        by_prompt = _by_prompt(at)
        uniques = [_unique(group) for group in by_prompt.values()]
        results.append(LevelResult(
            level=level, prompts=len(by_prompt),
            prompts_varying=sum(any(not c.same for c in g) for g in by_prompt.values()),
            comparisons=len(at), mismatches=sum(not c.same for c in at),
            most_unique_outputs=max(uniques, default=0),
            mean_unique_outputs=round(sum(uniques) / len(uniques), 4) if uniques else 0.0,
            first_divergence=_min(c.first_divergence for c in at if not c.same),
            max_logprob_delta=_max(c.max_logprob_delta for c in at)))
    return results


def _by_prompt(found: Iterable[Comparison]) -> dict[str, list[Comparison]]:
    grouped: dict[str, list[Comparison]] = {}
    for comparison in found:
        grouped.setdefault(comparison.prompt_id, []).append(comparison)
    return grouped


def prompt_results(found: Sequence[Comparison]) -> list[PromptResult]:
    results = []
    for factor in FACTORS:
        for prompt_id, group in _by_prompt(c for c in found if c.factor == factor).items():
            results.append(PromptResult(
                prompt_id=prompt_id, factor=factor,
                unique_outputs=max(_unique([c for c in group if c.level == level])
                                   for level in dict.fromkeys(c.level for c in group)),
                comparisons=len(group), mismatches=sum(not c.same for c in group),
                varying_levels=list(dict.fromkeys(c.level for c in group if not c.same)),
                first_divergence=_min(c.first_divergence for c in group if not c.same),
                max_logprob_delta=_max(c.max_logprob_delta for c in group)))
    return results


def _level_number(level: str) -> int:
    return int(level.split("=", 1)[1]) if "=" in level else 0


def explain_factor(factor: Factor, levels: Sequence[LevelResult],
                   prefix_levels: Sequence[LevelResult] = ()) -> str:
    """What a factor's levels say, in one phrase."""
    varying = [r.level for r in levels if r.mismatches]
    if not varying:
        return "no variation" if any(r.comparisons for r in levels) else "not tested"
    if factor == "repeat":
        return "varies with no batch factor: identical requests sent one at a time differ"
    if factor == "stream":
        return "streamed and whole answers differ"
    numbers = [_level_number(level) for level in varying]
    tested = [_level_number(r.level) for r in levels if r.comparisons]
    from_all = all(n in numbers for n in tested if n >= min(numbers))
    if factor == "batch":
        if from_all:
            return f"varies only when batch size >= {min(numbers)}"
        return "varies at batch sizes " + ", ".join(map(str, numbers))
    if factor == "prefix":
        return "varies after a shared prefix of " + ", ".join(map(str, numbers)) + \
            " words with the prefix cache off"
    cache_off_varies = any(r.mismatches for r in prefix_levels)
    at = f">= {min(numbers)}" if from_all else ", ".join(map(str, numbers))
    if cache_off_varies:
        return f"varies with the prefix cache on (prefix {at} words), and with it off"
    return f"varies only when a shared prefix is cached (prefix {at} words)"


def explain(factors: Sequence[FactorResult]) -> str:
    """The factor that explains the variation: alone-repeats first (nothing else can
    be told apart from them), then every factor that varies."""
    by_name = {f.factor: f for f in factors}
    repeat = by_name.get("repeat")
    if repeat is not None and repeat.mismatches:
        return repeat.explanation
    said = [f.explanation for f in factors if f.mismatches]
    return "; ".join(said) if said else "no variation"


def rule_of_three(n: int) -> tuple[float, float]:
    """The 95% upper bounds of a rate seen 0 times in n trials: 3/n, and the exact
    1 - 0.05^(1/n)."""
    return min(1.0, 3.0 / n), 1.0 - 0.05 ** (1.0 / n)


def statement(mismatches: int, total: int, failed: int, batch_count: int,
              explanation: str, prompts_varying: int, prompts: int) -> str:
    if failed:
        return f"not certified: {failed} requests failed (rerun; every request must answer)"
    if total == 0:
        return "not certified: no comparison could be made"
    if mismatches:
        return (f"{mismatches} mismatches in {total} comparisons: {explanation} "
                f"({prompts_varying} of {prompts} prompts vary)")
    bound, exact = rule_of_three(total)
    return (f"0 mismatches in {total} comparisons over {batch_count} batch sizes: the "
            f"mismatch rate is below 3/{total} = {bound:.2g} at 95% confidence (rule of "
            f"three; the exact binomial bound is {exact:.2g})")


def _examples(found: Sequence[Comparison]) -> list[Example]:
    examples: list[Example] = []
    for factor in FACTORS:
        seen: set[tuple[str, str]] = set()
        for c in found:
            if c.factor != factor or c.same or (c.prompt_id, c.level) in seen:
                continue
            seen.add((c.prompt_id, c.level))
            examples.append(Example(prompt_id=c.prompt_id, factor=c.factor, level=c.level,
                                    first_divergence=c.first_divergence,
                                    baseline=c.baseline_text[:EXAMPLE_CHARS],
                                    other=c.text[:EXAMPLE_CHARS],
                                    max_logprob_delta=c.max_logprob_delta))
            if len(seen) == EXAMPLES_PER_FACTOR:
                break
    return examples


def _levels_of(plan: Plan, factor: Factor) -> list[str]:
    if factor == "repeat":
        return ["alone"]
    if factor == "stream":
        return ["streamed"]
    if factor == "batch":
        return [f"batch={size}" for size in plan.batch_sizes]
    return [f"prefix={length}" for length in plan.prefix_lengths]


def certify(answers: Sequence[Answer], plan: Plan, failed: int, endpoint: str, model: str,
            runtime: str | None, cache_control: str) -> Certificate:
    """The certificate of one endpoint's answers to `plan`."""
    found = comparisons(answers)
    factors: list[FactorResult] = []
    by_factor: dict[Factor, list[LevelResult]] = {}
    for factor in FACTORS:
        of = [c for c in found if c.factor == factor]
        levels = level_results(of, _levels_of(plan, factor))
        by_factor[factor] = levels
        grouped = _by_prompt(of)
        varying = sum(any(not c.same for c in g) for g in grouped.values())
        factors.append(FactorResult(
            factor=factor, comparisons=len(of), mismatches=sum(not c.same for c in of),
            prompts=len(grouped), prompts_varying=varying,
            share_varying=round(varying / len(grouped), 4) if grouped else 0.0,
            levels=levels, explanation=explain_factor(factor, levels,
                                                      by_factor.get("prefix", []))))
    mismatches = sum(not c.same for c in found)
    prompts = len({a.prompt_id for a in answers})
    varying = len({c.prompt_id for c in found if not c.same})
    explanation = explain(factors)
    bound, exact = rule_of_three(len(found)) if found and not mismatches and not failed \
        else (None, None)
    return Certificate(
        endpoint=endpoint, model=model, runtime=runtime,
        certified=not mismatches and not failed and bool(found),
        statement=statement(mismatches, len(found), failed, len(plan.batch_sizes),
                            explanation, varying, prompts),
        comparisons=len(found), mismatches=mismatches, failed_requests=failed,
        prompts=prompts, prompts_varying=varying, rate_bound=bound, rate_bound_exact=exact,
        explanation=explanation, batch_sizes=plan.batch_sizes,
        prefix_lengths=plan.prefix_lengths, trials=plan.trials, seed=plan.seed,
        requests=plan.requests, cache_control=cache_control, factors=factors,
        prompt_results=prompt_results(found), examples=_examples(found))


def control_result(control: Certificate) -> ControlResult:
    """The control run, as the certificate reports it: detected when it varied."""
    return ControlResult(endpoint=control.endpoint, detected=control.mismatches > 0,
                         statement=control.statement, mismatches=control.mismatches,
                         comparisons=control.comparisons)


NO_CONTROL = ("no control was run: this certificate does not show that the test would "
              "have seen variation on this setup (give --control URL of a configuration "
              "expected to vary)")


def control_note(control: ControlResult | None) -> str:
    if control is None:
        return NO_CONTROL
    if control.detected:
        return (f"the control {control.endpoint} was detected as varying "
                f"({control.mismatches} mismatches in {control.comparisons} comparisons)")
    return (f"the control {control.endpoint} was NOT detected as varying: this test could "
            "not tell a varying configuration on this setup, so a pass says little")
