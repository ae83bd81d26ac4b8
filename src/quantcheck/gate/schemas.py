"""The JSON Schemas of every JSON file quantcheck writes, made from the records that
write them (msgspec.json.schema), pairs.csv's column table made from PairRow, and the
policy file's schema made from the policy table (gate/limits.py): what ships in
store/schemas/ (a test checks the shipped files equal these).

This is the lowest floor that sees every record (the gate's own, the approvals of the
judge, the store's). After a record changed, `write_shipped()` writes the shipped files
again (docs/development.md)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from ..store.folders.reviews import Review
from ..store.folders.run_dir import Manifest, Throughput
from ..store.records.certificate_records import Certificate
from ..store.records.formats import PAIRS_FORMAT, SCHEMAS, schema_file
from ..store.records.ladder_records import Ladder, LadderPlan
from ..store.records.pair_records import PAIR_COLUMNS, PAIR_DTYPES, PairRow
from ..store.records.report_records import DeterminismReport, ForcedSummary, Overview, Summary
from ..store.records.repro_records import Repro
from ..triage.approvals import ApprovalsFile
from .limits import policy_schema
from .overview import CandidatesGate
from .verdict import GateResult

RECORDS: dict[str, type[msgspec.Struct]] = {
    "summary": Summary, "gate": GateResult, "candidates-gate": CandidatesGate,
    "overview": Overview, "review": Review, "approvals": ApprovalsFile,
    "manifest": Manifest, "determinism": DeterminismReport, "forced": ForcedSummary,
    "throughput": Throughput, "certificate": Certificate, "repro": Repro, "ladder": Ladder,
    "ladder-plan": LadderPlan,
}
COLUMN_TYPES = {"Int64": "integer", "float64": "number", "boolean": "boolean",
                "object": "string"}
SHIPPED = Path(__file__).parents[1] / "store" / "schemas"
# the policy file's schema: an input quantcheck reads, not an output (so not in SCHEMAS)
POLICY = "policy"


def json_schema(name: str) -> dict[str, object]:
    """The JSON Schema (draft 2020-12) of the file a record writes."""
    schema = msgspec.json.schema(RECORDS[name], schema_hook=_any_json)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"quantcheck {name}: {SCHEMAS[name]}", **schema}


def _any_json(kind: type) -> dict[str, object]:
    """`object` fields hold what a server or a user wrote: any JSON value."""
    if kind is object:
        return {"description": "any JSON value"}
    raise NotImplementedError


def pairs_columns() -> dict[str, object]:
    """pairs.csv's columns in order: each one's type, and whether a cell may be empty
    (an integer column is integers, never 12.0, also beside empty cells)."""
    fields = {field.name: field for field in msgspec.structs.fields(PairRow)}
    return {"format": PAIRS_FORMAT, "title": f"quantcheck pairs: {SCHEMAS['pairs']}",
            "columns": [{"name": name, "type": COLUMN_TYPES[PAIR_DTYPES[name]],
                         "may_be_empty": fields[name].required is False
                         and fields[name].default in (None, "")}
                        for name in PAIR_COLUMNS]}


def generated(name: str) -> str:
    """A shipped file's text, as it is made now."""
    document = (pairs_columns() if name == "pairs" else policy_schema() if name == POLICY
                else json_schema(name))
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_shipped(folder: Path = SHIPPED) -> list[Path]:
    """Write every schema into `folder`; the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in [*SCHEMAS, POLICY]:
        path = folder / schema_file(name)
        path.write_text(generated(name), encoding="utf-8")
        written.append(path)
    return written
