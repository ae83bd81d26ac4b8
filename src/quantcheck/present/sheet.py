"""Render REPORT_DIR/index.html, the self-contained review sheet, from the report files."""

from __future__ import annotations

import math
import os
import secrets
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
from markupsafe import Markup

from ..store.files import AtomicFile, write_atomic
from ..store.folders.report_dir import (
    PAIRS_READ_AT_ONCE,
    DetailsReader,
    PromptIds,
    iter_pair_rows,
    iter_pairs,
    read_judge_labels,
    read_summary,
)
from ..store.folders.reviews import load_reviews
from ..store.inputs.rubric import Rubric, load_rubric
from ..store.records.judge_records import Agreement
from ..store.records.pair_records import FLIP_CAUSE_TEXT, PAIR_COLUMNS, REVIEW_CAUSES
from ..store.records.report_records import Counts, ForcedSummary, Overview, Summary
from ..triage.agreement import agreement, review_verdicts
from ..triage.cells import CELL_AXES
from ..triage.forced_figures import llama_cpp_sentence
from .sentences import (
    agreement_sentence,
    backends_warning,
    collapse_warning,
    collecting_speed,
    figure,
    headline,
    judge_sentence,
    order_floor_sentence,
    repeats_phrases,
    repeats_sent,
    replicas_lines,
    task_lines,
    template_warning,
)
from .templating import embed_json, template

SHEET = "index.html"
AXES = ["model", "runtime", "runtime_version"]
# At a divergence the sheet shows both sides' tokens and the alternatives within this
# many nats of a side's most likely token (at least e^-2, 14% of its probability);
# a top-20 list beyond them is noise a reviewer opens on demand.
TOPK_MARGIN_NATS = 2.0
# Above this many pairs the sheet embeds the texts and details of the pairs that need
# a human only (not identical, not approved); the others keep their row (id, category,
# status, flags: counted, filtered, found by id) and name pairs.csv for their texts.
# 20,000 pairs of which 60% identical then open like 8,000 (bench/sheet.py).
EMBED_ALL_UP_TO = 2000
ELIDED_FIELDS = ("a_text", "b_text", "a_tool_calls", "b_tool_calls")
# A pair in the page is a row of these values: at 20,000 pairs, naming every value
# took a third of the page's 40 MB
SHEET_COLUMNS = [*PAIR_COLUMNS, "detail", "elided"]


SHEET_PAIRS_CHUNK = PAIRS_READ_AT_ONCE
# What the template needs from every pair (the rest is streamed into the page).
PLOTTED = ("similarity", "first_divergence", "divergence_gap")
OVERVIEW_COLUMNS = ["prompt_id", "category", "status", "identical", *PLOTTED]


@dataclass
class PairsOverview:
    """What the sheet's page shows of all pairs, read from pairs.csv a few thousand
    rows at a time: the count, the categories, the spreads it plots (non-identical
    compared pairs) and the prompt ids reviews are checked against."""

    pairs: int
    categories: list[str]
    plotted: dict[str, np.ndarray]
    prompt_ids: PromptIds

    @classmethod
    def read(cls, report_dir: Path) -> PairsOverview:
        import pandas as pd  # here alone: importing this module (the CLI does) stays light

        pairs, categories, keys = 0, set(), []
        plotted: dict[str, list[np.ndarray]] = {column: [] for column in PLOTTED}
        for frame in iter_pairs(report_dir, PAIRS_READ_AT_ONCE, OVERVIEW_COLUMNS):
            pairs += len(frame)
            keys.append(PromptIds.of(frame))
            categories |= {str(c) for c in frame["category"].dropna() if c}
            identical = frame["identical"].eq(True).fillna(False).astype(bool)
            shown = frame[(frame["status"] == "compared") & ~identical]
            for column, values in plotted.items():
                values.append(pd.to_numeric(shown[column], errors="coerce").dropna()
                              .to_numpy(float))
        return cls(pairs, sorted(categories),
                   {c: np.concatenate(v) if v else np.zeros(0) for c, v in plotted.items()},
                   PromptIds(keys))


def _sheet_head(report_dir: Path, rubric: Rubric, live: dict[str, str] | None,
                summary: Summary, prompt_ids: Container[str]) -> dict[str, object]:
    """The sheet's data without its pairs."""
    reviews, refused = load_reviews(report_dir, summary.identity, rubric, prompt_ids)
    head: dict[str, object] = {
        "meta": {"identity": summary.identity, "a": msgspec.to_builtins(summary.a),
                 "b": msgspec.to_builtins(summary.b)},
        "rubric": rubric.to_json(),
        "flip_causes": FLIP_CAUSE_TEXT,
        "review_causes": REVIEW_CAUSES,
        "reviews": {name: msgspec.to_builtins(review) for name, review in reviews.items()},
        "refused_reviews": refused,
        "live": live,
    }
    if summary.judge is not None:
        judged = agreement(read_judge_labels(report_dir), review_verdicts(reviews),
                           [label.id for label in rubric.labels])
        head["judge"] = {"model": summary.judge.model, "endpoint": summary.judge.endpoint,
                         "prompt_version": summary.judge.prompt_version,
                         "agreement": msgspec.to_builtins(judged)}
    return head


def _sheet_pairs(report_dir: Path, elide: bool) -> Iterator[dict[str, object]]:
    """Each pair of pairs.csv with its details, in order; with `elide`, those that need
    no human without texts or empty cells."""
    details = DetailsReader(report_dir)
    for rows in iter_pair_rows(report_dir, SHEET_PAIRS_CHUNK):
        for row in rows:
            record = dict(zip(PAIR_COLUMNS, msgspec.structs.astuple(row), strict=True))
            detail = details.get(row.prompt_id)
            if elide and not (row.needs_review and not row.approved_label):
                record = {key: value for key, value in record.items()
                          if key not in ELIDED_FIELDS and value not in (None, "")}
                record.update(detail={}, elided=True)
            else:
                record["detail"] = detail
            yield record


def sheet_pieces(report_dir: str | Path, rubric: Rubric | str | Path | None = None,
                 live: dict[str, str] | None = None) -> Iterator[str]:
    """The review sheet's HTML in pieces: the page, its data streamed pair by pair (a
    100,000-pair report is never one string), the rest of the page. `rubric`: loaded
    already, or its file (None: the default rubric)."""
    report_dir = Path(report_dir)
    rubric = rubric if isinstance(rubric, Rubric) else load_rubric(rubric)
    summary = read_summary(report_dir)
    overview = PairsOverview.read(report_dir)
    # where the data goes: unguessable, so no text the page shows (a label, a log line)
    # can stand in for it
    placeholder = f"\0{secrets.token_hex(16)}\0"
    head = _sheet_head(report_dir, rubric, live, summary, overview.prompt_ids)
    forced = summary.forced
    page = template("sheet.html").render(
        nonce=secrets.token_urlsafe(16), a=summary.a, b=summary.b, rubric=rubric,
        axes=_axes(summary), axes_warning=summary.cells.warning, headline=headline(summary),
        template_warning=template_warning(summary),
        collapse_warning=collapse_warning(summary),
        sessions=summary.sessions,
        backends_warning=backends_warning(summary), replicas_lines=replicas_lines(summary),
        count_tiles=_count_tiles(summary.counts),
        throughput_note="; ".join(collecting_speed(summary)),
        repeats_lines=[line for line in (repeats_sent(summary), *repeats_phrases(summary)[1:])
                       if line],
        log_matches=summary.log_matches, summary_counts=summary.counts,
        pass_rate=summary.stats.pass_rate, determinism=summary.determinism,
        evaluation=summary.evaluation, task_lines=task_lines(summary), figure=figure,
        preflight=summary.preflight, plots=_plots(overview.plotted, forced),
        forced=forced if forced is not None and forced.scored else None,
        forced_llama_cpp=_forced_llama_cpp(forced),
        forced_order=order_floor_sentence(forced) if forced is not None else "",
        categories=overview.categories,
        refused_reviews=head["refused_reviews"], comparison=summary.comparison,
        near_tie_nats=summary.near_tie_nats, topk_margin_nats=TOPK_MARGIN_NATS, e=math.e,
        data_json=Markup(placeholder), **_judge_view(summary, head))
    before, after = page.split(placeholder)
    yield before
    yield str(embed_json(head))[:-1] + f',"columns":{embed_json(SHEET_COLUMNS)},"rows":['
    for number, record in enumerate(_sheet_pairs(report_dir, overview.pairs > EMBED_ALL_UP_TO)):
        record["b_text"] = shared_start(record.get("a_text"), record.get("b_text"))
        yield ("," if number else "") + embed_json([record.get(c) for c in SHEET_COLUMNS])
    yield "]}"
    yield after


def _judge_view(summary: Summary, head: dict[str, object]) -> dict[str, object]:
    """What the page says of the judge (nothing without one): its figures in a
    sentence, and its agreement with the reviews the sheet holds, with the table."""
    if summary.judge is None:
        return {"judge": None}
    judge = head["judge"]
    assert isinstance(judge, dict)  # _sheet_head made it
    found = msgspec.convert(judge["agreement"], Agreement | None)
    return {"judge": summary.judge, "judge_line": judge_sentence(summary.judge),
            "judge_agreement": found,
            "agreement_line": agreement_sentence(found, sum(summary.judge.labels.values()))}


def shared_start(a_text: object, b_text: object) -> object:
    """B's text as [n, rest] when it starts with A's first n characters, n counted in
    UTF-16 units as the page's script slices (a pair that forks late, or is identical,
    carries its common start once); otherwise as it is."""
    if not isinstance(a_text, str) or not isinstance(b_text, str):
        return b_text
    start = os.path.commonprefix([a_text, b_text])
    if len(start) < 16:
        return b_text
    return [len(start.encode("utf-16-le", "surrogatepass")) // 2, b_text[len(start):]]


def write_sheet(report_dir: str | Path, rubric: Rubric | str | Path | None = None) -> Path:
    report_dir = Path(report_dir)
    path = report_dir / SHEET
    with AtomicFile(path) as page:
        for piece in sheet_pieces(report_dir, rubric):
            page.write(piece.encode("utf-8"))
    return path


def write_overview_page(folder: Path, overview: Overview) -> Path:
    """DIR/index.html of several candidates: one row each, linking to its sheet."""
    html = template("overview.html").render(overview=overview)
    write_atomic(folder / SHEET, html.encode("utf-8"))
    return folder / SHEET


def _axes(summary: Summary) -> list[dict[str, object]]:
    """Header rows: label and endpoint, then every cell axis either side knows."""
    cells = summary.cells
    a_cell, b_cell = cells.a, cells.b
    a_side, b_side = msgspec.to_builtins(summary.a), msgspec.to_builtins(summary.b)
    differing = set(cells.differs)
    rows = [{"name": name, "a": a_side.get(name) or "", "b": b_side.get(name) or "",
             "differs": False} for name in ("label", "endpoint")]
    names = [k for k in CELL_AXES if k in a_cell or k in b_cell] + sorted(
        (set(a_cell) | set(b_cell)) - set(CELL_AXES))
    for name in names or AXES:
        a, b = a_cell.get(name, a_side.get(name)), b_cell.get(name, b_side.get(name))
        if a in (None, "") and b in (None, ""):
            continue  # nothing known on either side: no row
        rows.append({"name": name, "a": "" if a is None else a, "b": "" if b is None else b,
                     "differs": name in differing})
    if cells.a_key or cells.b_key:
        rows.append({"name": "cell key", "a": cells.a_key or "", "b": cells.b_key or "",
                     "differs": False})
    return rows


def _count_tiles(counts: Counts) -> list[tuple[str, object]]:
    collapsed = counts.collapse.new_on_b if counts.collapse else 0
    return [("pairs compared", counts.pairs), ("identical", counts.identical),
            ("wording (suggested)", counts.wording_similar),
            ("to review", counts.divergent),
            ("expect regressions", counts.flips.regression),
            ("expect improvements", counts.flips.improvement),
            ("degenerate new on B", counts.degenerate_new_on_b),
            *([("collapsed on B", collapsed)] if collapsed else []),  # a tile when it counts
            _repeats_tile(counts),
            ("not compared", counts.prompts - counts.pairs)]


def _repeats_tile(counts: Counts) -> tuple[str, object]:
    """Prompts whose repeats' texts vary, A / B (the headline says those whose logprobs
    alone moved beside them; a report made before: both together)."""
    texts, moved = counts.text_varies, counts.logprobs_only
    if texts is None or moved is None:
        return ("nondeterministic A / B", f"{counts.nondeterministic.a} / "
                                          f"{counts.nondeterministic.b}")
    return ("texts vary A / B", f"{texts.a} / {texts.b}")


def _plots(plotted: dict[str, np.ndarray], forced: ForcedSummary | None
           ) -> list[dict[str, object]]:
    similarity, divergence, gap = (plotted[c] for c in PLOTTED)
    highest = {name: float(values.max()) if len(values) else 1.0
               for name, values in (("divergence", divergence), ("gap", gap))}
    return [
        {"svg": histogram(similarity, 0.0, 1.0), "caption":
         f"similarity of the {len(similarity)} non-identical pairs (0 to 1)"},
        {"svg": histogram(divergence, 0.0, highest["divergence"] or 1.0), "caption":
         f"token where the streams diverge ({len(divergence)} pairs)"},
        {"svg": histogram(gap, 0.0, highest["gap"] or 1.0), "caption":
         f"logprob gap at the divergence ({len(gap)} pairs with B's token in A's top-k)"},
        *_forced_plot(forced),
    ]


def _forced_llama_cpp(forced: ForcedSummary | None) -> str:
    if forced is None or not forced.scored:
        return ""
    return llama_cpp_sentence(forced.overall, min(forced.a_top_k or forced.top_k, forced.top_k),
                              forced.quarter_k)


def _forced_plot(forced: ForcedSummary | None) -> list[dict[str, object]]:
    histogram_data = forced.kl_histogram if forced else None
    if histogram_data is None or not sum(histogram_data.counts):
        return []
    counts, high = histogram_data.counts, histogram_data.high
    return [{"svg": bars(counts, 0.0, high or 1.0), "caption":
             f"teacher-forced KL per position ({sum(counts)} positions, to the 99th "
             "percentile)"}]


def histogram(values: Iterable[float], low: float, high: float, bins: int = 10) -> Markup:
    """A small histogram as inline SVG (numbers only, so nothing to escape)."""
    counts = [0] * bins
    for value in values:
        index = min(int((value - low) / (high - low) * bins), bins - 1) if high > low else 0
        counts[max(index, 0)] += 1
    return bars(counts, low, high)


def bars(counts: list[int], low: float, high: float, width: int = 240,
         height: int = 90) -> Markup:
    """Counts as equal-width bars from `low` to `high`, as inline SVG."""
    bins = len(counts)
    peak = max(counts) or 1
    bar = width / bins
    bars = "".join(
        f'<rect x="{i * bar + 1:.1f}" y="{height - 14 - (c / peak) * (height - 24):.1f}" '
        f'width="{bar - 2:.1f}" height="{(c / peak) * (height - 24):.1f}" fill="#1f5fa8">'
        f"<title>{c}</title></rect>" for i, c in enumerate(counts))
    axis = (f'<text x="0" y="{height - 2}" font-size="10">{low:g}</text>'
            f'<text x="{width}" y="{height - 2}" font-size="10" text-anchor="end">'
            f"{high:.3g}</text>")
    return Markup(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                  f'role="img">{bars}{axis}</svg>')
