"""Judge two sides pair by pair, CHUNK_PAIRS (store/folders/report_dir.py) at a time: the pairs
(pairs.csv's rows, typed `PairRow`s), their details, and the totals the summary is made
of."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np
import orjson

from ..store.files import make_directory
from ..store.folders.report_dir import CHUNK_PAIRS, pair_frame, read_forced, writing_pairs
from ..store.folders.run_dir import PromptLines, first_seen
from ..store.records.pair_records import PairDetails, PairRow
from ..store.records.report_records import ForcedSummary, KLHistogram, Summary
from ..store.records.run_records import Prompt
from .approvals import Approval, apply_approvals, load_approvals
from .evaluations import check_pairing, evaluation_of
from .expects import CodeRunner
from .forced_figures import NOT_SCORED, ForcedColumns, all_kl, pair_columns
from .one_pair import triage_pair
from .parallel import ordered_chunks
from .sandbox import Limits, code_execution, code_runner
from .searches import begin
from .sides import Side, load_side, prompt_id_of
from .signals import NEAR_TIE_NATS
from .summary import PairTotals
from .tokenizers import tokenizer_agreement

if TYPE_CHECKING:
    import pandas as pd


def compare(a: str | Path | Side, b: str | Path | Side, sig_digits: int = 12,
            prompts: Mapping[str, Prompt] | None = None,
            approvals: str | Path | None = None, code_exec: Limits | None = None,
            jobs: int = 1) -> pd.DataFrame:
    """One row per prompt (PAIR_COLUMNS); A is the reference, B the candidate.
    `code_exec`: run `code` checks within these limits (None: they are skipped).
    `jobs`: processes for the signatures and the pairs (available_cores(): all)."""
    side_a, side_b = resolve_sides(a, b, sig_digits, prompts, jobs)
    with side_a, side_b:
        rows = [row for chunk, _ in triaged_chunks(side_a, side_b, code_runner(code_exec), jobs)
                for row in chunk]
    apply_approvals(rows, load_approvals(Path(approvals) if approvals else None))
    return pair_frame(rows)


def resolve_sides(a: str | Path | Side, b: str | Path | Side, sig_digits: int,
                   prompts: Mapping[str, Prompt] | None, jobs: int = 1) -> tuple[Side, Side]:
    # A texts file names its prompts after the other side's prompt set (or --prompts).
    side_a = None if _is_texts(a) else _side(a, sig_digits, None, jobs)
    side_b = None if _is_texts(b) else _side(b, sig_digits, None, jobs)
    known = prompts or (side_a.prompts if side_a else None) or (
        side_b.prompts if side_b else None)
    side_a, side_b = side_a or _side(a, sig_digits, known), side_b or _side(b, sig_digits, known)
    check_pairing(side_a.manifest, side_b.manifest)
    return side_a, side_b


def _side(source: str | Path | Side, sig_digits: int, prompts: Mapping[str, Prompt] | None,
          jobs: int = 1) -> Side:
    return source if isinstance(source, Side) else load_side(source, sig_digits, prompts, jobs)


def _is_texts(source: str | Path | Side) -> bool:
    return not isinstance(source, Side) and Path(source).suffix == ".json"


def triaged_chunks(a: Side, b: Side, run_code: CodeRunner | None = None, jobs: int = 1
                   ) -> Iterator[tuple[list[PairRow], list[PairDetails]]]:
    """The pairs in prompt order, CHUNK_PAIRS at a time: their rows and details; triaged
    in `jobs` processes."""
    token_level = token_metrics_withheld(a, b) is None

    def triage(keys: Sequence[int]) -> list[tuple[PairRow, PairDetails]]:
        triaged = []
        for key in map(int, keys):
            prompt = a.prompt_by_key(key) or b.prompt_by_key(key)
            prompt_id = prompt_id_of(a, b, key)
            assert prompt_id is not None  # every key in the order has a prompt or records
            triaged.append(triage_pair(prompt_id, prompt, a, b, a.records(prompt_id, key),
                                       b.records(prompt_id, key), token_level, run_code))
        return triaged

    a.close()  # each worker opens the runs' files itself (a shared offset would race)
    b.close()
    begin()  # the comparison's pattern searches: one budget, before the workers fork
    order = cast("Sequence[int]", prompt_order(a, b))  # an array slices as a sequence does
    for triaged in ordered_chunks(triage, order, jobs, CHUNK_PAIRS):
        yield [row for row, _ in triaged], [details for _, details in triaged]


def prompt_order(a: Side, b: Side) -> np.ndarray:
    """Every prompt's key once: A's prompt set in its order, then prompts only A's
    records name, then B's prompt set, then B's records."""
    keys = np.concatenate([a.prompt_keys(), a.index.order, b.prompt_keys(), b.index.order])
    order: np.ndarray = keys[first_seen(keys)]
    return order


class Digest(Protocol):
    """What the identity is fed to: a hashlib sha256."""

    def update(self, data: bytes, /) -> None: ...


def update_identity(digest: Digest, rows: Sequence[PairRow]) -> None:
    """Feed pairs, in order, to a sha256 whose first 20 hex digits are the report's
    identity, what a review belongs to: every prompt's status and both texts."""
    for row in rows:
        digest.update(orjson.dumps([row.prompt_id, row.status, row.a_text, row.b_text]))


def token_metrics_withheld(a: Side, b: Side) -> str | None:
    """Why token positions of A and B do not correspond (their preflights' tokenizer
    fingerprints differ), or None."""
    agreement = tokenizer_agreement(a.fingerprint, b.fingerprint)
    return agreement.message if agreement.status == "warn" else None


def _code_checked(prompts: Mapping[str, Prompt]) -> bool:
    """Whether a prompt asks for its code to be run (a run's prompt set knows it from
    reading its file: parsing every prompt again took a tenth of `compare`)."""
    if isinstance(prompts, PromptLines):
        return prompts.code_checked
    return any(p.expect and p.expect.code for p in prompts.values())


def _forced(folder: str | Path) -> tuple[ForcedSummary, dict[str, ForcedColumns]]:
    """The run's forced figures, with a KL histogram, and each prompt's columns."""
    forced, lines = read_forced(Path(folder))
    values = np.fromiter(all_kl(lines), float)
    high = float(np.percentile(values, 99)) if len(values) else 0.0
    counts = np.histogram(np.minimum(values, high), bins=20, range=(0.0, high or 1.0))[0]
    forced.source = str(folder)
    forced.kl_histogram = KLHistogram(high, counts.tolist())
    return forced, {prompt_id: pair_columns(line) for prompt_id, line in lines.items()}


def _add_forced(rows: Sequence[PairRow], by_prompt: Mapping[str, ForcedColumns]) -> None:
    for row in rows:
        by_prompt.get(row.prompt_id, NOT_SCORED).fill(row)


def write_pairs(side_a: Side, side_b: Side, out: Path, approvals: dict[str, Approval],
                 forced: str | Path | None, code_exec: Limits | None, jobs: int
                 ) -> tuple[Summary, PairTotals]:
    """pairs.csv and details.jsonl written chunk by chunk to temporaries that replace
    both once the summary of what they hold is made (a failure before then leaves both
    as they were; summary.json and the sheet are the caller's to write after); that
    summary but its statistics, and the totals gathered as the chunks passed."""
    forced_summary, forced_columns = _forced(forced) if forced is not None else (None, {})
    identity = hashlib.sha256()
    totals = PairTotals()
    make_directory(out)
    with side_a, side_b, writing_pairs(out) as writer:
        for rows, details in triaged_chunks(side_a, side_b, code_runner(code_exec), jobs):
            apply_approvals(rows, approvals)
            if forced_summary is not None:
                _add_forced(rows, forced_columns)
            writer.write(rows, details)
            update_identity(identity, rows)
            totals.add(rows)
        summary = totals.summary(side_a, side_b, statistics=False)
        summary.forced = forced_summary
        summary.near_tie_nats = NEAR_TIE_NATS
        summary.identity = identity.hexdigest()[:20]
        summary.evaluation = evaluation_of(side_a.manifest, side_b.manifest)
        if any(map(_code_checked, (side_a.prompts, side_b.prompts))):
            summary.code_execution = code_execution(code_exec)
    return summary, totals
