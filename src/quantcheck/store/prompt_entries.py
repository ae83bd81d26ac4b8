"""One prompt entry (a mapping as a prompt set writes it) validated into a Prompt with
its exact request body; shared by the YAML prompt sets and the data-file sources.

Values come from users' files, so they are `object` until validated: each check
narrows one field and names the file, line (or row), prompt and field it refuses.

An `expect.regex` is compiled here by the engine its check searches with (the `regex`
module, triage/expects.py) and by Python's `re`, whose syntax the docs promise: a
pattern either refuses (`[[` is an unterminated set to `regex`; `\\p{L}` or a
variable-width look-behind is beyond `re`) is refused naming where, never accepted to
fail every check later. `re`'s FutureWarnings about sets are never shown or raised.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import orjson
import regex as regex_engine
from jsonschema.validators import validator_for

from ..errors import PromptFileError
from .haystack import LANGUAGES, PLACEHOLDER, filler_text, sentences_for
from .run_records import CHOICE_LETTERS, CodeExpect, Expect, JsonValue, Prompt, ToolCallExpect

DEFAULT_MAX_TOKENS = 256

# Sent with every request so that "temperature 0" really is greedy on every runtime:
# llama-cpp-python defaults to repeat_penalty 1.1, which changes the logits; vLLM and
# SGLang spell the penalty repetition_penalty. top_k is left out on purpose: it cannot
# move the argmax, and runtimes disagree on its "off" value (vLLM and SGLang take -1,
# llama-cpp-python rejects anything below 0). A field set to null in --extra-body is
# dropped.
GREEDY_FIELDS: dict[str, object] = {
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
# The request fields a prompt entry names itself (the rest go to `extra`).
REQUEST_KEYS = ("stop", "chat_template_kwargs", "tools", "tool_choice")
HAYSTACK_KEYS = {"tokens", "sentences", "depth", "needle", "seed", "language"}
TOOL_CHOICES = ("auto", "none", "required")
EXPECT_KEYS = set(Expect.__dataclass_fields__)
TOOL_CALL_KEYS = {"name", "arguments_schema", "arguments"}
APIS = ("chat", "completions")

Fields = dict[str, object]


@dataclass
class SourceOptions:
    """How data files (JSONL, CSV, Parquet, datasets folders) become prompts: the
    column mapping as given (`TARGET=COLUMN[:RULE]`, a preset's name) and the sample
    drawn. docs/prompts.md ("Bring your own prompts") documents each."""

    map: list[str] = field(default_factory=list)
    preset: str | None = None
    sample: int | None = None
    seed: int | None = None  # None: 0, or a YAML source file's own


@dataclass
class RequestOptions:
    """Command-line settings that shape every request body of a run."""

    max_tokens: int | None = None
    api: str | None = None
    extra_body: dict[str, object] = field(default_factory=dict)
    source: SourceOptions = field(default_factory=SourceOptions)


def request_hash(body: Mapping[str, object]) -> str:
    hashed = {k: v for k, v in body.items() if k not in UNHASHED_FIELDS}
    return hashlib.sha256(orjson.dumps(hashed, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


_LONG_DIGITS = re.compile(rb"\d{19}")  # an integer that may not fit in 64 bits


def loads_exact(data: bytes | str) -> object:
    """JSON as written: orjson (fast) reads an integer beyond 64 bits as a float, which
    would send another number than the file holds, so a text holding a run of 19 digits
    or more is read again by Python's reader, which keeps every integer exact (and the
    request check then refuses one that does not fit). orjson.JSONDecodeError when it
    is not JSON."""
    value = orjson.loads(data)
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _LONG_DIGITS.search(raw):
        return json.loads(data)  # orjson read it: the same values, integers exact
    return value


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


def build_prompt(where: Where, entry: object, defaults: Mapping[str, object],
                 options: RequestOptions, source: str | None = None) -> Prompt:
    """The Prompt of one entry (`{id, messages | prompt, expect, ...}`)."""
    fields = mapping(entry)
    if fields is None:
        raise where.error(None, "each prompt must be a mapping with at least 'id'")
    prompt_id = fields.get("id")
    if not isinstance(prompt_id, str | int) or isinstance(prompt_id, bool) or not str(prompt_id):
        raise where.error("id", "required, a non-empty string")
    where.prompt = str(prompt_id)
    reject_unknown(where, fields, PROMPT_KEYS)
    api, body = _request_body(where, fields, defaults, options)
    return Prompt(
        id=str(prompt_id),
        category=_string(where, fields, "category", default="general"),
        request=body,
        api=api,
        hash=request_hash(body),
        tags=_string_list(where, fields, "tags"),
        expect=_expect(where, fields),
        source=source if source is not None else where.place,
    )


def _request_body(where: Where, entry: Fields, defaults: Mapping[str, object],
                  options: RequestOptions) -> tuple[str, Fields]:
    set_where = Where.of(where.path, defaults)
    api = options.api or defaults.get("api")
    if api is not None and api not in APIS:
        raise set_where.error("api", f"must be one of {', '.join(APIS)}, not {api!r}")
    has_messages, has_prompt = "messages" in entry, "prompt" in entry
    if has_messages == has_prompt:
        raise where.error(None, "needs exactly one of 'messages' (chat) or 'prompt' (completions)")
    fill = _haystack(where, entry.get("haystack"))
    body: Fields
    if has_messages:
        if api == "completions":
            raise where.error("messages", "the completions API takes 'prompt', not 'messages'")
        api = "chat"
        body = {"messages": [
            {**m, "content": fill(content)} if isinstance(content := m.get("content"), str)
            else m for m in messages_of(where, entry["messages"])]}
    else:
        text = fill(_string(where, entry, "prompt"))
        api = api or "completions"
        body = {"prompt": text} if api == "completions" else {
            "messages": [{"role": "user", "content": text}]}

    extra = {k: plain(v) for k, v in defaults.items() if k not in {"api", "max_tokens"}}
    body["max_tokens"] = options.max_tokens or _positive_int(
        where, entry, "max_tokens", _positive_int(set_where, defaults, "max_tokens",
                                                  DEFAULT_MAX_TOKENS))
    body.update(GREEDY_FIELDS)
    body.update(extra)
    for key in REQUEST_KEYS:
        if key in entry:
            body[key] = plain(entry[key])
    per_prompt_extra = entry.get("extra") or {}
    extra_fields = mapping(per_prompt_extra)
    if extra_fields is None:
        raise where.error("extra", "must be a mapping of extra request fields")
    body.update(extra_fields)
    body.update(options.extra_body)
    if "stop" in body and not _is_stop(body["stop"]):
        raise where.error("stop", "must be a string or a list of strings")
    if api == "completions":
        body.pop("chat_template_kwargs", None)
    _check_tools(where, body, str(api))
    for key, value in body.items():
        if problem := unsendable(value):
            raise where.error(key, problem)
    return str(api), {k: v for k, v in body.items() if v is not None}


def unsendable(value: object) -> str:
    """Why a request value cannot go out as JSON ("" when it can): servers and the
    request hash read integers of 64 bits, and JSON has no NaN or infinity."""
    if isinstance(value, dict):
        return next((p for v in value.values() if (p := unsendable(v))), "")
    if isinstance(value, list):
        return next((p for v in value if (p := unsendable(v))), "")
    if isinstance(value, int) and not isinstance(value, bool) and not (
            -(2 ** 63) <= value < 2 ** 64):
        return (f"the integer {value} does not fit in 64 bits, which is what servers and "
                "JSON readers hold; it is not sent changed: write it as a string or a "
                "float")
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a number JSON can carry"
    return ""


def _haystack(where: Where, spec: object) -> Callable[[str], str]:
    """What fills `{haystack}` in the prompt's text (haystack.py), or the identity."""
    if spec is None:
        return lambda text: text
    fields = mapping(spec)
    if fields is None or len({"tokens", "sentences"} & set(fields)) != 1:
        raise where.error("haystack", "must be {tokens: N, needle: SENTENCE, depth: 0..1, "
                          "seed: N} (or sentences: N in place of tokens)")
    reject_unknown(where.inside(spec), fields, HAYSTACK_KEYS)
    depth, seed = fields.get("depth", 0.5), fields.get("seed", 0)
    needle, language = fields.get("needle", ""), fields.get("language", "en")
    size_key = "tokens" if "tokens" in fields else "sentences"
    size = fields[size_key]
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= 1_000_000:
        raise where.error("haystack", f"{size_key} must be 1 to 1,000,000, not {size!r}")
    if isinstance(depth, bool) or not isinstance(depth, int | float) or not 0 <= depth <= 1:
        raise where.error("haystack", f"depth must be from 0 (start) to 1 (end), not {depth!r}")
    if not isinstance(needle, str) or not isinstance(seed, int) or isinstance(seed, bool):
        raise where.error("haystack", "needle must be a sentence and seed an integer")
    if language not in LANGUAGES:
        raise where.error("haystack", f"language must be one of {', '.join(LANGUAGES)}, "
                          f"not {language!r}")
    sentences = size if size_key == "sentences" else sentences_for(size, language, seed)
    filler = filler_text(sentences, float(depth), needle, seed, language)

    def fill(text: str) -> str:
        if PLACEHOLDER not in text:
            raise where.error("haystack", f"the prompt's text has no {PLACEHOLDER} to fill")
        return text.replace(PLACEHOLDER, filler)
    return fill


def regex_problem(pattern: str) -> str:
    """Why `pattern` cannot be an expect.regex ("" when it can): see the module
    docstring."""
    try:
        regex_engine.compile(pattern)
    except (regex_engine.error, ValueError, OverflowError, RecursionError) as exc:
        return f"invalid regular expression: {exc}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a FutureWarning on sets `regex` reads as written
        try:
            re.compile(pattern)
        except (re.error, ValueError, OverflowError, RecursionError) as exc:
            return (f"invalid regular expression in Python's re syntax: {exc} (only the "
                    "regex module's extensions read it; write it in re's syntax)")
    return ""


def check_schema(schema: object) -> str:
    """Why `schema` is not a JSON Schema ("" when it is), for the prompt loader."""
    fields = mapping(schema)
    if fields is None:
        return "must be a mapping (a JSON Schema object)"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # re's FutureWarnings on a pattern's sets
            validator_for(fields).check_schema(fields)
    except Exception as exc:  # noqa: BLE001 - jsonschema raises SchemaError and others
        message = str(getattr(exc, "message", exc))
        if len(message) > 240:
            message = message[:240] + "..."
        return f"not a valid JSON Schema: {message}"
    return ""


def _check_tools(where: Where, body: Fields, api: str) -> None:
    """`tools` (OpenAI function tools) and `tool_choice`, on the chat API only."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if (tools is not None or choice is not None) and api != "chat":
        raise where.error("tools", "tools need the chat API ('messages')")
    if tools is not None:
        functions = _functions(tools)
        if functions is None:
            raise where.error("tools", "must be a list of {type: function, function: {name, "
                              "description, parameters}}")
        for function in functions:
            parameters = function.get("parameters")
            if parameters is not None and (problem := check_schema(parameters)):
                raise where.error("tools", f"{function['name']} parameters: {problem}")
    choice_fields = mapping(choice)
    if choice is not None and choice not in TOOL_CHOICES and not (
            choice_fields is not None and mapping(choice_fields.get("function")) is not None):
        raise where.error("tool_choice", f"must be one of {', '.join(TOOL_CHOICES)} or "
                          "{type: function, function: {name: NAME}}")


def _functions(tools: object) -> list[Fields] | None:
    """The `function` of each tool, or None unless every tool is a named function."""
    if not isinstance(tools, list) or not tools:
        return None
    functions = []
    for tool in tools:
        fields = mapping(tool)
        function = mapping(fields.get("function")) if fields is not None else None
        if fields is None or fields.get("type") != "function" or function is None \
                or not isinstance(function.get("name"), str):
            return None
        functions.append(function)
    return functions


def _is_stop(value: object) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(s, str) for s in value))


def messages_of(where: Where, value: object) -> list[Fields]:
    """A chat conversation: each message a mapping with a string `role` and a `content`
    that is a string, a list of parts, or (beside `tool_calls`) null; other keys
    (`name`, `tool_calls`, `tool_call_id`) are sent as given."""
    if not isinstance(value, list) or not value:
        raise where.error("messages", "must be a non-empty list of {role, content}")
    messages: list[Fields] = []
    for n, message in enumerate(value, 1):
        fields = mapping(message)
        if fields is None or not isinstance(fields.get("role"), str):
            raise where.error("messages", f"message {n} needs a string 'role' and 'content'")
        content = fields.get("content")
        if not (isinstance(content, str) or (isinstance(content, list) and all(
                mapping(part) is not None for part in content))
                or (content is None and fields.get("tool_calls"))):
            raise where.error("messages", f"message {n} needs a string 'role' and 'content' "
                              "(a string, a list of parts, or null beside 'tool_calls')")
        messages.append({str(k): plain(v) for k, v in fields.items()})
    return messages


def _string(where: Where, entry: Mapping[str, object], key: str,
            default: str | None = None) -> str:
    value = entry.get(key, default)
    if not isinstance(value, str) or not value:
        raise where.error(key, "must be a non-empty string")
    return value


def _string_list(where: Where, entry: Mapping[str, object], key: str) -> list[str]:
    value = entry.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise where.error(key, "must be a string or a list of strings")
    return [str(v) for v in value]


def _positive_int(where: Where, entry: Mapping[str, object], key: str, default: int) -> int:
    value = entry.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise where.error(key, f"must be a positive integer, not {value!r}")
    return value


def _expect(where: Where, entry: Fields) -> Expect | None:
    spec = entry.get("expect")
    if spec is None:
        return None
    fields = mapping(spec)
    if fields is None or not fields:
        raise where.error("expect", "must be a mapping, e.g. {contains: Canberra}")
    at = where.inside(spec, "expect.")
    for key in fields:
        if key not in EXPECT_KEYS:
            raise at.error(str(key),
                           f"unknown check; allowed: {', '.join(sorted(EXPECT_KEYS))}")
    number = fields.get("number")
    if number is not None and (isinstance(number, bool) or not isinstance(number, int | float)):
        raise at.error("number", "must be a number")
    if number is not None and not _finite(number):
        raise at.error("number", f"must be a finite number, not {number} (nothing can "
                       "be checked against it: fill the answer in or drop the prompt)")
    tolerance = fields.get("tolerance", 0.0)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or tolerance < 0 \
            or not _finite(tolerance):
        raise at.error("tolerance", "must be a finite number >= 0")
    regex = fields.get("regex")
    if regex is not None and (problem := regex_problem(str(regex))):
        raise at.error("regex", problem)
    json_schema = fields.get("json_schema")
    if json_schema is not None and (problem := check_schema(json_schema)):
        raise at.error("json_schema", problem)
    return Expect(
        contains=_string_list(at, fields, "contains"),
        any_of=_string_list(at, fields, "any_of"),
        not_contains=_string_list(at, fields, "not_contains"),
        regex=str(regex) if regex is not None else None,
        number=float(number) if number is not None else None,
        tolerance=float(tolerance),
        case_sensitive=_flag(at, fields, "case_sensitive"),
        json=_flag(at, fields, "json"),
        json_schema=plain_mapping(json_schema),
        tool_call=_tool_call_expect(at, fields.get("tool_call")),
        ordered=_flag(at, fields, "ordered"),
        code=_code_expect(at, fields.get("code")),
        choice=_choice(at, fields.get("choice")),
    )


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond a float's range
        return False


def _flag(at: Where, spec: Mapping[str, object], key: str) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise at.error(key, "must be true or false")
    return value


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


def _tool_call_expect(at: Where, value: object) -> list[ToolCallExpect] | None:
    if value is None:
        return None
    calls = value if isinstance(value, list) else [value]
    if not calls or not all(mapping(call) is not None for call in calls):
        raise at.error("tool_call", "must be a mapping {name, arguments_schema, "
                       "arguments}, or a list of them")
    expected = []
    for call in calls:
        fields = cast(Fields, call)
        reject_unknown(at.inside(call, "expect.tool_call."), fields, TOOL_CALL_KEYS)
        if "name" not in fields:
            raise at.error("tool_call", "each call needs 'name' (null: no call at all)")
        name = fields["name"]
        if name is not None and (not isinstance(name, str) or not name):
            raise at.error("tool_call", f"name must be a tool's name or null, not {name!r}")
        schema = fields.get("arguments_schema")
        if schema is not None and (problem := check_schema(schema)):
            raise at.error("tool_call", f"arguments_schema: {problem}")
        arguments = fields.get("arguments")
        if arguments is not None and mapping(arguments) is None:
            raise at.error("tool_call", "arguments must be a mapping of argument values")
        if name is None and (schema is not None or arguments is not None or len(calls) > 1):
            raise at.error("tool_call", "name: null (no call) stands alone")
        expected.append(ToolCallExpect(name, plain_mapping(schema), plain_mapping(arguments)))
    return expected


def _code_expect(at: Where, value: object) -> CodeExpect | None:
    if value is None:
        return None
    fields = mapping(value)
    if fields is None or set(fields) != {"entry_point", "tests"}:
        raise at.error("code", "must be {entry_point: NAME, tests: 'assert NAME(...)...'}")
    entry_point, tests = fields["entry_point"], fields["tests"]
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


def _choice(at: Where, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != 1 or value not in CHOICE_LETTERS:
        raise at.error("choice", f"must be one letter {CHOICE_LETTERS[0]} to "
                       f"{CHOICE_LETTERS[-1]}, not {value!r}")
    return value
