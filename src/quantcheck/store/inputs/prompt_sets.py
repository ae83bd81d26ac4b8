"""Load prompt sets into Prompts with their exact request bodies: the project's YAML
prompt sets here, data files (JSONL, CSV, Parquet, datasets folders) and YAML source
files through data_prompts.py."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

from ...errors import PromptFileError
from ..files import UnreadableFile, bounded_lines, open_regular
from ..records.run_records import Prompt
from .data_prompts import LoadedSource, is_data_source, load_data_source
from .data_rows import SUFFIXES as DATA_SUFFIXES
from .entry_fields import Where, mapping, reject_unknown
from .prompt_entries import (
    APIS,
    DEFAULT_MAX_TOKENS,
    GREEDY_FIELDS,
    Defaults,
    RequestOptions,
    SourceOptions,
    build_prompt,
    own_field_problem,
    read_defaults,
    request_hash,
)
from .sessions import expand_session
from .yamlfile import MAX_YAML_BYTES, SafeLoader, read_yaml

__all__ = ["APIS", "DEFAULT_MAX_TOKENS", "GREEDY_FIELDS", "LoadedSource", "RequestOptions",
           "SourceOptions", "file_sha256", "load_prompts", "load_sources", "request_hash",
           "shipped_prompt_file"]

TOP_KEYS = {"defaults", "prompts", "name", "description"}


def shipped_prompt_file(name: str) -> Path:
    """A prompt set (or folder of them) shipped with quantcheck (in the wheel, or
    prompts/ of a checkout)."""
    for folder in (Path(__file__).parents[2] / "_prompts", Path(__file__).parents[4] / "prompts"):
        if (folder / name).exists():
            return folder / name
    raise PromptFileError(f"the shipped prompt set {name!r} is missing from this installation")


def file_sha256(path: Path) -> str:
    """SHA-256 of a prompt file; of a folder (a datasets folder, Parquet shards): over
    each file's relative path and bytes, in name order."""
    digest = hashlib.sha256()
    files = [path] if not path.is_dir() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        if file != path:
            digest.update(str(file.relative_to(path)).encode() + b"\0")
        try:
            with open_regular(file, "prompt file") as stream:
                while chunk := stream.read(1 << 20):
                    digest.update(chunk)
        except UnreadableFile as exc:
            raise PromptFileError(str(exc)) from None
    return digest.hexdigest()


class _Located(dict[str, object]):
    """A YAML mapping that remembers the line of itself and of each key."""

    line: int = 0
    key_lines: dict[str, int]


class _LineLoader(SafeLoader):  # type: ignore[misc,valid-type]
    pass


def _construct_located(loader: yaml.SafeLoader, node: yaml.MappingNode) -> _Located:
    mapping = _Located({str(k): v for k, v in loader.construct_mapping(node, deep=True).items()})
    mapping.line = node.start_mark.line + 1
    mapping.key_lines = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_located)


def load_prompts(paths: Iterable[str | Path],
                 options: RequestOptions | None = None) -> list[Prompt]:
    """Load one or more prompt files (YAML prompt sets, data files, YAML source files,
    datasets folders); ids must be unique across all of them."""
    return [prompt for source in load_sources(paths, options) for prompt in source.prompts]


def load_sources(paths: Iterable[str | Path],
                 options: RequestOptions | None = None) -> list[LoadedSource]:
    """Each file's prompts and what was read to make them (`quantcheck prompts check`)."""
    options = options or RequestOptions()
    if problem := own_field_problem(options.extra_body):
        raise PromptFileError(f"--extra-body: {problem}")
    files = [Path(path) for path in paths]
    _check_mapping_has_a_file(files, options.source)
    sources: list[LoadedSource] = []
    seen: dict[str, str] = {}
    for path in files:
        source = _load_file(path, options)
        for prompt in source.prompts:
            if prompt.id in seen:
                raise PromptFileError(
                    f"{prompt.source}: prompt id {prompt.id!r} is used twice "
                    f"(first at {seen[prompt.id]}); ids must be unique"
                )
            seen[prompt.id] = prompt.source
        sources.append(source)
    return sources


def _check_mapping_has_a_file(paths: Sequence[Path], source: SourceOptions) -> None:
    """A column mapping or a sample applies to data files: given with YAML prompt sets
    only, it would be ignored without a word."""
    if (source.map or source.preset or source.sample is not None) and not any(
            is_data_source(path) or _is_source_file(path) for path in paths):
        raise PromptFileError(
            "--map, --map-preset and --sample apply to data files (JSONL, CSV, Parquet, "
            "a datasets folder) and YAML source files; "
            f"{', '.join(map(str, paths)) or 'no file'} holds YAML prompt sets only")


def _is_source_file(path: Path) -> bool:
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return False
    try:
        with open_regular(path) as stream:
            return any(line.startswith(b"source:")
                       for _, line in bounded_lines(stream, path, MAX_YAML_BYTES))
    except (OSError, UnreadableFile):  # read again as a prompt set, which says why not
        return False


def _load_file(path: Path, options: RequestOptions) -> LoadedSource:
    if is_data_source(path):
        return load_data_source(path, options)
    document = read_located_yaml(path, "prompt file")
    top = Where.of(path, document)
    fields = mapping(document)
    if fields is None:
        raise top.error(None, "expected a mapping with a 'prompts:' list at the top level"
                        + ("" if path.suffix in (".yaml", ".yml") else
                           f" (prompt files are YAML, {', '.join(DATA_SUFFIXES)} or folders)"))
    if "source" in fields and "prompts" not in fields:
        return load_data_source(path, options, fields)
    reject_unknown(top, fields, TOP_KEYS)
    defaults = read_defaults(top, fields.get("defaults"))
    entries = fields.get("prompts")
    if not isinstance(entries, list) or not entries:
        raise top.error("prompts", "must be a non-empty list of prompts")
    prompts = [prompt for n, entry in enumerate(entries, 1)
               for prompt in _entry_prompts(Where.of(path, entry, f"#{n}"), entry,
                                            defaults, options)]
    return LoadedSource(path, "YAML prompt set", prompts, len(entries), read=[path])


def _entry_prompts(where: Where, entry: object, defaults: Defaults,
                   options: RequestOptions) -> list[Prompt]:
    """An entry's prompt, or a tool session's, one per turn (sessions.py)."""
    fields = mapping(entry)
    if fields is None or "session" not in fields:
        return [build_prompt(where, entry, defaults, options)]
    prompts = []
    for turn_entry, turn in expand_session(where, fields):
        prompt = build_prompt(Where.of(where.path, entry, str(turn_entry["id"])), turn_entry,
                              defaults, options, source=where.place)
        prompt.session = turn
        prompts.append(prompt)
    return prompts


def read_located_yaml(path: Path, what: str) -> object:
    """A YAML file whose mappings remember their lines, or one clear error (the bounds
    of yamlfile.py: a regular file, its size, its aliases)."""
    return read_yaml(path, what, _LineLoader, PromptFileError)
