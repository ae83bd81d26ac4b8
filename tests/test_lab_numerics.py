"""Each weight format changes numerics the way the format defines it (small tensors)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from quantcheck.lab.numerics import (  # noqa: E402
    FP8_MAX,
    bf16_round_trip,
    chunked_matmul,
    fp8_quantize,
    fp8_round_trip,
    int4_round_trip,
    unscaled_fp8,
)


@pytest.fixture
def weight() -> object:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(16, 64, generator=generator) * torch.linspace(0.01, 3.0, 16)[:, None]


def test_bf16_keeps_eight_bits_of_mantissa(weight: object) -> None:
    rounded = bf16_round_trip(weight)
    assert torch.equal(rounded, rounded.to(torch.bfloat16).to(torch.float32))
    relative = ((rounded - weight).abs() / weight.abs()).max()
    assert 0 < relative <= 2 ** -8


def test_fp8_has_one_scale_per_output_channel(weight: object) -> None:
    values, scale = fp8_quantize(weight)
    assert values.dtype == torch.float8_e4m3fn and scale.shape == (16, 1)
    assert torch.allclose(values.to(torch.float32).abs().amax(dim=1), torch.full((16,), FP8_MAX))
    rounded = fp8_round_trip(weight)
    # E4M3 keeps 3 mantissa bits: within 2^-4 of each value (relative to its channel's
    # scale for the smallest, subnormal ones)
    error = (rounded - weight).abs()
    assert (error <= weight.abs() * 2 ** -4 + scale * 2 ** -6).all()
    assert not torch.equal(rounded, weight)


def test_unscaled_fp8_is_the_raw_values(weight: object) -> None:
    raw = unscaled_fp8(weight)
    assert raw.abs().max() == FP8_MAX
    ratio = raw / fp8_round_trip(weight)
    _, scale = fp8_quantize(weight)
    finite = ratio.isfinite() & (fp8_round_trip(weight) != 0)
    assert torch.allclose(ratio[finite], (1 / scale).expand_as(ratio)[finite], rtol=1e-5)


def test_int4_uses_sixteen_levels_per_group_of_32(weight: object) -> None:
    rounded = int4_round_trip(weight)
    for group in rounded.reshape(16, 2, 32).reshape(-1, 32):
        assert len(torch.unique(group)) <= 16
    scale = (weight.reshape(16, 2, 32).amax(2) - weight.reshape(16, 2, 32).amin(2)) / 15
    error = (rounded - weight).abs().reshape(16, 2, 32)
    assert (error <= scale[..., None] / 2 + 1e-6).all()
    with pytest.raises(ValueError, match="multiple of 32"):
        int4_round_trip(torch.ones(2, 40))


def test_reduction_order_changes_the_last_bits_only() -> None:
    generator = torch.Generator().manual_seed(1)
    hidden = torch.randn(640, generator=generator)
    weight = torch.randn(4096, 640, generator=generator)
    forward = chunked_matmul(hidden, weight, list(range(8)), 8)
    backward = chunked_matmul(hidden, weight, list(reversed(range(8))), 8)
    assert torch.allclose(forward, hidden @ weight.T, rtol=1e-4, atol=1e-4)
    assert torch.allclose(forward, backward, rtol=1e-5, atol=1e-5)
    assert not torch.equal(forward, backward)
