"""How far the judge can be trusted on this data: its labels against reviewers' labels,
as a confusion table and Cohen's kappa (agreement beyond what chance would give)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from ..store.folders.reviews import Review, ReviewVerdict
from ..store.records.judge_records import Agreement


def agreement(judged: Mapping[str, str], verdicts: Mapping[str, Sequence[ReviewVerdict]],
              order: Sequence[str]) -> Agreement | None:
    """The judge's label (by prompt id; only pairs it labelled) against every
    reviewer's label of the same pair, each one observation; None without any.
    `order`: the rubric's label ids, the table's order (others follow by name)."""
    pairs: Counter[tuple[str, str]] = Counter()
    reviewers, reviewed = set(), set()
    for prompt_id, judge_label in judged.items():
        for verdict in verdicts.get(prompt_id, ()):
            if judge_label and verdict.label:
                pairs[judge_label, verdict.label] += 1
                reviewers.add(verdict.reviewer)
                reviewed.add(prompt_id)
    if not pairs:
        return None
    seen = {label for pair in pairs for label in pair}
    labels = [label for label in order if label in seen] + sorted(seen - set(order))
    confusion = {j: {h: pairs[j, h] for h in labels} for j in labels}
    agreed = sum(pairs[label, label] for label in labels)
    return Agreement(observations=sum(pairs.values()), pairs=len(reviewed),
                     reviewers=sorted(reviewers), agreed=agreed, labels=labels,
                     confusion=confusion, kappa=cohens_kappa(confusion))


def cohens_kappa(confusion: Mapping[str, Mapping[str, int]]) -> float | None:
    """(p_o - p_e) / (1 - p_e): p_o the share of observations on the diagonal, p_e the
    agreement expected from each rater's label shares alone. None when p_e is 1 (both
    gave one and the same label throughout: agreement that says nothing) or empty."""
    labels = list(confusion)
    total = sum(sum(row.values()) for row in confusion.values())
    if not total:
        return None
    observed = sum(confusion[label].get(label, 0) for label in labels) / total
    expected = sum(sum(confusion[label].values()) / total
                   * sum(confusion[j].get(label, 0) for j in labels) / total
                   for label in labels)
    if expected >= 1.0:
        return None
    return round((observed - expected) / (1.0 - expected), 6)


def review_verdicts(reviews: Mapping[str, Review]) -> dict[str, list[ReviewVerdict]]:
    """Review files (by reviewer) as every labelled verdict by prompt, each naming its
    reviewer: the shape the gate reads reviews in."""
    verdicts: dict[str, list[ReviewVerdict]] = {}
    for name, review in reviews.items():
        for prompt_id, verdict in review.verdicts.items():
            if verdict.label:
                named = ReviewVerdict(label=verdict.label, right_side=verdict.right_side,
                                      reviewer=review.reviewer or name)
                verdicts.setdefault(prompt_id, []).append(named)
    return verdicts


def agreement_sentence(agreement: Agreement | None, labelled: int | None = None) -> str:
    """How often the judge's label was a reviewer's, with Cohen's kappa; without any
    observation, why (`labelled`: the pairs the judge gave a label, when known)."""
    if agreement is None and labelled == 0:
        return "the judge gave no label, so there is no agreement to measure"
    if agreement is None:
        return "no reviewer has labelled a pair the judge labelled yet"
    share = agreement.agreed / agreement.observations
    kappa = "n/a" if agreement.kappa is None else f"{agreement.kappa:.2f}"
    return (f"the judge's label was the reviewer's in {agreement.agreed} of "
            f"{_plural(agreement.observations, 'label')} ({share:.0%}; Cohen's kappa {kappa}) "
            f"on {_plural(agreement.pairs, 'pair')} by {', '.join(agreement.reviewers)}")


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun if n == 1 else noun + 's'}"
