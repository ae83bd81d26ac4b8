"""Teacher-forced drift figures, offline: per position, per prompt, the noise floor of
A's own repeats, and forced.json / forced.jsonl read back (no network here; the HTTP
scoring is forced.py).

Per position: `top1` (B's top-1 is A's token), `delta_p` (B's probability of A's token
minus A's) and `kl` (a KL(A || B) lower bound over the shared top-k).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .records import Completion
from .runstore import iter_jsonl, read_json
from .triage import kl_lower_bound

FORCED_JSON = "forced.json"
FORCED_JSONL = "forced.jsonl"


@dataclass
class Positions:
    """Per-position figures of one prompt (forced, or A against its own repeats)."""

    top1: list[bool] = field(default_factory=list)
    kl: list[float] = field(default_factory=list)
    delta_p: list[float] = field(default_factory=list)

    def extend(self, other: Positions) -> None:
        self.top1 += other.top1
        self.kl += other.kl
        self.delta_p += other.delta_p

    def stats(self) -> dict[str, Any]:
        if not self.kl:
            return {"positions": 0}
        kl = np.array(self.kl)
        delta = np.array(self.delta_p)
        return {"positions": len(kl), "top1_agreement": float(np.mean(self.top1)),
                "kl": _spread(kl), "delta_p": {"mean": float(delta.mean()),
                                                **_spread(np.abs(delta), "abs_")}}


def _spread(values: np.ndarray, prefix: str = "") -> dict[str, float]:
    return {f"{prefix}mean": float(values.mean()), f"{prefix}median": float(np.median(values)),
            f"{prefix}p99": float(np.percentile(values, 99)), f"{prefix}max": float(values.max())}


def compare_position(a_token: str, a_logprob: float | None, a_top: tuple[list[str], list[float]],
                     b_logprob: float | None, b_top: tuple[list[str], list[float]]
                     ) -> tuple[bool, float, float]:
    """(B's top-1 is A's token, delta p, KL lower bound) at one position."""
    top1 = bool(b_top[0]) and b_top[0][0] == a_token
    p_a = math.exp(a_logprob) if a_logprob is not None else 0.0
    p_b = math.exp(b_logprob) if b_logprob is not None else 0.0
    return top1, p_b - p_a, kl_lower_bound(a_top[0], a_top[1], b_top[0], b_top[1])


def noise_floor(completions: list[Completion]) -> dict[str, Any]:
    """The forced figures for A against A's own repeats (successful records with
    tokens): over each repeat's common prefix with repeat 0, and where they part."""
    floor = Positions()
    groups: dict[str, list[Completion]] = {}
    for record in completions:
        groups.setdefault(record.prompt_id, []).append(record)
    repeats = 0
    for records in groups.values():
        records.sort(key=lambda r: r.repeat)
        reference = records[0].tokens
        for other in records[1:]:
            repeats += 1
            floor.extend(_repeat_positions(reference, other.tokens))
    if not repeats:
        return {"positions": 0, "note": "A has one repeat per prompt; collect A with "
                "--repeats 2 or more for a noise floor"}
    return {**floor.stats(), "repeats_compared": repeats}


def _repeat_positions(reference: Any, other: Any) -> Positions:
    found = Positions()
    for n in range(min(len(reference), len(other))):
        top1, delta, kl = compare_position(
            reference.text[n], reference.logprob[n],
            (reference.top_text[n], reference.top_logprob[n]), other.logprob[n],
            (other.top_text[n], other.top_logprob[n]))
        if reference.text[n] != other.text[n]:
            top1 = False
        found.top1.append(top1)
        found.kl.append(kl)
        found.delta_p.append(delta)
        if reference.text[n] != other.text[n]:
            break
    return found


def load_forced(folder: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """forced.json, and forced.jsonl's lines by prompt id."""
    path = Path(folder)
    summary: dict[str, Any] = read_json(path / FORCED_JSON)
    lines = {line["prompt_id"]: line for _, line in iter_jsonl(path / FORCED_JSONL)}
    return summary, lines


def pair_columns(line: dict[str, Any] | None) -> dict[str, Any]:
    """A prompt's forced figures as pairs.csv columns."""
    if not line or not line.get("positions"):
        return {}
    return {"forced_positions": line["positions"], "forced_top1": line["top1_agreement"],
            "forced_kl_mean": line["kl"]["mean"], "forced_kl_p99": line["kl"]["p99"],
            "forced_kl_max": line["kl"]["max"], "forced_delta_p_mean": line["delta_p"]["mean"]}


def all_kl(lines: dict[str, dict[str, Any]]) -> Iterator[float]:
    for line in lines.values():
        yield from (line.get("per_position") or {}).get("kl") or []
