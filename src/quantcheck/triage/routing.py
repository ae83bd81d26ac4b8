"""MoE expert routing, compared (pure: no I/O).

A routing is an int array (tokens, layers, k): row i is the experts each layer sent
the forward pass that chose generated token i to (store.records.run_records.Tokens.routing). The
order of a slot's k experts is not compared, only which experts they are.

Across repeats of one side, routing and logprob signatures together say where
nondeterminism comes from: routing identical while logprobs differ puts it after
routing (how the experts' outputs are reduced, e.g. a fused MoE finalize); routing
that differs puts it in the gating. Routing says which experts, not how their outputs
were summed: identical routing does not prove the reduction deterministic, and a
gating difference may itself come from nondeterministic numbers before the router.

A against B is compared on the tokens both generated alike: up to and including the
first divergence (the token there was chosen from identical context on both sides).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from ..store.records.pair_records import RoutingGrid

GRID_TOKENS = 256  # the sheet's grid shows at most this many tokens


def problem(routing: np.ndarray, n_tokens: int) -> str | None:
    """Why a stored routing cannot be the experts of a record's `n_tokens` generated
    tokens (None when it can): runs collected before collect checked routing may hold
    such, and comparing them would read as routing alike."""
    if routing.ndim != 3 or not routing.shape[1] or not routing.shape[2]:
        return f"routing of shape {tuple(routing.shape)} holds no experts"
    if len(routing) != n_tokens:
        return f"{len(routing)} rows of routing for {n_tokens} generated tokens"
    return None


def incomparable(a: np.ndarray, b: np.ndarray) -> str | None:
    """Why A's and B's routings cannot be set side by side (None when they can)."""
    if a.shape[1:] != b.shape[1:]:
        return (f"A's routing has {a.shape[1]} layers x {a.shape[2]} experts, B's "
                f"{b.shape[1]} x {b.shape[2]}")
    return None


def signature(routing: np.ndarray) -> str:
    """Equal for routings that send every (token, layer) to the same experts."""
    ordered = np.sort(routing, axis=2).astype(np.int32)
    digest = hashlib.blake2b(str(ordered.shape).encode(), digest_size=12)
    digest.update(ordered.tobytes())
    return digest.hexdigest()


def row_digests(routing: np.ndarray) -> list[str]:
    """One short digest per token (row) of a routing: equal for rows that send every
    layer to the same experts (the determinism certificate keeps these, not the rows)."""
    ordered = np.sort(routing, axis=2).astype(np.int32)
    return [hashlib.blake2b(row.tobytes(), digest_size=6).hexdigest() for row in ordered]


def differing(a: np.ndarray, b: np.ndarray, tokens: int | None = None) -> np.ndarray:
    """(tokens, layers) bool: where a and b route to other experts, over their common
    tokens (the first `tokens` at most) and layers."""
    n = min(len(a), len(b), tokens if tokens is not None else len(a))
    layers = min(a.shape[1], b.shape[1]) if a.ndim == 3 and b.ndim == 3 else 0
    if not n or not layers or a.shape[2] != b.shape[2]:
        return np.zeros((n, layers), bool)
    return np.asarray(np.any(np.sort(a[:n, :layers], axis=2) != np.sort(b[:n, :layers], axis=2),
                             axis=2))


def first_cell(grid: np.ndarray) -> tuple[int, int] | None:
    """The first (token, layer) marked in a grid, token first."""
    cells = np.argwhere(grid)
    return (int(cells[0][0]), int(cells[0][1])) if len(cells) else None


@dataclass
class RepeatRouting:
    """One side's repeats of one prompt."""

    kind: str  # "identical", "after_routing", "gating", or "" (fewer than 2 repeats)
    distinct: int
    sentence: str
    grid: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool))


def across_repeats(routings: list[np.ndarray], logprob_signatures: int | None
                   ) -> RepeatRouting:
    """What the repeats' routings and logprob signatures say about nondeterminism."""
    n = len(routings)
    distinct = len({signature(r) for r in routings})
    if n < 2:
        return RepeatRouting("", distinct, "one repeat: nothing to compare")
    grid = np.zeros((0, 0), bool)
    for other in routings[1:]:
        found = differing(routings[0], other)
        grid = found if not grid.size else grid[:len(found)] | found[:len(grid)]
    if distinct > 1:
        cell = first_cell(grid)
        where = f" at token {cell[0]}, layer {cell[1]}" if cell else " in length"
        return RepeatRouting("gating", distinct, f"routing differs between repeats{where}: "
                             "gating is not deterministic", grid)
    if logprob_signatures and logprob_signatures > 1:
        return RepeatRouting("after_routing", distinct,
                             f"routing identical in {n} of {n} repeats, logprobs differ: "
                             "nondeterminism after routing (expert reduction/finalize)", grid)
    return RepeatRouting("identical", distinct,
                         f"routing and logprobs identical in {n} of {n} repeats", grid)


@dataclass
class PairRouting:
    """A's repeat 0 against B's on the tokens they share."""

    first_token: int | None
    first_layer: int | None
    share: float
    tokens: int
    sentence: str
    grid: np.ndarray


def routed_layers(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """bool per layer: whether either side routed it. A dense layer's columns are all 0
    on both (the engines fill them so): no routing to compare."""
    layers = min(a.shape[1], b.shape[1])
    return np.asarray(np.any(a[:, :layers] != 0, axis=(0, 2))
                      | np.any(b[:, :layers] != 0, axis=(0, 2)))


def between(a: np.ndarray, b: np.ndarray, first_divergence: int | None) -> PairRouting:
    """Where B routed the shared tokens elsewhere than A, against where texts part; the
    share of (token, layer) slots that differ counts routed layers only."""
    shared = min(len(a), len(b)) if first_divergence is None else first_divergence + 1
    grid = differing(a, b, shared)
    cell = first_cell(grid)
    counted = grid[:, routed_layers(a, b)] if grid.size else grid
    share = float(counted.mean()) if counted.size else 0.0
    if cell is None:
        sentence = f"A and B routed all {len(grid)} shared tokens alike"
        return PairRouting(None, None, share, len(grid), sentence, grid)
    token, layer = cell
    if first_divergence is None:
        when = "; the texts do not part"
    elif token < first_divergence:
        ahead = first_divergence - token
        when = f", {ahead} token{'s' if ahead != 1 else ''} before the texts part"
    else:
        when = ", where the texts part"
    sentence = (f"B routed token {token} of layer {layer} to other experts{when} "
                f"({100 * share:.1f}% of shared (token, layer) slots differ)")
    return PairRouting(token, layer, share, len(grid), sentence, grid)


def shown(sentence: str, grid: np.ndarray) -> RoutingGrid:
    """A sentence and its grid for the sheet: the grid's size and its marked cells, cut
    to GRID_TOKENS tokens."""
    return RoutingGrid(sentence, int(len(grid)), int(grid.shape[1]) if grid.ndim == 2 else 0,
                       np.argwhere(grid[:GRID_TOKENS]).tolist())
