"""store/folders/report_dir.py: a report's files read back as untrusted input: one that is
missing or malformed is one RunFormatError naming it, never a traceback."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck import CollectSettings, collect
from quantcheck.errors import RunFormatError
from quantcheck.fetch.forced_scoring import ForcedSettings
from quantcheck.pipeline.collecting import score_run
from quantcheck.store.folders.report_dir import (
    CANDIDATES,
    DETAILS,
    FORCED_JSON,
    FORCED_JSONL,
    PAIRS,
    _require_every_candidate_listed,
    read_forced,
    read_pair_rows,
    writing_pairs,
)
from quantcheck.store.records.pair_records import ENUMERATED, TEXT_COLUMNS, PairDetails
from quantcheck.store.records.run_records import DEGENERATE_KINDS, LENGTH_CAPPED
from quantcheck.triage.judging import CLASSES, NO_VERDICT, UNCLEAR
from quantcheck.triage.signals import TOOL_CALL_CHANGES

from .conftest import (
    TWO_PROMPTS,
    Serve,
    WritePrompts,
    assert_one_clear_line,
    cli_in_child,
    invoke,
    replace_with,
)


@pytest.fixture
def forced(serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> tuple[Path, Path]:
    """A run, and A's tokens scored on a second server (DIR/forced.json and .jsonl)."""
    run = tmp_path / "a"
    collect([write_prompts(TWO_PROMPTS)], run, CollectSettings(
        endpoint=serve().url, label="a", preflight=False, top_logprobs=3))
    score_run(run, tmp_path / "forced", ForcedSettings(endpoint=serve().url, top_k=3))
    return run, tmp_path / "forced"


@pytest.mark.parametrize("damage", ["lines-missing", "lines-a-folder", "a-line-malformed",
                                    "summary-malformed"])
def test_forced_scores_that_cannot_be_read_are_one_clear_line(
        forced: tuple[Path, Path], tmp_path: Path, damage: str) -> None:
    run, folder = forced
    read_forced(folder)  # as written, it reads
    if damage == "lines-missing":
        (folder / FORCED_JSONL).unlink()
    elif damage == "lines-a-folder":
        (folder / FORCED_JSONL).unlink()
        (folder / FORCED_JSONL).mkdir()
    elif damage == "a-line-malformed":
        (folder / FORCED_JSONL).write_text('{"prompt_id": 7}\n')
    else:
        (folder / FORCED_JSON).write_text('{"scored": "many"}')
    named = FORCED_JSON if damage == "summary-malformed" else FORCED_JSONL
    with pytest.raises(RunFormatError, match=named):
        read_forced(folder)
    result = invoke("compare", run, run, "--forced", folder, "--out", tmp_path / "report")
    assert result.exit_code == 2
    assert_one_clear_line(result.output, named)


@pytest.mark.parametrize(("column", "value"), [
    ("flip", "no"), ("suggested_label", "fine"), ("status", "Compared"),
    ("b_degenerate", "loop"), ("judge_class", "maybe"), ("b_expect", "PASS"),
    ("flip_cause", "noise"), ("unsure_side", "A")])
def test_a_value_outside_an_enumerated_column_is_refused_naming_row_column_and_values(
        planted_report: Path, column: str, value: str) -> None:
    pairs = pd.read_csv(planted_report / PAIRS, keep_default_na=False, dtype=str)
    row = int((pairs["prompt_id"] == "numbers").to_numpy().argmax())
    pairs.loc[row, column] = value
    pairs.to_csv(planted_report / PAIRS, index=False)
    with pytest.raises(RunFormatError) as caught:
        read_pair_rows(planted_report)
    allowed = ", ".join(repr(v) if v else "empty" for v in ENUMERATED[column])
    assert str(caught.value) == (
        f"{planted_report / PAIRS}: row {row + 1} (prompt 'numbers'), column {column}: "
        f"{value!r} is not one of its values ({allowed}); edited by hand? re-run compare")
    for command in (("gate", planted_report), ("report", planted_report)):
        result = invoke(*command)
        assert result.exit_code == 2, result.output
        assert_one_clear_line(result.output, f"column {column}: {value!r} is not one of")


def test_every_value_triage_writes_is_one_its_column_allows(planted_report: Path) -> None:
    read_pair_rows(planted_report)  # the planted report, as written, reads
    assert set(TOOL_CALL_CHANGES) < set(ENUMERATED["tool_call_change"])
    assert {*CLASSES, UNCLEAR, NO_VERDICT} < set(ENUMERATED["judge_class"])
    assert {*DEGENERATE_KINDS, LENGTH_CAPPED} < set(ENUMERATED["a_degenerate"])


# --- the one writer of pairs.csv and details.jsonl -----------------------------------------

def test_pairs_written_in_any_chunks_are_the_report_compare_wrote(planted_report: Path,
                                                                  tmp_path: Path) -> None:
    """A report's pairs and details, read back and written again cut into any chunks
    (empty ones too), are its pairs.csv and details.jsonl byte for byte."""
    rows = read_pair_rows(planted_report)
    details = [msgspec.json.decode(line, type=PairDetails)
               for line in (planted_report / DETAILS).read_bytes().splitlines()]
    files = {name: (planted_report / name).read_bytes() for name in (PAIRS, DETAILS)}

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.integers(0, len(rows)), max_size=5))
    def chunked(cuts: list[int]) -> None:
        bounds = [0, *sorted(cuts), len(rows)]
        with writing_pairs(tmp_path) as writer:
            for start, end in zip(bounds, bounds[1:], strict=False):
                writer.write(rows[start:end], details[start:end])
        assert {name: (tmp_path / name).read_bytes() for name in files} == files

    chunked()


def test_an_answer_with_a_bare_carriage_return_is_compared_and_gated(
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    """`Sydney\rIt is on the coast.` once left pairs.csv unreadable: every reader split
    the row at the unquoted carriage return, and `run` and `gate` said exit 2."""
    prompts = write_prompts('prompts:\n  - {id: capital, prompt: "Q", expect: '
                            '{contains: Canberra}}\n  - {id: other, prompt: "R"}\n')
    (tmp_path / "a.texts.json").write_text('["Canberra.", "x\\r"]')
    (tmp_path / "b.texts.json").write_text('["Sydney\\rIt is on the coast.", "x\\r"]')
    report = tmp_path / "report"
    compared = invoke("compare", tmp_path / "a.texts.json", tmp_path / "b.texts.json",
                      "--prompts", prompts, "--out", report)
    assert compared.exit_code == 1, compared.output  # the flip, read back from pairs.csv
    rows = {row.prompt_id: row for row in read_pair_rows(report)}
    assert rows["capital"].b_text == "Sydney\rIt is on the coast."
    assert rows["other"].a_text == rows["other"].b_text == "x\r"
    gated = invoke("gate", report)
    assert gated.exit_code == 1 and "| `capital` | factual_flips |" in gated.output


def test_any_text_in_every_text_column_round_trips(planted_report: Path,
                                                   tmp_path: Path) -> None:
    """Whatever a model or a prompt file puts in a text column (carriage returns, NUL,
    quotes, a formula) pairs.csv and details.jsonl give it back as written."""
    rows = read_pair_rows(planted_report)
    free = [c for c in TEXT_COLUMNS if c not in ENUMERATED]

    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.text(), min_size=len(free), max_size=len(free)),
           st.sampled_from(["\r", "\r\n", "\n", '"', "\x00", "=1+1", ",", ""]))
    def round_trip(texts: list[str], planted: str) -> None:
        texts = [planted + text + planted for text in texts]
        row = msgspec.structs.replace(rows[0], **dict(zip(free, texts, strict=True)))
        detail = PairDetails(prompt_id=texts[0], a_variants=[(texts[1], 2)])
        with writing_pairs(tmp_path) as writer:
            writer.write([row, rows[1]], [detail, PairDetails(prompt_id=rows[1].prompt_id)])
        read = read_pair_rows(tmp_path)
        assert [read[0], read[1]] == [row, rows[1]]
        line = (tmp_path / DETAILS).read_bytes().split(b"\n")[0]
        assert msgspec.json.decode(line, type=PairDetails) == detail

    round_trip()


def test_a_negative_count_in_pairs_csv_is_refused_naming_row_and_column(
        planted_report: Path) -> None:
    """Every integer column is a count or a token position: a negative one (a hand-made
    pairs.csv diluting the forced KL's weights, say) is no report compare wrote."""
    pairs = pd.read_csv(planted_report / PAIRS, keep_default_na=False, dtype=str)
    pairs.loc[1, "a_texts"] = "-3"
    pairs.to_csv(planted_report / PAIRS, index=False)
    with pytest.raises(RunFormatError) as caught:
        read_pair_rows(planted_report)
    assert str(caught.value) == (
        f"{planted_report / PAIRS}: row 2 (prompt {pairs.loc[1, 'prompt_id']!r}), column "
        "a_texts: -3 is negative (a count or a position); edited by hand? re-run compare")
    assert invoke("gate", planted_report).exit_code == 2


@pytest.mark.parametrize("column", ["forced_kl_mean", "kl_topk_max", "logprob_mean_abs_diff"])
def test_a_negative_kl_or_distance_in_pairs_csv_is_refused(planted_report: Path,
                                                           column: str) -> None:
    """compare clamps a KL at 0: a negative one (pulling the forced KL's mean under its
    limit) is no report compare wrote."""
    pairs = pd.read_csv(planted_report / PAIRS, keep_default_na=False, dtype=str)
    pairs.loc[0, column] = "-0.5"
    pairs.to_csv(planted_report / PAIRS, index=False)
    with pytest.raises(RunFormatError, match=f"column {column}: -0.5 is negative \\(a KL or a "
                                             "distance\\)"):
        read_pair_rows(planted_report)


def test_no_pairs_write_the_header_alone_and_a_failure_leaves_the_report(
        planted_report: Path) -> None:
    before = {name: (planted_report / name).read_bytes() for name in (PAIRS, DETAILS)}
    with pytest.raises(RuntimeError), writing_pairs(planted_report) as writer:
        writer.write(read_pair_rows(planted_report)[:1], [PairDetails(prompt_id="x")])
        raise RuntimeError("stopped while the pairs were written")
    assert {name: (planted_report / name).read_bytes() for name in before} == before
    assert sorted(p.name for p in planted_report.iterdir() if p.name.endswith(".tmp")) == []
    with writing_pairs(planted_report):
        pass
    assert (planted_report / PAIRS).read_bytes() == before[PAIRS].split(b"\n", 1)[0] + b"\n"
    assert (planted_report / DETAILS).read_bytes() == b""


def test_no_other_module_writes_pairs_csv_or_details_jsonl() -> None:
    """Compare and the judge's pass write a report's pairs through `writing_pairs`, so
    its chunking, column types and replacement live in one place."""
    package = Path(__file__).parents[1] / "src" / "quantcheck"
    writing = re.compile(r"\b(pairs_csv|details_jsonl)\(|AtomicFile\([^)]*\b(PAIRS|DETAILS)\)")
    writers = sorted(str(path.relative_to(package)) for path in package.rglob("*.py")
                     if writing.search(path.read_text(encoding="utf-8")))
    assert writers == ["store/folders/report_dir.py"]


# --- a report's file that is not a regular file ---------------------------------------

@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of a run compared with itself, made once."""
    from quantcheck import compare_runs
    from quantcheck.lab.scripted import ScriptedModel, ScriptedServer

    from .conftest import A_ANSWERS, RUNNER_UPS

    folder = tmp_path_factory.mktemp("compared")
    (folder / "prompts.yaml").write_text('prompts:\n  - {id: same, prompt: "Q: same"}\n')
    with ScriptedServer(ScriptedModel(A_ANSWERS, RUNNER_UPS)) as server:
        collect([folder / "prompts.yaml"], folder / "a", CollectSettings(
            endpoint=server.url, label="a", concurrency=1, top_logprobs=3))
    compare_runs(folder / "a", folder / "a", folder / "report")
    return folder / "report"


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "folder"])
@pytest.mark.parametrize(("name", "command"), [
    ("summary.json", "gate"), ("pairs.csv", "gate"), ("reviews/someone.json", "gate"),
    ("approvals.json", "approve"), ("details.jsonl", "report")])
def test_a_report_file_that_is_not_a_regular_file_is_refused_naming_it(
        compared: Path, tmp_path: Path, name: str, command: str, kind: str) -> None:
    """The gate, the sheet and the review server read a report's files as regular files
    only: never read without end, never wait on a FIFO, never a traceback."""
    import shutil

    report = tmp_path / "report"
    shutil.copytree(compared, report)
    path = report / name
    path.parent.mkdir(exist_ok=True)
    path.touch()
    replace_with(path, kind)
    result = cli_in_child(command, "report", cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert f"report/{name}" in line and "not a regular file" in line, line
    assert line.count("\n") == 0, line


@settings(max_examples=60, deadline=None)
@given(on_disk=st.lists(st.sampled_from(["fp8", "int4", "kv-fp8", "n v"]), unique=True),
       listed=st.lists(st.sampled_from(["fp8", "int4", "kv-fp8", "n v"]), max_size=5))
def test_an_overview_lists_each_candidate_folder_once_or_is_refused(
        tmp_path_factory: pytest.TempPathFactory, on_disk: list[str], listed: list[str]) -> None:
    folder = tmp_path_factory.mktemp("overview")
    for name in on_disk:
        (folder / CANDIDATES / name).mkdir(parents=True)
    (folder / CANDIDATES / "notes.txt").parent.mkdir(exist_ok=True)
    (folder / CANDIDATES / "notes.txt").write_text("a file is no candidate")
    fine = set(on_disk) <= set(listed) and len(set(listed)) == len(listed)
    try:
        _require_every_candidate_listed(folder, listed)
    except RunFormatError as exc:
        assert not fine and "so its verdict would not be checked" in str(exc)
    else:
        assert fine
