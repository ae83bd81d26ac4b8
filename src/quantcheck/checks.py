"""A preflight check's outcome, and whether two sides tokenize alike (pure: read from the
fingerprints their preflights recorded, so compare needs no network)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Check:
    name: str
    status: str  # pass | warn | fail | skip
    message: str
    fix: str | None = None


def tokenizer_agreement(a: dict[str, Any] | None, b: dict[str, Any] | None) -> Check:
    """Whether A and B tokenize alike, from their recorded fingerprints."""
    a, b = a or {}, b or {}
    shared_ids = sorted(set(a.get("ids") or {}) & set(b.get("ids") or {}))
    if shared_ids:
        same = all(a["ids"][text] == b["ids"][text] for text in shared_ids)
        return Check("tokenizer", "pass" if same else "warn",
                     "A and B give the same token ids" if same else
                     "A and B tokenize differently: token positions do not correspond, so "
                     "token-level metrics are withheld")
    shared = sorted(set(a.get("prompt_tokens") or {}) & set(b.get("prompt_tokens") or {}))
    if shared:
        same = all(a["prompt_tokens"][t] == b["prompt_tokens"][t] for t in shared)
        return Check("tokenizer", "pass" if same else "warn",
                     f"A and B count the same prompt tokens for {len(shared)} probe texts"
                     if same else "A and B count different prompt tokens for the same texts: "
                     "they tokenize differently, so token-level metrics are withheld")
    return Check("tokenizer", "skip", "no tokenizer fingerprint for both sides")
