"""Preflight records, as a run's manifest holds them (the checks run in fetch/preflight.py;
whether two sides tokenize alike is judged in triage/tokenizers.py)."""

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
