"""Who answered a side, read from its records (summary.json's `backends`).

Each successful record names its backend as the server sent it: the answer's `model`,
`system_fingerprint` (vLLM: `vllm-VERSION-HASH` of its configuration; llama-server and
TGI: their build) and `weight_version` (SGLang's `metadata.weight_version`). A side
whose answers name two values of one of these fields was answered by two backends
(two builds behind one URL during a rollout, or replicas that are not one
configuration): `mixed`. A field an answer leaves out is no difference: vLLM started
with `--fingerprint-mode none` sends no fingerprint, and is not called mixed for it.

On a side served by several URLs, each record also names its replica: the replicas
are counted, and the prompts answered on more than one of them (the `repeat` spread,
or a dropped replica's requests sent elsewhere) tell whether they answer alike: a
prompt differs when the token signatures one replica gave are not those another gave.
"""

from __future__ import annotations

from array import array
from collections import Counter, defaultdict
from collections.abc import Callable

import numpy as np

from ..store.folders.run_dir import Manifest
from ..store.records.report_records import Backend, ReplicaAnswers, SideBackends

PromptId = Callable[[int], str]  # the prompt id of a record, by its row in file order
BackendKey = tuple[str | None, str | None, str | None]  # model, fingerprint, weights
FIELDS = ("model", "system_fingerprint", "weight_version")
NAMED_IDS = 10  # prompt ids named in `spread_differing_ids`
NO_REPLICA = -1
# What a hostile server can make compare hold: each field is kept to its first
# FIELD_CHARACTERS characters, and at most DISTINCT (replica, backend) pairs are told
# apart; the requests of any further one are counted in `other_backends`.
FIELD_CHARACTERS = 200
DISTINCT = 256


class BackendTally:
    """Counted while a run is read, record by record in file order: the successful
    requests by replica and backend, the failed ones by replica, and each record's
    replica as a small code (for the prompts answered on several)."""

    def __init__(self) -> None:
        self.answered: Counter[tuple[str | None, BackendKey]] = Counter()
        self.failed: Counter[str | None] = Counter()
        self.other = 0  # requests of backends beyond DISTINCT
        self.rows = 0
        self.codes: array[int] | None = None  # made when a record first names a replica
        self._replicas: dict[str, int] = {}

    def add(self, ok: bool, replica: str | None, backend: BackendKey) -> None:
        """One record (the common case, a backend seen before, costs a lookup)."""
        self.rows += 1
        if replica is not None or self.codes is not None:
            self._code(replica)
        key = (replica, backend)
        if ok and key in self.answered:
            self.answered[key] += 1
        elif ok:
            self._first(key)
        elif (kept := _kept(replica)) in self.failed or len(self.failed) < DISTINCT:
            self.failed[kept] += 1

    def _first(self, key: tuple[str | None, BackendKey]) -> None:
        """A backend not seen before: its fields cut, told apart while there is room."""
        replica, backend = key
        key = (_kept(replica), (_kept(backend[0]), _kept(backend[1]), _kept(backend[2])))
        if key in self.answered or len(self.answered) < DISTINCT:
            self.answered[key] += 1
        else:
            self.other += 1

    def _code(self, replica: str | None) -> None:
        if self.codes is None:  # the records before named none
            self.codes = array("h", [NO_REPLICA]) * (self.rows - 1)
        if replica is None or (replica not in self._replicas
                               and len(self._replicas) >= DISTINCT):
            self.codes.append(NO_REPLICA)
        else:
            self.codes.append(self._replicas.setdefault(_kept(replica) or "",
                                                        len(self._replicas)))

    def side(self, manifest: Manifest | None, keys: np.ndarray, ok: np.ndarray,
             signatures: np.ndarray, missing: int, prompt_id: PromptId) -> SideBackends:
        """The side's backends; `keys`, `ok` and `signatures` are its records' columns
        in file order (`missing`: the signature of a record without tokens), and
        `prompt_id(row)` names the prompt of a record."""
        backends = _backends(self.answered)
        named = [backend for _, backend in self.answered]
        differs = [name for n, name in enumerate(FIELDS)
                   if len({backend[n] for backend in named if backend[n] is not None}) > 1]
        found = SideBackends(backends=backends, mixed=bool(differs or self.other),
                             differs=differs, other_backends=self.other)
        if self._replicas or (manifest is not None and manifest.replication is not None):
            found.replicas = self._replica_answers(manifest)
            found.spread = manifest.replication.spread if manifest and manifest.replication \
                else None
            codes = np.frombuffer(self.codes, np.int16) if self.codes else \
                np.full(self.rows, NO_REPLICA, np.int16)
            _spread_agreement(found, keys[ok], codes[ok], signatures[ok], missing,
                              np.flatnonzero(ok), prompt_id)
        return found

    def _replica_answers(self, manifest: Manifest | None) -> list[ReplicaAnswers]:
        dropped = {replica.endpoint: replica.dropped for replica in
                   (manifest.replication.replicas if manifest and manifest.replication
                    else [])}
        names = list(dict.fromkeys([*dropped, *self._replicas]))
        answers = []
        for name in names:
            named = {backend for (replica, backend) in self.answered if replica == name}
            answers.append(ReplicaAnswers(
                endpoint=name, requests=sum(n for (replica, _), n in self.answered.items()
                                            if replica == name),
                failed=self.failed[name], backends=len(named), dropped=dropped.get(name)))
        return answers


def _kept(value: str | None) -> str | None:
    return value[:FIELD_CHARACTERS] if value is not None else None


def _backends(answered: Counter[tuple[str | None, BackendKey]]) -> list[Backend]:
    """Every distinct backend, most requests first (ties by name)."""
    requests: Counter[BackendKey] = Counter()
    replicas: dict[BackendKey, set[str]] = defaultdict(set)
    for (replica, backend), count in answered.items():
        requests[backend] += count
        if replica is not None:
            replicas[backend].add(replica)
    ranked = sorted(requests.items(), key=lambda item: (-item[1], str(item[0])))
    return [Backend(model=model, system_fingerprint=fingerprint, weight_version=weights,
                    requests=count, replicas=sorted(replicas[(model, fingerprint, weights)]))
            for (model, fingerprint, weights), count in ranked]


def _spread_agreement(found: SideBackends, keys: np.ndarray, codes: np.ndarray,
                      signatures: np.ndarray, missing: int, rows: np.ndarray,
                      prompt_id: PromptId) -> None:
    """The prompts answered on more than one replica, and those whose replicas gave
    other token signatures (None when the records hold no tokens)."""
    named = codes != NO_REPLICA  # a record made before the side had replicas: unknown
    order = np.lexsort((codes[named], keys[named]))
    keys, codes = keys[named][order], codes[named][order]
    signatures, rows = signatures[named][order], rows[named][order]
    if not len(keys):
        return
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(keys)]
    spread = [(start, end) for start, end in zip(starts, ends, strict=True)
              if codes[start] != codes[end - 1]]
    found.spread_prompts = len(spread)
    if spread and all(signatures[start] == missing for start, _ in spread):
        found.spread_differing = None
        return
    differing = [int(rows[start]) for start, end in spread
                 if _replicas_differ(codes[start:end], signatures[start:end])]
    found.spread_differing = len(differing)
    found.spread_differing_ids = [prompt_id(row) for row in differing[:NAMED_IDS]]


def _replicas_differ(codes: np.ndarray, signatures: np.ndarray) -> bool:
    """Whether one replica's set of signatures for a prompt is not another's."""
    by_replica: dict[int, set[int]] = defaultdict(set)
    for code, signature in zip(codes.tolist(), signatures.tolist(), strict=True):
        by_replica[code].add(signature)
    first, *others = by_replica.values()
    return any(other != first for other in others)


SHOWN_BACKENDS = 4


def mixed_sentence(name: str, found: SideBackends) -> str | None:
    """"B was answered by 2 backends, not one server: system_fingerprint 'b6123' (6
    requests); system_fingerprint 'b6124' (6 requests)", or None when one answered."""
    if not found.mixed:
        return None
    parts = []
    for backend in found.backends[:SHOWN_BACKENDS]:
        named = ", ".join(f"{field} {value!r}" for field in found.differs
                          if (value := getattr(backend, field)) is not None) or \
            "nothing named"
        where = f" on {', '.join(backend.replicas)}" if len(found.replicas) > 1 else ""
        parts.append(f"{named} ({backend.requests} request{'s' * (backend.requests != 1)}"
                     f"{where})")
    more = len(found.backends) - SHOWN_BACKENDS
    if more > 0:
        parts.append(f"and {more} more")
    if found.other_backends:
        parts.append(f"{found.other_backends} requests of still more, not told apart")
    many = f"more than {len(found.backends)}" if found.other_backends \
        else str(len(found.backends))
    return f"{name} was answered by {many} backends, not one server: " + "; ".join(parts)
