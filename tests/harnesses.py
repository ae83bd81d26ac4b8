"""The real eval harnesses, run by the tests on data the tests write (nothing is
downloaded): lm-evaluation-harness (`python -m lm_eval run`, its `local-completions`
model) and Inspect AI (`python -m inspect_ai eval`, its `openai-api` provider), each
against a loopback server. The versions are the `evals` extra's."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

HARNESS_SECONDS = 600


def require_harness(module: str) -> None:
    """Skip without the `evals` extra's harness; in CI (CI set) its absence fails."""
    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have {module} installed (the evals extra)")
        pytest.skip(f"{module} is not installed (the evals extra)")


def harness_environment(home: Path, **extra: str) -> dict[str, str]:
    """The environment a harness runs in: offline, its caches in `home`."""
    return {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(home / "hf"), "HF_DATASETS_CACHE": str(home / "hf-datasets"),
            "NO_COLOR": "1", **extra}


FIRST_NUMBER = r"(-?[0-9]+)"


def write_lm_eval_task(folder: Path, name: str, rows: list[dict[str, Any]],
                       shots: list[dict[str, Any]] | None = None, version: str = "1.0",
                       answer: str = FIRST_NUMBER) -> Path:
    """A generating task `name` over the local JSONL `rows` ({question, answer}), its
    few-shot examples from `shots` (a train split), scored by exact_match on what the
    regular expression `answer` takes from the answer (its group)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    files = {"test": str(folder / f"{name}.jsonl")}
    if shots:
        (folder / f"{name}-train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in shots))
        files["train"] = str(folder / f"{name}-train.jsonl")
    config = {
        "task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": files},
        "test_split": "test", "output_type": "generate_until",
        "doc_to_text": "Q: {{question}}\nA:", "doc_to_target": "{{answer}}",
        "generation_kwargs": {"until": ["\n"], "max_gen_toks": 12, "do_sample": False,
                              "temperature": 0},
        "filter_list": [{"name": "strict-match", "filter": [
            {"function": "regex", "regex_pattern": answer}, {"function": "take_first"}]}],
        "metric_list": [{"metric": "exact_match", "aggregation": "mean",
                         "higher_is_better": True}],
        "metadata": {"version": version},
    }
    if shots:
        config |= {"training_split": "train", "fewshot_split": "train"}
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(config, indent=1))  # YAML reads JSON
    return path


def write_choice_task(folder: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    """A multiple-choice task ({question, choices, label}): one loglikelihood request
    per choice, scored by acc and acc_norm."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "task": name, "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(folder / f"{name}.jsonl")}},
        "test_split": "test", "output_type": "multiple_choice",
        "doc_to_text": "{{question}}", "doc_to_choice": "{{choices}}",
        "doc_to_target": "label",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                        {"metric": "acc_norm", "aggregation": "mean",
                         "higher_is_better": True}],
        "metadata": {"version": "1.0"},
    }
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(config, indent=1))
    return path


def run_lm_eval(tasks: Path, task: str, url: str, out: Path, *options: str,
                model: str = "scripted-model", tokenizer: Path | None = None) -> Path:
    """`lm_eval run` of `task` (defined in the folder `tasks`) against the completions
    endpoint at `url`, samples logged into `out`; `out`."""
    require_harness("lm_eval")
    arguments = (f"model={model},base_url={url}/v1/completions,num_concurrent=1,"
                 "tokenized_requests=False,"
                 + (f"tokenizer_backend=huggingface,tokenizer={tokenizer}" if tokenizer
                    else "tokenizer_backend=None"))
    command = [sys.executable, "-m", "lm_eval", "run", "--model", "local-completions",
               "--model_args", arguments, "--tasks", task, "--include_path", str(tasks),
               "--log_samples", "--output_path", str(out), *options]
    _run(command, harness_environment(out.parent))
    return out


def write_inspect_task(folder: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    """An Inspect task `name` over the local JSONL `rows` ({id, input, target}): one
    generation, scored by `includes` (the target found in the answer)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(f"""\
        from inspect_ai import Task, task
        from inspect_ai.dataset import json_dataset
        from inspect_ai.scorer import includes
        from inspect_ai.solver import generate


        @task
        def {name}():
            return Task(dataset=json_dataset({str(folder / f"{name}.jsonl")!r}),
                        solver=[generate()], scorer=includes())
        """))
    return path


def run_inspect(task_file: Path, url: str, logs: Path, *options: str,
                model: str = "scripted-model", log_format: str = "eval") -> Path:
    """`inspect eval` of the task file against the chat endpoint at `url` (its
    openai-api provider), greedy; the log it wrote."""
    require_harness("inspect_ai")
    logs.mkdir(parents=True, exist_ok=True)
    before = set(logs.iterdir())
    # Inspect finds a task by a path relative to where it runs
    command = [sys.executable, "-m", "inspect_ai", "eval", task_file.name,
               "--model", f"openai-api/lab/{model}", "--log-dir", str(logs.resolve()),
               "--log-format", log_format, "--temperature", "0", "--max-tokens", "24",
               "--display", "plain", *options]
    _run(command, harness_environment(logs.parent, LAB_BASE_URL=f"{url}/v1",
                                      LAB_API_KEY="not-a-secret"), task_file.parent)
    (written,) = set(logs.iterdir()) - before
    return written


def _run(command: list[str], environment: dict[str, str], cwd: Path | None = None) -> None:
    result = subprocess.run(command, env=environment, capture_output=True, text=True,
                            timeout=HARNESS_SECONDS, check=False, cwd=cwd)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command[:5])} ... exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def llama_server(model: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """llama.cpp's own llama-server (on PATH) on `model`, one slot: started, healthy."""
    from quantcheck.lab.launch import free_port, wait_until_healthy

    port = free_port()
    command = ["llama-server", "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
               "-c", "2048", "-t", "1", "-np", "1"]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, process, log, timeout=300)
    except BaseException:
        process.terminate()
        process.wait(30)
        raise
    return process, url


def llama_cpp_python_server(model: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """llama-cpp-python's OpenAI server on `model`, every position's logits kept (it
    echoes a prompt's logprobs): started, healthy."""
    from quantcheck.lab.launch import free_port, wait_until_healthy

    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host",
               "127.0.0.1", "--port", str(port), "--n_ctx", "512", "--logits_all", "true",
               "--n_threads", "1", "--verbose", "false"]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, process, log, timeout=300)
    except BaseException:
        process.terminate()
        process.wait(30)
        raise
    return process, url
