"""The determinism certificate's records (`quantcheck determinism --certify`).

The plan (`Plan`): rounds sent one after another; the probes of a round are sent at
once (a batch), after the round's `action` ("flush": the runtime's prefix cache is
emptied first, where it can be). A probe is a target prompt (`prompt_id`, with
`prefix` words put before its text) or a filler (`filler` words, no prompt id).

Each answered target probe is an `Answer` (OUT/answers.jsonl, one per line): the
factor and level it tests, its tokens and their logprobs, or its error, the round it was
sent in and its line in OUT/requests.jsonl. Every request sent is a `SentRequest`
(OUT/requests.jsonl, in the order sent): its round, what was done before the round
(`action`: "POST /flush_cache"), its exact JSON body (built as collect builds a body,
streaming fields included) and what it was (a target, a filler, a sibling); a request
is replayed from there (`quantcheck repro CERT_DIR PROMPT_ID`).

certificate.json (`Certificate`, format "quantcheck-certificate/1"): the verdict, the
statement and its statistics, each factor's levels (each tested, or not tested with
its reason) and prompts, what a match meant per factor, examples of what differed,
the cache control used, the cache's block, the preflight, the time taken and the
control run's result (with its own figures per factor and level).

Factors: `repeat` (each prompt alone, asked again), `stream` (streamed against whole),
`batch` (inside a concurrent batch of `batch=B`), `prefix` (after a shared prefix of
`prefix=L` words, the prefix cache off or emptied), `cache` (the same with the
prefix cache on and the prefix already computed by a sibling), `warm` (the same request
cold, the cache emptied, then warm from its own cached prompt: levels `cold` and
`warm`, held to the first cold answer), `block` (a cached prefix of exactly `block=T`
tokens, shared with a sibling that wrote it: one cache block and a token either side,
held to the same request cold), `cobatch` (after a shared prefix of `prefix=L` words,
sent at once with a sibling sharing it, both writing the cache, held to the `prefix`
baseline), `order` (the prompts and a sibling after a shared prefix, one after another
with the cache on, in other orders: `reordered`, held to the first order's answers),
`seed` (sampled at a temperature above 0 with the same `seed`, held to the first such
answer).

A factor has planned levels (the plan's probes name them); each level is tested (it
made comparisons) or not tested, with the reason (`LevelResult.not_tested`: it did
not fit the server's context, the server refused it, the runtime cannot do it). A new
factor is a new `Factor`, its rounds in the plan and its line in HELD_TO and PHRASES
(triage/certificate_coverage.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec

from ...errors import RunFormatError
from ..folders.folder_kinds import CERTIFICATE_JSON as CERTIFICATE_JSON  # re-exported
from ..folders.run_dir import jsonl_lines, read_json
from .formats import CERTIFICATE_FORMAT, CertificateFormat, Count
from .preflight_records import Preflight

Factor = Literal["repeat", "stream", "batch", "prefix", "cache", "warm", "block", "cobatch",
                 "order", "seed"]
FACTORS: tuple[Factor, ...] = ("repeat", "stream", "batch", "prefix", "cache", "warm", "block",
                               "cobatch", "order", "seed")
# The factors that need the prefix cache emptied (or computed cold) and then on: not
# tested where it can be neither
CACHE_FACTORS: frozenset[Factor] = frozenset({"cache", "warm", "block", "cobatch", "order"})
# "certified": every planned level tested and every comparison matched; "certified in
# part": every comparison matched, some planned level not tested (`not_tested` says
# which and why); "not certified": a mismatch, a failed request, or nothing compared
Verdict = Literal["certified", "certified in part", "not certified"]


class Probe(msgspec.Struct, kw_only=True, frozen=True):
    """One request of the plan."""

    factor: Factor
    level: str  # "alone", "streamed", "batch=8", "prefix=511", "warm", "block=16", "seeded"
    trial: int = 0
    prompt_id: str = ""  # empty: a filler
    prefix: str = ""  # words before the prompt's text (prefix ladder)
    filler: str = ""  # a filler's whole text
    stream: bool = False
    cache: bool = False  # the prefix cache left on (llama.cpp: cache_prompt true)
    baseline: bool = False  # the answer the others of its prompt (and prefix) are held to
    seed: int | None = None  # sampled: this seed sent at `temperature` (else greedy)
    temperature: float = 0.0
    # the prompt's request asking SIBLING_QUESTION instead, after the same prefix: it
    # shares the prefix (and the prompt's template and system message), and is no answer
    sibling: bool = False
    # the prefix cut so that the request and its sibling share exactly this many tokens
    # (the server's tokenizer counts them; `block`); 0: the prefix is sent whole
    shared_tokens: int = 0

    @property
    def target(self) -> bool:
        """A prompt's own request, whose answer is compared (not a filler or sibling)."""
        return bool(self.prompt_id) and not self.sibling


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
    block_lengths: list[int] = msgspec.field(default_factory=list)  # `block`'s tokens

    @property
    def requests(self) -> int:
        return sum(len(r.probes) for r in self.rounds)

    def levels(self, factor: Factor) -> list[str]:
        """The factor's planned levels, in the plan's order."""
        return list(dict.fromkeys(p.level for r in self.rounds for p in r.probes
                                  if p.factor == factor and p.target))


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
    # the round it was sent in (0 first) and its line in requests.jsonl (0 first); None
    # in answers written before requests were recorded
    round: Count | None = None
    request: Count | None = None
    # the prompt tokens the server said it read from its cache (usage's
    # prompt_tokens_details.cached_tokens); None when it did not say
    cached_tokens: Count | None = None
    shared_tokens: Count | None = None  # `block`: the tokens shared with its sibling


Role = Literal["target", "filler", "sibling"]


class SentRequest(msgspec.Struct, kw_only=True):
    """One request as it was sent (requests.jsonl): in `round`, after `action` ("POST
    /flush_cache" once before the round's requests, "" for none), all of a round's
    requests at once; `starts_cold` where the plan empties the cache before the round
    (by `action`, or, where the engine cannot, by computing its requests cold: their
    bodies say so, as llama.cpp's `cache_prompt: false`); `body` exactly as it was sent
    (streaming fields included), every value a credential could take cut out
    (`redacted` says so)."""

    index: Count  # its line, 0 first
    round: Count
    action: str = ""
    starts_cold: bool = False
    factor: Factor
    level: str
    trial: Count = 0
    prompt_id: str = ""  # its prompt's (a sibling's too), "" for a filler
    role: Role
    api: Literal["chat", "completions"]
    stream: bool = False
    body: dict[str, Any]
    redacted: bool = False


class LevelResult(msgspec.Struct, kw_only=True):
    """One level of a factor over all prompts."""

    level: str
    prompts: Count
    prompts_varying: Count
    comparisons: Count
    mismatches: Count
    most_unique_outputs: Count  # the largest count of distinct answers of one prompt
    mean_unique_outputs: float
    first_divergence: Count | None = None  # the earliest token index that differed
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
    unique_outputs: Count
    comparisons: Count
    mismatches: Count
    varying_levels: list[str]
    first_divergence: Count | None = None
    max_logprob_delta: float | None = None


class FactorResult(msgspec.Struct, kw_only=True):
    factor: Factor
    comparisons: Count
    mismatches: Count
    prompts: Count
    prompts_varying: Count
    share_varying: float
    levels: list[LevelResult]
    explanation: str  # "varies only when batch size >= 8", "no variation"
    # MoE routing (--routed-experts): comparisons with routing on both sides, those
    # whose routing differs on the tokens both chose alike, and what that says
    routing_compared: Count = 0
    routing_differing: Count = 0
    routing: str = ""  # "variation begins in the gating: ...", "" without routing
    # what a match means here: "tokens, logprobs and top-k alternatives, bit for bit",
    # or "text only ..." where the answers carried no logprobs
    compared: str = ""
    text_only: Count = 0  # comparisons made on the texts alone


class Example(msgspec.Struct, kw_only=True):
    """One comparison that differed."""

    prompt_id: str
    factor: Factor
    level: str
    first_divergence: Count | None
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
    mismatches: Count
    comparisons: Count
    tested: bool = True  # False: no answers, or too few to judge (`statement` says why)
    not_tested: list[Untested] = msgspec.field(default_factory=list)  # the control's own
    # the control's own figures per factor and level, shown beside the target's
    factors: list[FactorResult] = msgspec.field(default_factory=list)


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
    comparisons: Count
    mismatches: Count
    failed_requests: Count
    prompts: Count
    prompts_varying: Count
    max_nondeterministic_prompts: int | None = None
    max_untested_levels: int | None = None  # the limit it was made with (null: off)
    # the mismatch rate's 95% upper bound when none differed: 3/N (rule of three)
    rate_bound: float | None = None
    rate_bound_exact: float | None = None  # 1 - 0.05^(1/N), the exact binomial bound
    explanation: str
    batch_sizes: list[int]
    prefix_lengths: list[int]
    trials: Count
    seed: int
    requests: Count  # sent (the plan's requests of the levels that were tested)
    planned_requests: Count = 0
    seconds: float | None = None  # sending the plan took (its warm-up aside)
    estimated_seconds: float | None = None  # the estimate printed before it was sent
    cache_control: str  # how the prefix cache was turned off, or that it could not be
    # the cache block the `block` factor's prefixes are cut at (tokens), and where it
    # comes from ("the server says: ...", the engine's default); None: before it was said
    cache_block_tokens: Count | None = None
    cache_block: str = ""
    # how seeded sampling was tested ("seed 0 at temperature 1.0 ..."), or why it was not
    seed_control: str = ""
    factors: list[FactorResult]
    prompt_results: list[PromptResult]
    examples: list[Example]
    control: ControlResult | None = None
    control_note: str = ""
    preflight: Preflight | None = None  # the endpoint's preflight; None with --no-preflight



def read_certificate(folder: Path) -> Certificate:
    """FOLDER/certificate.json, or one RunFormatError naming the file and field: a file
    without its `format` is no certificate, and counts that disagree with the results
    they sum (`consistency_problem`) are refused, as a negative count is."""
    path = folder / CERTIFICATE_JSON
    hint = (" (written by another quantcheck version, or edited? run `quantcheck "
            "determinism --certify` again)")
    data = read_json(path)
    if not isinstance(data, dict) or "format" not in data:
        raise RunFormatError(f"{path}: no `format` field: not a certificate written by "
                             f"`quantcheck determinism --certify`{hint}")
    try:
        certificate = msgspec.convert(data, Certificate)
    except msgspec.ValidationError as exc:
        raise RunFormatError(f"{path}: {exc}{hint}") from None
    problem = consistency_problem(certificate)
    if problem:
        raise RunFormatError(f"{path}: {problem}{hint}")
    return certificate


ANSWERS_JSONL, REQUESTS_JSONL = "answers.jsonl", "requests.jsonl"
RecordT = TypeVar("RecordT", Answer, SentRequest)


def read_lines_of(path: Path, kind: type[RecordT]) -> list[RecordT]:
    """Every line of a certificate's answers.jsonl or requests.jsonl as its record; a
    line that is no such record is one RunFormatError naming the file, the line and the
    field."""
    if not path.is_file():
        raise RunFormatError(f"{path}: not there (a certificate written before it was "
                             "recorded? run `quantcheck determinism --certify` again)")
    records = []
    for number, _, data in jsonl_lines(path):
        try:
            records.append(msgspec.convert(data, kind))
        except msgspec.ValidationError as exc:
            raise RunFormatError(f"{path}:{number}: {exc} (not a line `quantcheck "
                                 "determinism --certify` writes)") from None
    return records


def require_its_answers(folder: Path, certificate: Certificate) -> None:
    """The failures certificate.json counts include every answer in answers.jsonl that
    failed (fillers' failures are counted too, and have no line): a certificate counting
    fewer would pass on requests that were never answered."""
    path = folder / ANSWERS_JSONL
    failed = sum(1 for answer in read_lines_of(path, Answer) if answer.error is not None)
    if failed > certificate.failed_requests:
        raise RunFormatError(f"{folder / CERTIFICATE_JSON}: failed_requests is "
                             f"{certificate.failed_requests}, but {path} holds {failed} failed "
                             "answers (edited? run `quantcheck determinism --certify` again)")


def _named(ids: Sequence[str]) -> str:
    shown = ", ".join(repr(i)[:40] for i in ids[:3])
    return shown + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")


def consistency_problem(certificate: Certificate) -> str:
    """The first count that disagrees with what it counts, said naming the field ("" when
    all agree): a certificate's totals are its factors' sums, a factor's are its
    prompts', and a certificate is certified only beside no mismatch and no failure."""
    c = certificate
    varying = sorted({r.prompt_id for r in c.prompt_results if r.mismatches})
    said = [_factors_problem(c)]
    if c.prompts_varying != len(varying):
        said.append(f"prompts_varying is {c.prompts_varying}, but prompt_results list "
                    f"{len(varying)} varying prompt{'' if len(varying) == 1 else 's'}"
                    + (f" ({_named(varying)})" if varying else ""))
    named = len({r.prompt_id for r in c.prompt_results})
    if c.prompts < named:
        said.append(f"prompts is {c.prompts}, but prompt_results name {named} prompts")
    if c.failed_requests > c.requests:
        said.append(f"failed_requests is {c.failed_requests}, more than the plan's "
                    f"requests ({c.requests})")
    if c.certified and (c.mismatches or c.failed_requests or not c.comparisons):
        said.append(f"certified is true beside {c.mismatches} mismatch"
                    f"{'' if c.mismatches == 1 else 'es'}, {c.failed_requests} failed "
                    f"requests and {c.comparisons} comparisons")
    return next((problem for problem in said if problem), "")


def _factors_problem(c: Certificate) -> str:
    """The totals against the factors' sums, and each factor against its prompts."""
    seen = Counter((r.prompt_id, r.factor) for r in c.prompt_results)
    twice = [key for key, n in seen.items() if n > 1]
    if twice:
        return f"prompt_results list {twice[0][0]!r:.40} under {twice[0][1]} twice"
    for total in ("comparisons", "mismatches"):
        summed = sum(getattr(f, total) for f in c.factors)
        if getattr(c, total) != summed:
            return f"{total} is {getattr(c, total)}, but its factors count {summed}"
    if c.mismatches > c.comparisons:
        return f"mismatches ({c.mismatches}) exceed comparisons ({c.comparisons})"
    if len({f.factor for f in c.factors}) != len(c.factors):
        return "factors list a factor twice"
    for n, factor in enumerate(c.factors):
        problem = _factor_problem(factor, [r for r in c.prompt_results
                                           if r.factor == factor.factor])
        if problem:
            return f"factors[{n}] ({factor.factor}).{problem}"
    return ""


def _factor_problem(factor: FactorResult, results: Sequence[PromptResult]) -> str:
    varying = sum(1 for r in results if r.mismatches)
    for field, counted in (("comparisons", sum(r.comparisons for r in results)),
                           ("mismatches", sum(r.mismatches for r in results)),
                           ("prompts", len(results)), ("prompts_varying", varying)):
        if getattr(factor, field) != counted:
            return (f"{field} is {getattr(factor, field)}, but prompt_results list "
                    f"{counted} under {factor.factor}")
    wrong = next((r for r in results if r.mismatches > r.comparisons
                  or bool(r.mismatches) != bool(r.varying_levels)), None)
    if wrong is not None:
        return (f"prompt {wrong.prompt_id!r:.40}: {wrong.mismatches} mismatches in "
                f"{wrong.comparisons} comparisons at levels {wrong.varying_levels[:3]}")
    return ""
