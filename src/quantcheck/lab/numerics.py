"""Weight formats as their checkpoints define them: quantize, then dequantize for compute.

These change numerics the way the real formats do (not noise added to logits):
- bf16: round every weight to bfloat16;
- fp8: FP8 E4M3 with one scale per output channel (max |w| maps to 448), as FP8
  checkpoints store linear layers;
- int4: asymmetric 4-bit in groups of 32 input weights with a scale and a zero point
  per group, as GPTQ/AWQ-style checkpoints do.
"""

from __future__ import annotations

import torch

FP8_MAX = 448.0  # largest finite float8_e4m3fn
INT4_GROUP = 32
PRECISIONS = ("bf16", "fp8", "int4")


def bf16_round_trip(weight: torch.Tensor) -> torch.Tensor:
    return weight.to(torch.bfloat16).to(weight.dtype)


def fp8_quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 values, per-output-channel scale) with weight ~= values * scale."""
    scale = weight.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / FP8_MAX
    return (weight / scale).to(torch.float8_e4m3fn), scale


def fp8_round_trip(weight: torch.Tensor) -> torch.Tensor:
    values, scale = fp8_quantize(weight)
    return (values.to(weight.dtype) * scale).to(weight.dtype)


def int4_round_trip(weight: torch.Tensor, group: int = INT4_GROUP) -> torch.Tensor:
    rows, columns = weight.shape
    if columns % group:
        raise ValueError(f"int4 groups of {group} need a multiple of {group} columns")
    grouped = weight.reshape(rows, columns // group, group)
    low = grouped.amin(dim=2, keepdim=True)
    high = grouped.amax(dim=2, keepdim=True)
    scale = ((high - low) / 15.0).clamp(min=1e-12)
    zero = torch.round(-low / scale).clamp(0, 15)
    levels = torch.clamp(torch.round(grouped / scale) + zero, 0, 15)
    return ((levels - zero) * scale).reshape(rows, columns).to(weight.dtype)


ROUND_TRIPS = {"bf16": bf16_round_trip, "fp8": fp8_round_trip, "int4": int4_round_trip}


def unscaled_fp8(weight: torch.Tensor, rows: int = 16384) -> torch.Tensor:
    """An FP8 head whose per-channel scales were never applied (SGLang's lm_head bug):
    the raw E4M3 values, up to 448, used as if they were the weights. Made `rows`
    output channels at a time (each has its own scale, so the values are the same):
    whole, a 262k-row head took three temporaries of its size."""
    head = torch.empty_like(weight)
    for start in range(0, weight.shape[0], rows):
        values, _ = fp8_quantize(weight[start:start + rows])
        head[start:start + rows] = values.to(weight.dtype)
    return head


def chunked_matmul(hidden: torch.Tensor, weight: torch.Tensor, order: list[int],
                   chunks: int) -> torch.Tensor:
    """hidden @ weight.T summed chunk by chunk over the hidden dimension in `order`.

    Floating-point addition is not associative: another order gives slightly other
    sums, as atomics in a fused MoE finalize do from one request to the next.
    """
    width = hidden.shape[-1]
    bounds = [(width * n // chunks, width * (n + 1) // chunks) for n in range(chunks)]
    total = torch.zeros(*hidden.shape[:-1], weight.shape[0], dtype=hidden.dtype)
    for n in order:
        start, end = bounds[n]
        total = total + hidden[..., start:end] @ weight[:, start:end].T
    return total
