"""store/inputs/haystack.py: filler of a given size in English, German or Chinese, the needle
at its depth or none at all, the same text everywhere, and English text unchanged from
the releases before the languages (the long-context suite's prompt hashes depend on it)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck.store.inputs.haystack import LANGUAGES, filler_text, haystack, sentences_for

NEEDLE = "The secret code is 48213."


def test_english_filler_is_the_text_earlier_releases_made() -> None:
    """sha256 of haystack(2500, 0.35, 'N.', 4) as written before languages existed."""
    text = haystack(2500, 0.35, "N.", 4)
    assert hashlib.sha256(text.encode()).hexdigest() == (
        "9cca95c63f04a8082039ecd68ee7aa1bc1e144c74467ccb736e98c96babeaf6f")


@pytest.mark.parametrize("language", list(LANGUAGES))
def test_each_language_plants_the_needle_at_its_depth(language: str) -> None:
    text = filler_text(200, 0.5, NEEDLE, seed=3, language=language)
    assert text.count(NEEDLE) == 1
    assert 0.4 < text.index(NEEDLE) / len(text) < 0.6
    assert filler_text(200, 0.5, NEEDLE, 3, language) == text  # a pure function
    assert filler_text(200, 0.5, NEEDLE, 4, language) != text
    assert "secret" not in filler_text(200, 0.5, "", 3, language)  # absent: nothing planted


def test_each_language_reads_as_itself() -> None:
    assert "Der" in filler_text(40, 0, "", 1, "de") or "Die" in filler_text(40, 0, "", 1, "de")
    chinese = filler_text(40, 0, "", 1, "zh")
    assert "。" in chinese and " " not in chinese.replace("\n", "")
    assert filler_text(40, 0, "", 1, "en") != filler_text(40, 0, "", 1, "de")


@given(st.integers(1, 400), st.sampled_from(list(LANGUAGES)), st.floats(0, 1))
def test_sentences_are_counted_exactly_and_depth_is_honoured(count: int, language: str,
                                                            depth: float) -> None:
    text = filler_text(count, depth, NEEDLE, 1, language)
    stop = LANGUAGES[language].stop
    assert text.count(stop) - NEEDLE.count(stop) == count
    assert text.startswith(NEEDLE) == (round(depth * count) == 0)


def test_a_token_target_gives_about_that_many_tokens_by_the_estimate() -> None:
    for language, filler in LANGUAGES.items():
        sentences = sentences_for(1000, language)
        text = filler_text(sentences, 0, "", 0, language)
        assert 1000 <= filler.estimate(text) < 1000 + 40  # a sentence at most over
