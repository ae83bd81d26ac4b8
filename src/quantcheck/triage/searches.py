"""Every bounded regular-expression search of one comparison (an `expect.regex`, a
schema's `pattern` and `patternProperties`, a log signature's pattern), within one
budget.

A pattern is searched with the `regex` module, which reads Python's `re` syntax and,
unlike `re`, can be stopped. One search may take PATTERN_SECONDS; all the searches of
one comparison may take RUN_SECONDS together (counted in each process: with `--jobs N`,
N processes each spend at most that). A search that is stopped says why
(`SearchSkipped`), and its check is reported skipped with that reason, never failed:
nothing was learnt about the answer. A pattern stopped once is not searched again: its
later checks are skipped at once, saying so. Once the budget is spent every later
search is skipped, naming the slowest pattern. An ordinary pattern takes microseconds.
Measured on 24 prompts sharing a pattern that backtracks without end (a loaded 2-core
machine): compare took 23.2 s of CPU when each answer's search ran to its second, and
1.9 s once the stopped pattern was set aside.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import regex

PATTERN_SECONDS = 1.0  # one search (microseconds, unless the pattern backtracks)
RUN_SECONDS = 60.0  # every search of one comparison
REWRITE = "it backtracks without end: rewrite it, e.g. (a+)+ as a+"


class SearchSkipped(Exception):
    """A search not made or not finished: the reason its check is skipped."""


@dataclass
class Searches:
    """The searches of one comparison: the time they took and the patterns stopped."""

    budget: float = RUN_SECONDS
    spent: float = 0.0
    stopped: dict[tuple[str, int], str] = field(default_factory=dict)
    took: dict[str, float] = field(default_factory=dict)  # each pattern's seconds
    _compiled: dict[tuple[str, int], Any] = field(default_factory=dict)

    def found(self, pattern: str, text: str, flags: int = 0, where: str = "") -> bool:
        """Whether `pattern` is found in `text`; SearchSkipped when the pattern cannot
        be searched or was stopped before, the budget is spent, or this search is
        stopped (`where`: what the text is, " on an answer", for the reason)."""
        key = (pattern, flags)
        if key in self.stopped:
            raise SearchSkipped(f"{self.stopped[key]}; not searched again")
        left = self.budget - self.spent
        if left <= 0:
            raise SearchSkipped(self._spent(pattern))
        compiled = self._compile(pattern, flags)
        seconds = min(PATTERN_SECONDS, left)
        started = time.perf_counter()
        try:
            return compiled.search(text, timeout=seconds) is not None
        except TimeoutError:
            if seconds < PATTERN_SECONDS:  # the budget's rest ran out, not the pattern's own
                self.spent = self.budget
                raise SearchSkipped(self._spent(pattern)) from None
            self.stopped[key] = f"/{pattern}/ was stopped after {seconds:g} s{where} ({REWRITE})"
            raise SearchSkipped(self.stopped[key]) from None
        finally:
            took = time.perf_counter() - started
            self.spent += took
            self.took[pattern] = self.took.get(pattern, 0.0) + took

    def _spent(self, pattern: str) -> str:
        slowest = max(self.took, key=self.took.__getitem__) if self.took else pattern
        return (f"/{pattern}/ not searched: the {self.budget:g} s all pattern searches may "
                f"take together are spent (/{slowest}/ took "
                f"{self.took.get(slowest, 0.0):.1f} s of them: rewrite it)")

    def _compile(self, pattern: str, flags: int) -> Any:
        key = (pattern, flags)
        if key not in self._compiled:
            try:
                self._compiled[key] = regex.compile(pattern, flags)
            except (regex.error, ValueError, OverflowError, RecursionError) as exc:
                self.stopped[key] = f"/{pattern}/ cannot be searched: {exc}"
                raise SearchSkipped(self.stopped[key]) from None
        return self._compiled[key]


_current = Searches()


def current() -> Searches:
    """The searches of the comparison under way (`begin` starts one)."""
    return _current


def begin() -> Searches:
    """A new comparison's searches: the budget whole, no pattern stopped. Worker
    processes forked after this inherit it, each counting its own."""
    global _current
    _current = Searches()
    return _current
