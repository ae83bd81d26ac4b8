"""Whether two sides tokenize alike (pure: read from the fingerprints their preflights
recorded, so compare needs no network; the fingerprints are taken in fetch/preflight.py)."""

from __future__ import annotations

from ..store.records.preflight_records import Check, Fingerprint


def tokenizer_agreement(a: Fingerprint | None, b: Fingerprint | None) -> Check:
    """Whether A and B tokenize alike, from their recorded fingerprints."""
    a, b = a or Fingerprint(), b or Fingerprint()
    # empty ids are no answer (earlier runs recorded llama-server's that way)
    shared_ids = sorted(t for t in set(a.ids) & set(b.ids) if a.ids[t] and b.ids[t])
    if shared_ids:
        same = all(a.ids[text] == b.ids[text] for text in shared_ids)
        return Check("tokenizer", "pass" if same else "warn",
                     "A and B give the same token ids" if same else
                     "A and B tokenize differently: token positions do not correspond, so "
                     "token-level metrics are withheld")
    shared = sorted(set(a.prompt_tokens) & set(b.prompt_tokens))
    if shared:
        same = all(a.prompt_tokens[t] == b.prompt_tokens[t] for t in shared)
        return Check("tokenizer", "pass" if same else "warn",
                     f"A and B count the same prompt tokens for {len(shared)} probe texts"
                     if same else "A and B count different prompt tokens for the same texts: "
                     "they tokenize differently, so token-level metrics are withheld")
    return Check("tokenizer", "skip", "no tokenizer fingerprint for both sides")
