"""cli/_probing.py: the lab's servers as commands (`lab serve`, `lab scripted`); what
needs the real model is in tests/test_lab_model.py."""

from __future__ import annotations

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from quantcheck.cli._probing import FAULTS, PRECISIONS, _side_spec

from .conftest import invoke


@pytest.mark.parametrize("spec", ["fp16@8001", "fp8", "fp8@", "fp8:broken@8001",
                                  "fp8@70000", "fp8@8001x"])
def test_a_side_that_is_not_precision_fault_at_port_is_refused_before_loading(
        spec: str) -> None:
    result = invoke("lab", "serve", "--port", "0", "--also", spec)
    assert result.exit_code == 2, result.output
    assert f"'{spec}' is not PRECISION[:FAULT]@PORT" in result.output
    assert "loading gemma" not in result.output


def test_two_sides_on_one_port_are_refused_before_loading() -> None:
    result = invoke("lab", "serve", "--port", "8123", "--also", "fp8@8124", "--also",
                    "int4@8123")
    assert result.exit_code == 2, result.output
    assert "two sides on one port (8123, 8124, 8123)" in result.output
    assert "loading gemma" not in result.output


@given(st.text(max_size=30) | st.builds(lambda p, f, port: f"{p}{f}@{port}",
                                        st.sampled_from(["bf16", "fp8", "int4", "fp16", ""]),
                                        st.sampled_from(["", ":none", ":lmhead-noscale",
                                                         ":x", ":"]),
                                        st.integers(-1, 99_999).map(str) | st.text(max_size=6)))
def test_any_side_spec_is_a_side_or_a_usage_error(spec: str) -> None:
    try:
        precision, fault, port = _side_spec(spec)
    except click.BadParameter as exc:
        assert repr(spec) in str(exc)
        return
    side, number = spec.split("@")
    assert side in (precision, f"{precision}:{fault}") and int(number) == port
    assert precision in PRECISIONS and fault in FAULTS and 0 <= port <= 65535


def test_the_choices_are_the_labs_own() -> None:
    pytest.importorskip("torch", reason="the lab's numerics need the demo extra")
    from quantcheck.lab.model import FAULTS as LAB_FAULTS
    from quantcheck.lab.numerics import PRECISIONS as LAB_PRECISIONS

    assert (PRECISIONS, FAULTS) == (LAB_PRECISIONS, LAB_FAULTS)
