"""Load and validate prompt sets (YAML) into Prompts with their exact request bodies."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from jsonschema.validators import validator_for

from ..errors import PromptFileError
from .haystack import PLACEHOLDER, haystack
from .run_records import CHOICE_LETTERS, CodeExpect, Expect, Prompt, ToolCallExpect

DEFAULT_MAX_TOKENS = 256

# Sent with every request so that "temperature 0" really is greedy on every runtime:
# llama-cpp-python defaults to repeat_penalty 1.1, which changes the logits; vLLM and
# SGLang spell the penalty repetition_penalty. top_k is left out on purpose: it cannot
# move the argmax, and runtimes disagree on its "off" value (vLLM and SGLang take -1,
# llama-cpp-python rejects anything below 0). A field set to null in --extra-body is
# dropped.
GREEDY_FIELDS: dict[str, Any] = {
    "temperature": 0.0,
    "top_p": 1.0,
    "seed": 0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "repeat_penalty": 1.0,
}

# Fields that do not change what is generated, so they stay out of the prompt hash:
# the same prompt is comparable across models, transports and top-k settings.
UNHASHED_FIELDS = {"model", "stream", "stream_options", "logprobs", "top_logprobs"}

PROMPT_KEYS = {"id", "category", "messages", "prompt", "max_tokens", "tags", "expect", "stop",
               "chat_template_kwargs", "extra", "tools", "tool_choice", "haystack"}
HAYSTACK_KEYS = {"tokens", "depth", "needle", "seed"}
TOOL_CHOICES = ("auto", "none", "required")
TOP_KEYS = {"defaults", "prompts", "name", "description"}
EXPECT_KEYS = set(Expect.__dataclass_fields__)
APIS = ("chat", "completions")


@dataclass
class RequestOptions:
    """Command-line settings that shape every request body of a run."""

    max_tokens: int | None = None
    api: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)


def shipped_prompt_file(name: str) -> Path:
    """A prompt set (or folder of them) shipped with quantcheck (in the wheel, or
    prompts/ of a checkout)."""
    for folder in (Path(__file__).parents[1] / "_prompts", Path(__file__).parents[3] / "prompts"):
        if (folder / name).exists():
            return folder / name
    raise PromptFileError(f"the shipped prompt set {name!r} is missing from this installation")


def request_hash(body: dict[str, Any]) -> str:
    hashed = {k: v for k, v in body.items() if k not in UNHASHED_FIELDS}
    return hashlib.sha256(orjson.dumps(hashed, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _Located(dict[str, Any]):
    """A YAML mapping that remembers the line of itself and of each key."""

    line: int = 0
    key_lines: dict[str, int]


# libyaml's parser when PyYAML has it (several times faster on large prompt sets)
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _LineLoader(_SafeLoader):  # type: ignore[misc]
    pass


def _construct_located(loader: _LineLoader, node: yaml.MappingNode) -> _Located:
    mapping = _Located({str(k): v for k, v in loader.construct_mapping(node, deep=True).items()})
    mapping.line = node.start_mark.line + 1
    mapping.key_lines = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_located)


class _Where:
    """Builds error messages that name the file, line, prompt and field."""

    def __init__(self, path: Path, mapping: Any, prompt: str | None = None,
                 prefix: str = "") -> None:
        self.path = path
        self.mapping = mapping
        self.prompt = prompt
        self.prefix = prefix  # "expect.": the mapping's keys are named expect.KEY

    def error(self, key: str | None, message: str) -> PromptFileError:
        line = getattr(self.mapping, "line", 0)
        if key is not None:
            line = getattr(self.mapping, "key_lines", {}).get(key.split(".")[-1], line)
        parts = [f"{self.path}:{line}" if line else str(self.path)]
        if self.prompt:
            parts.append(f"prompt {self.prompt}")
        if key is not None:
            parts.append(f"field '{self.prefix}{key}'")
        return PromptFileError(": ".join(parts + [message]))


def load_prompts(paths: Iterable[str | Path],
                 options: RequestOptions | None = None) -> list[Prompt]:
    """Load one or more prompt files; ids must be unique across all of them."""
    options = options or RequestOptions()
    prompts: list[Prompt] = []
    seen: dict[str, str] = {}
    for path in map(Path, paths):
        for prompt in _load_file(path, options):
            if prompt.id in seen:
                raise PromptFileError(
                    f"{prompt.source}: prompt id {prompt.id!r} is used twice "
                    f"(first at {seen[prompt.id]}); ids must be unique"
                )
            seen[prompt.id] = prompt.source
            prompts.append(prompt)
    return prompts


def _load_file(path: Path, options: RequestOptions) -> list[Prompt]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptFileError(f"{path}: cannot read prompt file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise PromptFileError(f"{path}: not UTF-8 text ({exc.reason})") from None
    try:
        document = yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise PromptFileError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    top = _Where(path, document)
    if not isinstance(document, dict):
        raise top.error(None, "expected a mapping with a 'prompts:' list at the top level")
    _reject_unknown(top, document, TOP_KEYS)
    defaults = document.get("defaults") or _Located()
    if not isinstance(defaults, dict):
        raise top.error("defaults", "must be a mapping")
    entries = document.get("prompts")
    if not isinstance(entries, list) or not entries:
        raise top.error("prompts", "must be a non-empty list of prompts")
    return [_build_prompt(path, n, entry, defaults, options) for n, entry in enumerate(entries, 1)]


def _reject_unknown(where: _Where, mapping: dict[str, Any], allowed: set[str]) -> None:
    for key in mapping:
        if key not in allowed:
            raise where.error(str(key), f"unknown field; allowed: {', '.join(sorted(allowed))}")


def _build_prompt(
    path: Path, position: int, entry: Any, defaults: dict[str, Any], options: RequestOptions
) -> Prompt:
    where = _Where(path, entry, f"#{position}")
    if not isinstance(entry, dict):
        raise where.error(None, "each prompt must be a mapping with at least 'id'")
    prompt_id = entry.get("id")
    if not isinstance(prompt_id, str | int) or isinstance(prompt_id, bool) or not str(prompt_id):
        raise where.error("id", "required, a non-empty string")
    where.prompt = str(prompt_id)
    _reject_unknown(where, entry, PROMPT_KEYS)
    api, body = _request_body(where, entry, defaults, options)
    line = getattr(entry, "line", 0)
    return Prompt(
        id=str(prompt_id),
        category=_string(where, entry, "category", default="general"),
        request=body,
        api=api,
        hash=request_hash(body),
        tags=_string_list(where, entry, "tags"),
        expect=_expect(where, entry),
        source=f"{path}:{line}" if line else str(path),
    )


def _request_body(
    where: _Where, entry: dict[str, Any], defaults: dict[str, Any], options: RequestOptions
) -> tuple[str, dict[str, Any]]:
    set_where = _Where(where.path, defaults)
    api = options.api or defaults.get("api")
    if api is not None and api not in APIS:
        raise set_where.error("api", f"must be one of {', '.join(APIS)}, not {api!r}")
    has_messages, has_prompt = "messages" in entry, "prompt" in entry
    if has_messages == has_prompt:
        raise where.error(None, "needs exactly one of 'messages' (chat) or 'prompt' (completions)")
    fill = _haystack(where, entry.get("haystack"))
    if has_messages:
        if api == "completions":
            raise where.error("messages", "the completions API takes 'prompt', not 'messages'")
        api = "chat"
        body: dict[str, Any] = {"messages": [
            {**m, "content": fill(m["content"])} for m in _messages(where, entry["messages"])]}
    else:
        text = fill(_string(where, entry, "prompt"))
        api = api or "completions"
        body = {"prompt": text} if api == "completions" else {
            "messages": [{"role": "user", "content": text}]}

    extra = {k: _plain(v) for k, v in defaults.items() if k not in {"api", "max_tokens"}}
    body["max_tokens"] = options.max_tokens or _positive_int(
        where, entry, "max_tokens", _positive_int(set_where, defaults, "max_tokens",
                                                  DEFAULT_MAX_TOKENS))
    body.update(GREEDY_FIELDS)
    body.update(extra)
    for key in ("stop", "chat_template_kwargs", "tools", "tool_choice"):
        if key in entry:
            body[key] = _plain(entry[key])
    per_prompt_extra = entry.get("extra") or {}
    if not isinstance(per_prompt_extra, dict):
        raise where.error("extra", "must be a mapping of extra request fields")
    body.update(per_prompt_extra)
    body.update(options.extra_body)
    if "stop" in body and not _is_stop(body["stop"]):
        raise where.error("stop", "must be a string or a list of strings")
    if api == "completions":
        body.pop("chat_template_kwargs", None)
    _check_tools(where, body, api)
    return api, {k: v for k, v in body.items() if v is not None}


def _haystack(where: _Where, spec: Any) -> Callable[[str], str]:
    """What fills `{haystack}` in the prompt's text (haystack.py), or the identity."""
    if spec is None:
        return lambda text: text
    if not isinstance(spec, dict) or not {"tokens", "needle"} <= set(spec):
        raise where.error("haystack", "must be {tokens: N, needle: SENTENCE, depth: 0..1, "
                          "seed: N}")
    _reject_unknown(_Where(where.path, spec, where.prompt), spec, HAYSTACK_KEYS)
    tokens, depth, seed = spec["tokens"], spec.get("depth", 0.5), spec.get("seed", 0)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or not 0 < tokens <= 1_000_000:
        raise where.error("haystack", f"tokens must be 1 to 1,000,000, not {tokens!r}")
    if isinstance(depth, bool) or not isinstance(depth, int | float) or not 0 <= depth <= 1:
        raise where.error("haystack", f"depth must be from 0 (start) to 1 (end), not {depth!r}")
    if not isinstance(spec["needle"], str) or not isinstance(seed, int):
        raise where.error("haystack", "needle must be a sentence and seed an integer")
    filler = haystack(tokens, float(depth), spec["needle"], seed)

    def fill(text: str) -> str:
        if PLACEHOLDER not in text:
            raise where.error("haystack", f"the prompt's text has no {PLACEHOLDER} to fill")
        return text.replace(PLACEHOLDER, filler)
    return fill


def check_schema(schema: Any) -> str:
    """Why `schema` is not a JSON Schema ("" when it is), for the prompt loader."""
    if not isinstance(schema, dict):
        return "must be a mapping (a JSON Schema object)"
    try:
        validator_for(schema).check_schema(schema)
    except Exception as exc:  # noqa: BLE001 - jsonschema raises SchemaError and others
        message = str(getattr(exc, "message", exc))
        if len(message) > 240:
            message = message[:240] + "..."
        return f"not a valid JSON Schema: {message}"
    return ""


def _check_tools(where: _Where, body: dict[str, Any], api: str) -> None:
    """`tools` (OpenAI function tools) and `tool_choice`, on the chat API only."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if (tools is not None or choice is not None) and api != "chat":
        raise where.error("tools", "tools need the chat API ('messages')")
    if tools is not None:
        if not isinstance(tools, list) or not tools or not all(
                isinstance(t, dict) and t.get("type") == "function" and isinstance(
                    t.get("function"), dict) and isinstance(t["function"].get("name"), str)
                for t in tools):
            raise where.error("tools", "must be a list of {type: function, function: {name, "
                              "description, parameters}}")
        for tool in tools:
            parameters = tool["function"].get("parameters")
            if parameters is not None and (problem := check_schema(parameters)):
                raise where.error("tools", f"{tool['function']['name']} parameters: {problem}")
    if choice is not None and choice not in TOOL_CHOICES and not (
            isinstance(choice, dict) and isinstance(choice.get("function"), dict)):
        raise where.error("tool_choice", f"must be one of {', '.join(TOOL_CHOICES)} or "
                          "{type: function, function: {name: NAME}}")


def _is_stop(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(s, str) for s in value))


def _messages(where: _Where, value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise where.error("messages", "must be a non-empty list of {role, content}")
    for n, message in enumerate(value, 1):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or not \
                isinstance(message.get("content"), str):
            raise where.error("messages", f"message {n} needs a string 'role' and 'content'")
    return [dict(m) for m in value]


def _string(where: _Where, entry: dict[str, Any], key: str, default: str | None = None) -> str:
    value = entry.get(key, default)
    if not isinstance(value, str) or not value:
        raise where.error(key, "must be a non-empty string")
    return value


def _string_list(where: _Where, entry: dict[str, Any], key: str) -> list[str]:
    value = entry.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise where.error(key, "must be a string or a list of strings")
    return list(value)


def _positive_int(where: _Where, entry: dict[str, Any], key: str, default: int) -> int:
    value = entry.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise where.error(key, f"must be a positive integer, not {value!r}")
    return value


def _expect(where: _Where, entry: dict[str, Any]) -> Expect | None:
    spec = entry.get("expect")
    if spec is None:
        return None
    at = _Where(where.path, spec, where.prompt, "expect.")
    if not isinstance(spec, dict) or not spec:
        raise where.error("expect", "must be a mapping, e.g. {contains: Canberra}")
    for key in spec:
        if key not in EXPECT_KEYS:
            raise at.error(str(key),
                           f"unknown check; allowed: {', '.join(sorted(EXPECT_KEYS))}")
    number = spec.get("number")
    if number is not None and (isinstance(number, bool) or not isinstance(number, int | float)):
        raise at.error("number", "must be a number")
    tolerance = spec.get("tolerance", 0.0)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or tolerance < 0:
        raise at.error("tolerance", "must be a number >= 0")
    regex = spec.get("regex")
    if regex is not None:
        try:
            re.compile(str(regex))
        except re.error as exc:
            raise at.error("regex", f"invalid regular expression: {exc}") from None
    json_schema = spec.get("json_schema")
    if json_schema is not None and (problem := check_schema(json_schema)):
        raise at.error("json_schema", problem)
    return Expect(
        contains=_string_list(at, spec, "contains"),
        any_of=_string_list(at, spec, "any_of"),
        not_contains=_string_list(at, spec, "not_contains"),
        regex=str(regex) if regex is not None else None,
        number=float(number) if number is not None else None,
        tolerance=float(tolerance),
        case_sensitive=_flag(at, spec, "case_sensitive"),
        json=_flag(at, spec, "json"),
        json_schema=_plain(json_schema),
        tool_call=_tool_call_expect(at, spec.get("tool_call")),
        ordered=_flag(at, spec, "ordered"),
        code=_code_expect(at, spec.get("code")),
        choice=_choice(at, spec.get("choice")),
    )


def _flag(at: _Where, spec: dict[str, Any], key: str) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise at.error(key, "must be true or false")
    return value


def _plain(value: Any) -> Any:
    """A YAML value without the line bookkeeping (plain dicts and lists)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


TOOL_CALL_KEYS = {"name", "arguments_schema", "arguments"}


def _tool_call_expect(at: _Where, value: Any) -> list[ToolCallExpect] | None:
    if value is None:
        return None
    calls = value if isinstance(value, list) else [value]
    if not calls or not all(isinstance(call, dict) for call in calls):
        raise at.error("tool_call", "must be a mapping {name, arguments_schema, "
                       "arguments}, or a list of them")
    expected = []
    for call in calls:
        _reject_unknown(_Where(at.path, call, at.prompt, "expect.tool_call."), call,
                        TOOL_CALL_KEYS)
        if "name" not in call:
            raise at.error("tool_call", "each call needs 'name' (null: no call at all)")
        name = call["name"]
        if name is not None and (not isinstance(name, str) or not name):
            raise at.error("tool_call", f"name must be a tool's name or null, not {name!r}")
        schema = call.get("arguments_schema")
        if schema is not None and (problem := check_schema(schema)):
            raise at.error("tool_call", f"arguments_schema: {problem}")
        arguments = call.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise at.error("tool_call", "arguments must be a mapping of argument values")
        if name is None and (schema is not None or arguments is not None or len(calls) > 1):
            raise at.error("tool_call", "name: null (no call) stands alone")
        expected.append(ToolCallExpect(name, _plain(schema), _plain(arguments)))
    return expected


def _code_expect(at: _Where, value: Any) -> CodeExpect | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"entry_point", "tests"}:
        raise at.error("code", "must be {entry_point: NAME, tests: 'assert NAME(...)...'}")
    entry_point, tests = value["entry_point"], value["tests"]
    if not isinstance(entry_point, str) or not entry_point.isidentifier():
        raise at.error("code", f"entry_point must be a Python name, not {entry_point!r}")
    if not isinstance(tests, str) or not tests.strip():
        raise at.error("code", "tests must be Python code (asserts)")
    try:
        compile(tests, "tests", "exec")
    except SyntaxError as exc:
        raise at.error("code", f"tests are not valid Python: {exc.msg} (line "
                       f"{exc.lineno})") from None
    return CodeExpect(entry_point, tests)


def _choice(at: _Where, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != 1 or value not in CHOICE_LETTERS:
        raise at.error("choice", f"must be one letter {CHOICE_LETTERS[0]} to "
                       f"{CHOICE_LETTERS[-1]}, not {value!r}")
    return value
