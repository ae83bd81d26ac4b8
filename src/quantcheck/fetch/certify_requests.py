"""A certificate's requests: a prompt's request after a prefix, its question replaced
for a sibling (`with_prefix`), and the record of every request as it is sent
(`RequestLog`: a `SentRequest` each, requests.jsonl's lines), credentials cut."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from ..store.records.certificate_records import Probe, Role, SentRequest
from ..store.redaction import environment_secrets, redact
from ..wire.requests import streamed


def with_prefix(request: Mapping[str, object], prefix: str, question: str | None = None
                ) -> dict[str, object]:
    """The request with `prefix` and a blank line before its prompt's text (the first
    user message's, on chat), that text replaced by `question` when given."""
    body = dict(request)
    if not prefix and question is None:
        return body

    def changed(text: str) -> str:
        text = text if question is None else question
        return f"{prefix}\n\n{text}" if prefix else text

    messages = body.get("messages")
    if isinstance(messages, list):
        listed, done = [], False
        for message in messages:
            if not done and isinstance(message, dict) and message.get("role") == "user" \
                    and isinstance(message.get("content"), str):
                message = {**message, "content": changed(message["content"])}
                done = True
            listed.append(message)
        body["messages"] = listed
    elif isinstance(body.get("prompt"), str):
        body["prompt"] = changed(str(body["prompt"]))
    return body


class RequestLog:
    """Numbers each request sent and hands its record to `record` (None: numbered only).
    `bare(probe)` is a probe's body built without the plan's own additions."""

    def __init__(self, bare: Callable[[Probe], dict[str, object]]) -> None:
        self.bare = bare
        self.record: Callable[[SentRequest], None] | None = None
        self.sent = 0  # the plan's requests, numbered
        self.secrets = environment_secrets()  # cut from every body recorded
        self.clean: dict[tuple[str, bool], bool] = {}  # prompts' bodies with nothing to cut

    def recorded(self, probe: Probe, body: dict[str, object], api: str,
                 at: tuple[int, str, bool]) -> int:
        """Record a request as it is sent (its credentials cut), `at` its round, the
        request made before the round, and whether the round starts cold; its number."""
        number = self.sent
        self.sent += 1
        if self.record is None:
            return number
        sent = streamed(body) if probe.stream else body
        try:
            raw = orjson.dumps(sent).decode("utf-8")
        except orjson.JSONEncodeError as exc:  # the client cannot send it either
            raw = orjson.dumps({"unrecordable": str(exc)}).decode("utf-8")
        role: Role = "target" if probe.target else "sibling" if probe.sibling else "filler"
        shown = raw if not self.may_hold_secrets(probe) else redact(raw, self.secrets)
        self.record(SentRequest(
            index=number, round=at[0], action=at[1], starts_cold=at[2], factor=probe.factor,
            level=probe.level, trial=probe.trial, prompt_id=probe.prompt_id, role=role,
            api="chat" if api == "chat" else "completions", stream=probe.stream,
            body=_json_object(shown), redacted=shown != raw))
        return number

    def may_hold_secrets(self, probe: Probe) -> bool:
        """Whether a body must be searched for credentials: a filler's holds the plan's
        own words and the model's name, and a prompt's request differs from its bare body
        (no prefix, greedy, whole) by the plan's words and fields alone, so it is searched
        whole only where the bare one held something to cut (redacting every long prefix
        took 5 of 22 s of a 5,000-request plan on the lab)."""
        if not probe.prompt_id:
            return False
        key = (probe.prompt_id, probe.sibling)
        if key not in self.clean:
            bare = self.bare(Probe(factor=probe.factor, level="", prompt_id=probe.prompt_id,
                                   sibling=probe.sibling))
            text = orjson.dumps(bare).decode("utf-8")
            self.clean[key] = redact(text, self.secrets) == text
        return not self.clean[key]


def _json_object(text: str) -> dict[str, Any]:
    """A body read back from its JSON text (after its credentials were cut); one whose
    cut left no JSON object holds only what says so."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {"unreadable": "credentials were cut"}
