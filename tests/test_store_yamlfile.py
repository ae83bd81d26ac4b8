"""YAML as users write it (prompt sets, configs) read in bounded time and memory:
alias bombs, anchors used inside themselves, files above the size cap; any bytes in
(hypothesis): a value, or one clear error naming the file."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantcheck.errors import ConfigFileError, PromptFileError
from quantcheck.store.inputs.prompt_sets import load_prompts
from quantcheck.store.inputs.yamlfile import read_yaml

from .conftest import invoke

FUZZ = settings(max_examples=int(os.environ.get("QUANTCHECK_FUZZ_EXAMPLES", "200")),
                deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
YAML_PIECES = st.sampled_from([
    "prompts:\n", "  - id: a\n", "    prompt: hi\n", "    expect: {number: .nan}\n",
    "x: &a [1, 2]\n", "y: [*a, *a]\n", "z: *b\n", "&c [*c]\n", "  - *a\n", "\t", ": ",
    "<<: *a\n", "defaults: {max_tokens: 9}\n", "!!python/object:os.system\n", "{", "[",
    "'", "\"", "\xe9", "\ufeff",
])
BYTES = st.binary(max_size=200) | st.lists(YAML_PIECES, max_size=12).map(
    lambda parts: "".join(parts).encode("utf-8"))


def laughs(levels: int = 9) -> str:
    """A 'billion laughs': each level nine aliases of the last."""
    lines = ['  x0: &x0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"  x{n}: &x{n} [" + ", ".join([f"*x{n - 1}"] * 9) + "]"
              for n in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_a_prompt_set_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    extra = "\n".join("    " + line for line in laughs().splitlines())
    path.write_text(f"prompts:\n  - id: a\n    prompt: hi\n    extra:\n{extra}\n")
    started = time.monotonic()
    with pytest.raises(PromptFileError, match="expands its aliases to more than"):
        load_prompts([path])
    assert time.monotonic() - started < 5


def test_an_alias_bomb_in_a_config_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "ab.yaml"
    path.write_text("extra-body:\n" + laughs())
    started = time.monotonic()
    result = invoke("collect", "--config", path)
    assert result.exit_code == 2 and "expands its aliases to more than" in result.output
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("text", ["prompts: &a\n  - *a\n",
                                  "prompts:\n  - &p {id: a, prompt: hi, extra: {x: *p}}\n"])
def test_an_anchor_used_inside_itself_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text(text)
    with pytest.raises(PromptFileError, match="uses an anchor inside itself"):
        load_prompts([path])


def test_anchors_that_share_a_few_values_still_load(tmp_path: Path) -> None:
    path = tmp_path / "shared.yaml"
    path.write_text("defaults: &d {max_tokens: 32}\nprompts:\n" + "".join(
        f"  - {{id: p{n}, prompt: hi, extra: {{shared: &s{n} [1, 2, 3], again: *s{n}}}}}\n"
        for n in range(200)))
    assert len(load_prompts([path])) == 200


def test_a_yaml_file_above_the_size_cap_is_refused(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from quantcheck.store.inputs import yamlfile

    monkeypatch.setattr(yamlfile, "MAX_YAML_BYTES", 1000)
    path = tmp_path / "big.yaml"
    path.write_text("prompts:\n" + "  - {id: a, prompt: hi}\n" * 100)
    with pytest.raises(PromptFileError, match="larger than"):
        load_prompts([path])



@FUZZ
@given(BYTES)
def test_any_bytes_as_a_prompt_set_load_or_are_one_clear_error(tmp_path: Path,
                                                               data: bytes) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(data)
    try:
        load_prompts([path])
    except PromptFileError as exc:
        assert str(exc).startswith(str(path)), exc


@FUZZ
@given(BYTES)
def test_any_bytes_as_a_config_load_or_are_one_clear_error(tmp_path: Path,
                                                           data: bytes) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    try:
        read_yaml(path, "config file")
    except ConfigFileError as exc:
        assert str(path) in str(exc)


def test_the_fuzzed_alias_bomb_corpus_is_bounded(tmp_path: Path) -> None:
    """Wide and deep alias trees of every shape load or are refused within a second."""
    for width in (2, 5, 30):
        for depth in (2, 6, 20):
            lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
            lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * width)}]"
                      for n in range(1, depth)]
            path = tmp_path / f"t{width}-{depth}.yaml"
            path.write_text("\n".join(lines) + "\n")
            started = time.monotonic()
            try:
                value: Any = read_yaml(path, "config file")
                assert isinstance(value, dict)
            except ConfigFileError as exc:
                assert "expands its aliases" in str(exc)
            assert time.monotonic() - started < 2
