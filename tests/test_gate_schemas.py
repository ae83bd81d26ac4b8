"""Versioned outputs: every JSON file names its format, validates against the schema
shipped for it (made from the records, so it cannot drift), and pairs.csv reads back
with its real column types."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pandas as pd
import pytest

import quantcheck
from quantcheck.gate.schemas import generated
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.present.review_server import review_app
from quantcheck.store.records.formats import SCHEMAS, shipped_schema

from .conftest import (
    A_ANSWERS,
    B_ANSWERS,
    PROMPTS,
    RUNNER_UPS,
    AppServer,
    Serve,
    WritePrompts,
    invoke,
    report_identity,
)

# Which schema a JSON file quantcheck writes follows, by its name (and its folder).
BY_NAME = {"summary.json": "summary", "overview.json": "overview",
           "approvals.json": "approvals", "manifest.json": "manifest",
           "determinism.json": "determinism", "forced.json": "forced",
           "throughput.json": "throughput", "certificate.json": "certificate",
           "repro.json": "repro", "ladder.json": "ladder", "plan.json": "ladder-plan"}


def schema_of(path: Path) -> str:
    if path.name == "gate.json":
        return "candidates-gate" if (path.parent / "overview.json").exists() else "gate"
    if path.parent.name == "reviews":
        return "review"
    return BY_NAME[path.name]


def made(*args: object) -> str:
    """A command that writes its files: it passes or fails, never exits 2 or 3."""
    result = invoke(*args)
    assert result.exit_code in (0, 1), result.output
    return result.output


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_the_shipped_schemas_are_the_ones_the_records_make(name: str) -> None:
    """After a record changes: quantcheck.gate.schemas.write_shipped() (docs/development.md)."""
    assert shipped_schema(name) == generated(name)


def test_the_schema_command_prints_a_shipped_schema_and_lists_them() -> None:
    printed = invoke("schema", "summary")
    assert printed.exit_code == 0 and printed.output == shipped_schema("summary")
    listed = invoke("schema", "--list").output
    assert [line.split()[0] for line in listed.splitlines()] == list(SCHEMAS)
    unknown = invoke("schema", "summry")
    assert unknown.exit_code == 2 and "no schema 'summry'" in unknown.output


def save_a_review(report: Path) -> Path:
    """A review saved as the review server saves it (a real POST to it)."""
    server = AppServer(review_app(report, "dana"))
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        headers = {"Host": f"127.0.0.1:{server.port}"}
        connection.request("GET", "/", headers=headers)
        page = connection.getresponse().read().decode()
        found = re.search(r'"token":"([^"]+)"', page)
        assert found
        body = json.dumps({"format": "quantcheck-review/1", "identity": report_identity(report),
                           "verdicts": {"wording": {"label": "wording"}}})
        connection.request("POST", "/api/review", body=body, headers={
            **headers, "Content-Type": "application/json", "X-Quantcheck-Token": found.group(1)})
        response = connection.getresponse()
        assert response.status == 200, response.read()
        connection.close()
    finally:
        server.stop()
    return report / "reviews" / "dana.json"


@pytest.fixture
def outputs(serve: Serve, write_prompts: WritePrompts, tmp_path: Path
            ) -> Iterator[Path]:
    """Every kind of JSON file: the scripted demo (runs, report, gate), a two-candidate
    run with throughput and the overview's gate, teacher forcing, determinism, a
    review saved by the review server, approvals made from it, a determinism
    certificate and a context ladder."""
    demo = tmp_path / "demo"
    made("demo", "--engine", "scripted", "--out", demo)
    a, b = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS)), serve(ScriptedModel(B_ANSWERS))
    clean = serve(ScriptedModel(A_ANSWERS, RUNNER_UPS))
    prompts = write_prompts(PROMPTS)
    two = tmp_path / "two"
    made("run", "--a", a.url, "--b", b.url, "--b-label", "flips", "--b", clean.url,
         "--b-label", "clean", "--prompts", prompts, "--out", two, "--no-preflight",
         "--throughput", "--throughput-seconds", "0", "--repeats", "2")
    made("gate", two)
    made("forced", two / "a", "--endpoint", clean.url, "--out", tmp_path / "forced")
    made("determinism", "--endpoint", a.url, "--prompts", prompts, "--modes", "sequential",
         "--repeats", "2", "--out", tmp_path / "determinism", "--no-preflight")
    made("determinism", "--certify", "--endpoint", a.url, "--prompts", prompts,
         "--max-batch", "2", "--trials", "2", "--out", tmp_path / "certificate")
    made("ladder", "--a", a.url, "--b", clean.url, "--lengths", "512", "--depths", "0",
         "--no-absent", "--out", tmp_path / "ladder")
    flips = two / "candidates" / "flips"
    save_a_review(flips)
    made("approve", flips)
    made("repro", flips, "flip", "--out", tmp_path / "repro")
    yield tmp_path


def test_every_json_output_names_its_format_and_validates_against_its_schema(
        outputs: Path) -> None:
    seen: dict[str, int] = {}
    for path in sorted(outputs.rglob("*.json")):
        if path.name.endswith(".request.json"):  # a repro's bodies: the wire's, as sent
            continue
        name = schema_of(path)
        document = json.loads(path.read_text())
        assert document["format"] == f"quantcheck-{name}/1", path
        jsonschema.Draft202012Validator(json.loads(shipped_schema(name))).validate(document)
        seen[name] = seen.get(name, 0) + 1
    assert set(seen) == set(SCHEMAS) - {"pairs"}, seen  # every kind was made and checked
    # the demo's, each candidate's (and the ladder's probe's summary)
    assert seen["summary"] == 4 and seen["gate"] == 3


def test_a_file_of_a_later_format_version_is_refused_naming_it(planted_report: Path) -> None:
    summary = planted_report / "summary.json"
    summary.write_text(summary.read_text().replace('"quantcheck-summary/1"',
                                                   '"quantcheck-summary/2"'))
    result = invoke("gate", planted_report)
    assert result.exit_code == 2
    assert "'quantcheck-summary/2'" in result.output and "$.format" in result.output


def test_read_pairs_gives_each_column_its_type_even_beside_empty_cells(
        planted_report: Path) -> None:
    """Plain pandas.read_csv reads an integer column with an empty cell as floats; the
    public reader keeps the column table's types."""
    pairs = quantcheck.read_pairs(planted_report)
    plain = pd.read_csv(planted_report / "pairs.csv")
    assert plain["a_tokens"].dtype == "float64"  # what the typed reader is for
    columns = json.loads(shipped_schema("pairs"))["columns"]
    assert [c["name"] for c in columns] == list(pairs.columns)
    kinds = {"integer": {"Int64"}, "boolean": {"boolean"}, "number": {"float64"},
             "string": {"object", "str"}}  # pandas 3 names its text columns str
    for column in columns:
        assert str(pairs[column["name"]].dtype) in kinds[column["type"]], column
    by_id = pairs.set_index("prompt_id")
    tokens = by_id.loc["same", "a_tokens"]
    assert by_id.loc["only-a", "a_tokens"] is pd.NA and tokens == 6
    assert str(pd.Series([tokens]).dtype) == "int64"  # a whole number, not 6.0
    assert bool(by_id.loc["same", "identical"]) and by_id.loc["only-a", "identical"] is pd.NA
    assert by_id.loc["same", "divergence_a_token"] == ""  # an empty text cell
