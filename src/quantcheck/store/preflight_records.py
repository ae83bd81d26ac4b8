"""Preflight records, as a run's manifest holds them, and whether two sides tokenize
alike (pure: read from the fingerprints their preflights recorded, so compare needs no
network; the checks themselves run in preflight.py)."""

from __future__ import annotations

import msgspec


class Check(msgspec.Struct):
    """One check's outcome: `status` pass | warn | fail | skip."""

    name: str
    status: str
    message: str
    fix: str | None = None


class Fingerprint(msgspec.Struct, kw_only=True):
    """How a server tokenizes: ids of fixed texts (from its tokenize endpoint) and the
    prompt token counts of the probes. `method` is empty when nothing was recorded."""

    method: str = ""
    ids: dict[str, list[int]] = {}
    prompt_tokens: dict[str, int] = {}


class TemplateRendering(msgspec.Struct, kw_only=True, omit_defaults=True):
    """How the server renders a fixed one-turn conversation (the `template` check):
    `method` names the endpoint asked; `text` the rendered prompt and `ids` its tokens,
    where the runtime gives them; `fallback` the runtime's known fallback template in
    use; `split_markers` each template marker the tokenizer splits (marker -> pieces)."""

    method: str
    text: str | None = None
    ids: list[int] | None = None
    fallback: str | None = None
    split_markers: dict[str, int] = {}


class Preflight(msgspec.Struct, kw_only=True):
    """Every check's outcome for one endpoint, as recorded in the run's manifest."""

    endpoint: str
    model: str
    api: str
    checks: list[Check] = []
    max_model_len: int | None = None
    tokenizer: Fingerprint = msgspec.field(default_factory=Fingerprint)
    template: TemplateRendering | None = None  # chat API, when the server renders on request
    seconds: float = 0.0
    status: str = "pass"  # the worst of the checks: fail, warn or pass (see settle)

    def settle(self) -> None:
        statuses = {check.status for check in self.checks}
        self.status = "fail" if "fail" in statuses else "warn" if "warn" in statuses \
            else "pass"

    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.status == "fail"]

    def explanation(self) -> str:
        lines = [f"preflight failed for {self.endpoint} ({self.model}):"]
        for check in self.failures():
            lines.append(f"  {check.name}: {check.message}")
            if check.fix:
                lines.append(f"    Fix: {check.fix}")
        lines.append("Nothing was collected. Skip these checks with --no-preflight.")
        return "\n".join(lines)


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
