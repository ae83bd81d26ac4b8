"""What a determinism certificate tested and what it did not: each factor's planned
levels, each tested or not tested with its reason, in words ("batch sizes 2, 4, 8";
"shared prefixes of 511, 2048 words with the prefix cache off (a slot holds 1,024
tokens)"), and the verdict that follows from them.

A factor's answers are held to a baseline (`HELD_TO`): a level whose baseline level
was not tested is not tested either, with that reason. A new factor is a line of
`HELD_TO` and of `PHRASES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..store.records.certificate_records import Factor, FactorResult, Untested, Verdict

# The answers a factor's answers are held to: the baselines of that factor, at the same
# level where the flag is set (a prefix's length), else at its one level.
HELD_TO: dict[Factor, tuple[Factor, bool]] = {
    "repeat": ("repeat", False), "stream": ("repeat", False), "batch": ("repeat", False),
    "seed": ("seed", False), "prefix": ("prefix", True), "cache": ("prefix", True),
    "warm": ("warm", False), "block": ("block", True), "cobatch": ("prefix", True),
    "order": ("order", False)}

# How a factor's levels read: the words before the levels' numbers, their unit and the
# words after; a level without a number ("alone") reads as the first words alone.
PHRASES: dict[Factor, tuple[str, str, str]] = {
    "repeat": ("repeats alone", "", ""),
    "stream": ("streamed answers", "", ""),
    "batch": ("batch sizes", "", ""),
    "prefix": ("shared prefixes of", "word", "with the prefix cache off"),
    "cache": ("cached shared prefixes of", "word", ""),
    "warm": ("cold against warm requests (its own prompt cached)", "", ""),
    "block": ("cached prefixes of", "token", "(a cache block and a token either side)"),
    "cobatch": ("shared prefixes of", "word", "sent at once with a sibling writing them"),
    "order": ("requests in other orders after a cached shared prefix", "", ""),
    "seed": ("seeded sampling", "", ""),
}


def why_untested(factor: Factor, level: str, untested: Mapping[tuple[Factor, str], str]
                 ) -> str | None:
    """Why a level is not tested: its own reason, or its baseline level's; None when
    it can be."""
    if (factor, level) in untested:
        return untested[(factor, level)]
    held_to, per_level = HELD_TO.get(factor, (factor, False))
    if held_to == factor:
        return None
    for (other, other_level), reason in untested.items():
        if other == held_to and (other_level == level or not per_level):
            at = " at the same level" if per_level else ""
            return f"its baseline ({other}{at}) was not tested: {reason}"
    return None


def level_value(level: str) -> str:
    """A level's number ("8" of "batch=8"), or "" for a level without one."""
    return level.split("=", 1)[1] if "=" in level else ""


def levels_phrase(factor: Factor, levels: Sequence[str]) -> str:
    lead, unit, tail = PHRASES.get(factor, (factor, "", ""))
    numbers = [value for value in map(level_value, levels) if value]
    if not numbers:
        return lead
    units = f" {unit}{'' if numbers == ['1'] else 's'}" if unit else ""
    return f"{lead} {', '.join(numbers)}{units}" + (f" {tail}" if tail else "")


def untested_levels(factors: Sequence[FactorResult]) -> list[Untested]:
    """The levels not tested, grouped by factor and reason, in the plan's order."""
    grouped: dict[tuple[Factor, str], list[str]] = {}
    for factor in factors:
        for level in factor.levels:
            if level.not_tested:
                grouped.setdefault((factor.factor, level.not_tested), []).append(level.level)
    return [Untested(factor=factor, levels=levels, reason=reason)
            for (factor, reason), levels in grouped.items()]


def scope(factors: Sequence[FactorResult]) -> str:
    """What was tested, factor by factor: "repeats alone, batch sizes 2, 4, 8, ..."."""
    said = [levels_phrase(f.factor, [level.level for level in f.levels if not level.not_tested])
            for f in factors if any(not level.not_tested for level in f.levels)]
    return ", ".join(said) if said else "nothing"


def not_tested_phrase(untested: Sequence[Untested]) -> str:
    """The levels not tested, those of one reason together: "shared prefixes of 511
    words with the prefix cache off and cached shared prefixes of 511 words (a slot
    holds 1,024 tokens)"."""
    by_reason: dict[str, list[str]] = {}
    for u in untested:
        by_reason.setdefault(u.reason, []).append(levels_phrase(u.factor, u.levels))
    return "; ".join(f"{' and '.join(phrases)} ({reason})"
                     for reason, phrases in by_reason.items())


def verdict(certified: bool, untested: Sequence[Untested]) -> Verdict:
    if not certified:
        return "not certified"
    return "certified in part" if untested else "certified"
