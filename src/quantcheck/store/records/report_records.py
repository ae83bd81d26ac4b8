"""The records of the report directory (summary.json and its parts, forced.json and
forced.jsonl, determinism.json): msgspec Structs, each with one JSON shape. Where they
are read and written: store/folders/report_dir.py."""

from __future__ import annotations

import msgspec

from ..folders.run_dir import Cell, Throughput
from .formats import (
    DETERMINISM_FORMAT,
    FORCED_FORMAT,
    OVERVIEW_FORMAT,
    SUMMARY_FORMAT,
    Count,
    DeterminismFormat,
    ForcedFormat,
    OverviewFormat,
    SummaryFormat,
)
from .judge_records import JudgeFigures
from .preflight_records import Check, Preflight


class SideIdentity(msgspec.Struct, kw_only=True):
    """Who a side is: `summary.a` / `summary.b`."""

    label: str
    endpoint: str | None = None
    model: str | None = None
    runtime: str | None = None
    runtime_version: str | None = None
    text_only: bool = False


class PerSide(msgspec.Struct):
    a: Count
    b: Count


class Flips(msgspec.Struct):
    regression: int
    improvement: int


class CheckCounts(msgspec.Struct, kw_only=True):
    """One kind of expect check (`contains`, `json_schema`, `tool_call`, ...) over the
    compared prompts that have it: results per side and flips."""

    checked: int  # compared prompts with this check
    a_pass: int
    b_pass: int
    regressions: int  # A pass, B fail: factual flips by this check
    improvements: int  # A fail, B pass
    skipped: int  # on either side (code checks without --allow-code-exec)


class CodeExecution(msgspec.Struct, kw_only=True):
    """Whether `code` checks ran (--allow-code-exec), within which limits (wall time,
    CPU seconds, memory), and what the sandbox they ran in isolated: the network (no
    socket, or no network), the processes (their own PID namespace), and in words what
    it does not isolate."""

    allowed: bool
    network_isolated: bool | None = None
    processes_isolated: bool | None = None
    not_isolated: list[str] = []
    wall_s: float | None = None
    cpu_s: int | None = None
    memory_mb: int | None = None


class Counts(msgspec.Struct, kw_only=True):
    prompts: int
    pairs: int  # compared
    identical: int
    wording_similar: int
    divergent: int
    flips: Flips
    suggested_factual_flip: int
    approved: int
    noise: int
    degenerate: dict[str, dict[str, int]]  # side -> reason -> prompts
    degenerate_new_on_b: int  # loops and empty answers on B where A has neither
    degenerate_new_on_b_kinds: dict[str, int]
    length_capped_new_on_b: int  # cut by max_tokens on B where A stopped: not degenerate
    nondeterministic: PerSide
    divergence_kinds: dict[str, int]
    status: dict[str, int]
    unanswered: PerSide  # requests without a successful record
    checks: dict[str, CheckCounts] = {}  # by check kind, in run_records.CHECKS order
    tool_calls: dict[str, int] = {}  # tool_call_change -> compared prompts
    routing: RoutingCounts | None = None  # when either side recorded MoE routing
    template: TemplateSigns | None = None  # when an answer showed a template gone wrong
    # factual flips (expect regressions) by what can explain them (pairs.csv's
    # flip_cause: unstable_a, near_tie, unstable_b, unverified, confident); improvements alike
    flip_causes: dict[str, int] = {}
    improvement_causes: dict[str, int] = {}
    # `nondeterministic` split (None in a report made before): prompts whose repeats gave
    # more than one text, those whose texts agree and only logprobs moved, and the
    # varying prompts whose first request alone differs
    text_varies: PerSide | None = None
    logprobs_only: PerSide | None = None
    only_first_differs: PerSide | None = None
    collapse: Collapse | None = None  # distinct prompts answered alike (a summary before: None)


class CollapseGroup(msgspec.Struct, kw_only=True):
    """Distinct prompts one side answers alike: how many, the first ids (at most 10),
    and the start of the answer they share (its first 80 characters)."""

    prompts: int
    ids: list[str]
    answer: str


class Collapse(msgspec.Struct, kw_only=True):
    """Cross-prompt collapse (triage/collapse.py): `new_on_b` compared prompts whose B
    answer is the same as another prompt's while their A answers differ (the gate's
    `collapsed_on_b`), `new_on_a` the same with the sides swapped, and B's `groups`,
    largest first (at most 10)."""

    new_on_b: int
    new_on_a: int
    groups: list[CollapseGroup] = []


class TemplateSigns(msgspec.Struct, kw_only=True):
    """Compared prompts whose answer echoes the question (chat prompts) or carries chat
    template markers, per side (pairs.csv's a_template_signs, b_template_signs)."""

    a_echo: int = 0
    a_markers: int = 0
    b_echo: int = 0
    b_markers: int = 0

    @property
    def any(self) -> bool:
        return bool(self.a_echo or self.a_markers or self.b_echo or self.b_markers)


class RoutingCounts(msgspec.Struct, kw_only=True):
    """Prompts by what their MoE routing showed (pairs.csv's routing columns)."""

    pairs: int  # compared prompts with routing on both sides
    a_gating: int  # routing differs between A's repeats
    b_gating: int
    a_after_routing: int  # routing identical across repeats, logprobs not
    b_after_routing: int
    ab_differs: int  # B routed a shared token elsewhere than A


class Comparison(msgspec.Struct):
    """How many prompts were compared, and in words why the others were not."""

    compared: int
    prompts: int
    notes: list[str]
    sentence: str


class Cells(msgspec.Struct, kw_only=True):
    a: Cell
    b: Cell
    a_key: str | None = None
    b_key: str | None = None
    differs: list[str] = []
    warning: str | None = None


class SideDeterminism(msgspec.Struct, kw_only=True):
    """How a side's repeats were made (summary.json's `determinism.a` / `.b`): the repeat
    mode, how many, how their requests met the prefix cache (`cache_off`, `cache`; None
    and "" for a run that did not record it), and whether most varying prompts show the
    first-request pattern of a warm prefix cache (`first_request_pattern`)."""

    mode: str
    repeats: int | None = None
    cache_off: bool | None = None
    cache: str = ""
    first_request_pattern: bool = False


class Spread(msgspec.Struct):
    mean: float
    median: float
    p99: float
    max: float


class FirstDivergence(msgspec.Struct):
    median: float
    min: int


class DriftSpreads(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Mean, median, p99 and max of each drift column over the compared pairs
    (summary.json's `drift`; each pair's own values are its pairs.csv columns of the
    same names)."""

    top1_agreement: Spread | None = None
    logprob_mean_abs_diff: Spread | None = None
    logprob_max_abs_diff: Spread | None = None
    kl_topk_mean: Spread | None = None
    kl_topk_max: Spread | None = None
    first_divergence: FirstDivergence | None = None


class PassRate(msgspec.Struct, kw_only=True):
    """The expect pass rates of A and B over the prompts checked on both, the paired
    change and its 95% interval (Newcombe), and the sentence that says it."""

    checked: int
    both_pass: int
    regressions: int  # A pass, B fail
    improvements: int  # A fail, B pass
    both_fail: int
    a_pass_rate: float
    b_pass_rate: float
    difference: float  # B - A, a share (not points)
    low: float
    high: float
    mcnemar_p: float  # exact, so more cautious than the interval the verdict is read off
    sentence: str = ""
    discordant_share: float | None = None  # (regressions + improvements) / checked
    # the smallest change in pass rate (a share) this many prompts detect at this
    # discordant share, 80% power, 5% two-sided (stats.detectable_change); None when no
    # prompt disagrees or there are too few to detect any
    detectable_change: float | None = None
    recovery_percent: float | None = None  # B's pass rate over A's, x 100 (A passes some)
    resolution_sentence: str = ""  # McNemar's p, the detectable change, the recovery

    def rates(self) -> str:
        """The absolute pass rates: 'A 16/17, B 14/17'."""
        return (f"A {self.both_pass + self.regressions}/{self.checked}, "
                f"B {self.both_pass + self.improvements}/{self.checked}")

    @property
    def significant(self) -> bool:
        """Whether the 95% interval of B minus A excludes no change."""
        return self.low > 0 or self.high < 0


class Bootstrap(msgspec.Struct):
    mean: float
    low: float
    high: float
    prompts: int


class Stats(msgspec.Struct):
    pass_rate: PassRate | None
    drift: dict[str, Bootstrap]
    # the same change within each category (an imported eval log's task) that has
    # prompts checked on both sides
    categories: dict[str, PassRate] = {}


class TaskFigures(msgspec.Struct, kw_only=True):
    """One task of two runs imported from eval logs: its verdict metric and settings,
    the harness's own figure for that metric in each log, and how many samples each
    side holds; quantcheck's paired figures are `stats.categories[task]`."""

    task: str
    metric: str | None = None
    few_shot: int | None = None
    higher_is_better: bool = True
    a_reported: float | None = None  # the harness's figure over A's own samples
    b_reported: float | None = None
    a_samples: int = 0
    b_samples: int = 0


class Evaluation(msgspec.Struct, kw_only=True):
    """summary.json's `evaluation`, when both sides were imported from eval logs: the
    harness and its versions, each task, and the average over tasks as model cards
    give it (each task's paired pass rate averaged, B's average over A's)."""

    harness: str
    a_version: str = "unknown"
    b_version: str = "unknown"
    tasks: list[TaskFigures] = []
    a_average: float | None = None
    b_average: float | None = None
    recovery_percent: float | None = None
    notes: list[str] = []  # what the imports noticed, and which samples did not pair


class SidePerformance(msgspec.Struct, kw_only=True):
    requests: int
    failed: int
    output_tokens: int | None = None
    compared_output_tokens: int | None = None
    ttft_p50_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p99_s: float | None = None
    output_tokens_per_s: float | None = None


class Performance(msgspec.Struct, kw_only=True):
    a: SidePerformance
    b: SidePerformance
    throughput_comparable: bool = False
    throughput_note: str = ""
    throughput_ratio_b_over_a: float | None = None


class PreflightPair(msgspec.Struct, kw_only=True):
    """Both sides' recorded preflights, whether their tokenizers agree, and whether they
    render a conversation alike."""

    a: Preflight | None = None
    b: Preflight | None = None
    tokenizer: Check
    token_metrics_withheld: str | None = None
    template: Check | None = None  # when either side rendered the conversation


class LogMatch(msgspec.Struct, kw_only=True):
    """A known failure signature found in a server log: where first, how often."""

    signature: str
    log: str
    line: int
    text: str
    count: int
    meaning: str
    action: str
    reference: str
    blocking: bool


class DeltaP(msgspec.Struct):
    """B's probability of A's token minus A's: the mean, and spread of its size."""

    mean: float
    abs_mean: float
    abs_median: float
    abs_p99: float
    abs_max: float


class KLSpread(Spread, kw_only=True, omit_defaults=True):
    """The per-position KL's spread, with llama-perplexity's 90th percentile too."""

    p90: float | None = None


class ForcedStats(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Teacher-forced figures over some positions (none scored: `positions` 0 only).

    As llama-perplexity --kl-divergence names them: `same_top_p` (B's top-1 is A's
    top-1), `rms_delta_p` (the root mean square of B's minus A's probability of A's
    token), `ppl_ratio` (exp of the mean of B's minus A's negative log-likelihood of A's
    tokens; `ppl_ratio_bound` says "exact", why it is a lower bound, or why it is left
    out: beyond the float range). `kl_quarter_k`:
    the same KL estimate on each side's top K/4 alternatives (converged when close to
    `kl`)."""

    positions: int
    top1_agreement: float | None = None
    kl: KLSpread | None = None
    delta_p: DeltaP | None = None
    note: str | None = None  # why a noise floor is missing
    repeats_compared: int | None = None
    same_top_p: float | None = None
    rms_delta_p: float | None = None
    ppl_ratio: float | None = None
    ppl_ratio_bound: str | None = None
    kl_quarter_k: Spread | None = None


class PerPosition(msgspec.Struct):
    top1: list[bool]
    kl: list[float]
    delta_p: list[float]
    b_logprob: list[float | None]
    same_top: list[bool] | None = None  # B's top-1 is A's top-1


class ForcedLine(ForcedStats, kw_only=True, omit_defaults=True):
    """A line of forced.jsonl: one prompt's figures, and each position's. `prompt_tokens`:
    the prompt's length in tokens as B scored it, so that answer position n is token
    `prompt_tokens + n` of the context (None: a line written before it was recorded)."""

    prompt_id: str
    mode: str
    skipped: str | None = None
    aligned: bool | None = None
    approximate: bool | None = None  # B re-tokenized A's text (echo, or no token ids)
    per_position: PerPosition | None = None
    prompt_tokens: int | None = None


class PositionBucket(ForcedStats, kw_only=True, omit_defaults=True):
    """The teacher-forced figures of the positions whose place in the context (prompt
    tokens before them plus their index in the answer) lies from `start` up to `end`
    (None: no end): forced.json's `by_position`, labelled "0-1K", "1K-4K", ..."""

    label: str
    start: int
    end: int | None = None


class KLHistogram(msgspec.Struct):
    high: float
    counts: list[int]


class WithinFloor(msgspec.Struct, kw_only=True):
    """How much of the A-vs-B KL lies inside the larger noise floor: `floor` names it
    ("A's repeats", "B's repeats", "B on its own tokens"), `kl_mean` is its mean KL,
    `share` that over the A-vs-B mean (capped at 1), `positions_within` the share of
    A-vs-B positions whose KL is at most the floor's 99th percentile."""

    floor: str
    kl_mean: float
    share: float
    positions_within: float
    sentence: str


class ForcedSummary(msgspec.Struct, kw_only=True):
    """forced.json (and summary.json's `forced`, with `source` and `kl_histogram`)."""

    format: ForcedFormat = FORCED_FORMAT
    endpoint: str
    model: str
    mode: str
    approximate: bool
    a_run: str
    top_k: int
    scored: int
    skipped: dict[str, str] = {}
    overall: ForcedStats
    noise_floor: ForcedStats
    tokenizer: str | None = None  # token-ids mode: whether B tokenizes like A
    seconds: float | None = None  # scoring's wall time
    source: str | None = None
    kl_histogram: KLHistogram | None = None
    a_top_k: int | None = None  # the most alternatives A's run holds at a position
    quarter_k: int | None = None  # the K/4 of `kl_quarter_k`
    estimator: str | None = None  # how KL is estimated from the top-k, in words
    b_self: ForcedStats | None = None  # B scoring its own tokens against B's run
    b_noise_floor: ForcedStats | None = None  # B against B's own repeats
    within_floor: WithinFloor | None = None
    # How the scoring requests met B's prefix cache, in words ("" in a file made before)
    cache: str = ""
    # Where B cannot turn its prefix cache off per request: A's tokens scored again in
    # the reverse order, against the first scoring (the cache's own floor), and whether
    # the A-vs-B KL mean lies within it (then it is not called drift)
    order_floor: ForcedStats | None = None
    within_order_floor: bool | None = None
    # the figures in spans of the context (0-1K, 1K-4K, 4K-16K, ...), those with a
    # scored position, and in words where they add to the overall figures ("" otherwise)
    by_position: list[PositionBucket] = []
    by_position_sentence: str = ""


class DeterminismRow(msgspec.Struct, kw_only=True):
    """One prompt in one repeat mode: how many distinct texts and signatures its
    repeats gave (determinism.csv and determinism.json's `prompts`)."""

    prompt_id: str
    category: str = ""
    mode: str
    repeats: int
    distinct_texts: int
    distinct_signatures: int | None = None
    texts: str  # "k distinct of n"
    signatures: str = ""
    first_text_divergence: int | None = None
    first_logprob_divergence: int | None = None
    max_logprob_spread: float | None = None
    verdict: str  # deterministic | logprobs vary | text varies
    routing: str = ""  # with --routed-experts: identical | after_routing | gating
    routing_sentence: str = ""
    # the first request alone differs, the repeats after it agree (a prompt cache's mark)
    only_first_differs: bool = False


class ModeCounts(msgspec.Struct, omit_defaults=True):
    prompts: int
    text_varies: int
    logprobs_vary: int
    deterministic: int
    routing: dict[str, int] = {}  # routing diagnosis -> prompts (with --routed-experts)
    only_first_differs: int = 0  # prompts whose first request alone differs


class DeterminismReport(msgspec.Struct, kw_only=True):
    """determinism.json: per repeat mode the counts, and every prompt's row."""

    format: DeterminismFormat = DETERMINISM_FORMAT
    sig_digits: int
    modes: dict[str, ModeCounts]
    prompts: list[DeterminismRow]

    @property
    def varying(self) -> int:
        return sum(row.verdict != "deterministic" for row in self.prompts)


class ThroughputPair(msgspec.Struct, kw_only=True):
    """Both sides' throughput phases, and whether B's may be compared with A's."""

    a: Throughput | None = None
    b: Throughput | None = None
    comparable: bool = False
    ratio_b_over_a: float | None = None
    note: str = ""


class ToolSession(msgspec.Struct, kw_only=True):
    """A tool session replayed turn by turn (a prompt entry's `session`): its `turns`,
    how many were `compared`, the first turn whose calls fail on A and on B (None: none
    did), B's failing prompt and its reason, and a `sentence` saying it."""

    session: str
    turns: int
    compared: int
    a_first_break: int | None = None
    b_first_break: int | None = None
    b_break_prompt: str | None = None
    b_break_reason: str = ""
    sentence: str


class Backend(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One backend a side's answers named (summary.json's `backends.X.backends`): the
    fields that name it as they were sent (absent: not sent), how many successful
    requests named it, and on which replicas."""

    model: str | None = None
    system_fingerprint: str | None = None
    weight_version: str | None = None
    requests: Count
    replicas: list[str] = []


class ReplicaAnswers(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One replica of a side (summary.json's `backends.X.replicas`): its successful and
    failed requests, how many backends its answers named, and, when it stopped
    answering in the middle of the last pass, why."""

    endpoint: str
    requests: Count
    failed: Count = 0
    backends: Count = 0
    dropped: str | None = None


class SideBackends(msgspec.Struct, kw_only=True):
    """Who answered a side (summary.json's `backends.a` / `.b`), read from its records:
    every distinct backend (`model`, `system_fingerprint`, `weight_version` as the
    answers named them); `mixed` when a field named by the answers takes more than one
    value (`differs` names those fields; a field an answer leaves out is no
    difference; `other_backends`: the requests of backends beyond the 256 told apart,
    each field kept to its first 200 characters); for a side served by several URLs,
    each replica, how many prompts
    were answered on more than one (`spread_prompts`) and how many of those gave other
    answers on one replica than on another (`spread_differing`, by token signature;
    null without logprobs)."""

    backends: list[Backend] = []
    mixed: bool = False
    differs: list[str] = []
    other_backends: Count = 0  # requests of backends beyond the first 256 told apart
    replicas: list[ReplicaAnswers] = []
    spread: str | None = None  # the run's replica spread: prompt | repeat
    spread_prompts: Count = 0
    spread_differing: Count | None = None
    spread_differing_ids: list[str] = []  # the first few

    @property
    def replicas_agree(self) -> bool | None:
        """The replicas answered as one backend and, where they answered one prompt,
        alike; None for a side of one URL."""
        if not self.replicas:
            return None
        return not self.mixed and not self.spread_differing


class Summary(msgspec.Struct, kw_only=True):
    """summary.json: every total a reader shows (terminal, sheet, gate)."""

    format: SummaryFormat = SUMMARY_FORMAT
    quantcheck_version: str
    identity: str = ""  # what review files belong to (see triage/pairs.update_identity)
    a: SideIdentity
    b: SideIdentity
    counts: Counts
    comparison: Comparison
    cells: Cells
    determinism: dict[str, SideDeterminism]
    drift: DriftSpreads
    stats: Stats
    performance: Performance
    preflight: PreflightPair
    forced: ForcedSummary | None = None  # with --forced
    approvals_file: str | None = None
    log_matches: dict[str, list[LogMatch]] = {}
    sources: dict[str, str] = {}
    sig_digits: int = 12
    near_tie_nats: float | None = None
    throughput: ThroughputPair | None = None  # when a throughput phase ran
    code_execution: CodeExecution | None = None  # when a prompt has a code check
    reviews_set_aside: list[str] = []  # review files of the report this one replaced
    judge: JudgeFigures | None = None  # with --judge
    sessions: list[ToolSession] = []  # tool sessions the prompt sets replay, turn by turn
    evaluation: Evaluation | None = None  # both sides imported from eval logs
    # who answered each side ({} in a report made before it was recorded)
    backends: dict[str, SideBackends] = {}


class CandidateRow(msgspec.Struct, kw_only=True):
    """One candidate in overview.json: its report, cell, counts, pass rates, drift,
    throughput against the reference, and the gate's verdict on it."""

    label: str
    report: str  # the candidate's report directory, relative to the overview
    endpoint: str | None = None
    cell: Cell = {}
    cell_key: str | None = None
    compared: int
    prompts: int
    identical: int
    factual_flips: int  # expect regressions (A pass, B fail)
    degenerate_new_on_b: int
    nondeterministic_b: int
    pass_rate: PassRate | None = None
    forced_kl_mean: float | None = None
    forced_top1: float | None = None
    throughput: ThroughputPair | None = None
    gate: str  # pass | fail
    gate_reasons: list[str] = []


class Recommendation(msgspec.Struct, kw_only=True):
    label: str | None  # None: no candidate passes the gate
    reason: str
    not_picked: dict[str, str] = {}  # label -> why not


class Overview(msgspec.Struct, kw_only=True):
    """overview.json: several candidates against one reference, and the decision."""

    format: OverviewFormat = OVERVIEW_FORMAT
    quantcheck_version: str
    reference: SideIdentity
    reference_cell: Cell = {}
    reference_throughput: Throughput | None = None
    candidates: list[CandidateRow]
    recommendation: Recommendation
