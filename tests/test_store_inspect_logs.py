"""Inspect AI logs read as eval samples: the `.eval` archive and the `.json` log of
the current Inspect (run for real against a scripted loopback server, with logprobs),
the deflate archive and JSON log of Inspect 0.3.150 (recorded), and any bytes."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantcheck.errors import EvalLogError, QuantcheckError
from quantcheck.lab.scripted import ScriptedModel, ScriptedServer
from quantcheck.store.evals.eval_runs import write_eval_run
from quantcheck.store.evals.inspect_logs import is_inspect, open_inspect, value_to_float

from .conftest import FIXTURES
from .harnesses import InspectRun, run_inspects, write_inspect_task

OLD = FIXTURES / "evals" / "inspect-0.3.150"
ROWS = [{"id": "add", "input": "What is 2 plus 3?", "target": "5"},
        {"id": "capital", "input": "What is the capital of France?", "target": "Paris"},
        {"id": "double", "input": "What is 4 plus 4?", "target": "8"}]
FORMATS = ("eval", "json")
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("name", ["default-or-not.eval", "default-or-not.json"])
def test_inspect_0_3_150_logs_read_to_their_own_accuracy(name: str) -> None:
    """0.3.150 wrote deflate entries (the current Inspect writes Zstandard) and the
    same log as one JSON object: both read alike."""
    log = open_inspect(OLD / name)
    (task,) = log.source.tasks
    assert log.source.harness_version == "0.3.150"
    assert log.source.format == ("Inspect .eval archive, deflate entries"
                                 if name.endswith(".eval") else "Inspect JSON log, format "
                                 "version 2")
    assert (task.name, task.metric, task.samples) == ("default_or_not", "includes", 3)
    samples = {s.sample_id: s for s in log.samples()}
    assert samples["q2"].scores == {"includes": 1.0}
    assert samples["q1"].text == "Default output from mockllm/model"
    assert samples["q1"].request == {"messages": [{"role": "user",
                                                   "content": "What is 2 plus 3?"}]}
    assert sum(s.scores["includes"] for s in samples.values()) / 3 == \
        task.reported["includes"]


def test_scores_read_as_inspects_value_to_float() -> None:
    assert [value_to_float(v) for v in ["C", "I", "P", "N", "yes", "False", "0.25", 2,
                                        True, "?", None, [1]]] == \
        [1.0, 0.0, 0.5, 0.0, 1.0, 0.0, 0.25, 2.0, 1.0, 0.0, 0.0, 0.0]


def test_an_archive_whose_entry_inflates_past_its_size_is_refused(tmp_path: Path) -> None:
    """A zip bomb: an entry whose directory states a small size."""
    bomb = tmp_path / "bomb.eval"
    shutil.copy(OLD / "default-or-not.eval", bomb)
    with zipfile.ZipFile(bomb, "a", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("samples/x_epoch_1.json", b"{" + b" " * 100_000 + b"}")
    data = bytearray(bomb.read_bytes())
    # the central directory's uncompressed size of that last entry: 2 bytes
    entry = data.rfind(b"PK\x01\x02")
    data[entry + 24:entry + 28] = (2).to_bytes(4, "little")
    bomb.write_bytes(bytes(data))
    log = None
    with pytest.raises(EvalLogError, match="x_epoch_1.json: cannot be read .*beyond its "
                                           "stated size"):
        log = open_inspect(bomb)
    assert log is None


@pytest.fixture(scope="module")
def current_logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The current Inspect run for real against a scripted server, with logprobs: its
    log in each format (both runs in one Inspect process), by format."""
    folder = tmp_path_factory.mktemp("inspect")
    task = write_inspect_task(folder / "task", "arith", ROWS)
    with ScriptedServer(ScriptedModel({"2 plus 3": " It is 5.", "capital of France": " Lyon.",
                                       "4 plus 4": " 8"})) as server:
        yield dict(zip(FORMATS, run_inspects(*(
            InspectRun(task, server.url, folder / log_format,
                       ("--logprobs", "--top-logprobs", "3"), log_format=log_format)
            for log_format in FORMATS)), strict=True))


@pytest.mark.evals
@pytest.mark.parametrize("log_format", FORMATS)
def test_the_current_inspect_log_reads_with_its_logprobs(current_logs: dict[str, Path],
                                                         tmp_path: Path,
                                                         log_format: str) -> None:
    """Inspect 0.3.285 run for real: Zstandard entries (or one JSON object), each
    answer's tokens with their top alternatives, the scorer's answer and value."""
    path = current_logs[log_format]
    assert is_inspect(path)
    log = open_inspect(path)
    (found,) = log.source.tasks
    assert log.source.harness_version == "0.3.285"
    assert log.source.format.startswith("Inspect .eval archive, Zstandard" if log_format
                                        == "eval" else "Inspect JSON log")
    assert found.metric == "includes" and found.reported["includes"] == pytest.approx(2 / 3)
    samples = {s.sample_id: s for s in log.samples()}
    capital = samples["capital"]
    assert capital.text == " Lyon." and capital.scores == {"includes": 0.0}
    assert capital.target == "Paris" and capital.finish_reason == "stop"
    assert capital.tokens is not None and "".join(capital.tokens.text) == " Lyon."
    assert all(len(top) == 3 for top in capital.tokens.top_text)
    assert capital.request == {"messages": [{"role": "user", "content":
                                             "What is the capital of France?"}],
                               "max_tokens": 24}
    imported = write_eval_run(log, tmp_path / "run", "a")
    assert (imported.prompts, imported.records) == (3, 3)


# --- any bytes in: an EvalLog or quantcheck's own error --------------------------------

SCALARS = (st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=True)
           | st.text(max_size=5) | st.sampled_from(["C", "I", "attachment://x"]))
ANY_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.sampled_from(
                            ["id", "epoch", "input", "target", "messages", "output",
                             "choices", "completion", "scores", "value", "answer", "role",
                             "content", "logprobs", "error", "attachments", "x"]), inner,
                            max_size=4), max_leaves=14)


def read_whole(path: Path, out: Path) -> None:
    try:
        write_eval_run(open_inspect(path), out, "a", force=True)
    except QuantcheckError:
        pass


@FUZZ
@given(data=st.binary(max_size=400))
def test_any_bytes_as_an_archive_read_or_say_why(tmp_path_factory: pytest.TempPathFactory,
                                                 data: bytes) -> None:
    folder = tmp_path_factory.mktemp("log")
    (folder / "x.eval").write_bytes(data)
    read_whole(folder / "x.eval", folder / "run")


@FUZZ
@given(entries=st.dictionaries(st.sampled_from(["header.json", "samples/a_epoch_1.json",
                                                "samples/b_epoch_2.json",
                                                "_journal/start.json"]),
                               st.binary(max_size=80) | ANY_JSON.map(
                                   lambda v: json.dumps(v).encode()), max_size=4))
def test_any_entries_in_an_archive_read_or_say_why(
        tmp_path_factory: pytest.TempPathFactory, entries: dict[str, bytes]) -> None:
    folder = tmp_path_factory.mktemp("log")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    (folder / "x.eval").write_bytes(buffer.getvalue())
    read_whole(folder / "x.eval", folder / "run")


@FUZZ
@given(field=st.sampled_from(["id", "epoch", "input", "target", "messages", "output",
                              "scores", "error", "attachments"]), value=ANY_JSON)
def test_any_value_of_a_sample_field_reads_or_says_why(
        tmp_path_factory: pytest.TempPathFactory, field: str, value: Any) -> None:
    folder = tmp_path_factory.mktemp("log")
    log = json.loads((OLD / "default-or-not.json").read_text())
    log["samples"][1][field] = value
    (folder / "x.json").write_text(json.dumps(log))
    read_whole(folder / "x.json", folder / "run")
