"""The formats of the files quantcheck writes: every JSON file names its format and
version in `format` ("quantcheck-summary/1"), and a JSON Schema of each ships with
the package (store/schemas/NAME.schema.json, made from the records by gate/schemas.py,
so they cannot drift; `quantcheck schema NAME` prints one). pairs.csv, a table, has a
column table instead (`quantcheck schema pairs`).

A record's `format` is a one-value Literal: reading a file of another format or a
later version fails where it is decoded, naming the field; a file written before
formats were named reads as version 1, which it is."""

from __future__ import annotations

from importlib import resources
from typing import Annotated, Final, Literal

import msgspec

from ...errors import QuantcheckError

# A field that counts (or a token's position): never negative, read back or written;
# its schema says minimum 0.
Count = Annotated[int, msgspec.Meta(ge=0)]

SummaryFormat = Literal["quantcheck-summary/1"]
SUMMARY_FORMAT: Final[SummaryFormat] = "quantcheck-summary/1"
GateFormat = Literal["quantcheck-gate/1"]
GATE_FORMAT: Final[GateFormat] = "quantcheck-gate/1"
CandidatesGateFormat = Literal["quantcheck-candidates-gate/1"]
CANDIDATES_GATE_FORMAT: Final[CandidatesGateFormat] = "quantcheck-candidates-gate/1"
OverviewFormat = Literal["quantcheck-overview/1"]
OVERVIEW_FORMAT: Final[OverviewFormat] = "quantcheck-overview/1"
ReviewFormat = Literal["quantcheck-review/1"]
REVIEW_FORMAT: Final[ReviewFormat] = "quantcheck-review/1"
ApprovalsFormat = Literal["quantcheck-approvals/1"]
APPROVALS_FORMAT: Final[ApprovalsFormat] = "quantcheck-approvals/1"
ManifestFormat = Literal["quantcheck-manifest/1"]
MANIFEST_FORMAT: Final[ManifestFormat] = "quantcheck-manifest/1"
DeterminismFormat = Literal["quantcheck-determinism/1"]
DETERMINISM_FORMAT: Final[DeterminismFormat] = "quantcheck-determinism/1"
ForcedFormat = Literal["quantcheck-forced/1"]
FORCED_FORMAT: Final[ForcedFormat] = "quantcheck-forced/1"
ThroughputFormat = Literal["quantcheck-throughput/1"]
THROUGHPUT_FORMAT: Final[ThroughputFormat] = "quantcheck-throughput/1"
CertificateFormat = Literal["quantcheck-certificate/1"]
CERTIFICATE_FORMAT: Final[CertificateFormat] = "quantcheck-certificate/1"
LadderFormat = Literal["quantcheck-ladder/1"]
LADDER_FORMAT: Final[LadderFormat] = "quantcheck-ladder/1"
LadderPlanFormat = Literal["quantcheck-ladder-plan/1"]
LADDER_PLAN_FORMAT: Final[LadderPlanFormat] = "quantcheck-ladder-plan/1"
ReproFormat = Literal["quantcheck-repro/1"]
REPRO_FORMAT: Final[ReproFormat] = "quantcheck-repro/1"
PAIRS_FORMAT: Final = "quantcheck-pairs/1"

# Each shipped schema: its name, and the file it describes.
SCHEMAS: Final = {
    "summary": "REPORT_DIR/summary.json",
    "gate": "REPORT_DIR/gate.json",
    "candidates-gate": "DIR/gate.json of several candidates (beside overview.json)",
    "overview": "DIR/overview.json",
    "review": "REPORT_DIR/reviews/NAME.json, and files exported from the sheet",
    "approvals": "approvals.json",
    "manifest": "RUN_DIR/manifest.json",
    "determinism": "determinism.json",
    "forced": "forced.json",
    "throughput": "RUN_DIR/throughput.json",
    "certificate": "certificate.json (determinism --certify)",
    "ladder": "DIR/ladder.json (quantcheck ladder)",
    "ladder-plan": "DIR/plan.json (quantcheck ladder)",
    "repro": "DIR/repro.json (repro)",
    "pairs": "REPORT_DIR/pairs.csv: its columns and their types",
}


class UnknownSchema(QuantcheckError):
    """A schema name quantcheck does not ship."""


def schema_file(name: str) -> str:
    """The shipped file of a schema's name."""
    return f"{name}.columns.json" if name == "pairs" else f"{name}.schema.json"


def shipped_schema(name: str) -> str:
    """A shipped schema (or pairs.csv's column table), as its JSON text."""
    if name not in SCHEMAS:
        raise UnknownSchema(f"no schema {name!r}; the schemas: {', '.join(SCHEMAS)}")
    return (resources.files("quantcheck.store") / "schemas" / schema_file(name)).read_text("utf-8")
