"""store/prompt_entries.py: an expect.regex is checked by the engine that searches it
(the `regex` module) and by Python's `re`: a pattern either refuses is one error naming
the file, line, prompt and field; one both read loads without a warning."""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.errors import PromptFileError
from quantcheck.store.prompt_sets import load_prompts
from quantcheck.triage.expects import regex_failure

from .conftest import WritePrompts


def prompt_set(folder: Path, pattern: str) -> Path:
    path = folder / "prompts.yaml"
    path.write_text("prompts:\n  - id: p\n    prompt: 'Q'\n"
                    f"    expect: {{regex: {json.dumps(pattern)}}}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(("pattern", "said"), [
    ("[[", "unterminated character set"),  # re warns and reads it; regex refuses it
    ("[a--b]", "bad character range"),
    (r"\p{L}+", "re syntax"),  # regex reads it, re refuses it
    ("(?<=a+)b", "re syntax"),
    ("a(?i)b", "re syntax"),
    ("(", "missing )"),
])
def test_a_pattern_either_engine_refuses_names_file_line_and_field(
        tmp_path: Path, pattern: str, said: str) -> None:
    path = prompt_set(tmp_path, pattern)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(PromptFileError) as caught:
            load_prompts([path])
    message = str(caught.value)
    assert f"{path}:4" in message and "expect.regex" in message and said in message, message


@pytest.mark.parametrize("pattern", ["[[a]", "a[[:alpha:]]", "[a&&b]", r"\d+(?:\.\d+)?"])
def test_a_pattern_both_engines_read_loads_without_a_warning(tmp_path: Path,
                                                             pattern: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prompt = load_prompts([prompt_set(tmp_path, pattern)])[0]
    assert prompt.expect is not None and prompt.expect.regex == pattern


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet=st.sampled_from(list("[]()?*+{}|\\^$.:-&~=<!>,aAbpPdLNg0123 ")),
               max_size=12))
def test_any_pattern_loads_and_searches_or_is_one_clear_error(pattern: str) -> None:
    """Whatever the prompt set holds: a prompt whose check can search (never a crash,
    never a warning), or one PromptFileError naming the field."""
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            prompt = load_prompts([prompt_set(Path(folder), pattern)])[0]
        except PromptFileError as exc:
            assert "expect.regex" in str(exc)
            return
        assert prompt.expect is not None and prompt.expect.regex is not None
        assert "cannot be searched" not in regex_failure(prompt.expect.regex, "some answer")


def test_a_prompt_file_cannot_claim_a_verdict(write_prompts: WritePrompts) -> None:
    path = write_prompts("""
        prompts:
          - id: x
            prompt: "Q: 4 plus 4?"
            expect: {verdict: {metric: exact_match}}
        """)
    with pytest.raises(PromptFileError, match="field 'expect.verdict': set by `quantcheck "
                                              "import` from an eval harness's log"):
        load_prompts([path])
