"""One prompt entry (a mapping as a prompt set writes it) validated into a Prompt with
its exact request body; shared by the YAML prompt sets and the data-file sources.

Values come from users' files, so they are `object` until validated: each check
narrows one field and names the file, line (or row), prompt and field it refuses
(entry_fields.py; an `expect`: expect_entries.py).

A file's `defaults:` are read once (`read_defaults`) and apply to every prompt, a
prompt's own value winning: the request fields are sent with every request; the keys
quantcheck reads itself are never sent, each applied as the prompt's own would be:
`category` and `haystack` (a prompt's own replaces it), `tags` (added to a prompt's
own), `expect` (merged check by check, a prompt's own check winning), `extra` (its
fields sent). `id`, `messages` and `prompt` are each prompt's own and refused there. A
field quantcheck reads is refused where only request fields go (a prompt's `extra`,
--extra-body): sent, it would check nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import orjson

from ..records.run_records import Expect, Prompt
from .entry_fields import (
    Fields,
    Where,
    mapping,
    plain,
    positive_int,
    reject_unknown,
    string,
    string_list,
)
from .expect_entries import check_schema, expect_of
from .haystack import LANGUAGES, PLACEHOLDER, filler_text, sentences_for

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
APIS = ("chat", "completions")
# The keys of a prompt quantcheck reads itself: never sent as request fields.
OWN_FIELDS = ("id", "category", "tags", "expect", "haystack", "extra", "messages", "prompt")
# Of those, each prompt's own, never a default.
NOT_DEFAULTS = ("id", "messages", "prompt")
# The keys of `defaults` that are not sent as they are (the rest are request fields).
READ_DEFAULTS = {"api", "max_tokens", "category", "tags", "expect", "haystack", "extra"}


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


@dataclass(frozen=True)
class Defaults:
    """A file's `defaults:`, read once (`read_defaults`; the module docstring says how
    each key applies)."""

    request: Fields = field(default_factory=dict)  # sent with every request
    api: str | None = None
    max_tokens: int | None = None
    category: str | None = None
    tags: tuple[str, ...] = ()
    expect: Fields = field(default_factory=dict)  # each prompt's own checks merged over
    checks: Expect | None = None  # `expect` read: a prompt without its own
    haystack: object = None


def read_defaults(where: Where, value: object) -> Defaults:
    """The `defaults:` mapping `value` of the file or mapping `where` is (None: none),
    each key checked once, refused naming its field."""
    fields = mapping(value if value is not None else {})
    if fields is None:
        raise where.error("defaults", "must be a mapping of request fields, e.g. "
                          "{max_tokens: 64, expect: {not_contains: 'As an AI'}}")
    at = where.inside(value, "defaults.")
    for key in NOT_DEFAULTS:
        if key in fields:
            raise at.error(key, "is each prompt's own, not a default: set it on each "
                           "prompt")
    api = fields.get("api")
    if api is not None and api not in APIS:
        raise at.error("api", f"must be one of {', '.join(APIS)}, not {api!r}")
    if fields.get("haystack") is not None:
        _haystack_spec(at, fields["haystack"])
    expect = fields.get("expect")
    request = {k: plain(v) for k, v in fields.items() if k not in READ_DEFAULTS}
    return Defaults(
        request={**request, **_request_fields(at, fields.get("extra"))},
        api=str(api) if api is not None else None,
        max_tokens=positive_int(at, fields, "max_tokens", 1) if "max_tokens" in fields
        else None,
        category=string(at, fields, "category") if "category" in fields else None,
        tags=tuple(string_list(at, fields, "tags")),
        expect=dict(mapping(expect) or {}),
        checks=expect_of(at, expect) if expect is not None else None,
        haystack=fields.get("haystack"))


def own_field_problem(fields: Mapping[str, object]) -> str:
    """Why request fields hold one quantcheck reads itself ("" when they do not): sent,
    it would check or change nothing the way it says."""
    found = next((key for key in fields if key in OWN_FIELDS), None)
    if found is None:
        return ""
    return (f"{found!r} is a prompt's own field, which quantcheck reads and never sends: "
            "give it on the prompt in the prompt file (or in its defaults: for every "
            "prompt)")


def _request_fields(where: Where, value: object) -> Fields:
    """An `extra:` mapping: request fields, sent as given."""
    fields = mapping(value if value is not None else {})
    if fields is None:
        raise where.error("extra", "must be a mapping of extra request fields")
    if problem := own_field_problem(fields):
        raise where.error("extra", problem)
    return {str(k): plain(v) for k, v in fields.items()}


def build_prompt(where: Where, entry: object, defaults: Defaults,
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
    tags = string_list(where, fields, "tags")
    expect = fields.get("expect")
    return Prompt(
        id=str(prompt_id),
        category=string(where, fields, "category", default=defaults.category or "general"),
        request=body,
        api=api,
        hash=request_hash(body),
        tags=list(dict.fromkeys([*defaults.tags, *tags])),
        expect=defaults.checks if expect is None else expect_of(where, expect,
                                                                defaults.expect),
        source=source if source is not None else where.place,
    )


def _request_body(where: Where, entry: Fields, defaults: Defaults,
                  options: RequestOptions) -> tuple[str, Fields]:
    api = options.api or defaults.api
    has_messages, has_prompt = "messages" in entry, "prompt" in entry
    if has_messages == has_prompt:
        raise where.error(None, "needs exactly one of 'messages' (chat) or 'prompt' (completions)")
    fill = _haystack(where, entry.get("haystack", defaults.haystack))
    body: Fields
    if has_messages:
        if api == "completions":
            raise where.error("messages", "the completions API takes 'prompt', not 'messages'")
        api = "chat"
        body = {"messages": [
            {**m, "content": fill(content)} if isinstance(content := m.get("content"), str)
            else m for m in messages_of(where, entry["messages"])]}
    else:
        text = fill(string(where, entry, "prompt"))
        api = api or "completions"
        body = {"prompt": text} if api == "completions" else {
            "messages": [{"role": "user", "content": text}]}
    body["max_tokens"] = options.max_tokens or positive_int(
        where, entry, "max_tokens", defaults.max_tokens or DEFAULT_MAX_TOKENS)
    body.update(GREEDY_FIELDS)
    body.update(defaults.request)
    for key in REQUEST_KEYS:
        if key in entry:
            body[key] = plain(entry[key])
    body.update(_request_fields(where, entry.get("extra")))
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
    filler = filler_text(*_haystack_spec(where, spec))

    def fill(text: str) -> str:
        if PLACEHOLDER not in text:
            raise where.error("haystack", f"the prompt's text has no {PLACEHOLDER} to fill")
        return text.replace(PLACEHOLDER, filler)
    return fill


def _haystack_spec(where: Where, spec: object) -> tuple[int, float, str, int, str]:
    """A `haystack:` mapping's sentences (`sentences`, or as many as make about
    `tokens`), depth, needle (none: an absent needle), seed and language."""
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
    return sentences, float(depth), needle, seed, language


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


