"""Determinism of one endpoint: repeated identical requests, per prompt and repeat mode."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..store.folders.token_columns import round_significant
from ..store.records.report_records import DeterminismRow, SideDeterminism
from ..store.records.run_records import Tokens
from .routing import across_repeats
from .routing import problem as routing_problem
from .sides import Side
from .signals import first_divergence, token_keys

# A run imported from an eval log: quantcheck sent none of its requests (manifest cache null).
IMPORTED_CACHE = "not known: imported from an eval log (the harness sent the requests)"


def analyze_side(side: Side, mode: str, sig_digits: int = 12) -> list[DeterminismRow]:
    """One row per prompt: how many distinct texts and signatures its repeats gave."""
    rows = []
    for key in side.index.order:
        prompt_id = side.record_id(side.index.rows(key)[0])
        ok = sorted((r for r in side.records(prompt_id, key) or () if r.error is None),
                    key=lambda r: r.repeat)
        if not ok:
            continue
        prompt = side.prompts.get(prompt_id)
        repeats = [side.tokens_at(record.offset) for record in ok]
        n = len(ok)
        texts = len({record.text_hash for record in ok})
        signatures = len({r.signature for r in ok}) \
            if all(r.signature is not None for r in ok) else None
        routings = [t.routing for t in repeats if t and t.routing is not None
                    and routing_problem(t.routing, len(t)) is None]
        routed = across_repeats(routings, signatures) if routings else None
        text_first, logprob_first, spread = _positions([t for t in repeats if t], sig_digits)
        rows.append(DeterminismRow(
            prompt_id=str(prompt_id), category=prompt.category if prompt else "", mode=mode,
            repeats=n, distinct_texts=texts, distinct_signatures=signatures,
            texts=f"{texts} distinct of {n}",
            signatures=f"{signatures} distinct of {n}" if signatures else "",
            first_text_divergence=text_first, first_logprob_divergence=logprob_first,
            max_logprob_spread=spread,
            verdict=_verdict(texts, signatures),
            only_first_differs=only_first_differs(
                [r.signature if signatures else r.text_hash for r in ok]),
            routing=routed.kind if routed else "",
            routing_sentence=routed.sentence if routed else ""))
    return rows


def _verdict(texts: int, signatures: int | None) -> str:
    if texts > 1:
        return "text varies"
    if signatures and signatures > 1:
        return "logprobs vary"
    return "deterministic"


def only_first_differs(outcomes: list[object], fewest: int = 3) -> bool:
    """The first request alone differs and every repeat after it agrees: what a prompt
    cache does (the first request evaluates the whole prompt, the repeats find it
    cached). Two repeats cannot tell it from other variation (the first always differs
    from the only other): three at least, unless `fewest` says otherwise."""
    return len(outcomes) >= max(fewest, 2) and outcomes[0] != outcomes[1] \
        and len(set(outcomes[1:])) == 1


def cached_prompt_tokens(usage: Mapping[str, object] | None) -> int | None:
    """How many of the prompt's tokens the server read from its prefix cache, as its usage
    says it (OpenAI's `prompt_tokens_details.cached_tokens`: llama-server always, vLLM
    and SGLang when started to report it); None when it does not say."""
    details = (usage or {}).get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if type(cached) is int and cached >= 0 else None


def first_request_cached(outcomes: list[object], cached: list[int | None]) -> bool:
    """The first-request pattern of a warm prefix cache over one prompt's repeats (in
    order): repeat 0 alone differs and the repeats after it agree, seen over three
    repeats or more, or over two when the server says the later repeat read more of its
    prompt from the cache than the first (two repeats alone cannot tell it from other
    variation)."""
    if not only_first_differs(outcomes, fewest=2):
        return False
    if len(outcomes) >= 3:
        return True
    first, later = cached[0], cached[1:]
    return first is not None and all(n is not None and n > first for n in later)


def _positions(repeats: list[Tokens], sig_digits: int
               ) -> tuple[int | None, int | None, float | None]:
    """First token / logprob position where repeats differ, and the largest spread."""
    if len(repeats) < 2:
        return None, None, None
    reference = token_keys(repeats[0])
    text_positions = [first_divergence(reference, token_keys(r)) for r in repeats[1:]]
    text_first = min((p for p in text_positions if p is not None), default=None)
    length = min(len(r) for r in repeats)
    logprob_first, spread = None, 0.0
    for position in range(length):
        if any(r.top_text[position] != repeats[0].top_text[position] for r in repeats):
            logprob_first = position if logprob_first is None else logprob_first
            continue
        values = np.array([r.top_logprob[position] for r in repeats], dtype=float)
        if values.size == 0:
            continue
        rounded = round_significant(values, sig_digits)
        if logprob_first is None and (rounded != rounded[0]).any():
            logprob_first = position
        spread = max(spread, float((values.max(axis=0) - values.min(axis=0)).max()))
    return text_first, logprob_first, spread


def side_determinism(side: Side, varying: int = 0, first_alone: int = 0) -> SideDeterminism:
    """The compare summary's view: which mode made the repeats, how many, how they met
    the prefix cache, and whether the first-request pattern explains the variation:
    more than half of the `varying` prompts have their first request alone differing
    (`first_alone`), and the cache was not off (a request that cannot reuse a cached
    prefix cannot be moved by one)."""
    manifest = side.manifest
    cache = manifest.cache if manifest else None
    return SideDeterminism(
        mode=side.repeat_mode, repeats=manifest.parameters.repeats if manifest else None,
        cache_off=cache.off if cache else None,
        cache=cache.how if cache else (IMPORTED_CACHE if manifest and manifest.evaluation
                                       else ""),
        first_request_pattern=bool(varying) and 2 * first_alone > varying
        and not (cache and cache.off))
