"""The gate's policy table: every limit declared once, here. A limit is a policy file
key (`max_factual_flips`), its kind (what values it takes and how a file's value is
checked), its default and its help. Made from `LIMITS`, never written elsewhere:
`Policy`'s fields (`policy_fields`), the keys a policy file may hold and their checks
(`value_problem`), the gate's `--max-*`/`--require-*` options and so `--print-config`
(cli/options.py), the policy file's JSON Schema (`policy_schema`) and the table in
docs/gate.md (`markdown_table`); tests/test_structure.py fails on a limit written
anywhere else.

Kinds: `count` a whole number >= 0 or null (off); `share` a number from 0 to 1 or null;
`points` a number >= 0 or null (the option takes 0 to 100); `number` a number >= 0 or
null; `switch` true or false. A limit's `rules` are the `gate.json` rule names it
governs; `certificate`: the limit applies to a determinism certificate too
(gate/certificate_gate.py), the gate refusing the others there. A `count` or `share`
of compared prompts holds its rule too (`counts`: which prompts, in words and as a test
of a pairs.csv row), applied by gate/verdict.py with nothing written there; any other
limit's rule is a function in `_rules` of gate/verdict.py reading `policy.KEY`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from ..store.records.pair_records import PairRow

Kind = Literal["count", "share", "points", "number", "switch"]
# the type of a Policy field of each kind
_PYTHON_TYPES = {"count": "int | None", "share": "float | None", "points": "float | None",
                 "number": "float | None", "switch": "bool"}


@dataclass(frozen=True)
class Counted:
    """A rule the table makes whole: the compared prompts for which `test` holds, said
    "2 prompts WHAT" (a count) or "40% of compared prompts WHAT (2 of 5)" (a share)."""

    what: str
    test: Callable[[PairRow], bool]


@dataclass(frozen=True)
class Limit:
    key: str
    kind: Kind
    default: int | float | bool | None
    help: str
    rules: tuple[str, ...]
    off_flag: str = ""  # a switch's second name (`--all-flips`); else --no-KEY
    metavar: str | None = None
    certificate: bool = False  # applied to a determinism certificate too
    counts: Counted | None = None  # the rule itself, for a count or share of prompts

    def __post_init__(self) -> None:
        if self.counts is not None and (self.kind not in ("count", "share")
                                        or len(self.rules) != 1):
            raise ValueError(f"{self.key}: a limit whose row counts prompts is a count or "
                             "a share, and names its one gate.json rule")

    @property
    def flag(self) -> str:
        """The option: `--max-factual-flips`, `--confident-flips-only/--all-flips`."""
        name = "--" + self.key.replace("_", "-")
        if self.kind != "switch":
            return name
        return f"{name}/{self.off_flag or '--no-' + name[2:]}"

    def default_words(self) -> str:
        """The default as the docs say it: 0, off, true, false."""
        if self.default is None:
            return "off"
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return f"{self.default:g}"


LIMITS: tuple[Limit, ...] = (
    Limit("max_factual_flips", "count", 0,
          "Expect regressions plus reviewer-labelled blocking pairs (default 0).",
          ("factual_flips",)),
    Limit("confident_flips_only", "switch", True,
          "Leave out of factual flips the expect regressions the reference's "
          "own doubt explains (A's repeats disagree on the check, or a near tie "
          "on A's side at the fork): listed for review instead (the default). "
          "--all-flips counts every expect regression.",
          ("factual_flips",), off_flag="--all-flips"),
    Limit("max_new_degenerate", "count", 0,
          "Repetition loops or empty answers on B that A did not have (default 0).",
          ("new_degenerate_on_b",)),
    Limit("max_collapsed_on_b", "count", 0,
          "Distinct prompts B answers alike (the same first 512 characters, at "
          "least 64) while A answers them differently (default 0).",
          ("collapsed_on_b",)),
    Limit("max_nondeterministic", "count", None,
          "Prompts whose repeats' texts vary, per side (those whose logprobs "
          "alone moved are said beside, not counted; default off).",
          ("nondeterministic_a", "nondeterministic_b")),
    Limit("max_nondeterministic_prompts", "count", 0,
          "A determinism certificate's prompts that vary under any factor "
          "(REPORT_DIR holds certificate.json; default 0).",
          ("nondeterministic_prompts",), certificate=True),
    Limit("max_untested_levels", "count", 0,
          "A determinism certificate's levels planned and not tested (a level "
          "that did not fit the server's context, a cache that cannot be emptied; "
          "default 0: \"certified in part\" fails).",
          ("untested_levels",), certificate=True),
    Limit("require_review", "switch", False,
          "Fail while a non-identical pair has no verdict and no approval.",
          ("unreviewed",)),
    Limit("min_identical_share", "share", None,
          "Minimum share of identical pairs (default off).",
          ("identical_share",)),
    Limit("max_not_compared", "count", 0,
          "Prompts not compared: other hash, one side only, failed (default 0).",
          ("not_compared",)),
    Limit("max_failed_requests", "count", 0,
          "Requests without an answer on either side: failed after retries, or "
          "never sent (default 0).",
          ("failed_requests",), certificate=True),
    Limit("max_mixed_backends", "count", 0,
          "Sides whose answers name more than one backend (model, "
          "system_fingerprint or weight_version: two builds behind one URL, "
          "replicas that are not one configuration; default 0).",
          ("mixed_backends",)),
    Limit("max_skipped_checks", "count", 0,
          "Prompts whose code check did not run (no --allow-code-exec when "
          "comparing; default 0: a check that did not run never passes).",
          ("skipped_checks",)),
    Limit("max_pass_rate_drop", "points", None,
          "Fail when the expect pass rate may drop more than this (the far end of "
          "the 95% interval of B minus A; default off).",
          ("pass_rate_drop",), metavar="POINTS"),
    Limit("max_forced_kl", "number", None,
          "Fail when the mean teacher-forced KL over all scored positions exceeds X "
          "(needs a report made with --forced; default off).",
          ("forced_kl",), metavar="X"),
    Limit("require_routing_determinism", "switch", False,
          "Fail when B's repeats of a prompt were routed to other MoE experts "
          "(needs runs collected with --routed-experts; default off).",
          ("routing_determinism",)),
    Limit("max_blocking_log_signatures", "count", 0,
          "Blocking failure signatures found in --a-log/--b-log (default 0).",
          ("blocking_log_signatures",)),
    Limit("max_template_problems", "count", None,
          "Signs of a chat template the model does not know: the preflight's "
          "template warnings and answers that echo the question or carry "
          "template markers (default off: reported only).",
          ("template_problems",)),
    Limit("max_judge_flips", "count", None,
          "Pairs the judge (compare --judge) labelled with a blocking label and no "
          "person has labelled or approved (default off: the judge suggests, "
          "people decide).",
          ("judge_flips",)),
)
BY_KEY = {limit.key: limit for limit in LIMITS}
# what a determinism certificate is gated on (gate/certificate_gate.py)
CERTIFICATE_LIMITS = tuple(limit.key for limit in LIMITS if limit.certificate)


T = TypeVar("T")


def policy_fields(cls: type[T]) -> type[T]:
    """`cls` as a dataclass with one field per row of the table: the policy key, its
    kind's type, its default (the class declares none of them)."""
    fields = [(limit.key, _PYTHON_TYPES[limit.kind], dataclasses.field(default=limit.default))
              for limit in LIMITS]
    namespace = {name: value for name, value in vars(cls).items()
                 if name not in ("__dict__", "__weakref__")}
    made: type[T] = dataclasses.make_dataclass(cls.__name__, fields, namespace=namespace)
    return made


def counted_rules() -> dict[str, Limit]:
    """The gate.json rules the table makes whole, each with its limit."""
    return {limit.rules[0]: limit for limit in LIMITS if limit.counts is not None}


def share_rules() -> set[str]:
    """The gate.json rules whose count is a share (shown as a percentage)."""
    return {rule for limit in LIMITS if limit.kind == "share" for rule in limit.rules}


def value_problem(key: str, value: object) -> str | None:
    """What is wrong with a policy file's value for `key` (the fix said), or None."""
    kind = BY_KEY[key].kind
    if kind == "switch":
        return None if isinstance(value, bool) else "must be true or false"
    if value is None:
        return None
    if kind == "count":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else "a whole number >= 0, or null (off)"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "a share from 0 to 1, or null" if kind == "share" else \
            "a number >= 0, or null (off)"
    if kind == "share":
        return None if 0 <= value <= 1 else "a share from 0 to 1, or null"
    return None if value >= 0 else "a number >= 0, or null (off)"


_SCHEMA_TYPES: dict[str, dict[str, Any]] = {
    "count": {"type": ["integer", "null"], "minimum": 0},
    "share": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
    "points": {"type": ["number", "null"], "minimum": 0},
    "number": {"type": ["number", "null"], "minimum": 0},
    "switch": {"type": "boolean"},
}


def policy_schema() -> dict[str, Any]:
    """The JSON Schema of a policy file (YAML read as JSON): each key of the table."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "quantcheck gate policy",
        "description": "The limits of `quantcheck gate --policy FILE`; a key left out "
                       "keeps its default, null turns a limit off.",
        "type": "object",
        "additionalProperties": False,
        "properties": {limit.key: {**_SCHEMA_TYPES[limit.kind], "default": limit.default,
                                   "description": limit.help} for limit in LIMITS},
    }


def markdown_table() -> list[str]:
    """The table docs/gate.md holds: each policy key, its option, its default, its help."""
    lines = ["| policy key | option | default | limits | `gate.json` rules |",
             "|---|---|---|---|---|"]
    for limit in LIMITS:
        rules = ", ".join(f"`{rule}`" for rule in limit.rules)
        lines.append(f"| `{limit.key}` | `{limit.flag}` | {limit.default_words()} | "
                     f"{limit.help.replace('|', '/')} | {rules} |")
    return lines
