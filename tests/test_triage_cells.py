"""triage/cells.py: the serving cell each server reveals (and `quantcheck probe` prints),
its key, the axes two cells differ in, and compare's warning when A and B differ in
more than the one being tested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quantcheck import CollectSettings, collect, compare_runs, load_run
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.store.folders.run_dir import ServerInfo
from quantcheck.triage.cells import (
    axes_sentence,
    cell_from_server,
    cell_key,
    confound_warning,
    differing_axes,
    ftype_quantization,
    gguf_model_name,
    parse_cell_options,
)

from .conftest import FIXTURES, Serve, WritePrompts, invoke


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [
        ("vllm", {"runtime": "vllm", "runtime_version": "0.11.0", "context_len": 8192,
                  "quantization": None, "tp": None}),
        ("sglang", {"runtime": "sglang", "runtime_version": "0.5.9", "quantization": "fp8",
                    "kv_cache_dtype": "fp8_e4m3", "tp": 2, "backend": "flashinfer",
                    "context_len": 8192}),
        ("llama.cpp", {"runtime": "llama.cpp", "runtime_version": "b6000-abc1234",
                      "quantization": "Q4_K_M", "context_len": 8192}),
        ("llama-cpp-python", {"runtime": "llama-cpp-python", "runtime_version": None}),
    ],
)
def test_servers_reveal_their_cell(serve: Serve, dialect: str,
                                   expected: dict[str, object]) -> None:
    info = {"quantization": "fp8", "kv_cache_dtype": "fp8_e4m3", "tp_size": 2} \
        if dialect == "sglang" else {}
    if dialect == "llama.cpp":
        info = {"model_path": "/models/gemma-3-270m-Q4_K_M.gguf"}
    server = serve(ScriptedModel(), dialect, server_info=info)
    result = invoke("probe", server.url, "--json", "--cell", "gpu=H100", "--cell", "vram_gb=80")
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    for key, value in expected.items():
        assert found["cell"][key] == value, key
    assert found["cell"]["gpu"] == "H100" and found["cell"]["vram_gb"] == 80
    assert found["cell_key"] == cell_key(found["cell"])


def test_cell_key_style() -> None:
    cell = {"model": "nvidia/Qwen3.6-35B-A3B-NVFP4", "runtime": "vllm",
            "runtime_version": "0.27.1", "quantization": "nvfp4", "tp": 1}
    assert cell_key(cell) == "nvidia/Qwen3.6-35B-A3B-NVFP4__vllm-0.27.1__nvfp4__tp1"
    assert cell_key({"model": "a b:c"}) == "a_b_c"  # unknown parts are left out
    assert cell_key({"model": "m", "runtime": "vllm", "tp": 2}) == "m__vllm__tp2"


def test_cell_options_and_differing_axes() -> None:
    assert parse_cell_options(["gpu=RTX PRO 6000", "vram_gb=96", "tp=2"]) == {
        "gpu": "RTX PRO 6000", "vram_gb": 96, "tp": 2}
    with pytest.raises(Exception, match="expected key=value"):
        parse_cell_options(["gpu"])
    a = {"model": "m", "quantization": "bf16", "backend": None, "gpu": "H100"}
    b = {"model": "m", "quantization": "fp8", "backend": "marlin", "gpu": "H200"}
    assert differing_axes(a, b) == ["quantization", "gpu"]
    assert cell_from_server(ServerInfo(runtime="vllm", models=[{"id": "m"}]), "m", 8)[
        "concurrency"] == 8


def llama_server_cell(quantization: str, **meta: int) -> dict[str, object]:
    """The cell of a real llama-server's recorded answers (`/v1/models`, `/props`)."""
    answers = json.loads((FIXTURES / "wire" / f"llama-server-info-{quantization}.json")
                         .read_text())
    answers["models"][0]["meta"].update(meta)
    info = ServerInfo(models=answers["models"], props=answers["props"], runtime="llama.cpp")
    return cell_from_server(info, answers["models"][0]["id"], 1)


def test_quantizations_of_one_gguf_are_one_model_and_other_models_are_not() -> None:
    a, b = llama_server_cell("q4_k_m"), llama_server_cell("q2_k")
    assert a["model"] == b["model"] == "gemma-3-270m"
    assert (a["quantization"], b["quantization"]) == ("Q4_K_M", "Q2_K")  # model_ftype
    assert a["model_shape"] == ("params 268098176, vocab 262144, embd 640, "
                                "ctx_train 32768") == b["model_shape"]
    assert differing_axes(a, b) == ["quantization"] and confound_warning(["quantization"]) \
        is None
    # whatever the file is called, the shape says it is the same model ...
    renamed = {**b, "model": "candidate"}
    assert differing_axes(a, renamed) == ["quantization"]
    # ... and another model under a look-alike name is still a confound
    other = llama_server_cell("q2_k", n_params=1_000_000_000, n_embd=2048)
    assert differing_axes(a, other) == ["model", "quantization"]
    assert "not a single-variable A/B" in (confound_warning(differing_axes(a, other)) or "")


@pytest.mark.parametrize(("name", "model"), [
    ("gemma-3-270m-q4_k_m.gguf", "gemma-3-270m"),
    ("/models/Qwen3-30B-A3B-Q8_0-00001-of-00003.gguf", "Qwen3-30B-A3B"),
    ("llama-3.1-8b-instruct.Q5_K_M.gguf", "llama-3.1-8b-instruct"),
    ("gemma-f16.gguf", "gemma"),
    ("Q8_0.gguf", "Q8_0"),  # nothing left: the name stays
])
def test_gguf_model_names(name: str, model: str) -> None:
    assert gguf_model_name(name) == model


@pytest.mark.parametrize(("ftype", "quantization"), [
    ("Q2_K - Medium", "Q2_K"), ("Q2_K - Small", "Q2_K_S"), ("Q4_K - Medium", "Q4_K_M"),
    ("Q3_K - Large", "Q3_K_L"), ("F16", "F16"), ("all F32", "F32"),
    ("(guessed) Q8_0", "Q8_0"), ("IQ4_XS - 4.25 bpw", "IQ4_XS"),
    ("IQ3_S mix - 3.66 bpw", "IQ3_M"), ("MXFP4 MoE", "MXFP4"), ("", None), (7, None)])
def test_llama_cpp_ftype_names_read_as_file_names_spell_them(ftype: object,
                                                             quantization: str | None) -> None:
    assert ftype_quantization(ftype) == quantization


def test_collect_records_the_cell_and_compare_warns_on_confounds(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts("prompts:\n  - {id: p, prompt: hi}\n")
    a_server, b_server = serve(dialect="vllm"), serve(dialect="sglang")
    collect([prompts], tmp_path / "a", CollectSettings(endpoint=a_server.url, label="a",
                                                       cell={"gpu": "H100"}))
    collect([prompts], tmp_path / "b", CollectSettings(endpoint=b_server.url, label="b",
                                                       cell={"gpu": "H100"}))
    manifest = load_run(tmp_path / "a").manifest
    assert manifest.cell["gpu"] == "H100" and manifest.cell["runtime"] == "vllm"
    assert manifest.cell_key == "scripted-model__vllm-0.11.0"
    summary = compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    assert summary.cells.differs == ["runtime", "runtime_version"]
    assert "differ in 2 axes (runtime, runtime_version)" in str(summary.cells.warning)
    html = (tmp_path / "report" / "index.html").read_text()
    assert 'tr class="differs" data-axis="runtime"' in html


def test_probe_prints_aligned_known_axes_and_names_the_unknown_once(serve: Serve) -> None:
    result = invoke("probe", serve(ScriptedModel()).url, "--cell", "gpu=H100")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    values = [line for line in lines if not line.startswith("not revealed")]
    columns = {len(line) - len(line.split("  ", 1)[1].lstrip()) for line in values}
    assert len(columns) == 1  # one column for the values
    assert any(line.split() == ["gpu", "H100"] for line in lines)
    assert "unknown" not in result.output.replace("not revealed", "")
    (unknown,) = [line for line in lines if line.startswith("not revealed by the server:")]
    named = unknown.split(": ", 1)[1].split(" (")[0].split(", ")
    assert "quantization" in named and "tp" in named
    assert "gpu" not in named and "concurrency" not in named  # given; not a server fact
    assert [line for line in lines if line.startswith("cell key")][0].split()[-1] == \
        "scripted-model__vllm-0.11.0"


def test_vllm_tells_its_kv_cache_dtype_on_its_metrics_page(serve: Serve) -> None:
    """vLLM's `vllm:cache_config_info` (its page recorded from vLLM's own code) names the
    KV cache's dtype; the key then carries it, so two cells that differ only in it have
    other keys. `auto` (the model's own dtype) keeps the key as it was."""
    recorded = (FIXTURES / "wire" / "vllm-metrics.txt").read_text()
    fp8 = serve(ScriptedModel(), "vllm", server_info={"metrics": recorded})
    found = json.loads(invoke("probe", fp8.url, "--json").output)
    assert found["cell"]["kv_cache_dtype"] == "fp8_e4m3"
    assert found["cell_key"] == "scripted-model__vllm-0.11.0__kv-fp8_e4m3"
    assert found["server"]["answers"]["/metrics"]["vllm:cache_config_info"][
        "block_size"] == "16"  # the metric's labels kept, not the whole page
    default = json.loads(invoke("probe", serve(ScriptedModel(), "vllm").url, "--json").output)
    assert default["cell"]["kv_cache_dtype"] == "auto"
    assert default["cell_key"] == "scripted-model__vllm-0.11.0"


def test_llama_server_does_not_tell_its_kv_cache_dtype_and_the_cell_says_it(
        serve: Serve) -> None:
    """llama-server's /props, /slots and /v1/models say nothing of --cache-type-k/v
    (checked on the real binary): the dtype is unknown unless --cell gives it."""
    server = serve(ScriptedModel(), "llama.cpp")
    found = json.loads(invoke("probe", server.url, "--json").output)
    assert found["cell"]["kv_cache_dtype"] is None
    given = json.loads(invoke("probe", server.url, "--json", "--cell",
                              "kv_cache_dtype=q4_0").output)
    assert given["cell"]["kv_cache_dtype"] == "q4_0"
    assert given["cell_key"].endswith("__kv-q4_0")


def test_a_kv_cache_dtype_alone_is_a_one_axis_change_as_a_weight_quantization_is() -> None:
    a, b = llama_server_cell("q4_k_m"), llama_server_cell("q4_k_m")
    a["kv_cache_dtype"], b["kv_cache_dtype"] = "f16", "q4_0"
    differing = differing_axes(a, b)
    assert differing == ["kv_cache_dtype"] and confound_warning(differing) is None
    assert axes_sentence(a, b, differing) == (
        "A and B differ in one axis of the serving cell, kv_cache_dtype (f16 on A, q4_0 on "
        "B): a one-axis change")
    weights = llama_server_cell("q2_k")
    weights["kv_cache_dtype"] = "f16"
    assert axes_sentence(a, weights, differing_axes(a, weights)).startswith(
        "A and B differ in one axis of the serving cell, quantization (Q4_K_M on A, Q2_K on B)")
    both = {**weights, "kv_cache_dtype": "q4_0"}
    assert "differ in 2 axes (quantization, kv_cache_dtype)" in axes_sentence(
        a, both, differing_axes(a, both))
    unsaid = {k: v for k, v in b.items() if k != "kv_cache_dtype"}
    assert axes_sentence(a, unsaid, differing_axes(a, unsaid)) == (
        "A and B differ in no recorded axis of the serving cell; known on one side only: "
        "kv_cache_dtype (say it for the other with --a-cell or --b-cell)")


def test_the_sheet_calls_a_kv_cache_change_a_one_axis_change(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts("prompts:\n  - {id: p, prompt: hi}\n")
    for label, kv in (("a", "f16"), ("b", "q4_0")):
        collect([prompts], tmp_path / label, CollectSettings(
            endpoint=serve(dialect="llama.cpp").url, label=label,
            cell={"kv_cache_dtype": kv}))
    summary = compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    assert summary.cells.differs == ["kv_cache_dtype"] and summary.cells.warning is None
    html = (tmp_path / "report" / "index.html").read_text()
    assert "A and B differ in one axis, kv_cache_dtype: a one-axis change" in html
    assert 'tr class="differs" data-axis="kv_cache_dtype"><th>kv_cache_dtype</th><td>f16' \
        in html
