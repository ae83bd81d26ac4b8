"""The serving cell of a side: what a result is only meaningful for.

A cell is model, runtime and version, quantization, KV cache dtype, tensor
parallelism, backend, GPU and its memory, context length and concurrency. The server
reveals some of it; `--cell key=value` fills in or overrides the rest.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import QuantcheckError
from .runstore import ServerInfo
from .runtimes import context_length, mapping, whole_number

CELL_AXES = ["model", "runtime", "runtime_version", "quantization", "kv_cache_dtype", "tp",
             "backend", "gpu", "vram_gb", "context_len", "concurrency"]
QUANT_IN_NAME = re.compile(
    r"(?i)(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|FP8|NVFP4|MXFP4|AWQ|GPTQ|INT[48])"
    r"(?![A-Za-z0-9])")


def parse_cell_options(values: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """`--cell gpu="RTX PRO 6000" --cell vram_gb=96` -> {"gpu": ..., "vram_gb": 96}."""
    cell: dict[str, Any] = {}
    for value in values:
        key, separator, raw = value.partition("=")
        key = key.strip()
        if not separator or not key:
            raise QuantcheckError(f"--cell {value!r}: expected key=value, e.g. gpu=H100 "
                                  f"(known keys: {', '.join(CELL_AXES)})")
        cell[key] = _number_or_text(raw.strip())
    return cell


def _number_or_text(raw: str) -> Any:
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def cell_from_server(info: ServerInfo, model: str, concurrency: int) -> dict[str, Any]:
    """What the server's own endpoints say about the cell (None where they are silent)."""
    sglang = mapping(info.server_info)
    props = mapping(info.props)
    model_path = props.get("model_path")
    return {
        "model": model,
        "runtime": info.runtime,
        "runtime_version": info.runtime_version,
        "quantization": _text(sglang.get("quantization")) or _quant_from_name(
            model_path if isinstance(model_path, str) else ""),
        "kv_cache_dtype": _text(sglang.get("kv_cache_dtype")),
        "tp": whole_number(sglang.get("tp_size")),
        "backend": _text(sglang.get("attention_backend")),
        "gpu": None,
        "vram_gb": None,
        "context_len": context_length(info, model),
        "concurrency": concurrency,
    }


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _quant_from_name(path: str) -> str | None:
    match = QUANT_IN_NAME.search(path.rsplit("/", 1)[-1])
    return match.group(1).upper() if match else None


KEY_AXES = ("model", "runtime", "runtime_version", "quantization", "tp")


def cell_key(cell: dict[str, Any]) -> str:
    """`model__runtime-version__quant__tpN` from the parts that are known (an unknown
    part is left out, not written as "unknown": `unknown_key_axes` names those), every
    character outside A-Za-z0-9.+/- as _."""
    runtime = "-".join(str(cell[k]) for k in ("runtime", "runtime_version") if cell.get(k))
    fields = [str(cell.get("model") or ""), runtime, str(cell.get("quantization") or ""),
              f"tp{cell['tp']}" if cell.get("tp") else ""]
    return "__".join(re.sub(r"[^A-Za-z0-9.+/-]", "_", field) for field in fields if field)


def unknown_key_axes(cell: dict[str, Any]) -> list[str]:
    """The parts of the cell key this cell does not know (set them with --cell)."""
    return [axis for axis in KEY_AXES if not cell.get(axis)]


def differing_axes(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Axes known on both sides with different values (an unknown axis cannot confound)."""
    keys = [k for k in CELL_AXES if k in a or k in b] + sorted(
        (set(a) | set(b)) - set(CELL_AXES))
    return [k for k in keys if a.get(k) is not None and b.get(k) is not None
            and a.get(k) != b.get(k)]


def confound_warning(differing: list[str]) -> str | None:
    if len(differing) <= 1:
        return None
    return (f"A and B differ in {len(differing)} axes ({', '.join(differing)}): this is not a "
            "single-variable A/B, so any difference may come from any of them.")
