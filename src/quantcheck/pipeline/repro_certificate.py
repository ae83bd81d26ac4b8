"""`quantcheck repro CERT_DIR PROMPT_ID`: the two probes of one prompt of a determinism
certificate that differed (its baseline and the first answer held to it that did not
match it, factor by factor in the certificate's order), as requests to replay.

Each request is read from requests.jsonl as it was sent: its exact body, the requests
of its round sent at once with it (a batch's fillers, a co-batched sibling), the action
before its round (`POST /reset_prefix_cache`), and, for a cache factor
(store/records/certificate_records.py CACHE_FACTORS), the requests sent one after another since
the round that started its episode cold (the cold request before a warm one, the
sibling that wrote the prefix it read, the prompts before it in its order). Nothing in
the folder holds a credential: the bodies were written with any cut out, and are cut
again with the environment's secrets; endpoints are public URLs."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import orjson

from ..fetch.clients import posted_url
from ..present.repro import readme, replay_script
from ..store.files import make_directory, write_atomic
from ..store.records.certificate_records import (
    ANSWERS_JSONL,
    CACHE_FACTORS,
    FACTORS,
    REQUESTS_JSONL,
    Answer,
    SentRequest,
    read_certificate,
    read_lines_of,
)
from ..store.records.repro_records import (
    REPRO_JSON,
    Repro,
    ReproDivergence,
    ReproRequest,
    ReproUnavailable,
)
from ..store.redaction import environment_secrets, redact
from ..triage.certificate import baseline_key, compare_answers
from ..triage.certificate_difference import difference

# what may be sent before a round: a request to a path of the server (a flush)
ACTION = re.compile(r"(POST|GET) /[A-Za-z0-9_./-]{1,200}")


@dataclass(frozen=True)
class Probe:
    """One answer of the prompt and the request it was given for."""

    name: str
    answer: Answer
    sent: SentRequest


def write_certificate_repro(source: Path, prompt_id: str, out: Path) -> Repro:
    """The repro folder of the prompt's first differing comparison; its repro.json."""
    certificate = read_certificate(source)
    answers = [a for a in read_lines_of(source / ANSWERS_JSONL, Answer)
               if a.prompt_id == prompt_id and a.error is None]
    if not answers:
        raise ReproUnavailable(f"{source / ANSWERS_JSONL} holds no answer of {prompt_id!r}")
    baseline, other = differing_pair(answers, source, prompt_id)
    sent = read_lines_of(source / REQUESTS_JSONL, SentRequest)
    probes = [Probe("baseline", baseline, request_of(baseline, sent, source)),
              Probe(name_of(other), other, request_of(other, sent, source))]
    secrets = environment_secrets(os.environ)
    files: dict[str, bytes] = {}
    requests = [_request(probe, sent, certificate.endpoint, certificate.model,
                         certificate.runtime, files, secrets) for probe in probes]
    repro = Repro(source=str(source), prompt_id=prompt_id, requests=requests,
                  divergence=divergence(baseline, other))
    make_directory(out)
    for name, data in files.items():
        write_atomic(out / name, data)
    for probe, request in zip(probes, requests, strict=True):
        write_atomic(out / request.answer, probe.answer.text.encode("utf-8", "surrogatepass"))
    write_atomic(out / REPRO_JSON, msgspec.json.format(msgspec.json.encode(repro), indent=2)
                 + b"\n")
    write_atomic(out / "replay.sh", replay_script(repro).encode("utf-8"))
    (out / "replay.sh").chmod(0o755)
    labels = {probe.name: label_of(probe.answer) for probe in probes}
    write_atomic(out / "README.md", readme(repro, labels).encode("utf-8"))
    return repro


def differing_pair(answers: Sequence[Answer], source: Path, prompt_id: str
                   ) -> tuple[Answer, Answer]:
    """The prompt's baseline and the first answer held to it that differs from it."""
    baselines = {baseline_key(a): a for a in answers if a.baseline}
    compared = 0
    for factor in FACTORS:
        for answer in (a for a in answers if a.factor == factor and not a.baseline):
            base = baselines.get(baseline_key(answer))
            if base is None:
                continue
            compared += 1
            if not compare_answers(base, answer)[0]:
                return base, answer
    raise ReproUnavailable(f"no answer of {prompt_id!r} in {source} differs from its "
                           f"baseline ({compared} compared): there is nothing to reproduce")


def request_of(answer: Answer, sent: Sequence[SentRequest], source: Path) -> SentRequest:
    """The request an answer names; one that names none, or another prompt's, is refused
    naming the files."""
    index = answer.request
    found = sent[index] if index is not None and index < len(sent) else None
    if found is None or found.index != index or (found.prompt_id, found.factor, found.level,
                                                 found.role) != (answer.prompt_id,
                                                                 answer.factor, answer.level,
                                                                 "target"):
        raise ReproUnavailable(
            f"{source / ANSWERS_JSONL}: the answer of {answer.prompt_id!r} at {answer.factor} "
            f"{answer.level} names request {index}, which {source / REQUESTS_JSONL} does not "
            "hold as its request (written by another run, or before requests were "
            "recorded? run `quantcheck determinism --certify` again)")
    if found.action and not ACTION.fullmatch(found.action):
        raise ReproUnavailable(f"{source / REQUESTS_JSONL}:{index + 1}: action "
                               f"{found.action[:60]!r} is not a request to the server")
    return found


def before_it(request: SentRequest, sent: Sequence[SentRequest]) -> list[SentRequest]:
    """A cache factor's requests sent one after another since the round that started
    its episode cold (its own round: none); none for the other factors."""
    if request.factor not in CACHE_FACTORS or request.starts_cold:
        return []
    earlier = [r for r in sent if r.round < request.round]
    start = next((n for n in range(len(earlier) - 1, -1, -1) if earlier[n].starts_cold), None)
    return earlier[start:] if start is not None else []


def _request(probe: Probe, sent: Sequence[SentRequest], endpoint: str, model: str,
             runtime: str | None, files: dict[str, bytes], secrets: list[str]
             ) -> ReproRequest:
    """A probe's ReproRequest; its body files added to `files`."""
    name, request = probe.name, probe.sent
    preceded = before_it(request, sent)
    started = preceded[0] if preceded else request
    together = [r for r in sent if r.round == request.round and r.index != request.index]
    redacted = False  # cut when it was recorded, or now
    for file, sent_request in [(f"{name}.request.json", request),
                               *((f"{name}.before.{n}.json", r) for n, r in
                                 enumerate(preceded, 1)),
                               *((f"{name}.with.{n}.json", r) for n, r in
                                 enumerate(together, 1))]:
        written = orjson.dumps(sent_request.body).decode("utf-8")
        shown = redact(written, secrets)
        redacted |= shown != written or sent_request.redacted
        files[file] = shown.encode("utf-8")
    return ReproRequest(
        name=name, url=redact(posted_url(endpoint, request.api)),
        body=f"{name}.request.json", answer=f"{name}.answer.txt", stream=request.stream,
        together=[f"{name}.with.{n}.json" for n in range(1, len(together) + 1)],
        before=started.action, preceded=[f"{name}.before.{n}.json"
                                         for n in range(1, len(preceded) + 1)],
        model=redact(model), runtime=runtime, redacted=redacted)


def name_of(answer: Answer) -> str:
    """The differing probe's name, its factor and level in a file name's letters
    ("batch-8", "cache-prefix-511", "warm")."""
    level = answer.level if answer.level.startswith(answer.factor) or answer.factor == \
        answer.level else f"{answer.factor}-{answer.level}"
    return re.sub(r"[^A-Za-z0-9]+", "-", level).strip("-")[:60] or "other"


def label_of(answer: Answer) -> str:
    return f"{answer.factor} at {answer.level}, trial {answer.trial}"


def divergence(baseline: Answer, other: Answer) -> ReproDivergence:
    """Where the baseline and the other answer part: what differed first (a token, a
    logprob, the text), and the first character of the text that differs."""
    said = difference(baseline, other)
    char = None if baseline.text == other.text else len(os.path.commonprefix(
        [baseline.text, other.text]))
    token = said.position if said.baseline_token is not None \
        and said.baseline_token != said.other_token else None
    return ReproDivergence(token=token, a_token=said.baseline_token, b_token=said.other_token,
                           char=char, sentence=f"the baseline and the other answer differ "
                           f"first at {said.said}" + (f" (text from character {char})"
                                                      if char is not None else ""))
