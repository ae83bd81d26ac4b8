"""A side served by several URLs of one configuration (replicas): the list read, the
replicas checked to be one configuration before any prompt is sent, and a side's
requests spread over them.

The list: URLs joined by commas (`http://r1:8000/v1,http://r2:8000/v1`), split where
a comma is followed by `http://` or `https://` (a comma inside a URL, e.g. in a
password, stays); each URL once.

The check, every replica against the first, GETs first (nothing generated yet):
the model it lists, its serving cell (runtime and version, quantization, model shape,
context length, ...: triage/cells.py) and llama.cpp's slots; then the tokenizer
fingerprint (its tokenize endpoint's ids of fixed texts, or a probe's prompt token
count), the chat template as it renders a fixed conversation (chat prompt sets), and
the backend a one-token probe's answer names (`model`, `system_fingerprint`,
`weight_version`). A difference is refused naming the replica, the axis and both
values; what could not be compared is recorded as not checked, with why.

The spread (`Spread`): each replica gets `--concurrency` requests in flight (one,
`--repeat-mode sequential`). `prompt` spread: a replica that takes a prompt sends all
its repeats (a prompt's repeats compare one server with itself); the replicas take
prompts as they free up. `repeat` spread: repeat r of the n-th prompt goes to replica
(n + r) mod R, so a prompt's repeats also tell whether the replicas agree. A replica
that stops answering (collect's dead-endpoint rule) is dropped: its pending requests
go to the others, and a request that failed on it unanswered is sent to a replica
that has not tried it; only when every replica is gone does the pass stop.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import EndpointError, QuantcheckError, RequestsFailed
from ..store.engines import profile_of
from ..store.folders.run_dir import Cell, Replica, Replication, RunWriter, ServerInfo
from ..store.records.preflight_records import Fingerprint
from ..store.records.run_records import Completion, Prompt
from ..store.redaction import public_url
from ..store.runtimes import server_slots
from ..triage.cells import cell_from_server, cell_key, differing_axes
from ..triage.tokenizers import tokenizer_agreement
from ..wire.client import EndpointClient
from .preflight import ProbeShape, replica_probe
from .server_info import describe_server
from .template_check import rendering_cell_value, template_check

SPREADS = ("prompt", "repeat")
SPREAD_MODES = ("pool", "sequential")  # the repeat modes a spread over replicas keeps
_BETWEEN_URLS = re.compile(r"\s*,\s*(?=https?://)", re.IGNORECASE)
BACKEND_FIELDS = ("model", "system_fingerprint", "weight_version")


class ReplicaMismatch(QuantcheckError):
    """Replicas of one side that are not one configuration (nothing was collected)."""


class EndpointDown(RequestsFailed):
    """The endpoint (or one replica of a side) stopped answering in the middle of a run."""


class EveryReplicaDown(EndpointDown):
    """Every replica of a side stopped answering in the middle of a run."""


def split_endpoints(text: str) -> list[str]:
    """`URL1,URL2,...` -> the URLs; one URL -> itself. An empty item or a URL named
    twice is refused in one line."""
    urls = [url.strip() for url in _BETWEEN_URLS.split(text.strip())]
    empty = [url for url in urls if not url or url.endswith(",") or url.startswith(",")]
    if len(urls) > 1 and empty:
        raise EndpointError(f"{', '.join(public_url(u) for u in urls if u)}: a list of "
                            "replicas names an empty one (two commas in a row, or one at "
                            "an end): give URLs joined by single commas")
    return urls


def check_distinct(urls: Sequence[str]) -> None:
    """Each replica once: two URLs that are one (credentials aside) are refused."""
    shown = [public_url(url) for url in urls]
    twice = sorted({url for url in shown if shown.count(url) > 1})
    if twice:
        raise EndpointError(f"the replica {twice[0]} is named twice: each URL of a side "
                            "once")


@dataclass
class _Described:
    """One replica as its GETs and its probe showed it."""

    endpoint: str
    model: str  # as it lists it
    server: ServerInfo
    cell: Cell
    fingerprint: Fingerprint = field(default_factory=Fingerprint)
    template: str | None = None
    backend: dict[str, str] = field(default_factory=dict)

    def record(self) -> Replica:
        return Replica(endpoint=self.endpoint, runtime=self.server.runtime,
                       runtime_version=self.server.runtime_version,
                       cell_key=cell_key(self.cell) or None, **self.backend)


async def check_replicas(clients: Sequence[EndpointClient], label: str, model: str,
                         first: ServerInfo, concurrency: int, shape: ProbeShape,
                         spread: str) -> Replication:
    """The replicas checked against the first (`first`: its server info, described
    already); ReplicaMismatch names the first difference found."""
    described = [_Described(public_url(clients[0].endpoint), model, first,
                            cell_from_server(first, model, concurrency))]
    for number, client in enumerate(clients[1:], 2):
        described.append(await _describe(client, label, number, len(clients), model,
                                         concurrency))
    checked = ["model", "serving cell"]
    _refuse(label, described, _cell_differences)
    _refuse(label, described, _name_differences)
    for replica, client in zip(described, clients, strict=True):
        replica.fingerprint, answer = await replica_probe(client, model, shape,
                                                          replica.server.runtime)
        replica.backend = {name: value for name in BACKEND_FIELDS
                           if isinstance(value := getattr(answer, name), str) and value}
        if shape.api == "chat":
            _, rendering = await template_check(client, model, replica.server, shape.api)
            replica.template = rendering_cell_value(rendering)
    not_checked = _not_checked(described, shape.api)
    checked += [what for what in ("tokenizer", "chat template", "backend")
                if not any(note.startswith(what) for note in not_checked)]
    _refuse(label, described, _probe_differences)
    return Replication(spread=spread, replicas=[r.record() for r in described],
                       checked=checked, not_checked=not_checked)


async def _describe(client: EndpointClient, label: str, number: int, count: int,
                    model: str, concurrency: int) -> _Described:
    endpoint = public_url(client.endpoint)
    try:
        models = await client.list_models()
    except EndpointError as exc:
        raise EndpointError(f"{label}: replica {number} of {count} ({endpoint}): {exc}; "
                            "start it, or leave it out of the list") from None
    server = await describe_server(client, models)
    listed = [str(entry["id"]) for entry in models]
    profile = profile_of(server.runtime)
    if model in listed:
        own = model
    elif profile is not None and profile.gguf_names and len(listed) == 1:
        # named by its file's path, which may differ between machines; it serves its one
        # model whatever a request names: its cell's model and quantization decide
        own = listed[0]
    else:
        raise ReplicaMismatch(
            f"{label}: replica {number} ({endpoint}) does not serve {model!r}, which "
            f"replica 1 serves (it lists: {', '.join(listed) or 'nothing'}). No prompt "
            "was sent; replicas of a side serve one model")
    return _Described(endpoint, own, server, cell_from_server(server, own, concurrency))


def _cell_differences(first: _Described, other: _Described) -> list[str]:
    found = [f"{axis} {other.cell.get(axis)!r} (replica 1: {first.cell.get(axis)!r})"
             for axis in differing_axes(first.cell, other.cell) if axis != "concurrency"]
    slots = server_slots(first.server), server_slots(other.server)
    if None not in slots and slots[0] != slots[1]:
        found.append(f"slots {slots[1]} (replica 1: {slots[0]}; llama.cpp --parallel)")
    return found


def _name_differences(first: _Described, other: _Described) -> list[str]:
    """One model under two names (llama.cpp names it by the path it was started with):
    every answer names it, so the side would read as answered by two backends."""
    if other.model == first.model:
        return []
    return [f"the name it lists its model by, {other.model!r} (replica 1: {first.model!r}), "
            "which every answer carries: start each replica with one name (llama-server: "
            "the same path, or --alias NAME)"]


def _probe_differences(first: _Described, other: _Described) -> list[str]:
    found = []
    if tokenizer_agreement(first.fingerprint, other.fingerprint).status == "warn":
        found.append("its tokenizer (other token ids or counts for the same texts)")
    if first.template and other.template and first.template != other.template:
        found.append("its chat template (it renders a fixed conversation otherwise)")
    for name in BACKEND_FIELDS:
        mine, theirs = other.backend.get(name), first.backend.get(name)
        if mine and theirs and mine != theirs:
            found.append(f"the {name} its answers name, {mine!r} (replica 1: {theirs!r})")
    return found


def _refuse(label: str, described: list[_Described], differences: _Differences) -> None:
    for number, replica in enumerate(described[1:], 2):
        found = differences(described[0], replica)
        if found:
            raise ReplicaMismatch(
                f"{label}: replica {number} ({replica.endpoint}) is not the configuration "
                f"of replica 1 ({described[0].endpoint}): {'; '.join(found)}. No prompt was "
                "sent. Give replicas of one configuration, or compare them as two "
                "candidates (--b URL1 --b URL2)")


class _Differences(Protocol):
    def __call__(self, first: _Described, other: _Described) -> list[str]: ...


def _not_checked(described: list[_Described], api: str) -> list[str]:
    notes = []
    if tokenizer_agreement(described[0].fingerprint,
                           described[1].fingerprint).status == "skip":
        notes.append("tokenizer: no tokenize endpoint and no prompt token counts")
    if api != "chat":
        notes.append("chat template: completions API, no template")
    elif not all(replica.template for replica in described):
        notes.append("chat template: not every replica renders a conversation on request")
    if not all(replica.backend for replica in described):
        notes.append("backend: not every replica's answer names its model or build")
    return notes


# --- the spread ----------------------------------------------------------------------

class Sender(Protocol):
    """One replica's sending (collect's per-endpoint session): `send` makes a request
    with its retries (raising EndpointDown when the replica stopped answering), `keep`
    stores, counts and reports a record; `unreachable`: its last failure got no answer
    at all."""

    replica: str | None
    collected: int
    failed: int

    async def send(self, prompt: Prompt, repeat: int) -> Completion: ...
    def keep(self, record: Completion) -> None: ...
    @property
    def unreachable(self) -> bool: ...


_Job = tuple[Prompt, int]


@dataclass
class _Lane:
    """A replica, the requests it holds (the rest of a prompt it took; under the
    `repeat` spread, its share), and whether it still answers."""

    sender: Sender
    held: deque[_Job] = field(default_factory=deque)
    dropped: str | None = None


class Spread:
    """One pass of a side's requests over its replicas (see the module's docstring);
    collect runs it as it runs one endpoint's session."""

    def __init__(self, senders: Sequence[Sender], spread: str, width: int,
                 writer: RunWriter, warn: Callable[[str], None], label: str) -> None:
        self.lanes = [_Lane(sender) for sender in senders]
        self.spread, self.width, self.writer = spread, width, writer
        self.warn, self.label = warn, label
        self.finished = False
        self._shared: deque[list[_Job]] = deque()  # prompts no replica holds yet
        # the lanes a request failed on without an answer, by (prompt id, repeat)
        self._tried: dict[tuple[str, int], set[int]] = {}
        self._left = 0
        self._changed = asyncio.Event()

    @property
    def collected(self) -> int:
        return sum(lane.sender.collected for lane in self.lanes)

    @property
    def failed(self) -> int:
        return sum(lane.sender.failed for lane in self.lanes)

    def dropped(self) -> dict[str, str]:
        """Replica -> why it was dropped in this pass."""
        return {lane.sender.replica or "": lane.dropped for lane in self.lanes
                if lane.dropped is not None}

    async def run(self, jobs: list[_Job], fillers: list[Prompt]) -> None:
        self._place(jobs)
        self._left = len(jobs)
        self.writer.open()
        try:
            async with asyncio.TaskGroup() as group:
                for number, lane in enumerate(self.lanes):
                    for _ in range(self.width):
                        group.create_task(self._worker(number, lane))
        except* QuantcheckError as errors:
            raise errors.exceptions[0] from None
        finally:
            self.writer.close()
        if self._left:
            reasons = "; ".join(str(lane.dropped) for lane in self.lanes)
            raise EveryReplicaDown(f"every replica of {self.label} stopped answering: "
                                   f"{reasons}")
        self.finished = True

    def _place(self, jobs: list[_Job]) -> None:
        """Each prompt's requests in order: shared (`prompt`), or dealt to the lanes."""
        by_prompt: dict[str, list[_Job]] = {}
        for job in jobs:
            by_prompt.setdefault(job[0].id, []).append(job)
        if self.spread == "prompt":
            self._shared.extend(by_prompt.values())
            return
        for number, prompt_jobs in enumerate(by_prompt.values()):
            for prompt, repeat in prompt_jobs:
                lane = self.lanes[(number + repeat) % len(self.lanes)]
                lane.held.append((prompt, repeat))

    def _next(self, lane: _Lane) -> _Job | None:
        if lane.held:
            return lane.held.popleft()
        while self._shared:
            prompt_jobs = self._shared.popleft()
            if prompt_jobs:
                lane.held.extend(prompt_jobs[1:])
                return prompt_jobs[0]
        return None

    async def _worker(self, number: int, lane: _Lane) -> None:
        while lane.dropped is None and self._left:
            job = self._next(lane)
            if job is None:  # another replica may hand requests back: wait for a change
                self._changed.clear()
                await self._changed.wait()
                continue
            await self._send(number, lane, job)
            self._changed.set()

    async def _send(self, number: int, lane: _Lane, job: _Job) -> None:
        try:
            record = await lane.sender.send(*job)
        except EndpointDown as exc:
            self._drop(lane, str(exc), job)
            return
        key = (job[0].id, job[1])
        tried = self._tried.setdefault(key, set())
        tried.add(number)
        others = [n for n, other in enumerate(self.lanes)
                  if other.dropped is None and n not in tried]
        if record.error and lane.sender.unreachable and others:
            self._shared.append([job])  # sent again by a replica that has not tried it
            return
        self._tried.pop(key, None)
        lane.sender.keep(record)
        self._left -= 1

    def _drop(self, lane: _Lane, reason: str, job: _Job) -> None:
        """A replica that stopped answering: what it held goes to the others."""
        if lane.dropped is None:
            lane.dropped = reason
            live = sum(other.dropped is None for other in self.lanes)
            self.warn(f"{self.label}: {reason}; its requests go to the {live} other "
                      f"replica{'s' * (live != 1)}" if live else
                      f"{self.label}: {reason}, the last replica")
        held = [job, *lane.held]
        lane.held.clear()
        by_prompt: dict[str, list[_Job]] = {}
        for one in held:
            by_prompt.setdefault(one[0].id, []).append(one)
        self._shared.extend(by_prompt.values())
        self._changed.set()
