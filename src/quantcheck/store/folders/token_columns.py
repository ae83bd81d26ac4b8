"""The compact, lossless on-disk form of a completion's token arrays (`tokens.bin`).

A run directory appends one blob per completion to `tokens.bin`; the completion's line
in completions.jsonl points at it: `"tokens": {"file": "tokens.bin", "offset": 0,
"length": 1234, "n_tokens": 256}`. A blob is a zstandard frame of:

    uint32 header length, header (JSON), then the sections the header describes:
    top        every alternative's token string, position by position, UTF-8 (lone
               surrogates kept), joined by NUL (or, when a token holds a NUL, preceded
               by uint32 character lengths)
    counts     alternatives per position (uint16; uint32 when the header says
               `"counts": "u4"`), unless the header gives one `k`
    own_token  bitmap: positions whose chosen token is not their top-1 alternative
    chosen     those positions' chosen tokens, joined like `top`
    own_prob   bitmap: positions whose chosen logprob differs from the top-1's
    floats     those positions' chosen logprobs (NaN: none sent), then every
               alternative's logprob; byte-shuffled
    ids        token ids (-1 unknown), when the server sent any: int32, or int64 when
               the header says `"ids": "i8"` (older blobs say `true`: int32)
    routing    MoE experts per generated token, layer and slot, when the header has
               `"routing": [tokens, layers, k, type]` (type u1, u2 or i4)

zstd finds the repeated token strings itself. Logprobs are stored as float32 when
that is exact: `f4` when each value is a float32 (vLLM, SGLang and llama-cpp-python
compute in float32 and send its exact decimal expansion), `f4s` when each is the
shortest decimal of a float32 (llama.cpp's server prints them so), otherwise `f8`.
Every digit the server sent comes back, and every count and id: the narrow integer
types are used only when every value fits (the parser refuses ids outside int64).
"""

from __future__ import annotations

import hashlib
import operator
import struct
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import orjson
import zstandard

from ..records.run_records import Tokens

TOKENS_FILE = "tokens.bin"
# Level 3: a quarter of zlib -1's time on a top-20 response, and smaller.
_COMPRESS = zstandard.ZstdCompressor(level=3)
_DECOMPRESS = zstandard.ZstdDecompressor()


@dataclass
class PackedTokens:
    """A completion's token arrays as packed columns."""

    n: int
    top: bytes  # the alternatives' strings, encoded as described above
    counts: np.ndarray
    own_token: np.ndarray  # bool per position
    chosen: bytes  # the own_token positions' strings, encoded like `top`
    chosen_logprob: np.ndarray  # every position; NaN where the server sent none
    top_logprob: np.ndarray
    ids: np.ndarray | None = None
    raw_bytes: dict[int, list[int]] | None = None
    routing: np.ndarray | None = None

    def signature(self, digits: int) -> str:
        """Digest of the token sequence and every position's top-k, logprobs rounded
        to `digits` significant digits: equal for repeats that agree that closely. An
        equality key, never written: SHA-1 (the processor's own instructions) hashes the
        ~40 KB of a 128-token top-20 record in half blake2b's time, and `compare` hashes
        every record."""
        digest = hashlib.sha1(usedforsecurity=False)
        for part in (self.top, self.counts.astype(np.uint32).tobytes(),
                     np.packbits(self.own_token).tobytes(), self.chosen):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
        values = np.concatenate([self.chosen_logprob, self.top_logprob])
        digest.update(round_significant(values, digits).tobytes())
        return digest.hexdigest()[:24]

    def to_tokens(self) -> Tokens:
        alternatives = _split(self.top, int(self.counts.sum()))
        bounds = np.concatenate([[0], np.cumsum(self.counts)]).tolist()
        spans = list(zip(bounds, bounds[1:], strict=False))
        top_text = [alternatives[a:b] for a, b in spans]
        top_logprob_flat = self.top_logprob.tolist()
        own = iter(_split(self.chosen, int(self.own_token.sum())))
        text = [next(own) if mine else top_text[n][0]
                for n, mine in enumerate(self.own_token.tolist())]
        raw = None
        if self.raw_bytes is not None:
            raw = [self.raw_bytes.get(n) for n in range(self.n)]
        return Tokens(
            text=text,
            logprob=[None if v != v else v for v in self.chosen_logprob.tolist()],  # NaN
            top_text=top_text, top_logprob=[top_logprob_flat[a:b] for a, b in spans],
            ids=self.ids.tolist() if self.ids is not None else None, raw_bytes=raw,
            routing=self.routing)


def round_significant(values: np.ndarray, digits: int) -> np.ndarray:
    """Round each value to `digits` significant digits (NaN stays NaN)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        magnitude = np.floor(np.log10(np.abs(values)))
        magnitude = np.where(np.isfinite(magnitude), magnitude, 0.0)
        factor = 10.0 ** (digits - 1 - magnitude)
        return np.asarray(np.round(values * factor) / factor)


def packed_from_tokens(tokens: Tokens) -> PackedTokens:
    n = len(tokens.text)
    alternatives = list(chain.from_iterable(tokens.top_text))
    firsts = [top[0] if top else None for top in tokens.top_text]
    own_token = ~np.fromiter(map(operator.eq, tokens.text, firsts), bool, count=n)
    raw = None
    if tokens.raw_bytes is not None:
        raw = {n: b for n, b in enumerate(tokens.raw_bytes) if b is not None}
    return PackedTokens(
        n=n, top=_join(alternatives),
        counts=np.fromiter(map(len, tokens.top_text), np.int64, count=n),
        own_token=own_token,
        chosen=_join([text for text, mine in zip(tokens.text, own_token.tolist(),
                                                 strict=True) if mine]),
        chosen_logprob=np.array([np.nan if v is None else v for v in tokens.logprob], float),
        top_logprob=np.fromiter(chain.from_iterable(tokens.top_logprob), float,
                                count=len(alternatives)),
        ids=np.array(tokens.ids, np.int64) if tokens.ids is not None else None,
        raw_bytes=raw, routing=tokens.routing)


def pack(tokens: Tokens) -> bytes:
    """One completion's tokens -> a self-contained compressed blob."""
    packed = packed_from_tokens(tokens)
    first = np.minimum(np.concatenate([[0], np.cumsum(packed.counts)[:-1]]),
                       max(len(packed.top_logprob) - 1, 0)).astype(np.int64)
    own_prob = np.ones(packed.n, bool)
    if len(packed.top_logprob):
        own_prob = (packed.counts == 0) | (  # compared bit for bit: -0.0 is not 0.0
            packed.chosen_logprob.view(np.int64) != packed.top_logprob[first].view(np.int64))
    floats = np.concatenate([packed.chosen_logprob[own_prob], packed.top_logprob])
    float_format, float_bytes = _encode_floats(floats)
    counts = packed.counts
    uniform = int(counts[0]) if packed.n and (counts == counts[0]).all() else None
    count_type = _narrowest(counts, "u")
    id_type = _narrowest(packed.ids, "i") if packed.ids is not None else None
    header: dict[str, object] = {
        "v": 1, "n": packed.n, "k": uniform, "alternatives": len(packed.top_logprob),
        "own_token": int(packed.own_token.sum()), "own_prob": int(own_prob.sum()),
        "floats": float_format, "ids": id_type, "counts": count_type,
        "raw_bytes": None if packed.raw_bytes is None
        else {str(k): v for k, v in packed.raw_bytes.items()}}
    routing = packed.routing
    if routing is not None:
        routing_type = _narrowest(routing, "e")
        header["routing"] = [*routing.shape, routing_type]
    sections = [
        _sized(packed.top),
        b"" if uniform is not None else counts.astype(INTEGER_TYPES[count_type]).tobytes(),
        np.packbits(packed.own_token).tobytes(), _sized(packed.chosen),
        np.packbits(own_prob).tobytes(), float_bytes,
        packed.ids.astype(INTEGER_TYPES[id_type]).tobytes() if packed.ids is not None
        and id_type else b"",
        routing.astype(INTEGER_TYPES[routing_type]).tobytes() if routing is not None else b""]
    head = orjson.dumps(header)
    return _COMPRESS.compress(struct.pack("<I", len(head)) + head + b"".join(sections))


def unpack(blob: bytes) -> PackedTokens:
    """A blob written by `pack` -> its columns."""
    payload = _DECOMPRESS.decompress(blob)
    (head_length,) = struct.unpack_from("<I", payload)
    header: dict[str, Any] = orjson.loads(payload[4:4 + head_length])
    reader = _Reader(payload, 4 + head_length)
    n, alternatives = header["n"], header["alternatives"]
    top = reader.sized()
    counts = (np.full(n, header["k"], np.int64) if header["k"] is not None
              else reader.array(INTEGER_TYPES[header.get("counts", "u2")], n).astype(np.int64))
    own_token = reader.bits(n)
    chosen = reader.sized()
    own_prob = reader.bits(n)
    floats = _decode_floats(reader, header["floats"], header["own_prob"] + alternatives)
    id_type = "i4" if header["ids"] is True else header["ids"]
    ids = reader.array(INTEGER_TYPES[id_type], n).astype(np.int64) if id_type else None
    top_logprob = floats[header["own_prob"]:]
    chosen_logprob = np.full(n, np.nan)
    if alternatives:
        first = np.minimum(np.concatenate([[0], np.cumsum(counts)[:-1]]), alternatives - 1)
        chosen_logprob = top_logprob[first.astype(np.int64)]
    chosen_logprob[own_prob] = floats[:header["own_prob"]]
    raw = header["raw_bytes"]
    routing = None
    if header.get("routing"):
        *shape, routing_type = header["routing"]
        routing = reader.array(INTEGER_TYPES[routing_type], int(np.prod(shape))).astype(
            np.int32).reshape(shape)
    return PackedTokens(n=n, top=top, counts=counts, own_token=own_token, chosen=chosen,
                        chosen_logprob=chosen_logprob, top_logprob=top_logprob, ids=ids,
                        raw_bytes=None if raw is None else {int(k): v for k, v in raw.items()},
                        routing=routing)


INTEGER_TYPES: dict[str, type[np.integer[Any]]] = {
    "u1": np.uint8, "u2": np.uint16, "u4": np.uint32, "i4": np.int32, "i8": np.int64}
_WIDTHS = {"u": ("u2", "u4"), "i": ("i4", "i8"), "e": ("u1", "u2", "i4")}


def _narrowest(values: np.ndarray, kind: str) -> str:
    """u2 or u4 (counts), i4 or i8 (ids), u1, u2 or i4 (experts): the narrowest type
    every value fits."""
    *narrow, wide = _WIDTHS[kind]
    for name in narrow:
        limits = np.iinfo(INTEGER_TYPES[name])
        if not values.size or (limits.min <= values.min() and values.max() <= limits.max):
            return name
    return wide


def _join(strings: list[str]) -> bytes:
    """Strings as one UTF-8 run: NUL-joined, or after their lengths when one holds a NUL
    (first byte 0 or 1 says which)."""
    joined = "\0".join(strings)
    if joined.count("\0") == max(len(strings) - 1, 0):
        return b"\0" + joined.encode("utf-8", "surrogatepass")
    lengths = np.fromiter(map(len, strings), np.uint32, count=len(strings))
    return b"\1" + lengths.tobytes() + "".join(strings).encode("utf-8", "surrogatepass")


def _split(encoded: bytes, count: int) -> list[str]:
    if count == 0:
        return []
    if encoded[:1] == b"\0":
        return encoded[1:].decode("utf-8", "surrogatepass").split("\0")
    lengths = np.frombuffer(encoded[1:1 + 4 * count], np.uint32)
    text = encoded[1 + 4 * count:].decode("utf-8", "surrogatepass")
    bounds = [0, *np.cumsum(lengths, dtype=np.int64).tolist()]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _sized(encoded: bytes) -> bytes:
    return struct.pack("<I", len(encoded)) + encoded


class _Reader:
    def __init__(self, payload: bytes, offset: int) -> None:
        self.payload, self.offset = payload, offset

    def take(self, size: int) -> bytes:
        chunk = self.payload[self.offset:self.offset + size]
        self.offset += size
        return chunk

    def sized(self) -> bytes:
        (size,) = struct.unpack("<I", self.take(4))
        return self.take(size)

    def array(self, dtype: Any, count: int) -> np.ndarray:
        dtype = np.dtype(dtype)
        return np.frombuffer(self.take(dtype.itemsize * count), dtype)

    def bits(self, count: int) -> np.ndarray:
        return np.unpackbits(self.array(np.uint8, (count + 7) // 8), count=count).astype(bool)


def _encode_floats(values: np.ndarray) -> tuple[str, bytes]:
    with np.errstate(over="ignore"):  # beyond float32's range: stored as f8
        single = values.astype(np.float32)
    widened = single.astype(float)
    # without NaN (no position lacks its logprob) the plain comparison says it, in half
    # the time of the one that sets NaN equal to NaN
    if np.array_equal(widened, values) or np.array_equal(widened, values, equal_nan=True):
        return "f4", _shuffle(single)
    if _shortest_float32(single[:32], values[:32]) and _shortest_float32(single, values):
        return "f4s", _shuffle(single)
    return "f8", _shuffle(values.astype(np.float64))


def _shortest_float32(single: np.ndarray, values: np.ndarray) -> bool:
    """Whether each value is the shortest decimal that names its float32."""
    return bool(np.array_equal(single.astype(str).astype(float), values, equal_nan=True))


def _decode_floats(reader: _Reader, float_format: str, count: int) -> np.ndarray:
    dtype = np.dtype(np.float64 if float_format == "f8" else np.float32)
    shuffled = reader.array(np.uint8, dtype.itemsize * count)
    values = shuffled.reshape(dtype.itemsize, count).T.copy().view(dtype).ravel()
    if float_format == "f4s":
        return np.asarray(values.astype(str).astype(float))
    return np.asarray(values.astype(float))


def _shuffle(values: np.ndarray) -> bytes:
    """Byte i of every value together: exponents and high mantissa bytes repeat, so
    the compressor finds them (the same idea as blosc's shuffle filter)."""
    return values.view(np.uint8).reshape(-1, values.itemsize).T.tobytes()
