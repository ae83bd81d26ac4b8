"""Scan server logs for known failure signatures (a shipped file, plus the user's own).

A `regex: true` pattern is Python's `re` syntax, searched within the bounds of
searches.py (a second a line, a budget for the whole scan): a pattern that backtracks
without end on a line the engine wrote, or patterns slow enough to spend the budget,
are refused (ConfigFileError naming the signature, the log and the line), never a
hang. A log is read as a regular file only (a device such as /dev/zero, a FIFO or a
folder is refused naming it: files.open_regular), a line of at most MAX_LOG_LINE_BYTES
(files.bounded_lines)."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import regex

from ..errors import ConfigFileError, RunFormatError
from ..store.files import UnreadableFile, bounded_lines, open_regular
from ..store.inputs.yamlfile import read_yaml, reject_unknown, require_bools, require_text
from ..store.records.report_records import LogMatch
from .searches import Searches, SearchSkipped

SHIPPED = Path(__file__).parent / "signatures.yaml"
SIGNATURE_KEYS = {"id", "pattern", "regex", "meaning", "action", "reference", "blocking"}
MAX_LOG_LINE_BYTES = 64 << 20  # a server's log line (one quoting a long prompt: a few MB)


@dataclass
class Signature:
    id: str
    pattern: str
    meaning: str
    action: str
    reference: str = ""
    blocking: bool = False
    regex: bool = False

    def compiled(self) -> Any:
        """A regular expression as the `regex` module's (its `search` takes a `timeout`);
        a substring as `re`'s, faster, which cannot backtrack."""
        if not self.regex:
            return re.compile(re.escape(self.pattern))
        re.compile(self.pattern)  # what a signature file may hold: Python's re syntax
        return regex.compile(self.pattern)


def load_signatures(extra: list[Path] | tuple[Path, ...] = ()) -> list[Signature]:
    signatures: list[Signature] = []
    for path in [SHIPPED, *extra]:
        signatures += _load_file(path)
    return signatures


def _load_file(path: Path) -> list[Signature]:
    data = read_yaml(path, "signatures")
    entries = data.get("signatures") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ConfigFileError(f"{path}: field 'signatures': required, a list")
    return [_signature(path, n, entry) for n, entry in enumerate(entries, 1)]


def _signature(path: Path, position: int, entry: object) -> Signature:
    where = f"{path}: signatures[{position}]"
    if not isinstance(entry, dict):
        raise ConfigFileError(f"{where}: each signature is a mapping")
    reject_unknown(where, entry, SIGNATURE_KEYS)
    require_text(where, entry, ["id", "pattern", "meaning", "action"])
    require_bools(where, entry, ["blocking", "regex"])
    cleaned = {k: (v.strip() if isinstance(v, str) else v) for k, v in entry.items()}
    try:
        signature = msgspec.convert(cleaned, Signature)
        signature.compiled()
    except msgspec.ValidationError as exc:
        raise ConfigFileError(f"{where}: {exc}") from None
    except (re.error, regex.error) as exc:
        raise ConfigFileError(f"{where}: field 'pattern': invalid regular expression: "
                              f"{exc}") from None
    return signature


def scan_log(path: Path, signatures: list[Signature], searches: Searches | None = None
             ) -> list[LogMatch]:
    """Every signature found in the log, with its first line and number of occurrences.
    Its regular expressions are searched within `searches`' bounds (a new budget when
    none is given)."""
    searches = searches or Searches()
    literals = {s.id: s.compiled() for s in signatures if not s.regex}
    found: dict[str, LogMatch] = {}
    try:
        handle = io.TextIOWrapper(open_regular(path, "log"), encoding="utf-8",
                                  errors="replace")
    except UnreadableFile as exc:
        raise RunFormatError(str(exc)) from None
    with handle:
        for number, line in _log_lines(handle, path):
            for signature in signatures:
                if not _found(signature, line, literals, searches, f"{path}:{number}"):
                    continue
                if signature.id in found:
                    found[signature.id].count += 1
                else:
                    found[signature.id] = LogMatch(
                        signature=signature.id, log=str(path), line=number,
                        text=line.strip()[:300], count=1, meaning=signature.meaning,
                        action=signature.action, reference=signature.reference,
                        blocking=signature.blocking)
    return list(found.values())


def _log_lines(handle: io.TextIOWrapper, path: Path) -> Iterator[tuple[int, str]]:
    try:
        yield from bounded_lines(handle, path, MAX_LOG_LINE_BYTES, "log")
    except UnreadableFile as exc:
        raise RunFormatError(str(exc)) from None


def _found(signature: Signature, line: str, literals: dict[str, Any], searches: Searches,
           where: str) -> bool:
    """Whether the signature is in the line: a substring by `re` (it cannot backtrack),
    a regular expression within the searches' bounds, or refused naming where."""
    if not signature.regex:
        return literals[signature.id].search(line) is not None
    try:
        return searches.found(signature.pattern, line, where=f" on {where}")
    except SearchSkipped as skipped:
        reason = str(skipped) if where in str(skipped) else f"{skipped} (on {where})"
        raise ConfigFileError(f"signature {signature.id!r}: its pattern {reason}") from None


def scan_logs(logs: dict[str, Path | None], extra: list[Path] | tuple[Path, ...] = ()
              ) -> dict[str, list[LogMatch]]:
    """{"a": [...], "b": [...]} for the sides that have a log."""
    signatures, searches = load_signatures(extra), Searches()
    return {side: scan_log(path, signatures, searches) for side, path in logs.items()
            if path is not None}
