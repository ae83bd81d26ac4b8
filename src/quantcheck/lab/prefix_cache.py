"""The lab server's prefix cache, as the engines keep theirs: the token ids of the
prompts computed since it was last emptied, reused by a later prompt in whole blocks
(vLLM's blocks, SGLang's pages; a block of 1 token is llama.cpp's token-by-token
reuse). A prompt reads the longest start it shares with one cached, cut down to whole
blocks and to one token short of itself (the last prompt token is always computed).

What it reads is what the lab's cache faults act on (lab/endpoint.py `Faults`): a
corrupted block (`block_corruption`) and a block written by a request computed at the
same time (`cobatch_writer`), and what usage's `cached_tokens` says."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

KEPT_PROMPTS = 256  # the oldest are evicted beyond this, as a full cache evicts


def shared_start(one: Sequence[int], other: Sequence[int]) -> int:
    return next((n for n, (a, b) in enumerate(zip(one, other, strict=False)) if a != b),
                min(len(one), len(other)))


@dataclass
class PrefixCache:
    """Cached prompts' token ids, read in blocks of `block` tokens."""

    block: int = 1
    prompts: list[tuple[int, ...]] = field(default_factory=list)

    def shared(self, ids: Sequence[int]) -> int:
        """The longest start `ids` shares with a cached prompt, in tokens."""
        return max((shared_start(ids, cached) for cached in self.prompts), default=0)

    def read(self, ids: Sequence[int]) -> int:
        """The tokens of `ids` served from the cache: the shared start in whole blocks,
        one token short of the prompt at most."""
        reusable = min(self.shared(ids), max(len(ids) - 1, 0))
        return reusable // self.block * self.block

    def write(self, ids: Sequence[int]) -> None:
        self.prompts.append(tuple(ids))
        del self.prompts[:-KEPT_PROMPTS]

    def empty(self) -> None:
        self.prompts.clear()
