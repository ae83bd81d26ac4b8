"""Prompts from data files: JSONL request bodies and Batch API lines recognised by
their shape, rows of CSV, Parquet and Arrow tables through a column mapping, and the
YAML source file that names a data file with its mapping; stable ids, seeded samples.
docs/prompts.md ("Bring your own prompts") is the user's description."""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson

from ...errors import PromptFileError
from ..records.run_records import Prompt
from .column_maps import PRESETS, ColumnMap, ColumnMapError, parse_map
from .data_rows import DataFile, Row, columns, count_rows, is_data_file, open_data, rows
from .entry_fields import Fields, Where, mapping, reject_unknown
from .prompt_entries import (
    GREEDY_FIELDS,
    OWN_FIELDS,
    REQUEST_KEYS,
    Defaults,
    RequestOptions,
    SourceOptions,
    build_prompt,
    read_defaults,
)

SOURCE_KEYS = {"source", "preset", "map", "template", "system", "category", "expect",
               "defaults", "sample", "seed", "name", "description"}
# A request body's fields that are the project's own (docs/prompts.md), not sent.
PROJECT_FIELDS = tuple(key for key in OWN_FIELDS if key not in ("messages", "prompt"))
# Fields quantcheck sets on every request itself: the endpoint's model, streaming,
# logprobs, one answer per request.
SET_BY_QUANTCHECK = ("model", "stream", "stream_options", "logprobs", "top_logprobs", "n")
BATCH_KEYS = {"custom_id", "method", "url", "body"}
BATCH_URLS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
ID_DIGITS = 12  # of a content hash, when a row has no id


@dataclass
class LoadedSource:
    """One prompt file's prompts and what was read to make them."""

    path: Path
    kind: str  # "YAML prompt set", "JSONL", "Parquet folder (3 files)", ...
    prompts: list[Prompt]
    rows: int  # rows (or prompt entries) read
    shapes: dict[str, int] = field(default_factory=dict)  # how rows were read, and how many
    total: int | None = None  # the file's rows, when a sample was drawn
    seed: int | None = None
    mapping: str = ""  # the column mapping used, as TARGET=COLUMN entries
    hashed_ids: int = 0  # prompts whose id is a hash of their content
    read: list[Path] = field(default_factory=list)  # every file or folder read


@dataclass
class _Recipe:
    """What a data file needs besides its rows: the mapping, request defaults, sample."""

    columns: ColumnMap
    defaults: Defaults
    sample: int | None
    seed: int


def is_data_source(path: Path) -> bool:
    """A data file or folder (not a YAML prompt set or source file)."""
    return path.suffix.lower() not in (".yaml", ".yml") and is_data_file(path)


def load_data_source(path: Path, options: RequestOptions,
                     source_file: Fields | None = None) -> LoadedSource:
    """The prompts of a data file (or of the data file a YAML source file names, whose
    parsed top level is `source_file`)."""
    if source_file is None:
        return _load(open_data(path), _recipe(options.source, ColumnMap(), Defaults()), options)
    data_path, recipe = _source_file(path, source_file, options.source)
    try:
        loaded = _load(open_data(data_path), recipe, options)
    except ColumnMapError as exc:  # a mapping that does not fit the data: say where it is
        raise Where.of(path, source_file).error("map", str(exc)) from None
    loaded.kind = f"{loaded.kind} {data_path}, through the source file"
    loaded.path = path
    loaded.read = [path, data_path]
    return loaded


def _recipe(source: SourceOptions, base: ColumnMap, defaults: Defaults,
            file_sample: int | None = None, file_seed: int | None = None,
            file_map: list[str] | None = None, file_preset: str | None = None) -> _Recipe:
    preset = source.preset or file_preset
    columns = parse_map([*(file_map or []), *source.map], preset)
    if base.template is not None:
        columns = replace(columns, template=base.template)
    columns = replace(columns, system=base.system, category=base.category, expect=base.expect)
    sample = source.sample if source.sample is not None else file_sample
    if sample is not None and sample < 1:
        raise ColumnMapError(f"--sample must be a positive number of prompts, not {sample}")
    seed = source.seed if source.seed is not None else (file_seed or 0)
    return _Recipe(columns, defaults, sample, seed)


def _load(data: DataFile, recipe: _Recipe, options: RequestOptions) -> LoadedSource:
    names = columns(data)
    cmap = recipe.columns
    api = options.api or recipe.defaults.api or "chat"
    if names is not None:
        if not cmap.given and "prompt" not in names and "messages" not in names:
            raise ColumnMapError(_which_prompt(data, names, cmap, str(api)))
        cmap = cmap.with_named_columns(names).fitted(names, str(data.path))
    elif not cmap.given:
        _refuse_unmapped_lines(data, cmap, str(api))
    prompts: list[Prompt] = []
    shapes: Counter[str] = Counter()
    contents: Counter[str] = Counter()
    hashed = 0
    for row in rows(data, recipe.sample, recipe.seed):
        entry, shape = _entry(row, cmap, str(api), fit=names is None)
        shapes[shape] += 1
        if "id" not in entry:
            entry = {"id": _content_id(entry, contents, row.where), **entry}
            hashed += 1
        prompts.append(build_prompt(row.where, entry, recipe.defaults, options))
    if not prompts:
        raise PromptFileError(f"{data.path}: no rows: a prompt file needs at least one prompt")
    total = count_rows(data) if recipe.sample is not None else None
    return LoadedSource(data.path, data.described, prompts, len(prompts), dict(shapes), total,
                        recipe.seed if recipe.sample is not None else None,
                        " ".join(f"{t}={c}" for t, c in cmap.columns.items()), hashed,
                        [data.path])


FIRST_ROWS = 3  # rows a suggested mapping must read before it is suggested
PROMPT_COLUMNS = ("question", "input", "instruction", "query", "problem", "text")
ANSWER_COLUMNS = ("answer", "output", "target", "label", "solution", "expected",
                  "response", "completion")


def _which_prompt(data: DataFile, names: list[str], base: ColumnMap, api: str) -> str:
    """The error for a table without a prompt or messages column: its columns, and a
    mapping that reads its first rows when one can be found."""
    return (f"{data.path}: which column is the prompt? Give a mapping, e.g. --map "
            f"prompt=COLUMN --map expect.contains=COLUMN (the columns are "
            f"{', '.join(names)}){_suggestion(data, names, base, api)}")


def _suggestion(data: DataFile, names: list[str], base: ColumnMap, api: str) -> str:
    """'; these columns fit --map-preset NAME' when a preset's rules read the first rows,
    else '; these columns read as --map ...' when such a line does, else ''."""
    suggestion = ""
    first = list(itertools.islice(rows(data), FIRST_ROWS))
    for name in sorted(PRESETS, key=lambda preset: -len(PRESETS[preset].map)):
        if _reads(parse_map([], name), names, first, base, api):
            suggestion = f"; these columns fit --map-preset {name}"
            break
    else:
        prompt = next((c for c in PROMPT_COLUMNS if c in names), None)
        answer = next((c for c in ANSWER_COLUMNS if c in names), None)
        for entries in ([f"prompt={prompt}", f"expect.number={answer}"],
                        [f"prompt={prompt}", f"expect.number={answer}:after-hashes"],
                        [f"prompt={prompt}", f"expect.contains={answer}"],
                        [f"prompt={prompt}"]):
            if prompt is None or (answer is None and len(entries) > 1):
                continue
            if _reads(parse_map(entries), names, first, base, api):
                suggestion = ("; these columns read as " +
                              " ".join(f"--map {entry}" for entry in entries))
                break
    return suggestion


def _refuse_unmapped_lines(data: DataFile, base: ColumnMap, api: str) -> None:
    """JSON lines whose first is neither a request body nor a Batch API line are rows of
    columns: the same error as a table's, with a mapping that reads the first lines."""
    first = next(iter(rows(data)), None)
    fields = mapping(first.values) if first is not None else None
    if first is None or fields is None or {"messages", "prompt", "custom_id"} & fields.keys():
        return
    raise first.where.error(
        None, "neither a request body ('messages' or 'prompt') nor a Batch API line "
        f"('custom_id', 'body'); its fields are {', '.join(map(repr, fields))}: for rows of "
        "columns give a mapping, e.g. --map prompt=COLUMN"
        f"{_suggestion(data, list(fields), base, api)}")


def _reads(cmap: ColumnMap, names: list[str], first: list[Row], base: ColumnMap,
           api: str) -> bool:
    """Whether `cmap` makes a prompt of each of the `first` rows."""
    cmap = replace(cmap, system=base.system, category=base.category, expect=base.expect)
    try:
        fitted = cmap.with_named_columns(names).fitted(names, "")
        for row in first:
            entry, _ = _entry(row, fitted, api, fit=False)
            build_prompt(row.where, {"id": "-", **entry}, Defaults(), RequestOptions(api=api))
    except PromptFileError:
        return False
    return bool(first)


def _entry(row: Row, cmap: ColumnMap, api: str, fit: bool) -> tuple[Fields, str]:
    """A row's prompt entry, and the shape it was read as (`fit`: a JSON line, which
    names its own columns, is checked against the mapping by itself)."""
    fields = mapping(row.values)
    if fields is None:
        raise row.where.error(None, "expected a mapping of columns")
    if cmap.given:
        if fit:
            cmap = cmap.with_named_columns(fields).fitted(fields, row.where.place)
        return cmap.entry(fields, row.where, api), "mapped row"
    if "custom_id" in fields:
        return _batch_entry(fields, row.where), "Batch API line"
    if "messages" in fields or "prompt" in fields:
        kind = "chat" if "messages" in fields else "completions"
        return _body_entry(fields, row.where), f"{kind} request body"
    raise row.where.error(
        None, "neither a request body ('messages' or 'prompt') nor a Batch API line "
        f"('custom_id', 'body'); its fields are {', '.join(map(repr, sorted(fields))) or 'none'}: "
        "for rows of columns give a mapping, e.g. --map prompt=COLUMN, or --map-preset "
        f"{'|'.join(PRESETS)}")


def _body_entry(body: Fields, where: Where) -> Fields:
    """A request body (OpenAI chat or completions) as a prompt entry: every field is
    sent as given, but those quantcheck sets itself and the sampling fields it sets
    greedy; the project's own fields (id, expect, ...) may sit beside them."""
    entry: Fields = {key: body[key] for key in PROJECT_FIELDS if key in body}
    extra = mapping(body.get("extra"))
    extra = dict(extra) if extra is not None else {}
    for key, value in body.items():
        if key in PROJECT_FIELDS or key in SET_BY_QUANTCHECK or key in GREEDY_FIELDS:
            continue
        if key in ("messages", "prompt", "max_tokens", *REQUEST_KEYS):
            entry[key] = value
        elif key == "max_completion_tokens":
            if "max_tokens" not in body:  # every runtime here reads max_tokens
                entry["max_tokens"] = value
        else:
            extra[key] = value
    if extra:
        if "extra" in entry and mapping(entry["extra"]) is None:
            raise where.error("extra", "must be a mapping of extra request fields")
        entry["extra"] = extra
    return entry


def _batch_entry(line: Fields, where: Where) -> Fields:
    """A line of an OpenAI Batch API input file: custom_id is the prompt's id."""
    reject_unknown(where, line, BATCH_KEYS)
    custom_id, method, url = line.get("custom_id"), line.get("method", "POST"), line.get("url")
    if not isinstance(custom_id, str) or not custom_id:
        raise where.error("custom_id", "must be a non-empty string")
    where.prompt = custom_id
    if method != "POST":
        raise where.error("method", f"must be POST, not {method!r}")
    if not isinstance(url, str) or url not in BATCH_URLS:
        raise where.error("url", f"must be one of {', '.join(BATCH_URLS)} (a generation), "
                          f"not {url!r}")
    body = mapping(line.get("body"))
    if body is None:
        raise where.error("body", "must be the request body, a JSON object")
    needs = "messages" if BATCH_URLS[url] == "chat" else "prompt"
    if needs not in body:
        raise where.error("body", f"a request to {url} needs '{needs}'")
    return {**_body_entry(body, where), "id": custom_id}


def _content_id(entry: Fields, seen: Counter[str], where: Where) -> str:
    """A stable id for a row without one: a hash of its content; the same content
    again gets -2, -3, ... in file order."""
    try:
        encoded = orjson.dumps(entry, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
                               default=str)
    except TypeError as exc:
        raise where.error(None, f"a value cannot be read as JSON: {exc}") from None
    digest = hashlib.sha256(encoded).hexdigest()[:ID_DIGITS]
    seen[digest] += 1
    return digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"


# --- the YAML source file -------------------------------------------------------------

def _source_file(path: Path, fields: Fields, source: SourceOptions) -> tuple[Path, _Recipe]:
    """A YAML file naming a data file, its mapping and defaults (docs/prompts.md)."""
    where = Where.of(path, fields)
    reject_unknown(where, fields, SOURCE_KEYS)
    named = fields.get("source")
    if not isinstance(named, str) or not named.strip():
        raise where.error("source", "required: the data file or folder, relative to this file")
    data_path = path.parent / named
    if not data_path.exists():
        raise where.error("source", f"no such file or folder: {data_path}")
    if not is_data_source(data_path):
        raise where.error("source", f"{data_path} is not a data file or folder quantcheck "
                          "reads (.jsonl, .csv, .tsv, .parquet, .arrow, a folder)")
    preset = _optional_text(where, fields, "preset")
    if preset is not None and preset not in PRESETS:
        raise where.error("preset", f"unknown preset {preset!r}; the presets are "
                          f"{', '.join(sorted(PRESETS))}")
    expect = fields.get("expect") or {}
    expect_fields, defaults = mapping(expect), read_defaults(where, fields.get("defaults"))
    if expect_fields is None:
        raise where.error("expect", "must be a mapping merged into every prompt's expect, "
                          "e.g. {tolerance: 0.01}")
    base = ColumnMap(template=_optional_text(where, fields, "template"),
                     system=_optional_text(where, fields, "system"),
                     category=_optional_text(where, fields, "category"), expect=expect_fields)
    try:
        recipe = _recipe(source, base, defaults,
                         _optional_count(where, fields, "sample"),
                         _optional_int(where, fields, "seed"),
                         _map_entries(where, fields.get("map")), preset)
    except ColumnMapError as exc:
        raise where.error("map", str(exc)) from None
    return data_path, recipe


def _map_entries(where: Where, value: object) -> list[str]:
    """`map:` as {TARGET: COLUMN[:RULE]} (or a list of TARGET=COLUMN[:RULE])."""
    if value is None:
        return []
    fields = mapping(value)
    if fields is not None and all(isinstance(v, str) for v in fields.values()):
        return [f"{target}={column}" for target, column in fields.items()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [str(v) for v in value]
    raise where.error("map", "must map each target to a column, e.g. {prompt: question, "
                      "expect.number: 'answer:after-hashes'}")


def _optional_text(where: Where, fields: Fields, key: str) -> str | None:
    value = fields.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise where.error(key, "must be a non-empty string")
    return value


def _optional_int(where: Where, fields: Fields, key: str) -> int | None:
    value = fields.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise where.error(key, f"must be an integer, not {value!r}")
    return value


def _optional_count(where: Where, fields: Fields, key: str) -> int | None:
    value = _optional_int(where, fields, key)
    if value is not None and value < 1:
        raise where.error(key, f"must be a positive number of prompts, not {value}")
    return value
