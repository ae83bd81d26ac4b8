"""The scripted A/B behind `quantcheck demo --engine scripted`: no model, planted changes.

A answers the spot-check prompts correctly in vLLM's dialect. B speaks SGLang's
dialect and carries one of each kind of change quantcheck triages: identical
answers, a near-tie wording fork, a flipped fact, the repetition loop of a broken
FP8 lm_head, and a nondeterministic reduction (logprobs jitter between repeats).
"""

from __future__ import annotations

from .scripted import Faults, ScriptedModel, ScriptedServer

REFERENCE: dict[str, str | list[str]] = {
    "9.11 or 9.9": " 9.9",
    "capital of Australia": " The capital of Australia is Canberra.",
    "capital of Canada": " The capital of Canada is Ottawa.",
    "boils": " 100",
    "17 times 23": " 391",
    "planets": " 8",
    "gold": " Au",
    "Hamlet": " William Shakespeare",
}

CANDIDATE: dict[str, str | list[str]] = {
    **REFERENCE,
    "capital of Australia": " The capital of Australia is Sydney.",
    "capital of Canada": " Ottawa is the capital of Canada.",
    "Hamlet": " need analysis there" * 16,
}

RUNNER_UPS = {
    " The": [" Ottawa"],
    " Ottawa": [" The"],
    " Canberra.": [" Sydney."],
}


def demo_servers() -> tuple[ScriptedServer, ScriptedServer]:
    """Two scripted servers (not started): the reference and the candidate."""
    reference = ScriptedServer(ScriptedModel(REFERENCE, RUNNER_UPS, name="demo-bf16"), "vllm")
    candidate = ScriptedServer(ScriptedModel(CANDIDATE, RUNNER_UPS, name="demo-fp8"), "sglang",
                               faults=Faults(nondeterministic=True))
    return reference, candidate
