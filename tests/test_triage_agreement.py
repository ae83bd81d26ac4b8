"""triage/agreement.py: the judge against human reviews, a hand-computed confusion table
and Cohen's kappa."""

from __future__ import annotations

import pytest

from quantcheck.store.folders.reviews import ReviewVerdict
from quantcheck.triage.agreement import agreement, cohens_kappa


def test_kappa_matches_the_hand_computed_value() -> None:
    # judge rows, human columns: 20 observations, 15 on the diagonal
    confusion = {"wording": {"wording": 8, "factual_flip": 2},
                 "factual_flip": {"wording": 3, "factual_flip": 7}}
    # p_o = 15/20 = 0.75; p_e = (10/20)(11/20) + (10/20)(9/20) = 0.5; kappa = 0.25/0.5
    assert cohens_kappa(confusion) == pytest.approx(0.5)
    assert cohens_kappa({"wording": {"wording": 4}}) is None  # chance agreement is certain
    assert cohens_kappa({}) is None


def test_agreement_counts_every_reviewers_label_of_a_judged_pair() -> None:
    judged = {"p1": "wording", "p2": "factual_flip", "p3": "minor", "p4": "wording"}
    verdicts = {"p1": [ReviewVerdict(label="wording", reviewer="dana"),
                       ReviewVerdict(label="minor", reviewer="lee")],
                "p2": [ReviewVerdict(label="factual_flip", reviewer="dana")],
                "p3": [ReviewVerdict(label="factual_flip", reviewer="lee")],
                "p9": [ReviewVerdict(label="wording", reviewer="dana")]}  # not judged
    found = agreement(judged, verdicts, ["identical", "wording", "minor", "factual_flip"])
    assert found is not None
    assert (found.observations, found.pairs, found.agreed) == (4, 3, 2)
    assert found.reviewers == ["dana", "lee"]
    assert found.labels == ["wording", "minor", "factual_flip"]
    assert found.confusion["wording"] == {"wording": 1, "minor": 1, "factual_flip": 0}
    assert found.confusion["minor"]["factual_flip"] == 1
    # p_o = 2/4; judge shares 2/4, 1/4, 1/4; human 1/4, 1/4, 2/4: p_e = 5/16
    assert found.kappa == pytest.approx((0.5 - 5 / 16) / (1 - 5 / 16), abs=1e-6)
    assert agreement(judged, {}, []) is None
