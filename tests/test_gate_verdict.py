"""gate/verdict.py, the CI gate: every rule and exit code, the policy file, reviews (stale
ones too), JUnit XML and the step summary; and a verdict that cannot be fooled: the
gate never passes what it did not check, every malformed input is one line and exit 2,
and every count is the same in the terminal, summary.json, the sheet and the gate."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import msgspec
import pytest
from click.testing import Result
from hypothesis import given, settings
from hypothesis import strategies as st
from junitparser import JUnitXml

from quantcheck import CollectSettings, collect, compare_runs
from quantcheck.errors import RunFormatError
from quantcheck.lab.scripted import Faults, ScriptedModel

from .conftest import (
    A_ANSWERS,
    CANDIDATE_ANSWERS,
    CANDIDATE_PROMPTS,
    MARKDOWN_ATTACKS,
    PROMPTS,
    REPO,
    RUNNER_UPS,
    Serve,
    WritePrompts,
    copy_run,
    gate_rules,
    gate_writing_a_step_summary,
    invoke,
    no_tag_more,
    report_identity,
    write_review,
)


def gate(report: Path, *args: str) -> Result:
    return invoke("gate", report, *args)


def one_error_line(result: Any) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None or \
        isinstance(result.exception, SystemExit), result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]


def run_side(serve: Serve, prompts: Path, out: Path, answers: dict[str, Any] | None = None,
             **settings: Any) -> Path:
    server = serve(ScriptedModel(answers or A_ANSWERS, RUNNER_UPS), faults=settings.pop(
        "faults", None))
    collect([prompts], out, CollectSettings(endpoint=server.url, label=out.name,
                                            preflight=False, concurrency=1, top_logprobs=3,
                                            **settings))
    return out


# --- every rule and exit code, the policy, reviews, JUnit XML, the step summary ------------

def test_default_policy_fails_on_flip_and_new_degenerate(planted_report: Path) -> None:
    result = gate(planted_report)
    assert result.exit_code == 1
    found = gate_rules(planted_report)
    assert found["factual_flips"]["prompts"] == ["flip"]
    assert found["factual_flips"]["count"] == 1 and found["factual_flips"]["limit"] == 0
    assert found["new_degenerate_on_b"]["prompts"] == ["loop", "empty"]  # not "capped"
    assert "FAIL: 1 confident flip (flip), 2 degenerate outputs new on B (loop, empty)" in \
        result.output
    assert json.loads((planted_report / "gate.json").read_text())["verdict"] == "fail"


def test_limits_on_the_command_line_pass_the_gate(planted_report: Path) -> None:
    result = gate(planted_report, "--max-factual-flips", "1", "--max-new-degenerate", "2",
                  "--max-not-compared", "3")
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    assert json.loads((planted_report / "gate.json").read_text())["verdict"] == "pass"


@pytest.mark.parametrize(
    ("args", "rule", "count"),
    [
        (["--max-nondeterministic", "0"], "nondeterministic_a", 1),
        (["--require-review"], "unreviewed", 9),
        (["--min-identical-share", "0.5"], "identical_share", 0.1),
        (["--max-not-compared", "0"], "not_compared", 3),
    ],
    ids=["nondeterministic-a", "require-review", "identical-share",
         "not-compared"],
)
def test_optional_rules(planted_report: Path, args: list[str], rule: str,
                        count: float) -> None:
    result = gate(planted_report, "--max-factual-flips", "9", "--max-new-degenerate", "9",
                  *args)
    assert result.exit_code == 1
    assert gate_rules(planted_report)[rule]["count"] == pytest.approx(count)
    assert not gate_rules(planted_report)[rule]["passed"]


def test_nondeterminism_counts_texts_that_vary_and_says_logprob_only_beside(
        planted_report: Path) -> None:
    """B's reduction order moves its logprobs on 11 prompts and never its text: those are
    said beside the rule, not counted; A's two texts of `noisy` fail it."""
    result = gate(planted_report, "--max-factual-flips", "9", "--max-new-degenerate", "9",
                  "--max-nondeterministic", "0")
    found = gate_rules(planted_report)
    assert found["nondeterministic_a"]["prompts"] == ["noisy"]
    assert not found["nondeterministic_a"]["passed"]
    assert found["nondeterministic_b"]["count"] == 0 and found["nondeterministic_b"]["passed"]
    assert found["nondeterministic_b"]["description"] == (
        "0 prompts on B whose repeats' texts vary (11 more with logprobs only, not counted)")
    assert "1 prompt on A whose repeats' texts vary" in result.output


def test_policy_file_and_command_line_override(planted_report: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_factual_flips: 5\nmax_new_degenerate: 5\nrequire_review: false\n"
                      "max_not_compared: 3\n")
    assert gate(planted_report, "--policy", str(policy)).exit_code == 0
    assert gate(planted_report, "--policy", str(policy), "--max-factual-flips", "0"
                ).exit_code == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [("max_flips: 1\n", "field 'max_flips': unknown"),
     ("max_factual_flips: -1\n", "field 'max_factual_flips': a whole number >= 0"),
     ("min_identical_share: 2\n", "field 'min_identical_share': a share from 0 to 1"),
     ("require_review: maybe\n", "field 'require_review': must be true or false"),
     ("- a list\n", "a policy is a mapping")],
)
def test_malformed_policy_is_exit_2(planted_report: Path, tmp_path: Path, text: str,
                                    message: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(text)
    result = gate(planted_report, "--policy", str(policy))
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_missing_report_files_are_exit_2(tmp_path: Path) -> None:
    result = gate(tmp_path)
    assert result.exit_code == 2 and "summary.json: missing" in result.output


def test_reviewer_blocking_labels_count_as_flips(planted_report: Path) -> None:
    write_review(planted_report, "dana", {
        "numbers": {"label": "factual_flip", "right_side": "a"},
        "better": {"label": "factual_flip", "right_side": "b"},  # B right: an improvement
        "wording": {"label": "wording"}})
    result = gate(planted_report, "--max-new-degenerate", "9")
    assert result.exit_code == 1
    assert gate_rules(planted_report)["factual_flips"]["prompts"] == ["flip", "numbers"]
    assert json.loads((planted_report / "gate.json").read_text())["reviewers"] == ["dana"]


def test_require_review_passes_once_everything_is_reviewed(planted_report: Path) -> None:
    pending = ["wording", "near-tie", "flip", "better", "numbers", "loop", "empty", "capped",
               "noisy"]
    write_review(planted_report, "dana", {p: {"label": "minor"} for p in pending[:5]})
    write_review(planted_report, "li", {p: {"label": "minor"} for p in pending[5:]})
    result = gate(planted_report, "--require-review", "--max-factual-flips", "1",
                  "--max-new-degenerate", "2", "--max-not-compared", "3")
    assert result.exit_code == 0, result.output


def test_a_review_for_another_run_is_exit_2(planted_report: Path, tmp_path: Path) -> None:
    write_review(planted_report, "dana", {"wording": {"label": "wording"}}, run="other-run")
    result = gate(planted_report)
    assert result.exit_code == 2
    assert "made for another run" in result.output


def test_an_exported_review_file_can_be_given(planted_report: Path, tmp_path: Path) -> None:
    exported = tmp_path / "review.json"
    exported.write_text(json.dumps({"format": "quantcheck-review/1",
                                    "identity": report_identity(planted_report), "reviewer": "kim",
                                    "verdicts": {"numbers": {"label": "factual_flip"}}}))
    gate(planted_report, "--review", str(exported))
    assert "numbers" in gate_rules(planted_report)["factual_flips"]["prompts"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "quantcheck-review/1",
                               "identity": report_identity(planted_report),
                               "verdicts": {"numbers": {"label": "great"}}}))
    result = gate(planted_report, "--review", str(bad))
    assert result.exit_code == 2 and "label 'great' is not in rubric" in result.output


def test_junit_xml_is_accepted_by_a_junit_parser(planted_report: Path) -> None:
    gate(planted_report, "--max-not-compared", "0")
    suite = next(iter(JUnitXml.fromfile(str(planted_report / "junit.xml"))))
    cases = {case.name: case for case in suite}
    assert len(cases) == 13
    assert cases["same"].is_passed
    flip_results = cases["flip"].result
    assert [r.type for r in flip_results] == ["factual_flips"]
    assert "flip: breaks rule factual_flips" in flip_results[0].text
    assert {r.type for r in cases["only-a"].result} == {"not_compared"}
    assert suite.failures == 6  # flip, loop, empty; changed, only-a, only-b not compared


def test_step_summary_is_appended(planted_report: Path, tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    result = gate_writing_a_step_summary(planted_report, summary)
    text = summary.read_text()
    assert text.startswith("earlier step\n## quantcheck: FAIL")
    assert "| factual_flips | 1 | 0 | **fail** | `flip` |" in text
    assert "## quantcheck: FAIL" in result.output


def test_pass_rate_drop_rule(planted_report: Path) -> None:
    base = ["--max-factual-flips", "9", "--max-new-degenerate", "9", "--max-not-compared", "3"]
    assert gate(planted_report, *base).exit_code == 0
    result = gate(planted_report, *base, "--max-pass-rate-drop", "5")
    assert result.exit_code == 1
    rule = gate_rules(planted_report)["pass_rate_drop"]
    assert rule["limit"] == 5 and rule["count"] > 5 and not rule["passed"]
    assert gate(planted_report, *base, "--max-pass-rate-drop", "100").exit_code == 0
    summary = json.loads((planted_report / "summary.json").read_text())
    assert summary["stats"]["pass_rate"]["sentence"].startswith(
        "Expect pass rate A 3/4, B 3/4: no change")


def test_rules_that_do_not_apply_show_na(planted_report: Path) -> None:
    result = invoke("gate", planted_report, "--max-factual-flips", "9",
                    "--max-new-degenerate", "9", "--max-not-compared", "9")
    assert "| pass_rate_drop | n/a | off |" in result.output
    assert "| forced_kl | n/a | off |" in result.output
    rules = gate_rules(planted_report)
    assert rules["pass_rate_drop"]["count"] is None and rules["forced_kl"]["count"] is None


def test_the_shipped_example_policy_is_a_valid_policy(planted_report: Path) -> None:
    shipped = Path(__file__).parents[1] / "prompts" / "policy.yaml"
    result = invoke("gate", planted_report, "--policy", shipped)
    assert result.exit_code == 1, result.output  # the planted flip fails it: not exit 2
    assert "1 confident flip" in result.output


# --- run and compare end as the gate would, under their own --rubric ----------------------

def rubric_with_wrong_unit(tmp_path: Path) -> Path:
    """The default rubric with one more blocking label, `wrong_unit`, named `units`."""
    text = (REPO / "rubrics" / "default.yaml").read_text()
    path = tmp_path / "units.yaml"
    path.write_text(text.replace("name: default", "name: units").replace(
        "labels:\n", "labels:\n  - {id: wrong_unit, name: Wrong unit, key: u, blocking: true}\n",
        1))
    return path


def test_compare_gates_with_its_rubric_one_candidate_or_several(ab_runs: tuple[Path, Path],
                                                               tmp_path: Path) -> None:
    a, rubric = ab_runs[0], rubric_with_wrong_unit(tmp_path)
    one, several = tmp_path / "one", tmp_path / "several"
    copies = [copy_run(a, tmp_path / name, name) for name in ("same", "again")]
    assert invoke("compare", a, copies[0], "--out", one, "--rubric", rubric).exit_code == 0
    assert invoke("compare", a, *copies, "--out", several, "--rubric", rubric).exit_code == 0
    for report in (one, several / "candidates" / "again"):
        write_review(report, "dana", {"numbers": {"label": "wrong_unit"}})

    result = invoke("compare", a, copies[0], "--out", one, "--rubric", rubric)
    assert result.exit_code == 1, result.output  # the rubric's blocking label fails it
    assert "error" not in result.output
    result = invoke("compare", a, *copies, "--out", several, "--rubric", rubric)
    assert result.exit_code == 1, result.output
    overview = json.loads((several / "overview.json").read_text())
    assert {row["label"]: row["gate"] for row in overview["candidates"]} == {
        "same": "pass", "again": "fail"}
    assert gate_rules(several / "candidates" / "again")["factual_flips"]["prompts"] == [
        "numbers"]


def test_run_with_several_candidates_gates_with_its_rubric(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    a, b = (serve(ScriptedModel(CANDIDATE_ANSWERS, RUNNER_UPS)).url for _ in range(2))
    command = ["run", "--a", a, "--b", b, "--b-label", "c1", "--b", b, "--b-label", "c2",
               "--prompts", write_prompts(CANDIDATE_PROMPTS), "--no-preflight",
               "--rubric", rubric_with_wrong_unit(tmp_path), "--out", tmp_path / "ab"]
    assert invoke(*command).exit_code == 0
    write_review(tmp_path / "ab" / "candidates" / "c2", "dana", {"count": {"label": "wrong_unit"}})
    result = invoke(*command)
    assert result.exit_code == 1, result.output
    overview = json.loads((tmp_path / "ab" / "overview.json").read_text())
    assert {row["label"]: row["gate"] for row in overview["candidates"]} == {
        "c1": "pass", "c2": "fail"}


# --- the gate passes only what it checked --------------------------------------------------

def test_disjoint_prompt_sets_compare_nothing_and_the_gate_refuses(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    a = run_side(serve, write_prompts(PROMPTS), tmp_path / "a")
    other = "prompts:\n" + "".join(f'  - {{id: x{n}, prompt: "Q: same"}}\n' for n in range(3))
    b = run_side(serve, write_prompts(other), tmp_path / "b")
    compared = invoke("compare", a, b, "--out", tmp_path / "report")
    assert compared.exit_code == 2  # as the gate would: nothing to pass
    assert "nothing was compared: 12 prompts only in A, 3 prompts only in B (the two runs " \
           "share no prompt id)" in compared.output
    assert "0 of 0 identical" not in compared.output
    gated = invoke("gate", tmp_path / "report")
    assert "no pair was compared, so there is nothing to pass" in one_error_line(gated)


def test_other_max_tokens_on_b_is_named_and_the_gate_refuses(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts(PROMPTS)
    a = run_side(serve, prompts, tmp_path / "a")
    b = run_side(serve, prompts, tmp_path / "b")
    from quantcheck import RequestOptions
    b64 = tmp_path / "b64"
    server = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    collect([prompts], b64, CollectSettings(endpoint=server.url, label="b64", preflight=False,
                                            request=RequestOptions(max_tokens=32)))
    compared = invoke("compare", a, b64, "--out", tmp_path / "report")
    assert "B was collected with max_tokens 32, A with 256" in compared.output
    assert "nothing was compared" in compared.output
    assert "no pair was compared" in one_error_line(invoke("gate", tmp_path / "report"))
    assert invoke("compare", a, b, "--out", tmp_path / "same").exit_code == 0


def test_failed_requests_fail_the_gate_unless_the_policy_allows_them(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts(PROMPTS)
    a = run_side(serve, prompts, tmp_path / "a")
    every = {n: 500 for n in range(100)}
    b = run_side(serve, prompts, tmp_path / "b", faults=Faults(status=every), retries=0)
    compared = invoke("compare", a, b, "--out", tmp_path / "all-failed")
    assert "12 prompts without an answer on B (b): HTTP 500" in compared.output
    assert "no pair was compared" in one_error_line(invoke("gate", tmp_path / "all-failed"))

    # two of B's twelve requests fail: the rest is compared, and the gate fails by default
    some = run_side(serve, prompts, tmp_path / "b-some",
                    faults=Faults(status={0: 500, 5: 500}), retries=0)
    report = tmp_path / "some-failed"
    compare_runs(a, some, report)
    lenient = ["--max-factual-flips", "9", "--max-new-degenerate", "9"]
    result = invoke("gate", report, *lenient)
    assert result.exit_code == 1
    gate = json.loads((report / "gate.json").read_text())
    failed = next(r for r in gate["rules"] if r["name"] == "failed_requests")
    assert failed["count"] == 2 and not failed["passed"]
    assert "2 requests without an answer (A 0, B 2" in result.output
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_failed_requests: 2\nmax_not_compared: 2\n")
    assert invoke("gate", report, *lenient, "--policy", policy).exit_code == 0
    assert invoke("gate", report, *lenient, "--max-failed-requests", "2",
                  "--max-not-compared", "2").exit_code == 0


def test_prompts_not_compared_fail_the_default_gate(planted_report: Path) -> None:
    result = invoke("gate", planted_report, "--max-factual-flips", "9",
                    "--max-new-degenerate", "9")
    assert result.exit_code == 1
    assert "3 prompts not compared (changed, only-a, only-b)" in result.output


# --- malformed inputs: exit 2 and one line -------------------------------------------------

def test_a_summary_without_a_side_is_one_line(planted_report: Path) -> None:
    path = planted_report / "summary.json"
    summary = json.loads(path.read_text())
    del summary["b"]
    path.write_text(json.dumps(summary))
    for command in (["gate"], ["report"], ["approve"]):
        line = one_error_line(invoke(*command, planted_report))
        assert "summary.json" in line and "`b`" in line


def test_a_binary_pairs_table_is_one_line(planted_report: Path) -> None:
    (planted_report / "pairs.csv").write_bytes(bytes(range(256)) * 40)
    line = one_error_line(invoke("gate", planted_report))
    assert "pairs.csv" in line


def test_a_pairs_table_without_a_column_is_refused_by_every_reader(planted_report: Path
                                                                   ) -> None:
    """The sheet and the review server read a few columns of pairs.csv; every column
    is still checked, before anything is written or served."""
    from quantcheck.present.review_server import review_app

    path = planted_report / "pairs.csv"
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, [c for c in rows[0] if c != "noise"],
                                extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    sheet = (planted_report / "index.html").read_bytes()
    for command in (["gate"], ["report"]):
        assert "missing columns noise" in one_error_line(invoke(*command, planted_report))
    assert (planted_report / "index.html").read_bytes() == sheet
    with pytest.raises(RunFormatError, match="missing columns noise"):
        review_app(planted_report, "dana", None)


def test_a_review_path_that_is_a_folder_is_one_line(planted_report: Path) -> None:
    (planted_report / "reviews" / "dana.json").mkdir(parents=True)
    assert "dana.json: the file is a folder, not a regular file" in one_error_line(
        invoke("gate", planted_report))


@pytest.mark.parametrize(("verdict", "message"), [
    ({"label": ["wording"]}, "label must be a label id"),
    ({"label": "wording", "right_side": 5}, "right_side must be"),
    ({"label": "wording", "notes": {"a": 1}}, "notes must be text"),
], ids=["label-a-list", "side-a-number", "notes-a-mapping"])
def test_a_review_of_the_wrong_type_is_one_line(planted_report: Path, verdict: dict[str, Any],
                                                message: str) -> None:
    write_review(planted_report, "dana", {"wording": verdict})
    assert message in one_error_line(invoke("gate", planted_report))


@pytest.mark.parametrize("option", ["--policy", "--rubric"])
def test_a_policy_or_rubric_that_is_not_utf8_is_one_line(planted_report: Path,
                                                         tmp_path: Path, option: str) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert "not UTF-8 text" in one_error_line(invoke("gate", planted_report, option, path))


def test_signatures_that_are_not_utf8_are_one_line(ab_runs: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    path = tmp_path / "signatures.yaml"
    path.write_bytes(b"signatures:\n  - id: caf\xe9\n")
    result = invoke("compare", *ab_runs, "--out", tmp_path / "r", "--signatures", path)
    assert "not UTF-8 text" in one_error_line(result)


def test_gate_on_a_run_directory_says_what_to_do(ab_runs: tuple[Path, Path]) -> None:
    line = one_error_line(invoke("gate", ab_runs[0]))
    assert "is a run directory" in line and "quantcheck compare" in line


def test_junit_stays_well_formed_with_control_characters(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    prompts = write_prompts('prompts:\n  - {id: "bell\\x07id", category: "esc\\x1bcat", '
                            'prompt: "Q: flip", expect: {contains: Canberra}}\n')
    a = run_side(serve, prompts, tmp_path / "a")
    b = run_side(serve, prompts, tmp_path / "b", answers={"Q: flip": " Sydney."})
    compare_runs(a, b, tmp_path / "report")
    assert invoke("gate", tmp_path / "report").exit_code == 1
    suite = ElementTree.parse(tmp_path / "report" / "junit.xml").getroot()  # expat: strict
    case = suite.find("testcase")
    assert case is not None and case.get("name") == "bell\\x07id"
    assert case.get("classname") == "quantcheck.esc\\x1bcat"


# --- one number for one thing --------------------------------------------------------------

def test_every_count_is_the_same_in_terminal_summary_sheet_and_gate(
        ab_runs: tuple[Path, Path], tmp_path: Path, browser: Any) -> None:
    report = tmp_path / "report"
    terminal = invoke("compare", *ab_runs, "--out", report).output
    summary = json.loads((report / "summary.json").read_text())
    gate_output = invoke("gate", report).output
    rules = gate_rules(report)
    page = browser.new_page()
    page.goto((report / "index.html").as_uri())
    page.wait_for_selector("body[data-ready=true]")
    tiles = {t.locator("span").inner_text(): t.locator("b").inner_text()
             for t in page.locator(".count").all()}
    sheet_headline = page.locator("#headline").inner_text()
    page.close()

    counts = summary["counts"]
    degenerate = counts["degenerate_new_on_b"]
    assert degenerate == 2 and counts["degenerate_new_on_b_kinds"] == {"repetition": 1,
                                                                        "empty": 1}
    assert counts["length_capped_new_on_b"] == 1
    phrase = "2 degenerate outputs new on B (1 loop, 1 empty)"
    assert phrase in terminal and phrase in sheet_headline
    assert rules["new_degenerate_on_b"]["count"] == degenerate
    assert "2 degenerate outputs new on B (loop, empty)" in gate_output
    assert tiles["degenerate new on B"] == str(degenerate)
    flips = counts["flips"]["regression"]
    assert rules["factual_flips"]["count"] == flips == int(tiles["expect regressions"])
    assert f"{flips} factual flip by expect" in terminal
    not_compared = counts["prompts"] - counts["pairs"]
    assert rules["not_compared"]["count"] == not_compared == int(tiles["not compared"])
    assert tiles["pairs compared"] == str(counts["pairs"])
    assert rules["failed_requests"]["count"] == sum(counts["unanswered"].values())


def test_the_rule_tables_prompt_ids_stay_inside_their_cells() -> None:
    """A prompt id holding `|` or a backtick (a data file's id) is escaped as code: the
    step summary's table keeps five cells a row."""
    from quantcheck.gate.verdict import Rule, rule_table

    rows = rule_table([Rule("factual_flips", "", 2, 0, False, ["capital|au", "code`block"])])
    assert rows[2] == "| factual_flips | 2 | 0 | **fail** | `capital\\|au`, `code'block` |"


HOSTILE = st.lists(st.text(max_size=10) | st.sampled_from(MARKDOWN_ATTACKS), min_size=1,
                   max_size=4).map("".join)


def test_no_string_a_report_holds_changes_the_shape_of_its_step_summary(
        planted_report: Path) -> None:
    """Labels, a judge's model name, reviewers, approvals, prompt ids and both answers:
    whatever a server, a prompt file, a review file or an edited summary.json holds,
    the A/B's step summary renders no tag more than plain words give."""
    from quantcheck.gate.explain import Failure
    from quantcheck.gate.verdict import ApprovedPair, GateResult, Rule, markdown
    from quantcheck.store.folders.report_dir import read_summary
    from quantcheck.store.records.judge_records import Agreement, JudgeFigures

    planted = read_summary(planted_report)

    def summary_of(texts: list[str]) -> str:
        a, b, judge, reviewer, prompt_id, label, answer, why = texts
        summary = msgspec.structs.replace(
            planted, a=msgspec.structs.replace(planted.a, label=a),
            b=msgspec.structs.replace(planted.b, label=b),
            judge=JudgeFigures(endpoint=judge, model=judge, prompt_version="1", cache="c",
                               labels={"wording": 1}))
        agreement = Agreement(observations=1, pairs=1, reviewers=[reviewer], agreed=1,
                              labels=[label], confusion={})
        result = GateResult(verdict="fail", rules=[Rule("factual_flips", why, 1, 0, False,
                                                        [prompt_id])],
                            reviewers=[reviewer], approved=[ApprovedPair(prompt_id, label, why)],
                            judge_agreement=agreement)
        found = [Failure(prompt_id, "factual_flips", 0, why, answer, answer + why,
                         f"index.html#pair-{prompt_id}")]
        return markdown(result, summary, found)

    @settings(max_examples=200, deadline=None)
    @given(st.lists(HOSTILE, min_size=8, max_size=8))
    def shaped(texts: list[str]) -> None:
        assert no_tag_more(summary_of(texts), summary_of(["words"] * 8))

    shaped()


SHORTER = [("same", "Paris.", "Paris."), ("cut", "It is 42.", "42."),
           ("clipped", "Jane Austen.", "Austen."), ("longer", "Yes.", "Yes, it is.")]


@pytest.mark.parametrize(("kind", "limit", "description", "count", "passed"), [
    ("count", 1, "2 prompts shorter on B", 2, False),
    ("count", 2, "2 prompts shorter on B", 2, True),
    ("count", None, "2 prompts shorter on B", 2, True),
    ("share", 0.4, "50% of compared prompts shorter on B (2 of 4)", 0.5, False),
    ("share", 0.5, "50% of compared prompts shorter on B (2 of 4)", 0.5, True),
], ids=["count-over", "count-at", "count-off", "share-over", "share-at"])
def test_a_limit_whose_row_counts_prompts_is_its_own_rule(
        kind: Any, limit: float | None, description: str, count: float, passed: bool) -> None:
    """A row of the policy table with `counts` is a whole rule: the compared prompts its
    test holds for, as a count or a share, failing above the limit."""
    from quantcheck.gate.limits import Counted, Limit
    from quantcheck.gate.verdict import _counted_rule
    from quantcheck.store.records.pair_records import PairRow

    row = Limit("max_shorter", kind, None, "Shorter answers.", ("shorter",),
                counts=Counted("shorter on B",
                               lambda r: len(r.b_text or "") < len(r.a_text or "")))
    pairs = [PairRow(prompt_id=p, a_text=a, b_text=b) for p, a, b in SHORTER]
    rule = _counted_rule(row, limit, pairs)
    assert (rule.name, rule.description, rule.count, rule.limit, rule.passed, rule.prompts) \
        == ("shorter", description, count, limit, passed, ["cut", "clipped"])
