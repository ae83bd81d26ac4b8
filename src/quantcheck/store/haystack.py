"""Long filler text with one planted sentence, for needle-recall prompts.

A prompt's `haystack: {tokens: 10000, depth: 0.5, needle: "The codeword is ...", seed: 1}`
replaces `{haystack}` in its text with about `tokens` tokens of plain English filler
(sentences about an invented town's records, never the answer) and the needle sentence
placed at `depth` (0: the start, 1: the end). The text is a pure function of the
settings, the same on every machine and Python version (sha256, no `random`), so the
prompt's hash is stable and nothing is downloaded.
"""

from __future__ import annotations

import hashlib

PLACEHOLDER = "{haystack}"
# English filler of this kind runs about 1.3 tokens per word in Llama, Qwen and Gemma
# vocabularies; the word count aims at the requested token count.
TOKENS_PER_WORD = 1.3

_SUBJECTS = ("The ledger", "The harbour master", "A clerk", "The mill", "The council",
             "The ferry", "An old map", "The bakery", "The school", "A weaver",
             "The lighthouse", "The market", "A carpenter", "The orchard", "The library")
_VERBS = ("recorded", "noted", "counted", "described", "listed", "mentioned", "kept",
          "reported", "measured", "mended", "painted", "moved", "sold", "stored", "checked")
_OBJECTS = ("the spring tides", "forty barrels of salt", "a broken gate", "the winter wool",
            "seven new lanterns", "the eastern road", "a quiet season", "the river stones",
            "two hundred apples", "the north bridge", "a blue wagon", "the autumn fair",
            "the chapel bells", "a cart of timber", "the last frost")
_TIMES = ("in the third week", "before the harvest", "after the long rain", "on a Tuesday",
          "during the fair", "at first light", "late in the year", "in early summer",
          "when the snow came", "without complaint", "for the second time", "as usual")


def _sentence(seed: int, number: int) -> str:
    digest = hashlib.sha256(f"{seed}:{number}".encode()).digest()
    parts = (_SUBJECTS, _VERBS, _OBJECTS, _TIMES)
    words = [options[digest[n] % len(options)] for n, options in enumerate(parts)]
    return " ".join(words) + "."


def haystack(tokens: int, depth: float, needle: str, seed: int = 0) -> str:
    """About `tokens` tokens of filler with `needle` after `depth` of it."""
    sentences: list[str] = []
    words = 0
    while words * TOKENS_PER_WORD < tokens:
        sentences.append(_sentence(seed, len(sentences)))
        words += len(sentences[-1].split())
    sentences.insert(round(depth * len(sentences)), needle)
    paragraphs = [" ".join(sentences[n:n + 8]) for n in range(0, len(sentences), 8)]
    return "\n\n".join(paragraphs)
