"""store/folders/folder_kinds.py: one folder, one output. Every writer refuses a folder that
holds another kind of output (exit 2, one line naming the folder, what it holds and the
fix) before it writes or sends anything, and takes one of its own kind again; the gate
refuses a folder holding two kinds instead of picking one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import Result
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.errors import RunFormatError
from quantcheck.lab.scripted import Faults, ScriptedModel
from quantcheck.store.folders.folder_kinds import (
    CERTIFICATE,
    KINDS,
    REPORT,
    FolderInUse,
    MixedFolder,
    claim,
    held,
    kind_of,
)

from .conftest import A_ANSWERS, RUNNER_UPS, Serve, WritePrompts, invoke

CERTIFY_PROMPTS = ("prompts:\n  - {id: p0, category: c, prompt: 'question 0'}\n"
                   "  - {id: p1, category: c, prompt: 'question 1'}\n")


def one_error_line(result: Result) -> str:
    """The command refused with exit 2 and said why on one `error:` line."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]


def certify(url: str, prompts: Path, out: Path) -> Result:
    return invoke("determinism", "--certify", "--endpoint", url, "--prompts", prompts,
                  "--out", out, "--max-batch", "2", "--trials", "2",
                  "--max-nondeterministic-prompts", "2")


def test_a_certificate_into_a_failing_reports_folder_is_refused_and_the_gate_still_fails(
        serve: Serve, write_prompts: WritePrompts, planted_report: Path) -> None:
    assert invoke("gate", planted_report).exit_code == 1  # a factual flip
    server = serve(ScriptedModel(), dialect="llama.cpp")
    line = one_error_line(certify(server.url, write_prompts(CERTIFY_PROMPTS), planted_report))
    assert (f"{planted_report} already holds an A/B report (summary.json, pairs.csv, "
            "details.jsonl): a determinism certificate written there") in line
    assert "Give --out a folder of its own" in line
    assert not server.requests and not (planted_report / "certificate.json").exists()
    assert invoke("gate", planted_report).exit_code == 1


def test_a_report_into_a_certificates_folder_is_refused_by_run_and_compare(
        serve: Serve, write_prompts: WritePrompts, ab_runs: tuple[Path, Path],
        tmp_path: Path) -> None:
    server = serve(ScriptedModel(), dialect="llama.cpp")
    folder = tmp_path / "certificate"
    assert certify(server.url, write_prompts(CERTIFY_PROMPTS), folder).exit_code == 0
    a, b = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS)), serve(ScriptedModel(A_ANSWERS))
    ran = invoke("run", "--a", a.url, "--b", b.url, "--prompts",
                 write_prompts(CERTIFY_PROMPTS), "--out", folder)
    assert "already holds a determinism certificate (certificate.json, answers.jsonl)" in \
        one_error_line(ran)
    assert not a.requests and not b.requests  # refused before anything was sent
    compared = invoke("compare", *ab_runs, "--out", folder)
    assert "already holds a determinism certificate" in one_error_line(compared)
    assert not (folder / "summary.json").exists() and not (folder / "pairs.csv").exists()
    assert invoke("gate", folder).exit_code == 0


def test_a_report_into_a_run_directory_is_refused_and_the_run_is_untouched(
        ab_runs: tuple[Path, Path]) -> None:
    a, b = ab_runs
    before = sorted(p.name for p in a.iterdir())
    line = one_error_line(invoke("compare", a, b, "--out", a))
    assert f"{a} already holds a run directory (manifest.json, prompts.jsonl, " \
           "completions.jsonl): an A/B report written there" in line
    assert sorted(p.name for p in a.iterdir()) == before


@pytest.mark.parametrize("command", [
    ["collect", "--endpoint", "http://127.0.0.1:9/v1", "--prompts", "P"],
    ["forced", "A", "--endpoint", "http://127.0.0.1:9/v1"],
    ["determinism", "--endpoint", "http://127.0.0.1:9/v1", "--prompts", "P"],
    ["throughput", "http://127.0.0.1:9/v1", "--prompts", "P", "--seconds", "0"],
], ids=["collect", "forced", "determinism", "throughput"])
def test_every_other_writer_refuses_a_reports_folder_before_it_sends(
        command: list[str], planted_report: Path, ab_runs: tuple[Path, Path],
        write_prompts: WritePrompts) -> None:
    """Nothing listens on port 9: a writer that got as far as sending would fail there
    with another message."""
    prompts = write_prompts(CERTIFY_PROMPTS)
    args = [str(prompts) if arg == "P" else str(ab_runs[0]) if arg == "A" else arg
            for arg in command]
    before = {p.name: p.stat().st_mtime_ns for p in planted_report.iterdir()}
    line = one_error_line(invoke(*args, "--out", planted_report))
    assert f"{planted_report} already holds an A/B report" in line
    assert {p.name: p.stat().st_mtime_ns for p in planted_report.iterdir()} == before


def test_one_candidate_and_several_never_share_a_folder(
        ab_runs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = ab_runs
    second = shutil.copytree(b, tmp_path / "b2")
    several, one = tmp_path / "several", tmp_path / "one"
    assert invoke("compare", a, b, second, "--out", several).exit_code in (0, 1)
    assert "holds the overview of several candidates (overview.json, candidates)" in \
        one_error_line(invoke("compare", a, b, "--out", several))
    assert invoke("compare", a, b, "--out", one).exit_code in (0, 1)
    assert "already holds an A/B report" in one_error_line(
        invoke("compare", a, b, second, "--out", one))


def test_the_same_kind_is_written_again(
        serve: Serve, write_prompts: WritePrompts, ab_runs: tuple[Path, Path],
        tmp_path: Path) -> None:
    report = tmp_path / "report"
    for _ in range(2):
        assert invoke("compare", *ab_runs, "--out", report).exit_code == 1
    server = serve(ScriptedModel(), dialect="llama.cpp")
    prompts = write_prompts(CERTIFY_PROMPTS)
    for _ in range(2):
        assert certify(server.url, prompts, tmp_path / "certificate").exit_code == 0


def test_the_gate_refuses_a_folder_holding_two_outputs_naming_both(
        serve: Serve, write_prompts: WritePrompts, planted_report: Path,
        tmp_path: Path) -> None:
    """Written before writers claimed their folders, or put together by hand."""
    server = serve(ScriptedModel(), dialect="llama.cpp",
                   faults=Faults(nondeterministic=True))
    certificate = tmp_path / "certificate"
    assert certify(server.url, write_prompts(CERTIFY_PROMPTS), certificate).exit_code == 0
    for name in ("certificate.json", "answers.jsonl"):
        shutil.copy(certificate / name, planted_report / name)
    (planted_report / "gate.json").unlink(missing_ok=True)
    line = one_error_line(invoke("gate", planted_report))
    assert (f"{planted_report} holds an A/B report (summary.json, pairs.csv, details.jsonl) "
            "and a determinism certificate (certificate.json, answers.jsonl): two outputs "
            "in one folder, so the gate cannot tell which one to check") in line
    assert not (planted_report / "gate.json").exists()


def test_the_gate_says_what_to_do_with_a_determinism_report(tmp_path: Path) -> None:
    (tmp_path / "determinism.json").write_text("{}")
    line = one_error_line(invoke("gate", tmp_path))
    assert "is a determinism report (determinism.json), which the gate does not read" in line
    assert "--fail-on-nondeterminism" in line


NAMES = sorted({name for kind in KINDS for name in kind.files})


@settings(max_examples=200)
@given(st.sets(st.sampled_from(NAMES)), st.sampled_from(KINDS))
def test_a_folder_is_of_one_kind_or_refused(names: set[str], kind: object) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        for file in names:
            (folder / file).write_text("")
        kinds = [k for k in KINDS if set(k.files) & names]
        assert list(held(folder)) == kinds
        try:
            claim(folder, kind)  # type: ignore[arg-type]
            assert set(kinds) <= {kind}
        except FolderInUse as exc:
            assert any(k != kind for k in kinds) and str(folder) in str(exc)
        try:
            found = kind_of(folder, [REPORT, CERTIFICATE], "the gate")
            assert (found is None and not kinds) or [found] == kinds
        except MixedFolder:
            assert len(kinds) > 1
        except RunFormatError as exc:
            assert len(kinds) == 1 and kinds[0] not in (REPORT, CERTIFICATE)
            assert kinds[0].name in str(exc)
