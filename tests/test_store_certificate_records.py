"""store/records/certificate_records.py: certificate.json read back (by the gate) believes only
what a certificate can say: a file without its `format` is no certificate, a count is
never negative, and the counts agree with the per-prompt results they sum. Any bytes
are a certificate that keeps those rules or one RunFormatError naming the file."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantcheck.errors import RunFormatError
from quantcheck.store.records.certificate_records import (
    Certificate,
    FactorResult,
    PromptResult,
    read_certificate,
)


def certificate(**changed: Any) -> dict[str, Any]:
    """A certificate as `determinism --certify` writes it: 2 prompts repeated, p1 varying
    once in 4 comparisons."""
    results = [PromptResult(prompt_id="p0", factor="repeat", unique_outputs=1, comparisons=2,
                            mismatches=0, varying_levels=[]),
               PromptResult(prompt_id="p1", factor="repeat", unique_outputs=2, comparisons=2,
                            mismatches=1, varying_levels=["alone"], first_divergence=3)]
    factor = FactorResult(factor="repeat", comparisons=4, mismatches=1, prompts=2,
                          prompts_varying=1, share_varying=0.5, levels=[],
                          explanation="varies with no batch factor")
    record = Certificate(
        endpoint="http://127.0.0.1:8000/v1", model="m", certified=False,
        statement="1 mismatches in 4 comparisons", comparisons=4, mismatches=1,
        failed_requests=0, prompts=2, prompts_varying=1, explanation="varies",
        batch_sizes=[2], prefix_lengths=[], trials=2, seed=0, requests=6,
        cache_control="none", factors=[factor], prompt_results=results, examples=[])
    data: dict[str, Any] = msgspec.to_builtins(record)
    for key, value in changed.items():
        data[key] = value
    return data


def read(folder: Path, data: object) -> Certificate:
    (folder / "certificate.json").write_bytes(
        data if isinstance(data, bytes) else json.dumps(data).encode())
    return read_certificate(folder)


def test_the_certificate_as_written_is_read(tmp_path: Path) -> None:
    assert read(tmp_path, certificate()).prompts_varying == 1


def test_a_file_without_its_format_is_no_certificate(tmp_path: Path) -> None:
    data = certificate()
    del data["format"]
    with pytest.raises(RunFormatError, match=r"certificate\.json: no `format` field"):
        read(tmp_path, data)


@pytest.mark.parametrize(("field", "at"), [
    ("failed_requests", "$.failed_requests"), ("prompts_varying", "$.prompts_varying"),
    ("comparisons", "$.comparisons"), ("mismatches", "$.mismatches"),
])
def test_a_negative_count_is_refused_naming_it(tmp_path: Path, field: str, at: str) -> None:
    with pytest.raises(RunFormatError, match=rf"Expected `int` >= 0 - at `\{at}`"):
        read(tmp_path, certificate(**{field: -1}))


def test_a_negative_count_inside_a_factor_is_refused_naming_it(tmp_path: Path) -> None:
    data = certificate()
    data["prompt_results"][1]["mismatches"] = -5
    with pytest.raises(RunFormatError, match=r"at `\$\.prompt_results\[1\]\.mismatches`"):
        read(tmp_path, data)


@pytest.mark.parametrize(("change", "named"), [
    ({"prompts_varying": 0}, "prompts_varying is 0, but prompt_results list 1 varying "
                             "prompt ('p1')"),
    ({"mismatches": 0}, "mismatches is 0, but its factors count 1"),
    ({"comparisons": 40}, "comparisons is 40, but its factors count 4"),
    ({"certified": True}, "certified is true beside 1 mismatch"),
    ({"prompts": 1}, "prompts is 1, but prompt_results name 2 prompts"),
    ({"failed_requests": 7}, "failed_requests is 7, more than the plan's requests (6)"),
])
def test_counts_that_disagree_with_the_results_are_refused_naming_the_field(
        tmp_path: Path, change: dict[str, Any], named: str) -> None:
    with pytest.raises(RunFormatError) as refused:
        read(tmp_path, certificate(**change))
    assert f"certificate.json: {named}" in str(refused.value)


def test_a_factor_whose_counts_disagree_with_its_prompts_is_refused(tmp_path: Path) -> None:
    data = certificate()
    data["factors"][0]["prompts_varying"] = 0
    with pytest.raises(RunFormatError, match=r"factors\[0\] \(repeat\)\.prompts_varying is 0, "
                                             "but prompt_results list 1"):
        read(tmp_path, data)
    data = certificate()
    data["prompt_results"].append(data["prompt_results"][1])
    with pytest.raises(RunFormatError, match="prompt_results list 'p1' under repeat twice"):
        read(tmp_path, data)


# What a hostile or careless writer may put where: any JSON value at any field of a
# certificate as written (and bytes that are not JSON at all).
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=6)


def paths(data: object, at: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every place in a JSON value (its keys and list positions), itself first."""
    found: list[tuple[object, ...]] = [at]
    if isinstance(data, dict):
        for key, value in data.items():
            found += paths(value, (*at, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += paths(value, (*at, index))
    return found


@st.composite
def mutated(draw: st.DrawFn) -> object:
    data: Any = certificate()
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(data)))
        if not where:
            return draw(VALUES)
        parent = data
        for step in where[:-1]:
            parent = parent[step]
        if draw(st.booleans()) and isinstance(parent, dict):
            parent.pop(where[-1], None)
        else:
            parent[where[-1]] = draw(VALUES)
        data = copy.deepcopy(data)
    return data


def keeps_the_rules(found: Certificate) -> bool:
    """What the gate relies on, said again here apart from the reader's own code."""
    counts = [found.comparisons, found.mismatches, found.failed_requests, found.prompts,
              found.prompts_varying] + [n for f in found.factors for n in (
        f.comparisons, f.mismatches, f.prompts, f.prompts_varying)] + [
        n for r in found.prompt_results for n in (r.comparisons, r.mismatches)]
    varying = {r.prompt_id for r in found.prompt_results if r.mismatches}
    return (all(n >= 0 for n in counts) and found.prompts_varying == len(varying)
            and found.mismatches == sum(f.mismatches for f in found.factors)
            and found.comparisons == sum(f.comparisons for f in found.factors)
            and found.mismatches <= found.comparisons
            and not (found.certified and (found.mismatches or found.failed_requests)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200) | mutated().map(lambda d: json.dumps(d).encode()))
def test_any_file_is_a_certificate_keeping_the_rules_or_one_error_naming_it(
        content: bytes) -> None:
    with tempfile.TemporaryDirectory() as name:
        try:
            found = read(Path(name), content)
        except RunFormatError as exc:
            assert "certificate.json" in str(exc) and "\n" not in str(exc)
        else:
            assert keeps_the_rules(found)
