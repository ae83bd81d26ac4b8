"""The scripted A/B behind `quantcheck demo --engine scripted`: no model, planted changes.

Both sides are one serving stack (vLLM's dialect, one model name) that differs only in
the weights' format, as an A/B of a quantization should: A answers the spot-check
prompts correctly; B carries one of each kind of change quantcheck triages: identical
answers, a near-tie wording fork, a flipped fact, the repetition loop of a broken FP8
lm_head, and a nondeterministic reduction (logprobs jitter between repeats).
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


MODEL = "demo-model"
PRECISIONS = ("bf16", "fp8")  # the reference's and the candidate's (their cells say it)


def demo_servers() -> tuple[ScriptedServer, ScriptedServer]:
    """Two scripted servers (not started): the reference and the candidate."""
    reference = ScriptedServer(ScriptedModel(REFERENCE, RUNNER_UPS, name=MODEL), "vllm")
    candidate = ScriptedServer(ScriptedModel(CANDIDATE, RUNNER_UPS, name=MODEL), "vllm",
                               faults=Faults(nondeterministic=True))
    return reference, candidate
