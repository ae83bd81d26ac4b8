"""The serving cell of a side: what a result is only meaningful for.

A cell is model, runtime and version, quantization, KV cache dtype, tensor
parallelism, backend, GPU and its memory, context length, concurrency and the chat
template as the server renders it (a digest, from the preflight). The server
reveals some of it; `--cell key=value` fills in or overrides the rest.

A GGUF served by llama.cpp is named by its file: the model is the file's name without
its folder, `.gguf`, split suffix and quantization (`/m/gemma-3-270m-Q2_K.gguf` is
gemma-3-270m, quantization Q2_K; llama-server's `model_ftype` wins over the name).
llama-server also reports the model's shape (`/v1/models` meta: parameters,
vocabulary, embedding size, training context), the same for every quantization of one
model: when both sides report it, it decides whether the model differs, not the names.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from ..errors import QuantcheckError
from ..store.engines import profile_of
from ..store.folders.run_dir import Cell, CellValue, ServerInfo
from ..store.runtimes import context_length, info_answer, mapping, whole_number

CELL_AXES = ["model", "model_shape", "runtime", "runtime_version", "quantization",
             "kv_cache_dtype", "tp", "backend", "gpu", "vram_gb", "context_len", "concurrency",
             "chat_template"]
QUANT_IN_NAME = re.compile(
    r"(?i)(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|FP8|NVFP4|MXFP4|AWQ|GPTQ|INT[48])"
    r"(?![A-Za-z0-9])")
GGUF_SPLIT = re.compile(r"-\d{5}-of-\d{5}$")
# llama.cpp's ftype names (llama_ftype_name) that differ from the file-name convention
FTYPE_SIZES = {"Small": "_S", "Medium": "_M", "Large": "_L"}


def parse_cell_options(values: tuple[str, ...] | list[str]) -> Cell:
    """`--cell gpu="RTX PRO 6000" --cell vram_gb=96` -> {"gpu": ..., "vram_gb": 96}."""
    cell: Cell = {}
    for value in values:
        key, separator, raw = value.partition("=")
        key = key.strip()
        if not separator or not key:
            raise QuantcheckError(f"--cell {value!r}: expected key=value, e.g. gpu=H100 "
                                  f"(known keys: {', '.join(CELL_AXES)})")
        cell[key] = _number_or_text(raw.strip())
    return cell


def _number_or_text(raw: str) -> CellValue:
    """A number when it reads as one (a finite one: "nan" and "1e999" stay text, as
    JSON has no such number to store)."""
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        number = float(raw)
    except ValueError:
        return raw
    return number if math.isfinite(number) else raw


def cell_from_server(info: ServerInfo, model: str, concurrency: int) -> Cell:
    """What the server's own endpoints say about the cell (None where they are silent)."""
    sglang = mapping(info.server_info)
    props = mapping(info.props)
    model_path = _text(props.get("model_path")) or ""
    profile = profile_of(info.runtime)
    gguf = profile is not None and profile.gguf_names
    meta = _model_meta(info, model)
    return {
        "model": gguf_model_name(model) if gguf else model,
        "model_shape": _shape(meta),
        "runtime": info.runtime,
        "runtime_version": info.runtime_version,
        "quantization": _text(sglang.get("quantization")) or ftype_quantization(
            props.get("model_ftype") or meta.get("ftype")) or _quant_from_name(
            model_path or (model if gguf else "")),
        "kv_cache_dtype": kv_cache_dtype(info),
        "tp": whole_number(sglang.get("tp_size")),
        "backend": _text(sglang.get("attention_backend")),
        "gpu": None,
        "vram_gb": None,
        "context_len": context_length(info, model),
        "concurrency": concurrency,
    }


def kv_cache_dtype(info: ServerInfo) -> str | None:
    """The KV cache's dtype where the runtime tells it (store/engines.py: SGLang's
    server info, vLLM's `vllm:cache_config_info` metric; `auto` is the model's own
    dtype). llama-server does not tell it (not in `/props`, `/slots` or `/v1/models`):
    `--cell kv_cache_dtype=q4_0` says it."""
    profile = profile_of(info.runtime)
    if profile is None:
        return None
    if profile.kv_cache_dtype_at is not None:
        path, key = profile.kv_cache_dtype_at
        return _text(mapping(info_answer(info, path)).get(key))
    if profile.kv_cache_dtype_metric is not None:
        path, metric, label = profile.kv_cache_dtype_metric
        return _text(mapping(mapping(info_answer(info, path)).get(metric)).get(label))
    return None


def gguf_model_name(path: str) -> str:
    """`/models/gemma-3-270m-it-Q4_K_M-00001-of-00002.gguf` -> `gemma-3-270m-it`."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    name = GGUF_SPLIT.sub("", name[:-5] if name.lower().endswith(".gguf") else name)
    stripped = QUANT_IN_NAME.sub("", name).strip("-_. ")
    return re.sub(r"[-_.]{2,}", lambda run: run.group(0)[0], stripped) or name


def ftype_quantization(ftype: object) -> str | None:
    """llama.cpp's ftype name as a file name spells it: "Q4_K - Medium" -> Q4_K_M,
    "Q2_K - Medium" -> Q2_K, "IQ4_XS - 4.25 bpw" -> IQ4_XS, "all F32" -> F32."""
    if not isinstance(ftype, str) or not ftype.strip():
        return None
    name = ftype.removeprefix("(guessed) ").removeprefix("all ").strip()
    base, _, detail = name.partition(" - ")
    base = base.split()[0]
    if base == "Q2_K" and detail == "Medium":
        return base
    if base == "IQ3_S" and name.startswith("IQ3_S mix"):
        return "IQ3_M"
    return base + FTYPE_SIZES.get(detail, "")


def _model_meta(info: ServerInfo, model: str) -> Mapping[str, object]:
    entries = [entry for entry in info.models if isinstance(entry, dict)]
    chosen = next((e for e in entries if e.get("id") == model), entries[0] if entries else {})
    return mapping(chosen.get("meta"))


def _shape(meta: Mapping[str, object]) -> str | None:
    """The model's shape as llama-server reports it, or None when it does not."""
    parts = [(whole_number(meta.get(key)), label) for key, label in (
        ("n_params", "params"), ("n_vocab", "vocab"), ("n_embd", "embd"),
        ("n_ctx_train", "ctx_train"))]
    if not all(value for value, _ in parts):
        return None
    return ", ".join(f"{label} {value}" for value, label in parts)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _quant_from_name(path: str) -> str | None:
    match = QUANT_IN_NAME.search(path.rsplit("/", 1)[-1])
    return match.group(1).upper() if match else None


KEY_AXES = ("model", "runtime", "runtime_version", "quantization", "tp")
DEFAULT_KV = "auto"  # vLLM's and SGLang's word for the model's own dtype
# The axes a serving change is made in: one known on one side only may differ unseen
CHANGE_AXES = ("quantization", "kv_cache_dtype", "backend", "tp")


def cell_key(cell: Mapping[str, CellValue]) -> str:
    """`model__runtime-version__quant__tpN` from the parts that are known (an unknown
    part is left out, not written as "unknown": `unknown_key_axes` names those), every
    character outside A-Za-z0-9.+/- as _. A KV cache dtype other than the model's own
    adds `kv-DTYPE` before the tp (two cells that differ only in it differ in key)."""
    runtime = "-".join(str(cell[k]) for k in ("runtime", "runtime_version") if cell.get(k))
    kv = cell.get("kv_cache_dtype")
    fields = [str(cell.get("model") or ""), runtime, str(cell.get("quantization") or ""),
              f"kv-{kv}" if kv and kv != DEFAULT_KV else "",
              f"tp{cell['tp']}" if cell.get("tp") else ""]
    return "__".join(re.sub(r"[^A-Za-z0-9.+/-]", "_", field) for field in fields if field)


def unknown_key_axes(cell: Mapping[str, CellValue]) -> list[str]:
    """The parts of the cell key this cell does not know (set them with --cell)."""
    return [axis for axis in KEY_AXES if not cell.get(axis)]


def differing_axes(a: Mapping[str, CellValue], b: Mapping[str, CellValue]) -> list[str]:
    """Axes known on both sides with different values (an unknown axis cannot confound).
    A model shape known on both sides stands for the model: the names of two
    quantizations of one model may differ, their shapes do not."""
    keys = [k for k in CELL_AXES if k in a or k in b] + sorted(
        (set(a) | set(b)) - set(CELL_AXES))
    differing = [k for k in keys if a.get(k) is not None and b.get(k) is not None
                 and a.get(k) != b.get(k)]
    if a.get("model_shape") and b.get("model_shape"):
        differing = [k for k in differing if k != "model"]
        differing = ["model" if k == "model_shape" else k for k in differing]
    return differing


def axes_sentence(a: Mapping[str, CellValue], b: Mapping[str, CellValue],
                  differing: list[str]) -> str:
    """Which axes of the serving cell differ, in words: one axis (a weight quantization,
    a KV cache dtype, ...) is a one-axis change; axes known on one side only are named,
    as they may differ unseen."""
    if len(differing) == 1:
        axis = differing[0]
        shown = "" if axis == "model" else f" ({a.get(axis)} on A, {b.get(axis)} on B)"
        said = f"A and B differ in one axis of the serving cell, {axis}{shown}: a one-axis change"
    elif differing:
        said = confound_warning(differing) or ""
    else:
        said = "A and B differ in no recorded axis of the serving cell"
    one_sided = [k for k in CHANGE_AXES if (a.get(k) is None) != (b.get(k) is None)]
    if one_sided:
        said += (f"; known on one side only: {', '.join(one_sided)} (say it for the other "
                 "with --a-cell or --b-cell)")
    return said


def confound_warning(differing: list[str]) -> str | None:
    if len(differing) <= 1:
        return None
    return (f"A and B differ in {len(differing)} axes ({', '.join(differing)}): this is not a "
            "single-variable A/B, so any difference may come from any of them.")
