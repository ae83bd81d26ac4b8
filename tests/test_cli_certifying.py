"""cli/certifying.py: `determinism --certify` ends as a CI step must: exit 1 when the
endpoint is NOT CERTIFIED (a prompt varied, a request failed), exit 0 when it is, and
`--max-nondeterministic-prompts N` lets up to N varying prompts pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import Result

from quantcheck.lab.scripted import Faults, ScriptedModel

from .conftest import Serve, WritePrompts, invoke

PROMPTS = "prompts:\n" + "".join(f"  - {{id: p{n}, category: c, prompt: 'question {n}'}}\n"
                                 for n in range(2))


def certify(url: str, prompts: Path, out: Path, *extra: str) -> Result:
    return invoke("determinism", "--certify", "--endpoint", url, "--prompts", prompts,
                  "--out", out, "--max-batch", "2", "--trials", "2", *extra)


@pytest.mark.parametrize(("extra", "code"), [
    ((), 1), (("--max-nondeterministic-prompts", "1"), 1),
    (("--max-nondeterministic-prompts", "2"), 0), (("--fail-on-nondeterminism",), 1)],
    ids=["default", "one-allowed", "two-allowed", "fail-on-nondeterminism"])
def test_not_certified_exits_1_unless_the_varying_prompts_are_allowed(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path, extra: tuple[str, ...],
        code: int) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(nondeterministic=True))
    result = certify(server.url, write_prompts(PROMPTS), tmp_path / "c", *extra)
    assert result.exit_code == code, result.output
    assert "NOT CERTIFIED: " in result.output  # the statement is the same either way
    if code:
        assert "FAIL: 2 prompts vary: varies with no batch factor" in result.output
    assert (tmp_path / "c" / "certificate.json").exists()


def test_a_certified_endpoint_exits_0_and_the_gate_agrees_with_the_command(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    clean = serve(ScriptedModel(), dialect="llama.cpp")
    assert certify(clean.url, write_prompts(PROMPTS), tmp_path / "clean").exit_code == 0
    assert invoke("gate", tmp_path / "clean").exit_code == 0
    varying = serve(ScriptedModel(), dialect="llama.cpp", faults=Faults(nondeterministic=True))
    assert certify(varying.url, write_prompts(PROMPTS), tmp_path / "varying",
                   "--max-nondeterministic-prompts", "2").exit_code == 0
    gated = invoke("gate", tmp_path / "varying")  # the gate's own default: 0
    assert gated.exit_code == 1 and "FAIL: 2 prompts vary" in gated.output
    assert invoke("gate", tmp_path / "varying", "--max-nondeterministic-prompts", "2"
                  ).exit_code == 0
