"""What an output folder holds, decided in one place: each kind of output quantcheck
writes is known by its own files at the folder's top (not in its subfolders):

    kind                                 files                          written by
    a run directory                      manifest.json, prompts.jsonl,  collect, merge
                                         completions.jsonl
    an A/B report                        summary.json, pairs.csv,       compare, run
                                         details.jsonl
    the overview of several candidates   overview.json, candidates/     compare, run (several B)
    a determinism certificate            certificate.json, answers.jsonl determinism --certify
    a determinism report                 determinism.json,              determinism
                                         determinism.csv
    a folder of teacher-forced scores    forced.json, forced.jsonl      forced

Any one of a kind's files is enough (a write cut short leaves some of them). Every
writer claims its folder for its kind before it writes or sends anything (`claim`): a
folder that holds another kind is refused, naming what it holds; one of the same kind
is resumed or written again. A reader (the gate) takes a folder of one kind only
(`kind_of`): a folder holding two, written before writers claimed their folders or
put together by hand, is refused instead of one of them being picked."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import QuantcheckError, RunFormatError

MANIFEST = "manifest.json"
PROMPTS = "prompts.jsonl"
COMPLETIONS = "completions.jsonl"
PAIRS = "pairs.csv"
DETAILS = "details.jsonl"
SUMMARY = "summary.json"
OVERVIEW = "overview.json"  # several candidates: DIR/overview.json,
CANDIDATES = "candidates"  # and each one's report in DIR/candidates/LABEL/
CERTIFICATE_JSON = "certificate.json"
ANSWERS_JSONL = "answers.jsonl"
DETERMINISM_JSON = "determinism.json"
DETERMINISM_CSV = "determinism.csv"
FORCED_JSON = "forced.json"
FORCED_JSONL = "forced.jsonl"


@dataclass(frozen=True)
class Kind:
    """One kind of output folder: what it is called, the files that show it, and what
    a reader that does not take it should do instead."""

    name: str
    files: tuple[str, ...]
    instead: str


RUN = Kind("a run directory", (MANIFEST, PROMPTS, COMPLETIONS),
           "compare two runs first, e.g. `quantcheck compare RUN_DIR OTHER_RUN "
           "--out REPORT_DIR`, and gate REPORT_DIR")
REPORT = Kind("an A/B report", (SUMMARY, PAIRS, DETAILS), "`quantcheck gate DIR` gates it")
CANDIDATES_OVERVIEW = Kind("the overview of several candidates", (OVERVIEW, CANDIDATES),
                           "`quantcheck gate DIR` gates every candidate")
CERTIFICATE = Kind("a determinism certificate", (CERTIFICATE_JSON, ANSWERS_JSONL),
                   "`quantcheck gate DIR` applies a certificate's rules")
DETERMINISM = Kind("a determinism report", (DETERMINISM_JSON, DETERMINISM_CSV),
                   "its verdict is `quantcheck determinism --fail-on-nondeterminism`; "
                   "`quantcheck determinism --certify` writes a certificate the gate reads")
FORCED = Kind("a folder of teacher-forced scores", (FORCED_JSON, FORCED_JSONL),
              "give it to `quantcheck compare A_RUN B_RUN --forced DIR --out REPORT_DIR` "
              "and gate REPORT_DIR")
KINDS = (RUN, REPORT, CANDIDATES_OVERVIEW, CERTIFICATE, DETERMINISM, FORCED)


class FolderInUse(QuantcheckError):
    """An output folder that already holds another kind of output: writing there would
    leave two in one folder, and a reader could take either."""


class MixedFolder(RunFormatError):
    """A folder that holds two kinds of output: no reader picks one of them."""


def held(folder: Path) -> dict[Kind, list[str]]:
    """The kinds FOLDER holds, each with the files of it found there (a symbolic link
    counts, wherever it points)."""
    found: dict[Kind, list[str]] = {}
    for kind in KINDS:
        present = [name for name in kind.files if os.path.lexists(folder / name)]
        if present:
            found[kind] = present
    return found


def _said(found: dict[Kind, list[str]]) -> str:
    return " and ".join(f"{kind.name} ({', '.join(files)})" for kind, files in found.items())


def claim(folder: Path, kind: Kind) -> None:
    """Refuse to write `kind` into FOLDER when it holds another kind (FolderInUse, exit
    2, before anything is written or sent); a folder of the same kind, an empty one or
    one that does not exist yet is taken."""
    others = {k: files for k, files in held(folder).items() if k != kind}
    if others:
        raise FolderInUse(
            f"{folder} already holds {_said(others)}: {kind.name} written there would make "
            "one folder of two outputs, and `quantcheck gate` could check the other one. "
            "Give --out a folder of its own (a new one)")


def kind_of(folder: Path, readable: Sequence[Kind], reader: str) -> Kind | None:
    """The one kind FOLDER holds, when `reader` reads it; None when it holds none
    (the reader then says which file is missing). Two kinds are a MixedFolder, and a
    kind the reader does not read a RunFormatError saying what to do instead."""
    found = held(folder)
    if len(found) > 1:
        raise MixedFolder(
            f"{folder} holds {_said(found)}: two outputs in one folder, so {reader} cannot "
            "tell which one to check. Write each to a folder of its own (run the command "
            "that made the one to check again with a new --out) and give that folder")
    if not found:
        return None
    kind, files = next(iter(found.items()))
    if kind not in readable:
        raise RunFormatError(f"{folder} is {kind.name} ({', '.join(files)}), which {reader} "
                             f"does not read: {kind.instead}")
    return kind


def require_kind(folder: Path, kind: Kind, reader: str = "quantcheck") -> None:
    """Refuse FOLDER, about to be read as `kind`, when it holds any other kind."""
    kind_of(folder, [kind], reader)
