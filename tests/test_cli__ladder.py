"""`quantcheck ladder` on scripted servers: the plan and each rung's cost printed before
it is sent, the onset and the exit status (1 on an onset within the lengths served),
and options that cannot be read refused naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantcheck.lab.endpoint import Faults
from quantcheck.lab.scripted import ScriptedModel

from .conftest import Serve, invoke


def test_the_plan_comes_first_then_the_onset_and_the_exit_status(
        serve: Serve, tmp_path: Path) -> None:
    a = serve(ScriptedModel(), "llama.cpp")
    b = serve(ScriptedModel(), "llama.cpp", faults=Faults(sliding_window=1500))
    args = ["--lengths", "1k,2k", "--depths", "0", "--no-absent"]
    result = invoke("ladder", "--a", a.url, "--b", b.url, "--out", tmp_path / "l", *args)
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    plan = lines.index(next(line for line in lines if line.startswith("ladder: 2 rungs")))
    first_rung = lines.index(next(line for line in lines if line.startswith("rung 1,024")))
    assert plan < first_rung
    assert any(line.startswith("  2,048 tokens: 1 probe, ") and "tokens to send" in line
               for line in lines[plan:first_rung])
    assert "onset: B departs from A from 2,048 tokens" in result.output
    assert "gate: FAIL: B departs from A at 2,048 tokens" in result.output
    served = invoke("ladder", "--a", a.url, "--b", b.url, "--out", tmp_path / "l", *args,
                    "--served-tokens", "1024")
    assert served.exit_code == 0, served.output  # read back: nothing sent again
    assert "gate: pass: B departs from A from 2,048 tokens, beyond the 1,024 tokens " \
           "served" in served.output
    assert "rung (measured before) 1,024 tokens" in served.output
    itself = invoke("ladder", "--a", a.url, "--b", a.url, "--out", tmp_path / "self", *args)
    assert itself.exit_code == 0, itself.output
    assert "onset: no departure up to 2,048 tokens" in itself.output


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--lengths", "1k,two", "'two': expected token counts such as 1k,2k,4k"),
    ("--lengths", "0", "'0': expected token counts"),
    ("--depths", "0,1.5", "expected depths from 0 (the start) to 1 (the end)"),
    ("--language", "fr", "'fr' is not one of 'en', 'de', 'zh'"),
])
def test_options_that_cannot_be_read_are_refused(option: str, value: str, says: str,
                                                 tmp_path: Path) -> None:
    result = invoke("ladder", "--a", "http://127.0.0.1:9/v1", "--b", "http://127.0.0.1:9/v1",
                    "--out", tmp_path / "l", option, value)
    assert result.exit_code == 2 and says in result.output, result.output
    assert not (tmp_path / "l").exists()
