"""What a repro folder says to the engineer who runs it: replay.sh (bash, curl and
python3: each request sent as quantcheck sent it, each answer compared byte for byte
with the one recorded) and a README of five lines. Nothing here sends or reads a
request; pipeline/repro.py writes the files."""

from __future__ import annotations

import re
import shlex

from ..store.folders.run_dir import Cell
from ..store.records.repro_records import Repro, ReproRequest

# The text of an answer, whole or streamed, as quantcheck records it: the content of
# the first choice (a chat message's, or a completion's text), its pieces joined.
TEXT_OF = r'''
import json, sys
raw = open(sys.argv[1], "rb").read()
def piece(choice):
    for key in ("delta", "message"):
        if isinstance(choice.get(key), dict):
            return choice[key].get("content") or ""
    return choice.get("text") or ""
def first(answer):
    if not isinstance(answer, dict) or "choices" not in answer:
        sys.exit("not an answer: " + raw[:300].decode("utf-8", "replace"))
    return "".join(piece(c) for c in answer["choices"][:1] if c.get("index", 0) == 0)
try:
    if raw.lstrip().startswith(b"data:"):
        lines = [line.strip()[5:].strip() for line in raw.splitlines()
                 if line.strip().startswith(b"data:")]
        text = "".join(first(json.loads(data)) for data in lines if data != b"[DONE]")
    else:
        text = first(json.loads(raw))
except (ValueError, AttributeError, TypeError) as exc:
    sys.exit(f"{sys.argv[1]}: not an answer ({exc}): " + raw[:300].decode("utf-8", "replace"))
open(sys.argv[2], "wb").write(text.encode("utf-8", "surrogatepass"))
'''


def url_variable(name: str) -> str:
    """The environment variable that overrides a request's endpoint: A_URL, BATCH_8_URL."""
    return re.sub(r"[^A-Z0-9]+", "_", name.upper()).strip("_") + "_URL"


def replay_script(repro: Repro) -> str:
    """replay.sh: send each request (with the others of its moment, after its `before`),
    keep the answers in replayed/, compare each with the one recorded, then the first
    two replayed answers with each other. Exit 1 when a replayed answer differs."""
    lines = [
        "#!/usr/bin/env bash",
        f"# Replays the requests quantcheck sent for prompt {_comment(repro.prompt_id)} and",
        "# compares each answer with the recorded one, byte for byte. Needs bash, curl and",
        "# python3. Endpoints: " + ", ".join(url_variable(r.name) for r in repro.requests)
        + " override the recorded ones;",
        "# API_KEY, when set, is sent as a bearer token (no key is stored here).",
        "set -u",
        'cd "$(dirname "$0")"',
        "mkdir -p replayed",
        "auth=()",
        'if [ -n "${API_KEY:-}" ]; then auth=(-H "Authorization: Bearer $API_KEY"); fi',
        "send() {  # NAME URL BODY: the answer to replayed/NAME.response",
        '  curl -sS -X POST "$2" -H "Content-Type: application/json" '
        '"${auth[@]+"${auth[@]}"}" \\',
        '    --data-binary "@$3" -o "replayed/$1.response"',
        "}",
        "text_of() {  # RESPONSE TEXT: the answer's text, its exact bytes",
        "  python3 -c " + shlex.quote(TEXT_OF.strip()) + ' "$1" "$2"',
        "}",
        "status=0",
        "compare() {  # NAME RECORDED",
        '  if cmp -s "$2" "replayed/$1.answer.txt"; then',
        '    echo "$1: the same answer as recorded ($2)"',
        "  else",
        '    echo "$1: another answer than recorded: $(cmp "$2" "replayed/$1.answer.txt" 2>&1 '
        '| head -n 1)"',
        "    status=1",
        "  fi",
        "}",
    ]
    for request in repro.requests:
        lines += _replayed(request)
    if len(repro.requests) >= 2:
        lines += _compared_with_each_other(repro)
    return "\n".join(lines + ['exit "$status"']) + "\n"


def _compared_with_each_other(repro: Repro) -> list[str]:
    """The first two replayed texts compared. Where the recorded texts were equal (a
    certificate's answers that parted in a logprob), equal texts now are what was
    recorded: said so, with where the logprobs are, never "the same answer now"."""
    first, second = (shlex.quote(f"replayed/{r.name}.answer.txt") for r in repro.requests[:2])
    both = _double_quoted(f"{repro.requests[0].name} and {repro.requests[1].name}")
    differ = f"$(cmp {first} {second} 2>&1 | head -n 1)"
    if repro.divergence.char is None:
        responses = " and ".join(_double_quoted(f"replayed/{r.name}.response")
                                 for r in repro.requests[:2])
        same = (f"the same text, as recorded (the recorded texts were equal; each answer's "
                f"logprobs are in {responses})")
        other = f"their texts differ now; the recorded texts were equal: {differ}"
    else:
        same, other = "the same answer now", f"still differ: {differ}"
    return [f"if [ ! -f {first} ] || [ ! -f {second} ]; then", "  :",
            f"elif cmp -s {first} {second}; then", f'  echo "{both}: {same}"',
            "else", f'  echo "{both}: {other}"', "fi"]


def _replayed(request: ReproRequest) -> list[str]:
    """One request's lines: its `before`, the requests that preceded it one after
    another, then it and its `together` at once."""
    name, variable = request.name, url_variable(request.name)
    lines = [f"# {name}: {_comment(request.url)}",
             f'{variable}="${{{variable}:-{_double_quoted(request.url)}}}"']
    if request.before:
        method, path = request.before.split(" ", 1)
        lines.append(f'curl -sS -X {shlex.quote(method)} '
                     f'"${{{variable}%%/v1/*}}{_double_quoted(path)}" '
                     '"${auth[@]+"${auth[@]}"}" -o /dev/null')
    lines += [f'send {shlex.quote(f"{name}.before.{n}")} "${variable}" {shlex.quote(body)}'
              for n, body in enumerate(request.preceded, 1)]
    quoted, said = shlex.quote(name), _double_quoted(name)
    sent = f'send {quoted} "${variable}" {shlex.quote(request.body)}'
    if request.together:  # all at once; its own answer waited for first
        lines += [f'send {shlex.quote(f"{name}.with.{n}")} "${variable}" {shlex.quote(body)} &'
                  for n, body in enumerate(request.together, 1)]
        lines += [f"{sent} &", 'main=$!', 'wait "$main"; sent=$?', "wait"]
    else:
        lines += [sent, "sent=$?"]
    response, text = (shlex.quote(f"replayed/{name}.{kind}") for kind in ("response",
                                                                         "answer.txt"))
    lines += [
        'if [ "$sent" -ne 0 ]; then',
        f'  echo "{said}: the request failed (curl exit $sent)"; status=1',
        f"elif ! text_of {response} {text}; then",
        f'  echo "{said}: the response holds no answer ({_double_quoted(response)})"; status=1',
        "else",
        f"  compare {quoted} {shlex.quote(request.answer)}",
        "fi",
    ]
    return lines


def readme(repro: Repro, labels: dict[str, str]) -> str:
    """Five lines: what this is, how to run it, what was recorded, the serving cells,
    and when a replay can match byte for byte."""
    requests = repro.requests
    named = " against ".join(f"{labels.get(r.name, r.name)} ({r.name.upper()})"
                             for r in requests)
    cells = "; ".join(f"{r.name.upper()}: {_cell(r.cell) or 'none recorded'}" for r in requests)
    bodies = ", ".join(r.body for r in requests)
    redacted = (" A credential-shaped value was cut out of "
                + ", ".join(r.body for r in requests if r.redacted) + ": that replay is not exact."
                if any(r.redacted for r in requests) else "")
    return "\n".join([
        f"# quantcheck repro: prompt {repro.prompt_id}, {named}",
        f"Run `bash replay.sh`: it sends {bodies} with curl as quantcheck sent them "
        f"({', '.join(url_variable(r.name) for r in requests)} override the endpoints; "
        "API_KEY is sent as a bearer token and never stored here) and compares each answer "
        "byte for byte with the recorded one (*.answer.txt)." + redacted,
        f"Recorded: {repro.divergence.sentence}.",
        f"Serving cells: {cells}; repro.json holds every field.",
        "A replay matches only where the server is deterministic (llama-server: --parallel "
        "1 with cache_prompt false; vLLM: VLLM_BATCH_INVARIANT=1; SGLang: "
        "--enable-deterministic-inference).",
    ]) + "\n"


def _cell(cell: Cell) -> str:
    return ", ".join(f"{key}={value}" for key, value in cell.items() if value not in (None, ""))


def _comment(text: str) -> str:
    """Text safe on one comment line."""
    return re.sub(r"[\x00-\x1f\x7f]", " ", text)


def _double_quoted(text: str) -> str:
    """Text inside bash double quotes, taken literally."""
    return re.sub(r'([\\"$`])', r"\\\1", _comment(text))
