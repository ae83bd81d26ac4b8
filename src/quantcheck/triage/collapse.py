"""Cross-prompt collapse: distinct prompts whose answers on B are the same while A's
answers to them differ.

A broken candidate can answer every prompt alike (`!` to the length limit from a 4-bit
KV cache, one sentence whatever was asked) with HTTP 200 and no error. Each pair alone
reads as a flip or a loop; together they are one signal about the side: silent
breakage, which the gate fails on by default (`collapsed_on_b`).

Two answers are the same when their first COLLAPSE_PREFIX_CHARS characters are, after
case is folded and every run of whitespace made one space ("near identical": the same
opening 512 characters, whatever follows). Short answers are legitimately alike
("Paris" to two questions, "Yes", a number), so an answer shorter than
MIN_COLLAPSE_CHARS folded characters collapses with nothing. A prompt is collapsed on
B when another prompt's B answer is the same as its own and the two prompts' A answers
are not (compared the same way, whatever their length). A against itself never
collapses: the same answers give the same keys on both sides.

Each answer is reduced to a 64-bit key (blake2b), so a side's keys cost 8 bytes a
prompt and the grouping is linear in the number of prompts.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

from ..store.records.pair_records import PairRow
from .signals import with_calls

COLLAPSE_PREFIX_CHARS = 512
MIN_COLLAPSE_CHARS = 64
SHOWN_GROUPS = 10  # groups the summary lists, each with its first SHOWN_GROUPS ids

Id = TypeVar("Id", bound=Hashable)


def fold(text: str) -> str:
    """Case folded, whitespace runs made one space, the ends stripped."""
    return " ".join(text.casefold().split())


def collapse_key(text: str | None, minimum: int = MIN_COLLAPSE_CHARS) -> int | None:
    """The answer's key: a signed 64-bit digest of its folded first 512 characters; None
    for an answer shorter than `minimum` folded characters (or none at all)."""
    folded = fold(text or "")
    if text is None or len(folded) < minimum:
        return None
    digest = hashlib.blake2b(folded[:COLLAPSE_PREFIX_CHARS].encode("utf-8", "surrogatepass"),
                             digest_size=8)
    return int.from_bytes(digest.digest(), "little", signed=True)


def row_keys(row: PairRow) -> tuple[int, int, bool, bool]:
    """A compared pair's keys of A's and B's content (text, then tool calls) whatever its
    length, and whether each is long enough to collapse (MIN_COLLAPSE_CHARS)."""
    a_content = with_calls(row.a_text or "", row.a_tool_calls)
    b_content = with_calls(row.b_text or "", row.b_tool_calls)
    a_key, b_key = collapse_key(a_content, 0), collapse_key(b_content, 0)
    assert a_key is not None and b_key is not None  # a text always has a key at minimum 0
    return a_key, b_key, len(fold(a_content)) >= MIN_COLLAPSE_CHARS, \
        len(fold(b_content)) >= MIN_COLLAPSE_CHARS


def collapsed_on_b(rows: Iterable[PairRow]) -> list[list[str]]:
    """The groups of compared prompts collapsed on B (collapsed_groups), by prompt id:
    what the gate's `collapsed_on_b` and the summary count."""
    entries = []
    for row in rows:
        if row.compared:
            a_key, b_key, _, b_long = row_keys(row)
            entries.append((row.prompt_id, a_key, b_key if b_long else None))
    return collapsed_groups(entries)


def collapsed_groups(entries: Iterable[tuple[Id, int | None, int | None]]) -> list[list[Id]]:
    """The groups of prompts collapsed on B, largest first (ties in the order given):
    each entry is a prompt, A's key of its answer (any length) and B's (None: too short
    to collapse). A group is the prompts sharing one B key, kept when their A keys are
    not all the same. With the sides' keys swapped: collapsed on A."""
    by_b: dict[int, list[tuple[Id, int | None]]] = defaultdict(list)
    for prompt, a_key, b_key in entries:
        if b_key is not None:
            by_b[b_key].append((prompt, a_key))
    groups = [[prompt for prompt, _ in members] for members in by_b.values()
              if len(members) > 1 and len({a_key for _, a_key in members}) > 1]
    return sorted(groups, key=len, reverse=True)


def collapsed_prompts(groups: Sequence[Sequence[Id]]) -> list[Id]:
    """Every prompt of the groups, group by group."""
    return [prompt for group in groups for prompt in group]
