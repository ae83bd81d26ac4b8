"""From the eval runs a team already has to a gate: two lm-evaluation-harness logs (and
two Inspect logs), each written by the real harness against its own loopback server,
compared as quantcheck runs. Each side's pass rate is the harness's own figure to the
last digit; the flipped samples are listed with both answers; McNemar and the
detectable change are said; the gate fails on a flipped sample and passes on a log
against itself; logs that do not pair are refused in one line naming the difference;
records go out as Every Eval Ever files and a model card's table. The same against two
real llama-servers (F16 and Q2_K of the demo's model) closes the file."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from jsonschema import Draft7Validator

from quantcheck.lab.scripted import ScriptedModel, ScriptedServer
from quantcheck.store.folders.report_dir import read_pairs, read_summary
from quantcheck.store.folders.run_dir import load_run

from .conftest import FIXTURES, assert_one_clear_line, invoke
from .harnesses import (
    InspectRun,
    LmEvalRun,
    llama_server,
    run_inspects,
    run_lm_evals,
    run_lm_evals_side_by_side,
    serving,
    write_inspect_task,
    write_lm_eval_task,
)

pytestmark = pytest.mark.evals

QUESTIONS = ["What is 2 plus 3?", "What is 4 plus 4?", "What is 10 plus 5?",
             "What is 7 plus 8?", "What is 1 plus 1?", "What is 6 plus 3?"]
ANSWERS = ["5", "8", "15", "15", "2", "9"]
ROWS = [{"question": q, "answer": a} for q, a in zip(QUESTIONS, ANSWERS, strict=True)]
SHOTS = [{"question": "What is 3 plus 3?", "answer": "6"},
         {"question": "What is 5 plus 2?", "answer": "7"}]
# A passes 0-4 and fails 5; B fails 1 and 4 (flips) and passes 5 (an improvement)
A_SAYS = {QUESTIONS[0]: " The answer is 5.", QUESTIONS[1]: " It is 8.",
          QUESTIONS[2]: " 15", QUESTIONS[3]: " The answer is 15.",
          QUESTIONS[4]: " 2, of course.", QUESTIONS[5]: " The answer is 10."}
B_SAYS = {**A_SAYS, QUESTIONS[1]: " It is 9.", QUESTIONS[4]: " 11",
          QUESTIONS[5]: " The answer is 9."}
SCHEMAS = FIXTURES / "evals" / "eee-schema-0.3.0"


@dataclass
class Logs:
    """lm_eval's output folders: A, B, and B run otherwise (few-shot, a limit, another
    task)."""

    a: Path
    b: Path
    b_few_shot: Path
    b_limited: Path
    b_other_task: Path


def servers(*models: ScriptedModel) -> list[ScriptedServer]:
    return [ScriptedServer(model).start() for model in models]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Logs]:
    folder = tmp_path_factory.mktemp("lm-eval")
    tasks = folder / "tasks"
    write_lm_eval_task(tasks, "arith", ROWS, shots=SHOTS)
    write_lm_eval_task(tasks, "arith_copy", ROWS, shots=SHOTS)
    a_server, b_server = servers(ScriptedModel(A_SAYS), ScriptedModel(B_SAYS))
    try:  # the five runs in one lm_eval process
        yield Logs(*run_lm_evals(
            LmEvalRun(tasks, "arith", a_server.url, folder / "a"),
            LmEvalRun(tasks, "arith", b_server.url, folder / "b"),
            LmEvalRun(tasks, "arith", b_server.url, folder / "b-shot", ("--num_fewshot", "1")),
            LmEvalRun(tasks, "arith", b_server.url, folder / "b-limit", ("--limit", "4")),
            LmEvalRun(tasks, "arith_copy", b_server.url, folder / "b-copy")))
    finally:
        a_server.stop()
        b_server.stop()


@pytest.fixture(scope="module")
def report(logs: Logs, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`quantcheck compare A_LOG B_LOG --out REPORT`: its report and what it printed."""
    out = tmp_path_factory.mktemp("report") / "report"
    result = invoke("compare", logs.a, logs.b, "--out", out)
    assert result.exit_code == 1, result.output  # the default gate: two flips
    return out, result.output


def test_each_side_passes_at_lm_evals_own_figure_to_the_last_digit(
        report: tuple[Path, str]) -> None:
    out, printed = report
    summary = read_summary(out)
    assert summary.evaluation is not None
    (task,) = summary.evaluation.tasks
    paired = summary.stats.categories["arith"]
    assert (task.task, task.metric, task.few_shot) == ("arith", "exact_match,strict-match", 0)
    assert task.a_reported == paired.a_pass_rate == 5 / 6  # exact, not approximately
    assert task.b_reported == paired.b_pass_rate == 4 / 6
    assert ("Task arith (exact_match,strict-match, 0-shot, 6 of 6 / 6 samples paired): A "
            "0.8333333333333334 (lm-evaluation-harness: 0.8333333333333334), B "
            "0.6666666666666666 (lm-evaluation-harness: 0.6666666666666666)") in printed
    assert "flips A pass B fail / improvements 2 / 1; McNemar p = 1" in printed
    assert "detectable change none detectable; recovery 80.00%" in printed
    assert "Exact McNemar test on the 3 of 6 prompts whose checks disagree: p = 1" in printed
    assert "speed: not measured (both sides were imported from eval logs)" in printed


def test_the_flipped_samples_are_listed_with_both_answers(report: tuple[Path, str]) -> None:
    out, _ = report
    pairs = read_pairs(out).set_index("prompt_id")
    flipped = pairs[pairs["flip"] == "regression"]
    assert sorted(flipped.index) == ["arith/1", "arith/4"]
    assert (flipped.loc["arith/1", "a_text"], flipped.loc["arith/1", "b_text"]) == (
        " It is 8.", " It is 9.")
    assert pairs.loc["arith/5", "flip"] == "improvement"
    gate = invoke("gate", out)
    assert gate.exit_code == 1, gate.output
    assert "| `arith/1` | factual_flips |" in gate.output
    line = next(line for line in gate.output.splitlines() if line.startswith("| `arith/1`"))
    assert "It is 8." in line and "It is 9." in line
    assert 'exact\\_match,strict-match = 0 (scored answer "9", target "8")' in line


def test_a_log_against_itself_passes_the_gate(logs: Logs, tmp_path: Path) -> None:
    result = invoke("compare", logs.a, logs.a, "--out", tmp_path / "self")
    assert result.exit_code == 0, result.output
    assert invoke("gate", tmp_path / "self").exit_code == 0


@pytest.mark.parametrize(("other", "said"), [
    ("b_few_shot", "task arith: another few-shot count (A 0, B 1)"),
    ("b_limited", "task arith: another sample limit (A none, B 4)"),
    ("b_other_task", "another set of tasks: arith only in A, arith_copy only in B"),
])
def test_logs_that_do_not_pair_are_refused_in_one_line(logs: Logs, tmp_path: Path,
                                                       other: str, said: str) -> None:
    result = invoke("compare", logs.a, getattr(logs, other), "--out", tmp_path / "report")
    assert result.exit_code == 2
    assert_one_clear_line(result.output, f"A and B do not pair: {said}")
    assert not (tmp_path / "report" / "summary.json").exists()


def test_samples_one_log_lacks_are_left_out_and_counted(logs: Logs, tmp_path: Path) -> None:
    """B's log cut short (the eval stopped before its last sample): the rest pair, and
    the comparison says what was left out."""
    shutil.copytree(logs.b, tmp_path / "b")
    (samples,) = (tmp_path / "b").rglob("samples_arith_*.jsonl")
    samples.write_text("".join(samples.read_text().splitlines(keepends=True)[:-1]))
    result = invoke("compare", logs.a, tmp_path / "b", "--out", tmp_path / "report")
    summary = read_summary(tmp_path / "report")
    assert summary.comparison.notes == ["1 prompt only in A, 0 prompts only in B"]
    assert summary.stats.categories["arith"].checked == 5
    assert "5 of 6 / 5 samples paired" in result.output


def test_a_document_twice_in_a_log_is_refused_naming_both_lines(logs: Logs,
                                                                 tmp_path: Path) -> None:
    shutil.copytree(logs.b, tmp_path / "b")
    (samples,) = (tmp_path / "b").rglob("samples_arith_*.jsonl")
    lines = samples.read_text().splitlines(keepends=True)
    samples.write_text("".join([*lines, lines[2]]))
    result = invoke("import", tmp_path / "b", "--out", tmp_path / "run")
    assert result.exit_code == 2
    assert_one_clear_line(result.output, ":7: document 2 of task arith appears twice for "
                                         "filter strict-match (first at 3)")


def test_an_imported_run_compares_as_the_log_does(logs: Logs, report: tuple[Path, str],
                                                  tmp_path: Path) -> None:
    for side, log in (("a", logs.a), ("b", logs.b)):
        result = invoke("import", log, "--out", tmp_path / side)
        assert result.exit_code == 0, result.output
        assert "task arith: 6 samples, verdict exact_match,strict-match = " in result.output
    assert invoke("compare", tmp_path / "a", tmp_path / "b", "--out",
                  tmp_path / "report").exit_code == 1
    assert read_summary(tmp_path / "report").identity == read_summary(report[0]).identity


def test_the_sheet_shows_each_task_beside_the_harness(report: tuple[Path, str]) -> None:
    page = (report[0] / "index.html").read_text()
    start = page.index('<details id="eval-tasks"')
    table = page[start:page.index("</details>", start)]
    assert "<td>0.8333333333333334</td><td>0.8333333333333334</td>" in table
    assert "<td>2 / 1</td>" in table and "<td>80.00%</td>" in table


def test_records_out_are_valid_eee_and_a_model_card_table(report: tuple[Path, str],
                                                          tmp_path: Path) -> None:
    out, _ = report
    result = invoke("export", out, "--eee", tmp_path / "eee", "--model-card",
                    tmp_path / "card.md")
    assert result.exit_code == 0, result.output
    card = (tmp_path / "card.md").read_text()
    assert "| Category | Metric | a | b | Recovery (%) |" in card
    assert ("| lm-evaluation-harness | arith (exact_match,strict-match, 0-shot) | 83.33 "
            "| 66.67 | 80.00 |") in card
    assert "| arith | 6 | 2 | 1 | 1 | none at this size |" in card
    aggregate = Draft7Validator(json.loads((SCHEMAS / "eval.schema.json").read_text()))
    instance = Draft7Validator(json.loads((SCHEMAS / "instance_level_eval.schema.json")
                                          .read_text()))
    records = sorted((tmp_path / "eee").rglob("*-*.json"))
    assert len(records) == 2
    for record in records:
        assert not list(aggregate.iter_errors(json.loads(record.read_text())))
        lines = record.with_name(record.stem + "_samples.jsonl").read_text().splitlines()
        assert len(lines) == 6
        assert all(not list(instance.iter_errors(json.loads(line))) for line in lines)
    scores = sorted(json.loads(r.read_text())["evaluation_results"][0]["score_details"]
                    ["score"] for r in records)
    assert scores == [4 / 6, 5 / 6]
    # the records read back and pair as the logs did
    by_score = {json.loads(r.read_text())["evaluation_results"][0]["score_details"]["score"]:
                r for r in records}
    again = invoke("compare", by_score[5 / 6], by_score[4 / 6], "--out", tmp_path / "again")
    assert again.exit_code == 1, again.output
    flipped = read_pairs(tmp_path / "again").query("flip == 'regression'")["prompt_id"]
    assert sorted(flipped) == ["arith/1", "arith/4"]


# --- Inspect ---------------------------------------------------------------------------

INSPECT_ROWS = [{"id": f"q{n}", "input": q, "target": a}
                for n, (q, a) in enumerate(zip(QUESTIONS, ANSWERS, strict=True))]


@pytest.fixture(scope="module")
def inspect_logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    folder = tmp_path_factory.mktemp("inspect")
    task = write_inspect_task(folder / "task", "arith", INSPECT_ROWS)
    a_server, b_server = servers(ScriptedModel(A_SAYS), ScriptedModel(B_SAYS))
    try:
        yield dict(zip(("a", "a_json", "b"), run_inspects(  # in one Inspect process
            InspectRun(task, a_server.url, folder / "a"),
            InspectRun(task, a_server.url, folder / "a-json", log_format="json"),
            InspectRun(task, b_server.url, folder / "b")), strict=True))
    finally:
        a_server.stop()
        b_server.stop()


def test_two_inspect_logs_pass_at_inspects_own_accuracy_and_gate(
        inspect_logs: dict[str, Path], tmp_path: Path) -> None:
    """`includes`: A's " The answer is 10." holds no 9 (a fail), B's " It is 9." holds
    no 8 and " 11" no 2 (flips)."""
    result = invoke("compare", inspect_logs["a"], inspect_logs["b"], "--out",
                    tmp_path / "report")
    assert result.exit_code == 1, result.output
    summary = read_summary(tmp_path / "report")
    assert summary.evaluation is not None
    (task,) = summary.evaluation.tasks
    paired = summary.stats.categories["arith"]
    assert task.metric == "includes"
    assert task.a_reported == paired.a_pass_rate == 5 / 6
    assert task.b_reported == paired.b_pass_rate == 4 / 6
    assert "A 0.8333333333333334 (inspect_ai: 0.8333333333333334)" in result.output
    flipped = read_pairs(tmp_path / "report").query("flip == 'regression'")["prompt_id"]
    assert sorted(flipped) == ["arith/q1", "arith/q4"]
    assert invoke("gate", tmp_path / "report").exit_code == 1
    for folder in (tmp_path / "report" / "runs").iterdir():
        assert load_run(folder).manifest.evaluation is not None


def test_an_inspect_log_against_itself_in_its_other_form_passes(
        inspect_logs: dict[str, Path], tmp_path: Path) -> None:
    """The .eval archive and the .json log of the same eval pair sample for sample."""
    result = invoke("compare", inspect_logs["a"], inspect_logs["a_json"], "--out",
                    tmp_path / "report")
    assert result.exit_code == 0, result.output
    assert read_summary(tmp_path / "report").counts.flips.regression == 0
    assert invoke("gate", tmp_path / "report").exit_code == 0


# --- two real llama-servers ------------------------------------------------------------

# Q2_K answered none of them here and F16 17 of 20: flips to spare
CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"), ("Egypt", "Cairo"),
            ("Canada", "Ottawa"), ("Australia", "Canberra"), ("Brazil", "Brasilia"),
            ("Argentina", "Buenos Aires"), ("Mexico", "Mexico City"), ("India", "New Delhi"),
            ("Greece", "Athens"), ("Portugal", "Lisbon"), ("Norway", "Oslo"),
            ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Denmark", "Copenhagen")]
CAPITAL_SHOTS = [("United Kingdom", "London"), ("Ukraine", "Kyiv"), ("Czech Republic", "Prague"),
                 ("Romania", "Bucharest"), ("Bulgaria", "Sofia")]


def capitals(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"question": f"What is the capital of {country}?", "answer": capital}
            for country, capital in pairs]


@pytest.mark.llamacpp
def test_lm_eval_on_two_llama_servers_f16_and_q2_k(requantized: Callable[[str], Path],
                                                   tmp_path: Path) -> None:
    """lm_eval 0.4.13 on a local 20-sample, 3-shot task against llama-server on Gemma 3
    270M requantized to F16 and to Q2_K: each side's pass rate is lm-eval's own
    exact_match; the flips are listed with both answers; McNemar and the detectable
    change are said; the gate fails, and passes on the F16 log against itself."""
    if not shutil.which("llama-server"):
        if os.environ.get("CI"):
            pytest.fail("CI must have llama-server on PATH (.ci/build-llama-server)")
        pytest.skip("no llama-server on PATH (.ci/build-llama-server builds it)")
    tasks = tmp_path / "tasks"
    # the answer up to its first full stop or line break
    write_lm_eval_task(tasks, "capitals", capitals(CAPITALS), shots=capitals(CAPITAL_SHOTS),
                       answer=r"^ ?([^.\n]+)")
    models = {name: requantized(name) for name in ("F16", "Q2_K")}
    with serving(llama_server, models, tmp_path) as urls:  # one thread each, side by side
        logs = dict(zip(urls, run_lm_evals_side_by_side(*(
            LmEvalRun(tasks, "capitals", url, tmp_path / name, ("--num_fewshot", "3"),
                      model="gemma-3-270m") for name, url in urls.items())), strict=True))
    result = invoke("compare", logs["F16"], logs["Q2_K"], "--out", tmp_path / "report")
    assert result.exit_code == 1, result.output
    summary = read_summary(tmp_path / "report")
    assert summary.evaluation is not None
    (task,) = summary.evaluation.tasks
    paired = summary.stats.categories["capitals"]
    assert paired.checked == 20
    assert task.a_reported == paired.a_pass_rate and task.b_reported == paired.b_pass_rate
    assert paired.regressions > 0
    print(f"F16 {paired.a_pass_rate}, Q2_K {paired.b_pass_rate}, flips "
          f"{paired.regressions}/{paired.improvements}, McNemar p {paired.mcnemar_p:.3g}, "
          f"detectable {paired.detectable_change}")
    assert f"A {paired.a_pass_rate!r} (lm-evaluation-harness: {paired.a_pass_rate!r})" \
        in result.output
    assert "Exact McNemar test on the " in result.output
    assert "the smallest change this A/B can detect is " in result.output or \
        "too few prompts to detect any change" in result.output
    gate = invoke("gate", tmp_path / "report")
    assert gate.exit_code == 1 and "| factual_flips |" in gate.output
    pairs = read_pairs(tmp_path / "report")
    flipped = pairs[pairs["flip"] == "regression"]
    assert len(flipped) == paired.regressions and (flipped["a_text"] != flipped["b_text"]).all()
    itself = invoke("compare", logs["F16"], logs["F16"], "--out", tmp_path / "itself")
    assert itself.exit_code == 0, itself.output
    assert invoke("gate", tmp_path / "itself").exit_code == 0
