"""The real eval harnesses, run by the tests on data the tests write (nothing is
downloaded): lm-evaluation-harness (`lm_eval run`'s own command line, its
`local-completions` model) and Inspect AI (`inspect eval`'s own command line, its
`openai-api` provider), several runs to a process, each against a loopback server;
the real servers (llama.cpp's llama-server, llama-cpp-python's) started side by side.
The versions are the `evals` extra's."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
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


@dataclass(frozen=True)
class LmEvalRun:
    """One `lm_eval run` of `task` (defined in the folder `tasks`) against the completions
    endpoint at `url`, samples logged into `out`; `options` are more of its arguments."""

    tasks: Path
    task: str
    url: str
    out: Path
    options: tuple[str, ...] = ()
    model: str = "scripted-model"
    tokenizer: Path | None = None

    def arguments(self) -> list[str]:
        model_args = (f"model={self.model},base_url={self.url}/v1/completions,"
                      "num_concurrent=1,tokenized_requests=False,"
                      + (f"tokenizer_backend=huggingface,tokenizer={self.tokenizer}"
                         if self.tokenizer else "tokenizer_backend=None"))
        return ["run", "--model", "local-completions", "--model_args", model_args,
                "--tasks", self.task, "--include_path", str(self.tasks), "--log_samples",
                "--output_path", str(self.out), *self.options]


# lm_eval's own command line (its parsing, evaluation and log writing), the runs one
# after the other in one process, with one change: its task index leaves out the ~14,000
# task files lm_eval bundles (parsing them took 15 of a run's 20 s here). Every task run
# here is a local one (--include_path); the logs are the ones `lm_eval run` writes, byte
# for byte but for their date and timings (compared here).
LM_EVAL_COMMAND = """\
import functools, json, sys
from lm_eval.tasks import TaskManager
TaskManager.__init__ = functools.partialmethod(TaskManager.__init__, include_defaults=False)
from lm_eval.__main__ import cli_evaluate
for arguments in json.loads(sys.argv[1]):
    sys.argv = ["lm_eval", *arguments]
    cli_evaluate()
"""


def run_lm_evals(*runs: LmEvalRun) -> list[Path]:
    """The runs in one lm_eval process, in order (its caches beside the first one's
    `out`); each one's `out`."""
    require_harness("lm_eval")
    command = [sys.executable, "-c", LM_EVAL_COMMAND,
               json.dumps([run.arguments() for run in runs])]
    home = runs[0].out.with_name(f"{runs[0].out.name}-home")
    _run(command, harness_environment(home))
    return [run.out for run in runs]


def run_lm_evals_side_by_side(*runs: LmEvalRun) -> list[Path]:
    """Each run in an lm_eval process of its own, all at once (each against a server of
    its own: on two cores two such runs take about the time of one); each one's `out`."""
    with ThreadPoolExecutor(len(runs)) as pool:
        return [out for (out,) in pool.map(run_lm_evals, runs)]


def run_lm_eval(tasks: Path, task: str, url: str, out: Path, *options: str,
                model: str = "scripted-model", tokenizer: Path | None = None) -> Path:
    """One `lm_eval run` (see LmEvalRun); `out`."""
    (written,) = run_lm_evals(LmEvalRun(tasks, task, url, out, options, model, tokenizer))
    return written


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


@dataclass(frozen=True)
class InspectRun:
    """One `inspect eval` of `task_file` against the chat endpoint at `url` (its
    openai-api provider, the URL as --model-base-url), greedy, its log written into the
    folder `logs` as `log_format`; `options` are more of its arguments."""

    task_file: Path
    url: str
    logs: Path
    options: tuple[str, ...] = ()
    model: str = "scripted-model"
    log_format: str = "eval"

    def arguments(self) -> list[str]:
        return ["eval", self.task_file.name, "--model", f"openai-api/lab/{self.model}",
                "--model-base-url", f"{self.url}/v1", "--log-dir", str(self.logs.resolve()),
                "--log-format", self.log_format, "--temperature", "0", "--max-tokens", "24",
                "--display", "plain", *self.options]


# Inspect's own command line, the runs one after the other in one process (its imports,
# 3.5 of a run's 4.5 s, once). Each run names its server by --model-base-url: Inspect
# keeps a model per name and base URL for the process, so a base URL from the
# environment would send a later run to the first one's server.
INSPECT_COMMAND = """\
import json, os, sys
from inspect_ai._cli.main import inspect
for folder, arguments in json.loads(sys.argv[1]):
    os.chdir(folder)  # Inspect finds a task by a path relative to where it runs
    if code := inspect.main(arguments, standalone_mode=False, auto_envvar_prefix="INSPECT"):
        sys.exit(code)
"""


def run_inspects(*runs: InspectRun) -> list[Path]:
    """The runs in one Inspect process, in order; the log each one wrote."""
    require_harness("inspect_ai")
    before = {}
    for run in runs:
        run.logs.mkdir(parents=True, exist_ok=True)
        before[run] = set(run.logs.iterdir())
    command = [sys.executable, "-c", INSPECT_COMMAND, json.dumps(
        [(str(run.task_file.parent), run.arguments()) for run in runs])]
    home = runs[0].logs.with_name(f"{runs[0].logs.name}-home")
    _run(command, harness_environment(home, LAB_API_KEY="not-a-secret"))
    written = []
    for run in runs:
        (log,) = set(run.logs.iterdir()) - before[run]
        written.append(log)
    return written


def run_inspect(task_file: Path, url: str, logs: Path, *options: str,
                model: str = "scripted-model", log_format: str = "eval") -> Path:
    """One `inspect eval` (see InspectRun); the log it wrote."""
    (written,) = run_inspects(InspectRun(task_file, url, logs, options, model, log_format))
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


Server = Callable[[Path, Path], tuple["subprocess.Popen[bytes]", str]]


@contextmanager
def serving(start: Server, models: dict[str, Path], logs: Path) -> Iterator[dict[str, str]]:
    """A server per model (`llama_server` or `llama_cpp_python_server`), started side by
    side, each logging to LOGS/NAME.log; their URLs by name; every one stopped at the end."""
    with ThreadPoolExecutor(len(models)) as pool:
        futures = {name: pool.submit(start, model, logs / f"{name}.log")
                   for name, model in models.items()}
    started = {name: future.result() for name, future in futures.items()
               if future.exception() is None}
    try:
        for future in futures.values():
            future.result()  # a server that did not start fails here
        yield {name: url for name, (_, url) in started.items()}
    finally:
        for process, _ in started.values():
            process.terminate()
        for process, _ in started.values():
            process.wait(30)
