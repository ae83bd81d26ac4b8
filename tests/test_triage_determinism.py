"""The first-request pattern of a warm prefix cache over one prompt's repeats, and the
cached prompt tokens a server's usage says (triage/determinism.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck.triage.determinism import cached_prompt_tokens, first_request_cached

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
                    max_leaves=20)


@pytest.mark.parametrize(
    ("outcomes", "cached", "found"),
    [(["x", "y", "y"], [None] * 3, True),  # three repeats show it without usage
     (["x", "y"], [0, 12], True),  # two, when the later read its prompt from the cache
     (["x", "y"], [None, None], False),  # two alone cannot tell it from other variation
     (["x", "y"], [12, 12], False),  # both cached alike: not the cache's doing
     (["x", "y", "z"], [0, 12, 12], False),  # the later repeats disagree too
     (["x", "x", "y"], [0, 12, 12], False),  # the last differs, not the first
     (["x", "x"], [0, 12], False)],  # nothing differs
    ids=["three-repeats", "two-with-usage", "two-without", "both-cached", "later-differ",
         "last-differs", "same"])
def test_the_first_request_pattern_needs_three_repeats_or_the_cache_seen(
        outcomes: list[object], cached: list[int | None], found: bool) -> None:
    assert first_request_cached(outcomes, cached) is found


def test_cached_tokens_are_read_as_openai_and_llama_server_send_them() -> None:
    assert cached_prompt_tokens({"prompt_tokens": 13, "prompt_tokens_details":
                                 {"cached_tokens": 8}}) == 8
    assert cached_prompt_tokens({"prompt_tokens": 13}) is None
    assert cached_prompt_tokens({"prompt_tokens_details": {"cached_tokens": True}}) is None
    assert cached_prompt_tokens({"prompt_tokens_details": {"cached_tokens": -1}}) is None


@given(st.dictionaries(st.text(), JSON) | st.none())
def test_any_usage_reads_to_a_count_or_none(usage: dict[str, object] | None) -> None:
    found = cached_prompt_tokens(usage)
    assert found is None or (type(found) is int and found >= 0)
