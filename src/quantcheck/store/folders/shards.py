"""Sharded collection: a deterministic slice of a prompt set per machine or day
(`--shard I/N` on collect and run); `merging.py` joins the shard runs.

A prompt belongs to shard I of N when blake2b(its id) mod N is I - 1: the same on
every machine, and a prompt keeps its shard when others are added to the set.
"""

from __future__ import annotations

import hashlib
import re

from ...errors import QuantcheckError
from ..records.run_records import Prompt

SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class ShardError(QuantcheckError):
    """Shards that cannot be merged, or a malformed --shard."""


def parse_shard(text: str) -> tuple[int, int]:
    """"2/4" -> (2, 4)."""
    match = SHARD.match(text)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise ShardError(f"--shard {text!r}: expected I/N with 1 <= I <= N, e.g. 2/4")
    return int(match.group(1)), int(match.group(2))


def in_shard(prompt_id: str, index: int, count: int) -> bool:
    digest = hashlib.blake2b(prompt_id.encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "little") % count == index - 1


def shard_prompts(prompts: list[Prompt], shard: str) -> list[Prompt]:
    index, count = parse_shard(shard)
    return [prompt for prompt in prompts if in_shard(prompt.id, index, count)]
