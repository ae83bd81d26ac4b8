"""triage/searches.py: every bounded pattern search of a comparison shares one budget;
a pattern stopped once is never searched again (its later checks are skipped at once,
naming why); once the budget is spent every search is skipped, saying so; a pattern the
engine cannot read is skipped, never a crash."""

from __future__ import annotations

import time

import pytest

from quantcheck.triage.searches import Searches, SearchSkipped

# Each backtracks without end on HOSTILE (the regex module finds (a+)+ quickly itself).
STALLING = [r"^(a|aa)+$", *(rf"^(a|aa)+{n}?$" for n in range(3))]
HOSTILE = "a" * 60 + "b"


def test_a_stopped_pattern_is_not_searched_again() -> None:
    searches = Searches()
    started = time.monotonic()
    with pytest.raises(SearchSkipped, match=r"was stopped after 1 s on an answer \(it "
                                            r"backtracks without end"):
        searches.found(STALLING[0], HOSTILE, where=" on an answer")
    first = time.monotonic() - started
    again = time.monotonic()
    for text in (HOSTILE, "aaaa"):  # even a text it would match at once
        with pytest.raises(SearchSkipped, match="; not searched again$"):
            searches.found(STALLING[0], text)
    assert time.monotonic() - again < 0.05 < first
    assert searches.found(STALLING[0], "aaaa", flags=1 << 1)  # another flag: another search


def test_the_budget_bounds_every_search_of_a_comparison_together() -> None:
    searches = Searches(budget=1.5)
    started = time.monotonic()
    reasons = []
    for pattern in STALLING:
        with pytest.raises(SearchSkipped) as skipped:
            searches.found(pattern, HOSTILE)
        reasons.append(str(skipped.value))
    # 1 s, then the half second left, then nothing (on a loaded machine a stop comes
    # late: the engine looks at the clock now and then)
    assert 1.4 < time.monotonic() - started < 15
    spent = "not searched: the 1.5 s all pattern searches may take together are spent"
    assert "was stopped after 1 s" in reasons[0]
    assert "was stopped after 0." in reasons[1] or spent in reasons[1]  # what was left
    assert all(spent in reason for reason in reasons[2:])
    assert f"(/{STALLING[0]}/ took " in reasons[-1]  # the slowest pattern, named
    with pytest.raises(SearchSkipped, match="are spent"):  # a quick one too, now
        searches.found("a", "a")


def test_an_ordinary_pattern_costs_nothing_of_the_budget() -> None:
    searches = Searches(budget=0.5)
    for _ in range(20_000):
        assert searches.found(r"\bCanberra\b", "The capital is Canberra.", flags=0)
    assert searches.spent < 0.5


def test_a_pattern_the_engine_cannot_read_is_skipped_naming_why() -> None:
    searches = Searches()
    for _ in range(2):
        with pytest.raises(SearchSkipped, match=r"/\[\[/ cannot be searched: "):
            searches.found("[[", "text")
