"""The determinism certificate's numbers: every answer held to its baseline, counted
per prompt, factor and level, the factor that explains the variation, and the
statement with its statistics.

A comparison is one answer against its baseline (certificate_coverage.HELD_TO): a
prompt's first answer alone (for `repeat`, `stream`, `batch`), its first answer after a
shared prefix with the cache off (for `prefix` and `cache` at that length), or its
first sampled answer with the plan's seed (for `seed`). Two answers match when their
tokens, chosen logprobs and top-k alternatives are equal bit for bit, or, when either
carries no logprobs, their texts (a comparison on text only, counted and said per
factor: never a bit-for-bit claim). With no mismatch in N comparisons, the mismatch
rate is below 3/N at 95% confidence (the rule of three); the exact binomial bound
1 - 0.05^(1/N) is given beside it.

A level planned and not tested (its reason from the sender) makes no comparison; the
certificate names it, and certifies only what was tested ("certified in part"). An
example says what differed (triage/certificate_difference.py).

The control's result: triage/certificate_control.py.

MoE routing (answers collected with --routed-experts): a comparison's routing differs
when any token both answers generated alike (up to and including the first that
differs, chosen from identical context) was routed to other experts. Per factor:
routing that differs where the answers differ puts the variation's start in the
gating; routing identical there puts it after routing (the experts' reduction or
finalize), as `compare` says for A against B.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..store.records.certificate_records import (
    FACTORS,
    Answer,
    Certificate,
    Example,
    Factor,
    FactorResult,
    LevelResult,
    Plan,
    PromptResult,
)
from .certificate_coverage import (
    HELD_TO,
    not_tested_phrase,
    scope,
    untested_levels,
    verdict,
    why_untested,
)
from .certificate_difference import Difference, difference

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
    routing_differs: bool | None = None  # None: routing not on both answers
    routing_token: int | None = None  # the first token routed elsewhere
    by_text: bool = False  # either answer carried no logprobs: the texts were compared
    difference: Difference | None = None  # what differed, when they differ


def answer_key(answer: Answer) -> object:
    if not answer.tokens:
        return answer.text
    return (tuple(answer.tokens), tuple(answer.logprobs),
            tuple(tuple(map(tuple, top)) for top in answer.top))


def compare_answers(baseline: Answer, other: Answer
                    ) -> tuple[bool, int | None, float | None]:
    """(equal, first token index that differs, largest |delta logprob| where the
    tokens are the same so far)."""
    if not baseline.tokens or not other.tokens:  # texts, where one carries no logprobs
        same = baseline.text == other.text  # (the stream of an engine that streams none)
        return same, None if same else 0, None
    same = answer_key(baseline) == answer_key(other)
    first = next((n for n, (a, b) in enumerate(zip(baseline.tokens, other.tokens,
                                                   strict=False)) if a != b), None)
    if first is None and len(baseline.tokens) != len(other.tokens):
        first = min(len(baseline.tokens), len(other.tokens))
    end = first if first is not None else len(baseline.tokens)
    deltas = [abs(a - b) for a, b in zip(baseline.logprobs[:end], other.logprobs[:end],
                                         strict=False) if a is not None and b is not None]
    return same, first, max(deltas, default=None)


def baseline_key(answer: Answer) -> tuple[str, str]:
    """The baseline an answer is held to: (its factor's baseline factor, the level)."""
    held_to, per_level = HELD_TO.get(answer.factor, (answer.factor, False))
    return held_to, answer.level if per_level else ""


def comparisons(answers: Iterable[Answer],
                untested: Mapping[tuple[Factor, str], str] | None = None) -> list[Comparison]:
    """Every answered probe that is not a baseline, against its baseline; none of a
    level not tested (`untested`: why, by factor and level)."""
    listed = [a for a in answers if a.error is None
              and why_untested(a.factor, a.level, untested or {}) is None]
    baselines = {(a.prompt_id, *baseline_key(a)): a for a in listed if a.baseline}
    found = []
    for answer in listed:
        baseline = baselines.get((answer.prompt_id, *baseline_key(answer)))
        if answer.baseline or baseline is None:
            continue
        same, first, delta = compare_answers(baseline, answer)
        by_text = not (answer.tokens and baseline.tokens)
        keys = (answer.text, baseline.text) if by_text else (answer_key(answer),
                                                             answer_key(baseline))
        found.append(Comparison(answer.prompt_id, answer.factor, answer.level, same, first,
                                delta, *keys,
                                baseline.text, answer.text,
                                *routing_difference(baseline, answer, first), by_text,
                                None if same else difference(baseline, answer)))
    return found


def routing_difference(baseline: Answer, other: Answer, first_divergence: int | None
                       ) -> tuple[bool | None, int | None]:
    """(whether the routing differs on the tokens both chose alike, the first token that
    was routed elsewhere); (None, None) unless both answers carry routing."""
    if not baseline.routing or not other.routing:
        return None, None
    shared = min(len(baseline.routing), len(other.routing))
    if first_divergence is not None:
        shared = min(shared, first_divergence + 1)
    token = next((n for n in range(shared) if baseline.routing[n] != other.routing[n]), None)
    return token is not None, token


def routing_sentence(found: Sequence[Comparison]) -> str:
    """Where a factor's variation begins, from its comparisons' routing ("" when none
    carried routing on both sides)."""
    routed = [c for c in found if c.routing_differs is not None]
    if not routed:
        return ""
    varying = [c for c in routed if not c.same]
    gating = [c for c in varying if c.routing_differs]
    first = _min(c.routing_token for c in gating)
    if varying and len(gating) == len(varying):
        return (f"variation begins in the gating: routing differs in {len(gating)} of "
                f"{len(varying)} varying comparisons (first at token {first})")
    if varying and not gating:
        return (f"variation begins after routing: routing identical in {len(varying)} of "
                f"{len(varying)} varying comparisons (the experts' reduction or finalize)")
    if varying:
        return (f"routing differs in {len(gating)} of {len(varying)} varying comparisons "
                f"(first at token {first}): variation begins in the gating there, after "
                "routing in the others")
    moved = [c for c in routed if c.routing_differs]
    if moved:
        return (f"routing differs in {len(moved)} of {len(routed)} comparisons although "
                "the answers match: the gating is not deterministic")
    return f"routing identical in {len(routed)} of {len(routed)} comparisons"


def _min(values: Iterable[int | None]) -> int | None:
    return min((v for v in values if v is not None), default=None)


def _max(values: Iterable[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


def _unique(found: Sequence[Comparison]) -> int:
    return len({c.key for c in found} | {c.baseline_key for c in found})


def level_results(found: Sequence[Comparison], levels: Sequence[str],
                  why_not: Mapping[str, str | None] | None = None) -> list[LevelResult]:
    """Each planned level's figures; `why_not[level]`: why it was not tested (a level
    without a comparison and without a reason: no answer could be compared)."""
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
            max_logprob_delta=_max(c.max_logprob_delta for c in at),
            not_tested=(why_not or {}).get(level) or ("" if at else
                                                      "no answer could be compared")))
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


# What a varying factor with levels of no number says
FIXED_PHRASES: dict[Factor, str] = {
    "repeat": "varies with no batch factor: identical requests sent one at a time differ",
    "stream": "streamed and whole answers differ",
    "seed": "seed not honoured: sampled answers with the same seed differ",
    "order": "varies with the requests' order: a cached prefix written by another "
             "request gives another answer",
}


def explain_factor(factor: Factor, levels: Sequence[LevelResult],
                   prefix_levels: Sequence[LevelResult] = ()) -> str:
    """What a factor's levels say, in one phrase."""
    varying = [r.level for r in levels if r.mismatches]
    if not varying:
        return "no variation" if any(r.comparisons for r in levels) else "not tested"
    if factor in FIXED_PHRASES:
        return FIXED_PHRASES[factor]
    if factor == "warm":
        if "cold" in varying:
            return "cold requests differ from each other: cold and warm cannot be told apart"
        return "varies only when a request is served warm, from its own cached prompt"
    numbers = [_level_number(level) for level in varying]
    tested = [_level_number(r.level) for r in levels if r.comparisons]
    from_all = all(n in numbers for n in tested if n >= min(numbers))
    at = f">= {min(numbers)}" if from_all else ", ".join(map(str, numbers))
    if factor == "batch":
        if from_all:
            return f"varies only when batch size >= {min(numbers)}"
        return "varies at batch sizes " + ", ".join(map(str, numbers))
    if factor == "prefix":
        return "varies after a shared prefix of " + ", ".join(map(str, numbers)) + \
            " words with the prefix cache off"
    if factor == "block":
        others = [str(n) for n in tested if n not in numbers]
        return (f"varies when a cached prefix of {', '.join(map(str, numbers))} tokens is "
                "read" + (f" (not at {', '.join(others)})" if others else ""))
    cache_off_varies = any(r.mismatches for r in prefix_levels)
    if factor == "cobatch":
        said = (f"varies when a sibling writing the shared prefix into the cache is sent at "
                f"once (prefix {at} words)")
        return said + (", and with the prefix cache off" if cache_off_varies else "")
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
            said = c.difference or Difference("")
            examples.append(Example(prompt_id=c.prompt_id, factor=c.factor, level=c.level,
                                    first_divergence=c.first_divergence,
                                    baseline=c.baseline_text[:EXAMPLE_CHARS],
                                    other=c.text[:EXAMPLE_CHARS],
                                    max_logprob_delta=c.max_logprob_delta,
                                    difference=said.said[:EXAMPLE_CHARS],
                                    position=said.position,
                                    baseline_token=said.baseline_token,
                                    other_token=said.other_token,
                                    baseline_logprob=said.baseline_logprob,
                                    other_logprob=said.other_logprob))
            if len(seen) == EXAMPLES_PER_FACTOR:
                break
    return examples


def compared(found: Sequence[Comparison]) -> str:
    """What a factor's matches mean: bit for bit only where both answers carried
    logprobs; the texts alone where either did not."""
    by_text = sum(c.by_text for c in found)
    exact = "tokens, logprobs and top-k alternatives, bit for bit"
    if not found:
        return ""
    if not by_text:
        return exact
    if by_text == len(found):
        return "text only (the answers carried no logprobs)"
    return (f"text only in {by_text} of {len(found)} comparisons (answers without "
            f"logprobs); {exact} in the others")


def factor_result(factor: Factor, found: Sequence[Comparison], levels: list[LevelResult],
                  prefix_levels: Sequence[LevelResult]) -> FactorResult:
    grouped = _by_prompt(found)
    varying = sum(any(not c.same for c in g) for g in grouped.values())
    return FactorResult(
        factor=factor, comparisons=len(found), mismatches=sum(not c.same for c in found),
        prompts=len(grouped), prompts_varying=varying,
        share_varying=round(varying / len(grouped), 4) if grouped else 0.0,
        levels=levels, explanation=explain_factor(factor, levels, prefix_levels),
        routing_compared=sum(c.routing_differs is not None for c in found),
        routing_differing=sum(bool(c.routing_differs) for c in found),
        routing=routing_sentence(found), compared=compared(found),
        text_only=sum(c.by_text for c in found))


def block_phrase(tokens: int | None, said: str, plan: Plan) -> str:
    """Where the cache block comes from, and the prefixes the `block` factor cut."""
    lengths = ", ".join(map(str, plan.block_lengths))
    if not said or not lengths:
        return said
    edge = " (no block edge: tested at vLLM's default block)" if tokens is not None \
        and tokens <= 1 else ""
    return f"{said}; the block factor's cached prefixes: {lengths} tokens{edge}"


def certify(answers: Sequence[Answer], plan: Plan, failed: int, endpoint: str, model: str,
            runtime: str | None, cache_control: str, seed_control: str = "",
            untested: Mapping[tuple[Factor, str], str] | None = None,
            cache_block: tuple[int | None, str] = (None, "")) -> Certificate:
    """The certificate of one endpoint's answers to `plan`; `untested`: why each level
    not sent (or refused) was not tested; `cache_block`: the block its `block` factor's
    prefixes were cut at, and where that comes from."""
    untested = untested or {}
    found = comparisons(answers, untested)
    factors: list[FactorResult] = []
    by_factor: dict[Factor, list[LevelResult]] = {}
    for factor in FACTORS:
        of = [c for c in found if c.factor == factor]
        planned = plan.levels(factor)
        levels = level_results(of, planned, {level: why_untested(factor, level, untested)
                                             for level in planned})
        by_factor[factor] = levels
        factors.append(factor_result(factor, of, levels, by_factor.get("prefix", [])))
    mismatches = sum(not c.same for c in found)
    prompts = len({a.prompt_id for a in answers})
    varying = len({c.prompt_id for c in found if not c.same})
    explanation = explain(factors)
    certified = not mismatches and not failed and bool(found)
    not_tested = untested_levels(factors)
    bound, exact = rule_of_three(len(found)) if certified else (None, None)
    batch_sizes = sum(not level.not_tested for level in by_factor["batch"])
    said = statement(mismatches, len(found), failed, batch_sizes, explanation, varying,
                     prompts)
    if certified and not_tested:
        said += f"; certified for {scope(factors)} only"
    if not_tested:
        said += f"; NOT TESTED: {not_tested_phrase(not_tested)}"
    return Certificate(
        endpoint=endpoint, model=model, runtime=runtime, certified=certified,
        verdict=verdict(certified, not_tested), scope=scope(factors), not_tested=not_tested,
        statement=said,
        comparisons=len(found), mismatches=mismatches, failed_requests=failed,
        prompts=prompts, prompts_varying=varying, rate_bound=bound, rate_bound_exact=exact,
        explanation=explanation, batch_sizes=plan.batch_sizes,
        prefix_lengths=plan.prefix_lengths, trials=plan.trials, seed=plan.seed,
        requests=plan.requests, planned_requests=plan.requests, cache_control=cache_control,
        cache_block_tokens=cache_block[0], cache_block=block_phrase(*cache_block, plan),
        seed_control=seed_control, factors=factors,
        prompt_results=prompt_results(found), examples=_examples(found))
