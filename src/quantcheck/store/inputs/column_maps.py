"""Column mappings: which column of a data file is a prompt's id, its text (or
conversation) and its expected answer, with the extraction rules eval sets need (the
number after GSM8K's `####`, an MMLU answer index to its letter); the shipped presets.
docs/prompts.md ("Bring your own prompts") documents every target and rule."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import orjson

from ...errors import PromptFileError
from ..records.run_records import CHOICE_LETTERS, numbers_in
from .entry_fields import Fields, Where, mapping, plain
from .prompt_entries import loads_exact

# Each target a column can be mapped to, and what it becomes.
TARGETS = {
    "id": "the prompt's id (without it: a hash of the prompt's content)",
    "prompt": "the text asked, as the user message (or a completions prompt)",
    "messages": "a whole conversation: a list of {role, content}, or its JSON",
    "system": "a system message sent before the prompt",
    "choices": "options lettered A, B, C... after the prompt: a list column, or several "
               "columns (choices=A,B,C,D)",
    "category": "the prompt's category (default: general)",
    "expect": "a whole expect mapping, or its JSON",
    "expect.number": "the number the answer must give",
    "expect.choice": "the option the answer must choose",
    "expect.contains": "text the answer must contain (a list column: every item)",
    "expect.any_of": "texts of which the answer must contain one",
    "expect.not_contains": "text the answer must not contain",
    "expect.regex": "a regular expression the answer must match",
}
# Columns named like these targets map to them by themselves, unless the mapping names
# the target (prompt and messages: unless it names either).
NAMED_TARGETS = ("id", "prompt", "messages", "category", "expect")
RULES = {
    "after-hashes": "the text after the last '####' (GSM8K's answers end '#### 72')",
    "last-number": "the last number in the text",
    "index": "an option's number counted from 0, to its letter (0 -> A)",
    "index-from-1": "an option's number counted from 1, to its letter (1 -> A)",
    "letter": "an option's letter as it is (A to J)",
}
RULES_FOR = {
    "expect.number": ("after-hashes", "last-number"),
    "expect.choice": ("index", "index-from-1", "letter"),
    "expect.contains": ("after-hashes",),
    "expect.any_of": ("after-hashes",),
    "expect.not_contains": ("after-hashes",),
    "expect.regex": (),
}
CHOICES_TEMPLATE = "{prompt}\n\n{choices}\n\nAnswer with the letter of the correct option."
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]+)\}")
_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'" r'|"(?:[^"\\\n]|\\.)*"')  # a text's repr


class ColumnMapError(PromptFileError):
    """A mapping that cannot work (unknown target or rule, a missing column)."""


@dataclass(frozen=True)
class Column:
    """The column(s) a target reads, and the rule that extracts its value."""

    names: tuple[str, ...]
    rule: str | None = None

    def __str__(self) -> str:
        return ",".join(self.names) + (f":{self.rule}" if self.rule else "")


@dataclass(frozen=True)
class Preset:
    map: dict[str, str]
    description: str
    template: str | None = None
    optional: frozenset[str] = frozenset()  # targets dropped when their column is missing


PRESETS = {
    "gsm8k": Preset(
        {"prompt": "question", "expect.number": "answer:after-hashes"},
        "GSM8K-style rows: question, answer ending '#### NUMBER'; asks for the number alone "
        "(a number check reads the answer's first number)",
        template="{prompt}\n\nAnswer with the final number only."),
    "mmlu": Preset(
        {"prompt": "question", "choices": "choices", "expect.choice": "answer",
         "category": "subject"},
        "MMLU-style rows: question, choices (a list), answer (an index from 0, or a "
        "letter), subject as the category when there is one",
        optional=frozenset({"category"})),
}


@dataclass(frozen=True)
class ColumnMap:
    """How a row of columns becomes a prompt entry (prompt_entries.build_prompt)."""

    columns: dict[str, Column] = field(default_factory=dict)
    template: str | None = None
    optional: frozenset[str] = frozenset()
    system: str | None = None  # a fixed system message (a YAML source file's `system`)
    category: str | None = None  # a fixed category
    expect: Fields = field(default_factory=dict)  # merged into every prompt's expect

    @property
    def given(self) -> bool:
        return bool(self.columns)

    def with_named_columns(self, available: Iterable[str]) -> ColumnMap:
        """This mapping plus the columns named like a target it leaves unnamed (NAMED_TARGETS):
        an `id` column stays the id when --map names only the prompt."""
        have = set(available)
        columns = dict(self.columns)
        for target in NAMED_TARGETS:
            text_named = target in ("prompt", "messages") and (
                "prompt" in columns or "messages" in columns
                or (target == "messages" and self.template is not None))
            if target in have and target not in columns and not text_named:
                columns[target] = Column((target,))
        return replace(self, columns=columns)

    def fitted(self, available: Iterable[str], where: str) -> ColumnMap:
        """This mapping for a file with these columns: a preset's optional targets
        dropped when missing; any other missing column is one error naming them all."""
        have = set(available)
        columns = {target: column for target, column in self.columns.items()
                   if target not in self.optional or set(column.names) <= have}
        for target, column in columns.items():
            for name in column.names:
                if name not in have:
                    raise ColumnMapError(
                        f"{where}: {target}={column}: no column {name!r}; the columns are "
                        f"{', '.join(sorted(have)) or '(none)'}")
        for name in self._template_columns():
            if name not in have:
                raise ColumnMapError(f"{where}: template: no column {name!r}; the columns are "
                                     f"{', '.join(sorted(have)) or '(none)'}")
        return replace(self, columns=columns)

    def _template_columns(self) -> list[str]:
        return [match.group(1) for match in _PLACEHOLDER.finditer(self.template or "")
                if match.group(1) and match.group(1) not in ("prompt", "choices")]

    def entry(self, row: Mapping[str, object], where: Where, api: str) -> Fields:
        """The prompt entry of one row (`api` decides messages or a completions prompt)."""
        entry: Fields = {}
        if "id" in self.columns:
            entry["id"] = _id_text(row, self.columns["id"], where)
        if "category" in self.columns:
            entry["category"] = _text(row, self.columns["category"], where, "category")
        elif self.category:
            entry["category"] = self.category
        system = _text(row, self.columns["system"], where, "system") \
            if "system" in self.columns else self.system
        if "messages" in self.columns:
            messages = _json_list(row, self.columns["messages"], where, "messages")
            entry["messages"] = ([{"role": "system", "content": system}] if system else []) \
                + messages
        else:
            text = self._text_of(row, where)
            if api == "completions":
                if system:
                    raise where.error("system", "a system message needs the chat API")
                entry["prompt"] = text
            else:
                entry["messages"] = ([{"role": "system", "content": system}] if system
                                     else []) + [{"role": "user", "content": text}]
        expect = self._expect(row, where)
        if expect:
            entry["expect"] = expect
        return entry

    def _text_of(self, row: Mapping[str, object], where: Where) -> str:
        choices = self._choices(row, where)
        template = self.template or (CHOICES_TEMPLATE if choices else "{prompt}")
        values = {}
        if "prompt" in self.columns:
            values["prompt"] = _text(row, self.columns["prompt"], where, "prompt")
        if choices:
            values["choices"] = "\n".join(f"{CHOICE_LETTERS[n]}. {choice}"
                                          for n, choice in enumerate(choices))

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            if name is None:
                return match.group(0)[0]
            if name in values:
                return values[name]
            if name in ("prompt", "choices"):
                raise where.error("template", f"{{{name}}} needs a {name}= column")
            return _text(row, Column((name,)), where, "template")

        text = _PLACEHOLDER.sub(fill, template)
        if not text.strip():
            raise where.error("prompt", "the prompt's text is empty")
        return text

    def _choices(self, row: Mapping[str, object], where: Where) -> list[str]:
        column = self.columns.get("choices")
        if column is None:
            return []
        if len(column.names) > 1:
            choices = [_text(row, Column((name,)), where, "choices") for name in column.names]
        else:
            items = _json_list(row, column, where, "choices")
            if not all(isinstance(item, str | int | float) and not isinstance(item, bool)
                       for item in items):
                raise where.error("choices", f"column {column.names[0]!r}: options must be "
                                  "texts")
            choices = [str(item) for item in items]
        if not 2 <= len(choices) <= len(CHOICE_LETTERS):
            raise where.error("choices", f"{len(choices)} options; a choice needs 2 to "
                              f"{len(CHOICE_LETTERS)} (letters A to {CHOICE_LETTERS[-1]})")
        return choices

    def _expect(self, row: Mapping[str, object], where: Where) -> Fields:
        expect: Fields = dict(self.expect)
        if "expect" in self.columns:
            column = self.columns["expect"]
            value = _json_value(_cell(row, column.names[0], where, "expect"))
            whole = mapping(value)
            if whole is None and value is not None:
                raise where.error("expect", f"column {column.names[0]!r}: must be a mapping "
                                  "(or its JSON), e.g. {\"contains\": \"Paris\"}")
            expect.update(whole or {})
        for target, column in self.columns.items():
            if target.startswith("expect."):
                expect[target.removeprefix("expect.")] = self._check_value(row, target,
                                                                           column, where)
        if "choice" in expect and "choices" in self.columns:
            letter, count = expect["choice"], len(self._choices(row, where))
            if isinstance(letter, str) and letter in CHOICE_LETTERS \
                    and CHOICE_LETTERS.index(letter) >= count:
                raise where.error("expect.choice", f"option {letter} of {count} options")
        return expect

    def _check_value(self, row: Mapping[str, object], target: str, column: Column,
                     where: Where) -> object:
        value = _cell(row, column.names[0], where, target)
        named = f"column {column.names[0]!r}" + (f" ({column.rule})" if column.rule else "")
        if column.rule == "after-hashes":
            value = _after_hashes(value, where, target, named)
        if target == "expect.number":
            return _number(value, column.rule, where, named)
        if target == "expect.choice":
            return _letter(value, column.rule, where, named)
        if target == "expect.regex":
            if not isinstance(value, str):
                raise where.error(target, f"{named}: must be text")
            return value
        if isinstance(value, str):
            return value
        items = _json_value(value)
        if isinstance(items, list) and items and all(isinstance(i, str) for i in items):
            return items
        raise where.error(target, f"{named}: must be text or a list of texts")


def parse_map(entries: Iterable[str], preset: str | None = None) -> ColumnMap:
    """A ColumnMap from `TARGET=COLUMN[:RULE]` entries over a preset's; ColumnMapError
    says what is wrong with an entry."""
    columns: dict[str, Column] = {}
    template, optional = None, frozenset[str]()
    if preset is not None:
        if preset not in PRESETS:
            raise ColumnMapError(f"unknown preset {preset!r}; the presets are "
                                 f"{', '.join(sorted(PRESETS))}")
        chosen = PRESETS[preset]
        columns = {target: _column(target, spec) for target, spec in chosen.map.items()}
        template, optional = chosen.template, chosen.optional
    for entry in entries:
        target, equals, spec = entry.partition("=")
        target = target.strip()
        if not equals or not spec.strip():
            raise ColumnMapError(f"{entry!r}: expected TARGET=COLUMN[:RULE], e.g. "
                                 "prompt=question or expect.number=answer:after-hashes")
        columns[target] = _column(target, spec.strip())
        optional -= {target}
    if "prompt" in columns and "messages" in columns:
        raise ColumnMapError("map prompt= or messages=, not both")
    return ColumnMap(columns, template, optional)


def _column(target: str, spec: str) -> Column:
    if target not in TARGETS:
        raise ColumnMapError(f"unknown target {target!r}; the targets are "
                             f"{', '.join(TARGETS)}")
    name, colon, rule = spec.rpartition(":")
    if not colon or rule not in RULES:
        name, rule = spec, ""  # a column whose name holds ':' (no rule)
    if rule and rule not in RULES_FOR.get(target, ()):
        allowed = RULES_FOR.get(target, ())
        raise ColumnMapError(f"{target}={spec}: the rule {rule!r} does not apply to {target}"
                             + (f"; its rules: {', '.join(allowed)}" if allowed else
                                " (it takes no rule)"))
    names = tuple(part.strip() for part in name.split(",")) if target == "choices" \
        else (name.strip(),)
    if not all(names):
        raise ColumnMapError(f"{target}={spec}: a column name is empty")
    return Column(names, rule or None)


def _cell(row: Mapping[str, object], name: str, where: Where, target: str) -> object:
    if name not in row:
        raise where.error(target, f"no column {name!r} in this row; it has "
                          f"{', '.join(sorted(map(str, row))) or 'none'}")
    return row[name]


def _text(row: Mapping[str, object], column: Column, where: Where, target: str) -> str:
    value = _cell(row, column.names[0], where, target)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise where.error(target, f"column {column.names[0]!r}: must be text, not "
                          f"{_kind(value)}")
    text = str(value)
    if not text.strip():
        raise where.error(target, f"column {column.names[0]!r} is empty")
    return text


def _id_text(row: Mapping[str, object], column: Column, where: Where) -> str:
    return _text(row, column, where, "id").strip()


def _kind(value: object) -> str:
    return "empty" if value is None else type(value).__name__


def _json_value(value: object) -> object:
    """A cell that holds JSON (or a Python list's text, as pandas writes lists into a
    CSV) as the value it spells; any other cell as it is."""
    if not isinstance(value, str) or value.strip()[:1] not in ("[", "{"):
        return value
    try:
        return loads_exact(value)
    except orjson.JSONDecodeError:
        pass
    texts = _numpy_texts(value)  # before Python's reading, which joins 'a' 'b' into 'ab'
    if texts is not None:
        return texts
    try:
        return ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return value


def _numpy_texts(text: str) -> list[object] | None:
    """A numpy array of texts as its repr spells it, "['Paris' 'Rome']": what a list
    column becomes in a CSV written through pandas (datasets' `to_csv`)."""
    inner = text.strip()
    if not (inner.startswith("[") and inner.endswith("]")):
        return None
    items = _QUOTED.findall(inner[1:-1])
    if not items or _QUOTED.sub("", inner[1:-1]).strip():
        return None
    try:
        return [ast.literal_eval(item) for item in items]
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def _json_list(row: Mapping[str, object], column: Column, where: Where,
               target: str) -> list[object]:
    value = _json_value(_cell(row, column.names[0], where, target))
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list) or not value:
        raise where.error(target, f"column {column.names[0]!r}: must be a non-empty list "
                          f"(or its JSON), not {_kind(value)}")
    return [plain(item) for item in value]


def _after_hashes(value: object, where: Where, target: str, named: str) -> str:
    if not isinstance(value, str) or "####" not in value:
        raise where.error(target, f"{named}: no '####' in {_short(value)}")
    return value.rsplit("####", 1)[1].strip()


def _number(value: object, rule: str | None, where: Where, named: str) -> float | int:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise where.error("expect.number", f"{named}: must be a number, not {_kind(value)}")
    found = numbers_in(value)
    if rule == "last-number" and found:
        return found[-1]
    if len(found) != 1:
        hint = "; :last-number takes the last" if len(found) > 1 else ""
        raise where.error("expect.number", f"{named}: {len(found)} numbers in "
                          f"{_short(value)}, expected one{hint}")
    return found[0]


def _letter(value: object, rule: str | None, where: Where, named: str) -> str:
    if isinstance(value, str) and value.strip().isdigit() and rule != "letter":
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and rule != "letter":
        index = value - 1 if rule == "index-from-1" else value
        if not 0 <= index < len(CHOICE_LETTERS):
            raise where.error("expect.choice", f"{named}: option {value} is not one of "
                              f"{len(CHOICE_LETTERS)} ({rule or 'index'})")
        return CHOICE_LETTERS[index]
    if isinstance(value, str) and value.strip().upper() in CHOICE_LETTERS \
            and len(value.strip()) == 1 and rule not in ("index", "index-from-1"):
        return value.strip().upper()
    raise where.error("expect.choice", f"{named}: {_short(value)} is neither a letter A to "
                      f"{CHOICE_LETTERS[-1]} nor an option's number")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
