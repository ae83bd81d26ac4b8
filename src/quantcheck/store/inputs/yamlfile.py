"""Reading the YAML files users write (prompt sets, configs, rubrics, policies,
signatures) with clear errors, in bounded time and memory.

- A regular file only (a FIFO or a device such as /dev/zero is refused before a byte is
  read: files.open_regular), of at most `MAX_YAML_BYTES`.
- UTF-8 text (a byte-order mark is skipped); another encoding is refused with the line
  and column of the first byte that is not UTF-8, and the command that converts it.
- Anchors and aliases are YAML's own, but an alias is a copy of what it names: the
  copies the aliases of one file make may add at most `MAX_ALIAS_NODES` values (counted
  in full, nested ones too), and an anchor used inside itself is refused. A "billion
  laughs" file (aliases of aliases, each level nine times the last) is refused in
  milliseconds instead of filling the memory.
- Nesting deeper than Python's recursion allows is refused, not a crash.
Any failure is one error (exit 2) naming the file (and the line when there is one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ...errors import ConfigFileError, QuantcheckError
from ..files import UnreadableFile, read_regular

MAX_YAML_BYTES = 64 << 20  # 64 MiB: a prompt set of 100,000 prompts is a few MiB
MAX_ALIAS_NODES = 1_000_000  # values the aliases of one file may add when expanded

# libyaml's parser when PyYAML has it (several times faster on large prompt sets)
SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: Path, what: str, loader: type[yaml.SafeLoader] = SafeLoader,
              error: type[QuantcheckError] = ConfigFileError) -> Any:
    """The YAML document in `path` (None when it is empty), or one `error` naming it."""
    try:
        data = read_regular(path, MAX_YAML_BYTES, what)
    except UnreadableFile as exc:
        raise error(str(exc)) from None
    return load_yaml(path, data, what, loader, error)


def load_yaml(path: Path, data: bytes, what: str,
              loader: type[yaml.SafeLoader] = SafeLoader,
              error: type[QuantcheckError] = ConfigFileError) -> Any:
    """`data` (the bytes of `path`) as a YAML document, within the bounds above."""
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise error(not_utf8(path, data, exc.start, what)) from None
    try:
        reader = loader(text)
        try:
            node = reader.get_single_node()
            if node is None:
                return None
            # an alias is written `*name`: without one nothing can expand (the walk took a
            # third of reading a 1,000-prompt set)
            problem = _expansion_problem(node) if "*" in text else ""
            if problem:
                raise error(f"{path}: the {what} {problem}")
            return reader.construct_document(node)
        finally:
            reader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise error(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    except RecursionError:
        raise error(f"{path}: the {what} nests values too deeply to read") from None


def not_utf8(path: Path, data: bytes, offset: int, what: str = "file",
             suffix: str = "") -> str:
    """The message for a file whose byte at `offset` is not UTF-8: where, and how to
    convert it (Excel and other Windows tools save text as cp1252 or UTF-16)."""
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return not_utf8_at(path, line, column, data[offset:offset + 1], what, suffix,
                       utf16=data[:2] in (b"\xff\xfe", b"\xfe\xff"))


def not_utf8_at(path: Path, line: int, column: int, byte: bytes, what: str = "file",
                suffix: str = "", utf16: bool = False) -> str:
    encoding = "utf-16" if utf16 else "cp1252"
    name = path.name.removesuffix(path.suffix) + ".utf8" + (suffix or path.suffix)
    saved = "UTF-16" if utf16 else "cp1252 or Latin-1, as Excel and Windows tools save it"
    return (f"{path}:{line}: the {what} is not UTF-8 text: byte 0x{byte.hex().upper()} at "
            f"column {column} (probably {saved}); convert it, e.g. `iconv -f {encoding} "
            f"-t utf-8 {path} > {path.with_name(name)}`, and give the converted file")


def _expansion_problem(root: yaml.Node) -> str:
    """Why the aliases of a composed document expand too far ("" when they do not):
    each node's expanded size, counted once per node (aliases share the node they
    name), without recursion."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    distinct = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            size = 1 + sum(sizes[id(child)] for child in _children(node))
            sizes[key] = size
            if size > distinct + MAX_ALIAS_NODES:
                return (f"expands its aliases to more than {MAX_ALIAS_NODES:,} values "
                        f"(an alias of an alias...: line {node.start_mark.line + 1}); "
                        "write the values out, or use fewer aliases")
            continue
        if key in sizes:
            continue
        if key in on_path:
            return (f"uses an anchor inside itself (line {node.start_mark.line + 1}): "
                    "a value that holds itself has no end")
        on_path.add(key)
        distinct += 1
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return ""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def reject_unknown(where: str, mapping: Mapping[str, object], allowed: Iterable[str]) -> None:
    allowed = list(allowed)
    for key in mapping:
        if key not in allowed:
            raise ConfigFileError(f"{where}: field '{key}': unknown; allowed: "
                                  f"{', '.join(sorted(allowed))}")


def require_text(where: str, mapping: Mapping[str, object], keys: Iterable[str]) -> None:
    for key in keys:
        value = mapping.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ConfigFileError(f"{where}: field '{key}': required, a non-empty string")


def require_bools(where: str, mapping: Mapping[str, object], keys: Iterable[str]) -> None:
    for key in keys:
        if not isinstance(mapping.get(key, False), bool):
            raise ConfigFileError(f"{where}: field '{key}': must be true or false")
