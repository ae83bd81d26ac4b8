"""`quantcheck repro REPORT PROMPT_ID --out DIR`: one prompt's requests, rebuilt exactly
as collect sent them (fetch.collect.collect_body, from each run's manifest and
prompts.jsonl), written with the answers they were given, where those part, the
serving cells, replay.sh and a README (present/repro.py). A determinism certificate's
folder is read by pipeline/repro_certificate.py (its requests as recorded). Nothing in
the folder holds a credential: endpoints are public URLs, and a body that carries a
credential-shaped value is written with it cut out (and said so)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import msgspec
import orjson

from ..fetch.clients import posted_body, posted_url
from ..fetch.collect import collect_body
from ..present.repro import readme, replay_script
from ..store.files import make_directory, write_atomic
from ..store.folders.report_dir import read_summary
from ..store.folders.run_dir import MANIFEST, Run, load_run
from ..store.records.certificate_records import CERTIFICATE_JSON
from ..store.records.repro_records import (
    REPRO_JSON,
    Repro,
    ReproDivergence,
    ReproRequest,
    ReproUnavailable,
)
from ..store.records.run_records import Completion, Tokens
from ..store.redaction import environment_secrets, redact
from ..triage.signals import first_divergence, token_keys
from .repro_certificate import write_certificate_repro


@dataclass
class Sent:
    """One side's request as collect sent it, and the answer it was given."""

    request: ReproRequest
    body: bytes
    answer: Completion
    label: str


def write_repro(source: Path, prompt_id: str, out: Path) -> Repro:
    """The repro folder of one prompt of a report; its repro.json record."""
    if (source / CERTIFICATE_JSON).is_file():
        return write_certificate_repro(source, prompt_id, out)
    summary = read_summary(source)
    sent = [_sent(name, _run(source, name, summary.sources.get(name)), prompt_id)
            for name in ("a", "b")]
    repro = Repro(source=str(source), prompt_id=prompt_id,
                  requests=[side.request for side in sent],
                  divergence=divergence(sent[0].answer, sent[1].answer))
    make_directory(out)
    for side in sent:
        write_atomic(out / side.request.body, side.body)
        write_atomic(out / side.request.answer, (side.answer.text or "").encode(
            "utf-8", "surrogatepass"))
    write_atomic(out / REPRO_JSON, msgspec.json.format(msgspec.json.encode(repro), indent=2)
                 + b"\n")
    write_atomic(out / "replay.sh", replay_script(repro).encode("utf-8"))
    (out / "replay.sh").chmod(0o755)
    labels = {side.request.name: side.label for side in sent}
    write_atomic(out / "README.md", readme(repro, labels).encode("utf-8"))
    return repro


def _run(source: Path, name: str, recorded: str | None) -> Run:
    """A side's run: where summary.json's `sources` says, as given to compare (from the
    folder it ran in) or inside the report's folder (`run` keeps them in OUT/a, OUT/b)."""
    side = name.upper()
    if recorded is None:
        raise ReproUnavailable(f"{source}/summary.json names no run of {side} (sources)")
    for candidate in (Path(recorded), source / recorded, source / name):
        if (candidate / MANIFEST).is_file():
            return load_run(candidate)
    raise ReproUnavailable(
        f"{side}'s run {recorded} (summary.json sources) is not there, nor {source / name}: "
        "a repro rebuilds the requests from the runs; run it where the report was made, or "
        f"copy the run into {source / name}" + (
            " (a texts file records no request)" if recorded.endswith(".json") else ""))


def _sent(name: str, run: Run, prompt_id: str) -> Sent:
    """A side's request of the prompt, rebuilt by collect's own body builder."""
    side = name.upper()
    imported = run.manifest.evaluation
    if imported is not None:
        raise ReproUnavailable(
            f"{run.path} ({side}) was imported from a log of {imported.harness}: quantcheck "
            "sent none of its requests, so there is none to rebuild; the harness's log "
            f"({imported.path}) holds what it sent")
    prompt = run.prompts.get(prompt_id)
    if prompt is None:
        raise ReproUnavailable(f"{run.path} ({side}) holds no prompt {prompt_id!r}")
    answer = next((r for r in run.completions() if r.prompt_id == prompt_id and r.repeat == 0
                   and r.error is None), None)
    if answer is None:
        raise ReproUnavailable(f"{run.path} ({side}) holds no answer to repeat 0 of "
                               f"{prompt_id!r}")
    manifest = run.manifest
    parameters = manifest.parameters
    if manifest.cache is None:  # made before the cache was recorded: never turned off
        parameters = msgspec.structs.replace(parameters, cache_off=False)
    body = collect_body(prompt, manifest.model, parameters, manifest.server.runtime)
    written = orjson.dumps(posted_body(body, parameters.stream))
    shown = redact(written.decode("utf-8"), environment_secrets(os.environ))
    request = ReproRequest(
        name=name, url=redact(posted_url(manifest.endpoint, prompt.api)),
        body=f"{name}.request.json", answer=f"{name}.answer.txt", stream=parameters.stream,
        model=manifest.model, runtime=manifest.server.runtime,
        cell={key: redact(value) if isinstance(value, str) else value
              for key, value in manifest.cell.items()},
        redacted=shown != written.decode("utf-8"))
    return Sent(request, shown.encode("utf-8"), answer, manifest.label or name)


def divergence(a: Completion, b: Completion) -> ReproDivergence:
    """Where two recorded answers part, by token (when both carry tokens) and by
    character."""
    a_text, b_text = a.text or "", b.text or ""
    char = None if a_text == b_text else len(os.path.commonprefix([a_text, b_text]))
    token = a_token = b_token = None
    if a.tokens is not None and b.tokens is not None:
        token = first_divergence(token_keys(a.tokens), token_keys(b.tokens))
        a_token, b_token = _token(a.tokens, token), _token(b.tokens, token)
    if char is None:
        sentence = "the two answers are the same text" + (
            f" (their tokens part at generated token {token}: A {a_token!r}, B {b_token!r})"
            if token is not None else "")
    elif token is not None:
        sentence = (f"the answers part at generated token {token} (A {a_token!r}, B "
                    f"{b_token!r})" + (f", character {char}" if char is not None else ""))
    else:
        sentence = f"the answers part at character {char}"
    return ReproDivergence(token=token, a_token=a_token, b_token=b_token, char=char,
                           sentence=sentence)


def _token(tokens: Tokens, index: int | None) -> str | None:
    return tokens.text[index] if index is not None and index < len(tokens) else None
