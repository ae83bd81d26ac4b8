"""Aggregate a pairs frame into summary.json and the one-paragraph terminal summary."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd

from . import __version__
from .cells import confound_warning, differing_axes
from .determinism import side_determinism
from .sides import Side
from .stats import paired_statistics

DRIFT_COLUMNS = ["top1_agreement", "logprob_mean_abs_diff", "logprob_max_abs_diff",
                 "kl_topk_mean", "kl_topk_max"]


def summarize(pairs: pd.DataFrame, a: Side, b: Side) -> dict[str, Any]:
    compared = pairs[pairs["status"] == "compared"]
    counts = _counts(pairs, compared)
    sides = {"a": _side_stats(a, compared, "a"), "b": _side_stats(b, compared, "b")}
    return {
        "quantcheck_version": __version__,
        "a": {"label": a.label, **_identity(a)},
        "b": {"label": b.label, **_identity(b)},
        "counts": counts,
        "cells": _cells(a, b),
        "determinism": {"a": side_determinism(a), "b": side_determinism(b)},
        "drift": _drift(compared),
        "stats": paired_statistics(pairs),
        "performance": {**sides, **_throughput_verdict(sides)},
        "preflight": _preflight(a, b),
    }


def _preflight(a: Side, b: Side) -> dict[str, Any]:
    """Each side's recorded preflight, and whether their tokenizers agree."""
    from .preflight import tokenizer_agreement

    recorded = {side: s.manifest.get("preflight") for side, s in (("a", a), ("b", b))}
    agreement = tokenizer_agreement(*((report or {}).get("tokenizer")
                                      for report in recorded.values()))
    return {**recorded, "tokenizer": asdict(agreement),
            "token_metrics_withheld": agreement.message if agreement.status == "warn" else None}


def _counts(pairs: pd.DataFrame, compared: pd.DataFrame) -> dict[str, Any]:
    identical = int(compared["identical"].sum())
    wording = int((compared["suggested_label"] == "wording").sum())
    return {
        "prompts": len(pairs),
        "pairs": len(compared),
        "identical": identical,
        "wording_similar": wording,
        "divergent": len(compared) - identical - wording,
        "flips": {"regression": int((compared["flip"] == "regression").sum()),
                  "improvement": int((compared["flip"] == "improvement").sum())},
        "suggested_factual_flip": int((compared["suggested_label"] == "factual_flip").sum()),
        "approved": int((compared["approved_label"].fillna("") != "").sum()),
        "noise": int(compared["noise"].fillna(False).astype(bool).sum()),
        "degenerate": {side: _value_counts(compared[f"{side}_degenerate"]) for side in "ab"},
        "degenerate_new_on_b": int(((compared["b_degenerate"].fillna("") != "")
                                    & (compared["a_degenerate"].fillna("") == "")).sum()),
        "nondeterministic": {side: _nondeterministic(pairs, side) for side in "ab"},
        "divergence_kinds": _value_counts(compared["divergence_kind"]),
        "status": {status: int(n) for status, n in pairs["status"].value_counts().items()},
    }


def _value_counts(column: pd.Series) -> dict[str, int]:
    values = column.fillna("")
    return {str(k): int(v) for k, v in values[values != ""].value_counts().items()}


def _nondeterministic(pairs: pd.DataFrame, side: str) -> int:
    texts = pairs[f"{side}_texts"].fillna(0) > 1
    signatures = pairs[f"{side}_signatures"].fillna(0) > 1
    return int((texts | signatures).sum())


def _cells(a: Side, b: Side) -> dict[str, Any]:
    a_cell, b_cell = a.manifest.get("cell") or {}, b.manifest.get("cell") or {}
    differing = differing_axes(a_cell, b_cell)
    return {"a": a_cell, "b": b_cell, "a_key": a.manifest.get("cell_key"),
            "b_key": b.manifest.get("cell_key"), "differs": differing,
            "warning": confound_warning(differing)}


def _identity(side: Side) -> dict[str, Any]:
    server = side.manifest.get("server") or {}
    return {"endpoint": side.manifest.get("endpoint"), "model": side.manifest.get("model"),
            "runtime": server.get("runtime"), "runtime_version": server.get("runtime_version"),
            "text_only": side.text_only}


def _drift(compared: pd.DataFrame) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for column in DRIFT_COLUMNS:
        values = pd.to_numeric(compared[column], errors="coerce").dropna()
        if len(values):
            result[column] = {"mean": float(values.mean()), "median": float(values.median()),
                              "p99": float(np.percentile(values, 99)),
                              "max": float(values.max())}
    divergence = pd.to_numeric(compared["first_divergence"], errors="coerce").dropna()
    if len(divergence):
        result["first_divergence"] = {"median": float(divergence.median()),
                                      "min": int(divergence.min())}
    return result


def _side_stats(side: Side, compared: pd.DataFrame, prefix: str) -> dict[str, Any]:
    ok = side.index[side.index["error"].isna()]
    tokens = pd.to_numeric(ok["n_tokens"], errors="coerce")
    e2e = pd.to_numeric(ok["e2e_s"], errors="coerce").dropna()
    ttft = pd.to_numeric(ok["ttft_s"], errors="coerce").dropna()
    first_tokens = pd.to_numeric(compared[f"{prefix}_tokens"], errors="coerce")
    return {
        "requests": len(side.index),
        "failed": int(side.index["error"].notna().sum()),
        "output_tokens": int(tokens.sum()) if tokens.notna().any() else None,
        "compared_output_tokens": int(first_tokens.sum()) if first_tokens.notna().any() else None,
        "ttft_p50_s": _percentile(ttft, 50),
        "e2e_p50_s": _percentile(e2e, 50),
        "e2e_p99_s": _percentile(e2e, 99),
        "output_tokens_per_s": (float(tokens[e2e.index].sum() / e2e.sum())
                                if len(e2e) and e2e.sum() > 0 else None),
    }


def _percentile(values: pd.Series, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _throughput_verdict(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    a_tokens, b_tokens = (sides[s]["compared_output_tokens"] for s in "ab")
    a_rate, b_rate = (sides[s]["output_tokens_per_s"] for s in "ab")
    if a_tokens is None or b_tokens is None or not a_rate or not b_rate:
        return {"throughput_comparable": False, "throughput_note": "no timings on one side"}
    if a_tokens != b_tokens:
        return {"throughput_comparable": False,
                "throughput_note": f"generated token counts differ (A {a_tokens}, "
                                   f"B {b_tokens}): throughput is not compared"}
    return {"throughput_comparable": True, "throughput_ratio_b_over_a": b_rate / a_rate,
            "throughput_note": f"token counts match ({a_tokens}); B/A = {b_rate / a_rate:.2f}x"}


def headline(summary: dict[str, Any]) -> str:
    """The seeds' style: "7 of 20 identical, 9 wording only, ..."."""
    counts = summary["counts"]
    parts = [f"{counts['identical']} of {counts['pairs']} identical",
             f"{counts['wording_similar']} wording only (suggested)",
             f"{counts['divergent']} to review"]
    flips = counts["flips"]
    parts.append(f"{flips['regression']} factual flips by expect (A pass, B fail)")
    if flips["improvement"]:
        parts.append(f"{flips['improvement']} improvements")
    parts.append(f"{counts['degenerate_new_on_b']} degenerate outputs new on B")
    nondet = counts["nondeterministic"]
    if nondet["a"] or nondet["b"]:
        parts.append(f"nondeterministic prompts: A {nondet['a']}, B {nondet['b']}")
    if counts["noise"]:
        parts.append(f"{counts['noise']} differences within repeat noise")
    others = {k: v for k, v in counts["status"].items() if k != "compared"}
    if others:
        parts.append("not compared: " + ", ".join(f"{v} {k}" for k, v in others.items()))
    return ", ".join(parts) + "."
