"""The JSON bodies clients send to the lab, read field by field.

A body is whatever a client wrote, so each value is read as `object` and narrowed
where it is used. Each helper fails where the plain Python operation it stands for
fails on that JSON value (aiohttp answers 500, as it always did for such a body) and
returns what that operation returned everywhere else: the lab answers every request
as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import orjson


def json_object(value: object) -> dict[str, object]:
    """A JSON object (its keys are strings); TypeError for any other value."""
    if isinstance(value, dict):
        return value
    raise TypeError(f"expected a JSON object, got {type(value).__name__}")


def json_has(value: object, name: str) -> bool:
    """`name in value`: an object's key, an array's item or a part of a string;
    TypeError for a number, a bool or null."""
    if isinstance(value, (dict, list, str)):
        return name in value
    raise TypeError(f"argument of type {type(value).__name__!r} is not a container")


def json_items(value: object) -> list[object]:
    """What iterating the value gives (an array's items, a string's characters, an
    object's keys); TypeError for a number, a bool or null, which do not iterate."""
    if isinstance(value, Iterable):
        return list(value)
    raise TypeError(f"{type(value).__name__!r} object is not iterable")


def json_int(value: object) -> int:
    """`int(value)` of a number, a bool or a string (ValueError unless it is numeric);
    TypeError for the rest."""
    if isinstance(value, (int, float, str)):
        return int(value)
    raise TypeError(f"int() cannot convert {type(value).__name__}")


def json_str(value: object) -> str:
    """A string; TypeError for any other value, as `value in text` raises."""
    if isinstance(value, str):
        return value
    raise TypeError(f"expected a string, got {type(value).__name__}")


def message_contents(messages: object) -> str:
    """The messages' contents, one per line (each message must be an object)."""
    return "\n".join(str(json_object(message).get("content", ""))
                     for message in json_items(messages))


def prompt_text_of(body: Mapping[str, object]) -> str:
    if "messages" in body:
        return message_contents(body["messages"])
    prompt = body.get("prompt", "")
    return prompt if isinstance(prompt, str) else orjson.dumps(prompt).decode()
