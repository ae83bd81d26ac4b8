"""lab/endpoint.py: the lab server itself (its dialects are tested where they are read:
test_fetch_collect.py, test_wire_formats.py). What keeps it from starting is raised by
`start`, at once."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from quantcheck import compare_runs, load_run
from quantcheck.lab.scripted import DIALECTS, ScriptedModel, ScriptedServer
from quantcheck.store.engines import ENGINES

from .conftest import Serve, WritePrompts, invoke


def test_a_port_in_use_is_raised_by_start_at_once() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(OSError, match="address already in use"):
            ScriptedServer(port=port).start()
        assert time.monotonic() - started < 5  # not the 10 s wait for a server never ready
    with ScriptedServer(port=port) as server:  # the port free again: it serves
        assert server.port == port


BOTH_APIS = """prompts:
  - {id: capital, messages: [{role: user, content: "The capital of Australia?"}], max_tokens: 8}
  - {id: sum, prompt: "What is two plus two?", max_tokens: 8}
"""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_each_dialect_is_recognised_collected_and_compared(
    serve: Serve, write_prompts: WritePrompts, tmp_path: Path, dialect: str, stream: bool,
) -> None:
    """Two lab servers speaking one engine's dialect, collected (with the preflight) and
    compared: the runtime is read from what it serves, chat and legacy completions are
    kept, and where the engine sends no logprobs the texts are still compared and the
    collection says which figures are missing."""
    profile = ENGINES[dialect]
    prompts = write_prompts(BOTH_APIS)
    outputs = []
    for side, answer in (("a", " Canberra is the capital."), ("b", " Sydney is the capital.")):
        server = serve(ScriptedModel(responses={"Australia": answer,
                                                "two plus two": " Four, it is four."}), dialect)
        result = invoke("collect", "--endpoint", server.url, "--prompts", prompts, "--out",
                        tmp_path / side, "--top-logprobs", 3,
                        "--stream" if stream else "--no-stream")
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    assert load_run(tmp_path / "a").manifest.server.runtime == dialect
    summary = compare_runs(tmp_path / "a", tmp_path / "b", tmp_path / "report")
    assert (summary.counts.pairs, summary.counts.identical) == (2, 1)
    missing = profile.missing_logprobs({"chat", "completions"}, stream)
    assert all((missing or "sends no logprobs") in output for output in outputs) == bool(
        missing)
    with_logprobs = [api for api in ("chat", "completions") if profile.sends_logprobs(api, stream)]
    records = {r.prompt_id: r for r in load_run(tmp_path / "b").completions()}
    assert [api for api, prompt_id in (("chat", "capital"), ("completions", "sum"))
            if records[prompt_id].tokens] == with_logprobs
    assert (summary.drift.top1_agreement is not None) == bool(with_logprobs)
