"""The determinism certificate's records (`quantcheck determinism --certify`).

The plan (`Plan`): rounds sent one after another; the probes of a round are sent at
once (a batch), after the round's `action` ("flush": the runtime's prefix cache is
emptied first, where it can be). A probe is a target prompt (`prompt_id`, with
`prefix` words put before its text) or a filler (`filler` words, no prompt id).

Each answered target probe is an `Answer` (OUT/answers.jsonl, one per line): the
factor and level it tests, its tokens and their logprobs, or its error.

certificate.json (`Certificate`, format "quantcheck-certificate/1"): the verdict, the
statement and its statistics, each factor's levels (each tested, or not tested with
its reason) and prompts, what a match meant per factor, examples of what differed,
the cache control used, the preflight, the time taken and the control run's result.

Factors: `repeat` (each prompt alone, asked again), `stream` (streamed against whole),
`batch` (inside a concurrent batch of `batch=B`), `prefix` (after a shared prefix of
`prefix=L` words, the prefix cache off or emptied), `cache` (the same with the
prefix cache on and the prefix already computed), `seed` (sampled at a temperature
above 0 with the same `seed`, held to the first such answer).

A factor has planned levels (the plan's probes name them); each level is tested (it
made comparisons) or not tested, with the reason (`LevelResult.not_tested`: it did
not fit the server's context, the server refused it, the runtime cannot do it). A new
factor is a new `Factor`, its rounds in the plan and its phrase in triage/certificate.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from .formats import CERTIFICATE_FORMAT, CertificateFormat
from .preflight_records import Preflight
from .run_dir import read_record

Factor = Literal["repeat", "stream", "batch", "prefix", "cache", "seed"]
FACTORS: tuple[Factor, ...] = ("repeat", "stream", "batch", "prefix", "cache", "seed")
# "certified": every planned level tested and every comparison matched; "certified in
# part": every comparison matched, some planned level not tested (`not_tested` says
# which and why); "not certified": a mismatch, a failed request, or nothing compared
Verdict = Literal["certified", "certified in part", "not certified"]


class Probe(msgspec.Struct, kw_only=True, frozen=True):
    """One request of the plan."""

    factor: Factor
    level: str  # "alone", "streamed", "batch=8", "prefix=511", "seeded"
    trial: int = 0
    prompt_id: str = ""  # empty: a filler
    prefix: str = ""  # words before the prompt's text (prefix ladder)
    filler: str = ""  # a filler's whole text
    stream: bool = False
    cache: bool = False  # the prefix cache left on (llama.cpp: cache_prompt true)
    baseline: bool = False  # the answer the others of its prompt (and prefix) are held to
    seed: int | None = None  # sampled: this seed sent at `temperature` (else greedy)
    temperature: float = 0.0


class Round(msgspec.Struct, kw_only=True, frozen=True):
    """Probes sent at once, after `action` ("flush" or "")."""

    probes: list[Probe]
    action: str = ""


class Plan(msgspec.Struct, kw_only=True):
    """Every request, in order; reproducible from its seed."""

    seed: int
    trials: int
    batch_sizes: list[int]
    prefix_lengths: list[int]
    prompts: int
    rounds: list[Round]

    @property
    def requests(self) -> int:
        return sum(len(r.probes) for r in self.rounds)

    def levels(self, factor: Factor) -> list[str]:
        """The factor's planned levels, in the plan's order."""
        return list(dict.fromkeys(p.level for r in self.rounds for p in r.probes
                                  if p.factor == factor and p.prompt_id))


class Answer(msgspec.Struct, kw_only=True):
    """One target probe's answer (answers.jsonl)."""

    prompt_id: str
    factor: Factor
    level: str
    trial: int
    prefix_words: int = 0
    baseline: bool = False
    text: str = ""
    tokens: list[str] = msgspec.field(default_factory=list)
    logprobs: list[float | None] = msgspec.field(default_factory=list)
    top: list[list[tuple[str, float]]] = msgspec.field(default_factory=list)
    error: str | None = None
    # with --routed-experts: per generated token, a digest of the experts each layer
    # chose (equal digests, equal routing); empty when the server sent none
    routing: list[str] = msgspec.field(default_factory=list)


class LevelResult(msgspec.Struct, kw_only=True):
    """One level of a factor over all prompts."""

    level: str
    prompts: int
    prompts_varying: int
    comparisons: int
    mismatches: int
    most_unique_outputs: int  # the largest count of distinct answers of one prompt
    mean_unique_outputs: float
    first_divergence: int | None = None  # the earliest token index that differed
    max_logprob_delta: float | None = None  # largest |delta logprob| at equal tokens
    not_tested: str = ""  # why this planned level was not tested; "" when it was


class Untested(msgspec.Struct, kw_only=True):
    """Planned levels of one factor that were not tested, for one reason."""

    factor: Factor
    levels: list[str]
    reason: str


class PromptResult(msgspec.Struct, kw_only=True):
    """One prompt under one factor: its answers against its baseline."""

    prompt_id: str
    factor: Factor
    unique_outputs: int
    comparisons: int
    mismatches: int
    varying_levels: list[str]
    first_divergence: int | None = None
    max_logprob_delta: float | None = None


class FactorResult(msgspec.Struct, kw_only=True):
    factor: Factor
    comparisons: int
    mismatches: int
    prompts: int
    prompts_varying: int
    share_varying: float
    levels: list[LevelResult]
    explanation: str  # "varies only when batch size >= 8", "no variation"
    # MoE routing (--routed-experts): comparisons with routing on both sides, those
    # whose routing differs on the tokens both chose alike, and what that says
    routing_compared: int = 0
    routing_differing: int = 0
    routing: str = ""  # "variation begins in the gating: ...", "" without routing
    # what a match means here: "tokens, logprobs and top-k alternatives, bit for bit",
    # or "text only ..." where the answers carried no logprobs
    compared: str = ""
    text_only: int = 0  # comparisons made on the texts alone


class Example(msgspec.Struct, kw_only=True):
    """One comparison that differed."""

    prompt_id: str
    factor: Factor
    level: str
    first_divergence: int | None
    baseline: str  # the baseline's text
    other: str  # the differing answer's text
    max_logprob_delta: float | None = None
    # what differed, in words ("token 3: ' Paris' against ' Lyon'", "logprob of token 2
    # ...", "text at character 12 ..."), and where: the token (or character) index and
    # each side's token and logprob there
    difference: str = ""
    position: int | None = None
    baseline_token: str | None = None
    other_token: str | None = None
    baseline_logprob: float | None = None
    other_logprob: float | None = None


class ControlResult(msgspec.Struct, kw_only=True):
    """The same plan against a configuration expected to vary."""

    endpoint: str
    detected: bool
    statement: str  # the control's statement, or why it was not tested
    mismatches: int
    comparisons: int
    tested: bool = True  # False: no answers, or too few to judge (`statement` says why)
    not_tested: list[Untested] = msgspec.field(default_factory=list)  # the control's own


class Certificate(msgspec.Struct, kw_only=True):
    """certificate.json."""

    format: CertificateFormat = CERTIFICATE_FORMAT
    endpoint: str
    model: str
    runtime: str | None = None
    # true when every comparison made matched, none failed and one was made at least:
    # it covers the levels tested only; `verdict` and `not_tested` say what was not
    certified: bool
    verdict: Verdict | None = None  # None: written before verdicts were recorded
    scope: str = ""  # what was tested: "repeats alone, batch sizes 2, 4, 8, ..."
    not_tested: list[Untested] = msgspec.field(default_factory=list)
    statement: str
    comparisons: int
    mismatches: int
    failed_requests: int
    prompts: int
    prompts_varying: int
    max_nondeterministic_prompts: int | None = None
    # the mismatch rate's 95% upper bound when none differed: 3/N (rule of three)
    rate_bound: float | None = None
    rate_bound_exact: float | None = None  # 1 - 0.05^(1/N), the exact binomial bound
    explanation: str
    batch_sizes: list[int]
    prefix_lengths: list[int]
    trials: int
    seed: int
    requests: int  # sent (the plan's requests of the levels that were tested)
    planned_requests: int = 0
    seconds: float | None = None  # sending the plan took (its warm-up aside)
    estimated_seconds: float | None = None  # the estimate printed before it was sent
    cache_control: str  # how the prefix cache was turned off, or that it could not be
    # how seeded sampling was tested ("seed 0 at temperature 1.0 ..."), or why it was not
    seed_control: str = ""
    factors: list[FactorResult]
    prompt_results: list[PromptResult]
    examples: list[Example]
    control: ControlResult | None = None
    control_note: str = ""
    preflight: Preflight | None = None  # the endpoint's preflight; None with --no-preflight


CERTIFICATE_JSON = "certificate.json"


def read_certificate(folder: Path) -> Certificate:
    """FOLDER/certificate.json, or one RunFormatError naming the file and field."""
    return read_record(folder / CERTIFICATE_JSON, Certificate,
                       " (written by another quantcheck version, or edited? run "
                       "`quantcheck determinism --certify` again)")
