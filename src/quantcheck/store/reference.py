"""A stored reference: a run of A collected earlier (on the main branch, kept as a CI
artifact or cache) that each candidate is compared with, A not collected again. It
may be reused only when the candidate is asked exactly what A was: the same prompt
set (every prompt hash) and the same settings that decide what is requested and how
the repeats are made. Anything else would compare answers to different questions,
which `compare` only finds prompt by prompt after everything was sent; here it is said
before any request goes out, every difference named."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import msgspec

from ..errors import RunMismatch
from .run_dir import Manifest, Parameters, Run, load_run

# What B must be asked as A was (the rest, e.g. concurrency or timeouts, may differ;
# the model and endpoint are what the candidate changes).
SHARED_WITH_THE_REFERENCE = ("repeats", "top_logprobs", "stream", "repeat_mode", "request",
                             "routed_experts", "routed_experts_shape", "shard")
SHOWN_IDS = 3  # prompt ids named per kind of prompt difference


class ReferenceMismatch(RunMismatch):
    """A stored reference that does not fit the candidates' settings or prompts."""


def open_reference(run_dir: Path) -> Run:
    """The stored reference run, refused unless its collection completed."""
    run = load_run(run_dir)
    status = run.status
    if status != "complete":
        counts = run.manifest.counts
        failed = f", {counts.failed} requests failed" if counts and counts.failed else ""
        raise ReferenceMismatch(
            f"the stored reference {run_dir} is {status}{failed}: finish collecting it "
            "(rerun its collect command) before comparing candidates with it")
    return run


def reference_differences(reference: Manifest, parameters: Parameters,
                          prompt_hashes: Mapping[str, str]) -> list[str]:
    """Every way a candidate asked with `parameters` and these prompts would not be
    asked what the reference was, in words; none when it may be compared."""
    found = []
    for name in SHARED_WITH_THE_REFERENCE:
        theirs = msgspec.to_builtins(getattr(reference.parameters, name))
        mine = msgspec.to_builtins(getattr(parameters, name))
        if isinstance(theirs, dict) and isinstance(mine, dict):  # the request options
            found += [f"{key}: the reference {theirs.get(key)!r}, B {mine.get(key)!r}"
                      for key in sorted(theirs.keys() | mine.keys())
                      if theirs.get(key) != mine.get(key)]
        elif theirs != mine:
            found.append(f"{name}: the reference {theirs!r}, B {mine!r}")
    return found + _prompt_differences(reference.prompt_hashes, prompt_hashes)


def _prompt_differences(theirs: Mapping[str, str], mine: Mapping[str, str]) -> list[str]:
    added = [p for p in mine if p not in theirs]
    missing = [p for p in theirs if p not in mine]
    changed = [p for p in mine if p in theirs and theirs[p] != mine[p]]
    said = []
    for ids, what in ((added, "not in the reference"), (missing, "only in the reference"),
                      (changed, "asked otherwise than in the reference (another prompt hash)")):
        if ids:
            named = ", ".join(repr(p) for p in ids[:SHOWN_IDS])
            more = f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
            said.append(f"{len(ids)} prompt{'s' * (len(ids) != 1)} {what}: {named}{more}")
    return said
