"""`quantcheck import` and `quantcheck export` as a user runs them: what they print,
and every refusal one clear line (exit 2) that leaves nothing half written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from quantcheck.store.folders.run_dir import load_run

from .conftest import FIXTURES, assert_one_clear_line, invoke

EVALS = FIXTURES / "evals"
LM_EVAL = EVALS / "lm-eval-0.4.5"
INSPECT = EVALS / "inspect-0.3.150"


def test_import_says_what_the_log_held(tmp_path: Path) -> None:
    result = invoke("import", LM_EVAL, "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "lm-evaluation-harness unknown (lm-eval samples without filter names (0.4.3 to "
        "0.4.6)): 6 samples, 6 answers",
        "  task arith_two_filters: 6 samples, verdict exact_match,strict-match = "
        "0.3333333333333333",
        f"run: {tmp_path / 'run'}"]
    assert load_run(tmp_path / "run").manifest.label == "lm-eval-0.4.5"


def test_import_takes_a_metric_and_a_label(tmp_path: Path) -> None:
    result = invoke("import", LM_EVAL, "--out", tmp_path / "run", "--metric",
                    "exact_match,flexible-extract", "--label", "old")
    assert result.exit_code == 0, result.output
    assert "verdict exact_match,flexible-extract = 0.6666666666666666" in result.output
    assert load_run(tmp_path / "run").manifest.label == "old"


def test_import_refusals_are_one_line_and_write_nothing(tmp_path: Path) -> None:
    for args, cause in (
            ([LM_EVAL, "--metric", "acc"], "task arith_two_filters has no metric acc"),
            ([EVALS / "README.md"], "not an eval log quantcheck reads"),
            ([LM_EVAL, "--label", "no spaces"], "breaks the rule for labels")):
        result = invoke("import", *args, "--out", tmp_path / "run")
        assert result.exit_code == 2, result.output
        assert_one_clear_line(result.output, cause)
        assert not (tmp_path / "run").exists()
    assert invoke("import", LM_EVAL, "--out", tmp_path / "run").exit_code == 0
    again = invoke("import", INSPECT / "default-or-not.eval", "--out", tmp_path / "run")
    assert again.exit_code == 2
    assert_one_clear_line(again.output, "already holds a run; give another --out, or --force")
    forced = invoke("import", INSPECT / "default-or-not.eval", "--out", tmp_path / "run",
                    "--force")
    assert forced.exit_code == 0, forced.output
    assert "inspect_ai 0.3.150 (Inspect .eval archive, deflate entries)" in forced.output


def test_logs_of_two_harnesses_are_refused(tmp_path: Path) -> None:
    result = invoke("compare", LM_EVAL, INSPECT / "default-or-not.json", "--out",
                    tmp_path / "report")
    assert result.exit_code == 2
    assert_one_clear_line(result.output, "A and B do not pair: A is a log of "
                                         "lm-evaluation-harness, B of inspect_ai")
    # refused before anything is written: no report folder, no runs, nothing beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_import_into_another_outputs_folder_is_refused(tmp_path: Path) -> None:
    """One folder, one output: a report's or a certificate's folder is no run's."""
    for kind, name in (("report", "summary.json"), ("certificate", "certificate.json")):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / name).write_text("{}")
        result = invoke("import", LM_EVAL, "--out", tmp_path / kind)
        assert result.exit_code == 2, result.output
        assert_one_clear_line(result.output, f"{tmp_path / kind} already holds")
        assert [p.name for p in (tmp_path / kind).iterdir()] == [name]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["certificate", "report"]


def test_compare_of_logs_claims_its_folder_before_importing(tmp_path: Path) -> None:
    """A certificate's folder given to compare of two logs is refused before the logs
    are imported into its runs/; a report's folder of an earlier compare takes them."""
    certificate = tmp_path / "certificate"
    certificate.mkdir()
    (certificate / "certificate.json").write_text("{}")
    logs = [INSPECT / "default-or-not.json", INSPECT / "default-or-not.eval"]
    refused = invoke("compare", *logs, "--out", certificate)
    assert refused.exit_code == 2, refused.output
    assert_one_clear_line(refused.output, f"{certificate} already holds a determinism "
                                          "certificate")
    assert [p.name for p in certificate.iterdir()] == ["certificate.json"]
    assert invoke("compare", *logs, "--out", tmp_path / "report").exit_code == 0
    again = invoke("compare", *logs, "--out", tmp_path / "report")
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in (tmp_path / "report" / "runs").iterdir()) == [
        "default-or-not", "default-or-not-2"]
    assert not list(tmp_path.glob(".*importing*"))


def test_an_imported_run_says_no_request_was_sent(tmp_path: Path) -> None:
    """No prefix cache was turned off for a log's answers: quantcheck sent none (the
    manifest's cache null, cache_off false), and the report says so per side."""
    logs = [INSPECT / "default-or-not.json", INSPECT / "default-or-not.eval"]
    assert invoke("compare", *logs, "--out", tmp_path / "report").exit_code == 0
    manifest = load_run(tmp_path / "report" / "runs" / "default-or-not").manifest
    assert manifest.cache is None and manifest.parameters.cache_off is False
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["determinism"]["a"]["cache"] == summary["determinism"]["b"]["cache"] == \
        "not known: imported from an eval log (the harness sent the requests)"
    assert summary["determinism"]["a"]["cache_off"] is None


def test_export_needs_an_output_and_the_runs(tmp_path: Path) -> None:
    for side in ("a", "b"):
        assert invoke("import", INSPECT / "default-or-not.json", "--out",
                      tmp_path / side).exit_code == 0
    assert invoke("compare", tmp_path / "a", tmp_path / "b", "--out",
                  tmp_path / "report").exit_code == 0
    nothing = invoke("export", tmp_path / "report")
    assert nothing.exit_code == 2
    assert_one_clear_line(nothing.output, "nothing to write: give --eee FOLDER, --model-card")
    onto = invoke("export", tmp_path / "report", "--model-card",
                  tmp_path / "report" / "summary.json")
    assert onto.exit_code == 2
    assert_one_clear_line(onto.output, "a file of the report itself")
    shutil.move(tmp_path / "a", tmp_path / "moved")
    missing = invoke("export", tmp_path / "report", "--eee", tmp_path / "eee")
    assert missing.exit_code == 2
    assert_one_clear_line(missing.output, "A's run")
    assert "--a-run RUN_DIR" in missing.output
    found = invoke("export", tmp_path / "report", "--eee", tmp_path / "eee", "--a-run",
                   tmp_path / "moved", "--model-card", tmp_path / "card.md")
    assert found.exit_code == 0, found.output
    assert found.output.count("(3 samples)") == 2 and "wrote " in found.output
    assert "| inspect_ai | default_or_not (includes) | 33.33 | 33.33 | 100.00 |" in \
        (tmp_path / "card.md").read_text()
