"""MoE expert routing as the engines send it, checked before it is kept.

Both engines return routing when started with `--enable-return-routed-experts`. vLLM
puts `routed_experts` on each choice of a whole answer: base64 of `.npy` bytes, an
unsigned or int32 array (rows, layers, experts per token). SGLang (the request also
asks `return_routed_experts: true`) puts base64 of raw little-endian int32 values,
without their shape, in the response's `sglext.routed_experts`: in a whole answer, and
in a stream as a last chunk without choices. Both send one row per forward-passed
position: the prompt's, then every generated token's but the last (whose output is
never fed back), so prompt + generated - 1 rows, and row i of the generated part is
the pass whose output chose token i (the prompt's last row for token 0). A dense
layer's columns are all 0 in both.

Routing that cannot be right is never kept: it is unusable, with the reason, and the
answer keeps its text and logprobs.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from typing import TypeGuard

import numpy as np

# Routing entries of the generated tokens kept per answer (the prompt's rows are read,
# not kept): 256 MiB as int32, above a long answer of a large MoE (32k tokens x 94
# layers x 8 experts is 24 million)
ROUTING_LIMIT = 2**26


class RoutingUnusable(Exception):
    """Routing that cannot be the experts of the generated tokens; the message says why."""


def decode_npy_routing(encoded: str) -> np.ndarray:
    """vLLM's `routed_experts`: base64 `.npy` of an integer (rows, layers, k) array. The
    header is checked against the bytes that follow it before anything is allocated."""
    raw = _base64(encoded)
    stream = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(stream)
        shape, fortran, dtype = (np.lib.format.read_array_header_1_0(stream)
                                 if version == (1, 0)
                                 else np.lib.format.read_array_header_2_0(stream))
    except (ValueError, OSError, EOFError, TypeError) as exc:
        raise RoutingUnusable(f"routed experts are not a .npy array: {exc}") from None
    if len(shape) != 3 or dtype.kind not in "iu":
        raise RoutingUnusable(f"routed experts of shape {shape} and type {dtype}: expected "
                              "integers (rows, layers, k)")
    count = math.prod(shape)
    if count * dtype.itemsize != len(raw) - stream.tell():
        raise RoutingUnusable(f"routed experts of shape {shape} and type {dtype} do not fit "
                              f"the {len(raw) - stream.tell():,} bytes sent")
    array = np.frombuffer(raw, dtype, count, stream.tell()).reshape(
        shape, order="F" if fortran else "C")
    if array.size and (array.min() < 0 or array.max() >= 2**31):
        raise RoutingUnusable("routed experts hold an expert number out of range")
    return array


def decode_raw_routing(encoded: str) -> np.ndarray:
    """SGLang's `sglext.routed_experts`: base64 of raw little-endian int32, flat (its
    shape is the model's: see generated_routing)."""
    raw = _base64(encoded)
    if len(raw) % 4:
        raise RoutingUnusable(f"routed experts of {len(raw)} bytes are not int32 values")
    array = np.frombuffer(raw, "<i4")
    if array.size and array.min() < 0:
        raise RoutingUnusable("routed experts hold a negative expert number")
    return array


def _base64(encoded: str) -> bytes:
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RoutingUnusable(f"routed experts are not base64: {exc}") from None


def generated_routing(routing: np.ndarray, n_tokens: int, usage: dict[str, object] | None,
                      shape: tuple[int, int] | None) -> np.ndarray:
    """The routing that produced each of the `n_tokens` generated tokens, (tokens,
    layers, k) int32; RoutingUnusable when the rows cannot be those of this answer's
    prompt and generated tokens (the usage says how many), hold no experts, or are too
    many to keep. A flat (SGLang) array needs the model's (layers, k)."""
    rows = _rows(routing, shape)
    layers, k = rows.shape[1:]
    if not layers or not k:
        raise RoutingUnusable(f"routing of shape {tuple(rows.shape)} holds no experts")
    prompt, generated = _token_counts(usage)
    if generated != n_tokens:
        raise RoutingUnusable(f"the usage counts {generated} completion tokens and the "
                              f"logprobs {n_tokens}: the rows cannot be matched to tokens")
    expected = prompt + generated - 1
    if len(rows) != expected:
        raise RoutingUnusable(f"{len(rows)} rows of routing where the engines send one per "
                              f"forward-passed position, prompt + generated - 1 = "
                              f"{prompt} + {generated} - 1 = {expected}")
    if generated * layers * k > ROUTING_LIMIT:
        raise RoutingUnusable(f"routing of {generated:,} generated tokens x {layers} layers "
                              f"x {k} is beyond the {ROUTING_LIMIT:,} entries kept per "
                              "answer")
    if not rows.any():
        raise RoutingUnusable("every layer's experts are 0: no layer was routed (a dense "
                              "model sends zeros)")
    return np.asarray(rows[prompt - 1:prompt - 1 + generated], np.int32)


def _rows(routing: np.ndarray, shape: tuple[int, int] | None) -> np.ndarray:
    if routing.ndim != 1:
        return routing
    if shape is None:
        raise RoutingUnusable("routing came without its shape: pass --routed-experts-shape "
                              "LAYERS,K (the model's num_hidden_layers and "
                              "num_experts_per_tok)")
    layers, k = shape
    if routing.size % (layers * k):
        raise RoutingUnusable(f"{routing.size} routed experts are not rows of {layers} "
                              f"layers x {k}")
    return routing.reshape(-1, layers, k)


def _token_counts(usage: dict[str, object] | None) -> tuple[int, int]:
    """The answer's prompt and completion tokens, as its usage gives them."""
    prompt = (usage or {}).get("prompt_tokens")
    generated = (usage or {}).get("completion_tokens")
    if _count(prompt) and _count(generated) and prompt >= 1:
        return prompt, generated
    raise RoutingUnusable("the answer's usage does not give its prompt and completion "
                          "tokens, so the routing's rows cannot be checked")


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
