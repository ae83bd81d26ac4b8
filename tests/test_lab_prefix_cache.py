"""lab/prefix_cache.py: the lab's prefix cache reads a shared start in whole blocks, one
token short of the prompt at most, and nothing once emptied."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from quantcheck.lab.prefix_cache import KEPT_PROMPTS, PrefixCache


def test_a_shared_start_is_read_in_whole_blocks() -> None:
    cache = PrefixCache(block=16)
    cache.write(list(range(40)))
    prompt = list(range(17)) + [99, 100]
    assert cache.shared(prompt) == 17 and cache.read(prompt) == 16
    assert cache.read(list(range(15)) + [99]) == 0
    assert cache.read(list(range(40))) == 32  # its own prompt: one token is computed
    cache.empty()
    assert cache.read(prompt) == 0 and cache.shared(prompt) == 0


def test_token_by_token_and_the_oldest_evicted() -> None:
    cache = PrefixCache()
    cache.write([1, 2, 3])
    assert cache.read([1, 2, 9]) == 2
    for n in range(KEPT_PROMPTS):
        cache.write([100 + n])
    assert cache.read([1, 2, 9]) == 0


@given(st.lists(st.lists(st.integers(0, 3), max_size=12), max_size=5),
       st.lists(st.integers(0, 3), max_size=12), st.integers(1, 5))
def test_what_is_read_is_shared_whole_blocks_short_of_the_prompt(
        cached: list[list[int]], prompt: list[int], block: int) -> None:
    cache = PrefixCache(block)
    for ids in cached:
        cache.write(ids)
    read = cache.read(prompt)
    assert read % block == 0 and read <= cache.shared(prompt)
    assert read <= max(len(prompt) - 1, 0)
    assert any(ids[:read] == prompt[:read] for ids in cached) or read == 0
