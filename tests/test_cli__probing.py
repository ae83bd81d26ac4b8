"""cli/_probing.py: the lab's servers as commands (`lab serve`, `lab scripted`); what
needs the real model is in tests/test_lab_model.py."""

from __future__ import annotations

import pytest

from .conftest import invoke


@pytest.mark.parametrize("spec", ["fp16@8001", "fp8", "fp8@", "fp8:broken@8001",
                                  "fp8@70000", "fp8@8001x"])
def test_a_side_that_is_not_precision_fault_at_port_is_refused_before_loading(
        spec: str) -> None:
    result = invoke("lab", "serve", "--port", "0", "--also", spec)
    assert result.exit_code == 2, result.output
    assert f"'{spec}' is not PRECISION[:FAULT]@PORT" in result.output
    assert "loading gemma" not in result.output
