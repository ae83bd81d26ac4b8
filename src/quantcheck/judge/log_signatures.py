"""Scan server logs for known failure signatures (a shipped file, plus the user's own)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import msgspec

from ..errors import ConfigFileError, RunFormatError
from ..store.report_records import LogMatch
from ..store.yamlfile import read_yaml, reject_unknown, require_bools, require_text

SHIPPED = Path(__file__).parent / "signatures.yaml"
SIGNATURE_KEYS = {"id", "pattern", "regex", "meaning", "action", "reference", "blocking"}


@dataclass
class Signature:
    id: str
    pattern: str
    meaning: str
    action: str
    reference: str = ""
    blocking: bool = False
    regex: bool = False

    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.pattern if self.regex else re.escape(self.pattern))


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
    except re.error as exc:
        raise ConfigFileError(f"{where}: field 'pattern': invalid regular expression: "
                              f"{exc}") from None
    return signature


def scan_log(path: Path, signatures: list[Signature]) -> list[LogMatch]:
    """Every signature found in the log, with its first line and number of occurrences."""
    compiled = [(s, s.compiled()) for s in signatures]
    found: dict[str, LogMatch] = {}
    try:
        handle = path.open(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise RunFormatError(f"{path}: cannot read log: {exc.strerror or exc}") from None
    with handle:
        for number, line in enumerate(handle, 1):
            for signature, pattern in compiled:
                if not pattern.search(line):
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


def scan_logs(logs: dict[str, Path | None], extra: list[Path] | tuple[Path, ...] = ()
              ) -> dict[str, list[LogMatch]]:
    """{"a": [...], "b": [...]} for the sides that have a log."""
    signatures = load_signatures(extra)
    return {side: scan_log(path, signatures) for side, path in logs.items()
            if path is not None}
