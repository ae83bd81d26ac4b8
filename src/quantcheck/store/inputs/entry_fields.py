"""The fields of a user's prompt entry, read one by one: where each is (file, line or
row, prompt, field) for the one error that refuses it, and the small readers every
entry shares (a mapping, a string, a list of strings, a flag, a positive integer).

Values come from users' files, so they are `object` until read: each reader narrows one
field or raises a PromptFileError naming where it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from ...errors import PromptFileError
from ..records.run_records import JsonValue

Fields = dict[str, object]


def mapping(value: object) -> Fields | None:
    """`value` as a mapping with string keys, or None when it is not a mapping."""
    if not isinstance(value, dict):
        return None
    return cast(Fields, value)


def line_of(value: object) -> int:
    """The line a YAML mapping starts on (prompt_sets' loader records it), else 0."""
    line = getattr(value, "line", 0)
    return line if isinstance(line, int) else 0


def key_lines_of(value: object) -> Mapping[str, int]:
    lines = getattr(value, "key_lines", None)
    return cast(Mapping[str, int], lines) if isinstance(lines, dict) else {}


@dataclass
class Where:
    """Builds error messages that name the file, line (or row), prompt and field."""

    path: Path
    line: int = 0  # 0: not known
    key_lines: Mapping[str, int] = field(default_factory=dict)
    prompt: str | None = None
    prefix: str = ""  # "expect.": the mapping's keys are named expect.KEY
    row: int = 0  # a row of a columnar file (Parquet, Arrow), which has no lines

    @classmethod
    def of(cls, path: Path, value: object, prompt: str | None = None,
           prefix: str = "") -> Where:
        """Where a YAML mapping is, from the lines its loader recorded."""
        return cls(path, line_of(value), key_lines_of(value), prompt, prefix)

    def inside(self, value: object, prefix: str = "") -> Where:
        """A mapping nested in this one: its own lines when it has them."""
        line = line_of(value)
        return Where(self.path, line or self.line, key_lines_of(value) if line else {},
                     self.prompt, prefix, self.row)

    @property
    def place(self) -> str:
        """FILE:LINE, FILE:LINE (row N), FILE: row N, or FILE."""
        if self.row and self.line:
            return f"{self.path}:{self.line} (row {self.row})"
        if self.row:
            return f"{self.path}: row {self.row}"
        return f"{self.path}:{self.line}" if self.line else str(self.path)

    def error(self, key: str | None, message: str) -> PromptFileError:
        line = self.line
        if key is not None:
            line = self.key_lines.get(key.split(".")[-1], line)
        parts = [Where(self.path, line, row=self.row).place]
        if self.prompt:
            parts.append(f"prompt {self.prompt}")
        if key is not None:
            name = f"{self.prefix}{key}"
            parts.append(f"field '{name}'" if name.isprintable() else f"field {name!r}")
        return PromptFileError(": ".join(parts + [message]))


def reject_unknown(where: Where, entry: Mapping[str, object], allowed: set[str]) -> None:
    for key in entry:
        if key not in allowed:
            raise where.error(str(key), f"unknown field; allowed: {', '.join(sorted(allowed))}")


def plain(value: object) -> JsonValue:
    """A YAML or JSON value without the line bookkeeping (plain dicts and lists)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return cast(JsonValue, value)  # a scalar, as the file's parser read it


def plain_mapping(value: object) -> dict[str, JsonValue] | None:
    fields = mapping(value)
    return None if fields is None else {str(k): plain(v) for k, v in fields.items()}


def string(where: Where, entry: Mapping[str, object], key: str,
           default: str | None = None) -> str:
    value = entry.get(key, default)
    if not isinstance(value, str) or not value:
        raise where.error(key, "must be a non-empty string")
    return value


def string_list(where: Where, entry: Mapping[str, object], key: str) -> list[str]:
    value = entry.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise where.error(key, "must be a string or a list of strings")
    return [str(v) for v in value]


def positive_int(where: Where, entry: Mapping[str, object], key: str, default: int) -> int:
    value = entry.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise where.error(key, f"must be a positive integer, not {value!r}")
    return value


def flag(at: Where, spec: Mapping[str, object], key: str) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise at.error(key, "must be true or false")
    return value
