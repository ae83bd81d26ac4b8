"""Rubric files: the shipped default, custom ones, and clear errors; a rubric of too
many labels is refused at once (loading never costs more than linear time)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from quantcheck.errors import ConfigFileError
from quantcheck.store.inputs.rubric import MAX_LABELS, load_rubric

from .conftest import WritePrompts, invoke


def test_default_rubric() -> None:
    rubric = load_rubric()
    assert [label.id for label in rubric.labels] == [
        "identical", "wording", "minor", "ambiguous", "factual_flip"]
    assert rubric.blocking == ["factual_flip"]
    assert "factual or numerical claim" in rubric.question
    flip = rubric.labels[-1]
    assert flip.asks_side and not rubric.labels[0].key and rubric.labels[0].automatic


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("labels: []\nquestion: q\n", "field 'labels': required"),
        ("labels: [{id: a, name: A}]\n", "field 'question': required"),
        ("question: q\nlabels: [{id: a}]\n", "labels[1]: field 'name': required"),
        ("question: q\nlabels: [{id: a, name: A, colour: red}]\n",
         "labels[1]: field 'colour': unknown"),
        ("question: q\nlabels: [{id: a, name: A, key: j}]\n", "labels[1]: field 'key'"),
        ("question: q\nlabels: [{id: a, name: A, blocking: maybe}]\n",
         "labels[1]: field 'blocking': must be true or false"),
        ("question: q\nlabels: [{id: a, name: A}, {id: a, name: B}]\n", "id 'a' is used twice"),
        ("question: q\nlabels: [{id: a, name: A, key: x}, {id: b, name: B, key: x}]\n",
         "key 'x' is used twice"),
        ("question: q\nlabelz: []\n", "field 'labelz': unknown"),
        ("question: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_rubrics_name_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "rubric.yaml"
    path.write_text(text)
    with pytest.raises(ConfigFileError) as caught:
        load_rubric(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


def test_custom_rubric_drives_the_sheet(planted_report: Path, tmp_path: Path) -> None:
    custom = tmp_path / "strict.yaml"
    custom.write_text("question: Is B as good as A?\nlabels:\n"
                      "  - {id: same, name: Same, key: s}\n"
                      "  - {id: worse, name: Worse, key: x, blocking: true}\n")
    result = invoke("report", planted_report, "--rubric", custom)
    assert result.exit_code == 0, result.output
    html = (planted_report / "index.html").read_text()
    assert "Is B as good as A?" in html
    data = json.loads(html.split('id="sheet-data">', 1)[1].split("</script>", 1)[0])
    assert [label["id"] for label in data["rubric"]["labels"]] == ["same", "worse"]


def test_report_command_reports_a_bad_rubric(planted_report: Path,
                                             write_prompts: WritePrompts) -> None:
    bad = write_prompts("question: q\nlabels: [{id: a}]\n")
    result = invoke("report", planted_report, "--rubric", bad)
    assert result.exit_code == 2
    assert f"error: {bad}: labels[1]: field 'name': required" in result.output


def labels_yaml(count: int, duplicate: bool = False) -> str:
    ids = [f"l{n}" for n in range(count)]
    if duplicate:
        ids[-1] = ids[0]
    return "question: q\nlabels:\n" + "".join(f"  - {{id: {i}, name: N}}\n" for i in ids)


def test_a_rubric_of_100000_labels_is_refused_at_once_naming_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text(labels_yaml(100_000))
    started = time.monotonic()
    with pytest.raises(ConfigFileError) as caught:
        load_rubric(path)
    assert time.monotonic() - started < 15  # reading the YAML; nothing quadratic after
    assert str(caught.value) == (
        f"{path}: field 'labels': 100,000 labels; a rubric holds at most {MAX_LABELS} (a "
        "reviewer picks one at a glance): merge the labels that mean the same")


def test_a_rubric_at_the_bound_loads_and_one_label_twice_is_still_found(tmp_path: Path) -> None:
    path = tmp_path / "full.yaml"
    path.write_text(labels_yaml(MAX_LABELS))
    assert len(load_rubric(path).labels) == MAX_LABELS
    path.write_text(labels_yaml(MAX_LABELS, duplicate=True))
    with pytest.raises(ConfigFileError, match="id 'l0' is used twice"):
        load_rubric(path)
