"""Property-based tests of everything in triage/ that reads a string an engine or a user
wrote (answers, tool calls, patterns, the judge's replies, requests, server logs, review
labels, --cell values): any text in, a value of the documented kind out, never an
exception. And what compare makes of any two answers reads back from pairs.csv.

Seeded and small enough for CI (a few seconds each); `QUANTCHECK_FUZZ_EXAMPLES=5000`
runs longer (docs/collecting.md)."""

from __future__ import annotations

import json
import math
import os
import re
import time
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st

from quantcheck.errors import QuantcheckError
from quantcheck.store.folders.report_dir import pair_rows, pairs_csv, read_pair_rows
from quantcheck.store.folders.reviews import Review, ReviewVerdict
from quantcheck.store.records.ladder_records import LadderProbe
from quantcheck.store.records.pair_records import ENUMERATED, PairRow
from quantcheck.store.records.preflight_records import Fingerprint
from quantcheck.store.records.run_records import (
    CodeExpect,
    Completion,
    Expect,
    Prompt,
    ToolCall,
    ToolCallExpect,
    first_number,
    numbers_in,
)
from quantcheck.triage.agreement import agreement, review_verdicts
from quantcheck.triage.approvals import Approval, load_approvals
from quantcheck.triage.cells import (
    ftype_quantization,
    gguf_model_name,
    parse_cell_options,
)
from quantcheck.triage.expects import (
    check_answer,
    choice_of,
    code_of,
    parse_calls,
    parse_json,
    regex_failure,
    schema_failure,
    tool_call_failure,
    unfenced,
)
from quantcheck.triage.judging import (
    CLASSES,
    NO_VERDICT,
    UNCLEAR,
    clean,
    combine,
    judge_questions,
    question_text,
    read_reply,
)
from quantcheck.triage.ladder import needle_positions, probe_result
from quantcheck.triage.ladder_plan import ABSENT_PATTERN
from quantcheck.triage.log_signatures import load_signatures, scan_log
from quantcheck.triage.pairs import compare
from quantcheck.triage.searches import PATTERN_SECONDS, SearchSkipped, begin
from quantcheck.triage.sides import calls_json
from quantcheck.triage.signals import (
    TOOL_CALL_CHANGES,
    degenerate_reason,
    is_repetition_loop,
    numbers_changed,
    similarity,
    tool_call_change,
    with_calls,
)
from quantcheck.triage.templates import (
    known_fallback,
    last_user_message,
    markers_in,
    rendering_key,
    template_signs,
)
from quantcheck.triage.tokenizers import tokenizer_agreement

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
EXAMPLES = int(os.environ.get("QUANTCHECK_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
FEW = settings(FUZZ, max_examples=max(EXAMPLES // 5, 10))

# Pieces that once broke a reader, or sit on a rule's edge, mixed into any text.
PIECES = ["123e4567-e89b-12d3", "-e5", "+e3", "1e999", "-1e-999", "1,200", "3,4", ",", "-",
          "+", ".", "e", "E", "9" * 400, "```", "```json\n", "\n", "answer is", "(B)", "**C**",
          "<|im_start|>", "<|eot_id|>", "<<<", ">>>", "{", "}", '"class"', "NaN", "\ud83d",
          "\0", "\u202e", "é", "𝟘", "٣", " ", "\t"]
ANY_TEXT = st.text(st.characters(codec="utf-8") | st.sampled_from(["\ud83d", "\0"]),
                   max_size=60)
PIECED = st.lists(st.sampled_from(PIECES) | ANY_TEXT, max_size=12).map("".join)
NUMBERY = st.text(alphabet="0123456789+-eE.,x /", max_size=60)
TEXTS = ANY_TEXT | PIECED | NUMBERY
LOOPS = st.builds(lambda words, n, tail: " ".join(words * n) + tail,
                  st.lists(st.sampled_from(["na", "mi", "<em>", "yes", "1", "Yes"]), min_size=1,
                           max_size=4), st.integers(1, 40), TEXTS)
ANSWERS = TEXTS | LOOPS

SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | TEXTS)
ANY_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                        max_leaves=10)
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant"])
                                 | TEXTS}, optional={"content": ANY_JSON})
REQUESTS = st.fixed_dictionaries({}, optional={
    "messages": st.lists(MESSAGE | ANY_JSON, max_size=3) | ANY_JSON,
    "prompt": ANY_JSON, "max_tokens": ANY_JSON})


def storable(text: str) -> str:
    """What a run can hold: its files are JSON, which has no lone surrogate."""
    return text.encode("utf-8", "replace").decode("utf-8")


# tool calls as a run stores them (sides.calls_json makes pairs.csv's cell of them)
CALLS = st.lists(st.fixed_dictionaries({
    "name": st.sampled_from(["f", "get_weather"]) | TEXTS.map(storable) | st.none(),
    "arguments": st.sampled_from(['{"a": 1}', '{"a": 1.0}', "{}", "[", '{"a": 1e999}',
                                  '{"a": ' * 3000]) | TEXTS.map(storable)
    | st.builds(json.dumps, ANY_JSON)}), max_size=3)


ABSENT_PROBE = LadderProbe(id="absent", kind="absent")
NEEDLE_PROBE = LadderProbe(id="needle-d0", kind="needle", depth=0.0, code="48213")


# --- numbers ------------------------------------------------------------------------

@FUZZ
@seed(31)
@given(TEXTS)
def test_any_text_holds_a_list_of_finite_numbers(text: str) -> None:
    numbers = numbers_in(text)
    assert all(isinstance(n, float) and math.isfinite(n) for n in numbers)
    assert first_number(text) == (numbers[0] if numbers else None)


@FUZZ
@seed(32)
@given(st.floats(allow_nan=False, allow_infinity=False), TEXTS.map(
    lambda t: re.sub(r"[\d.,+-]", "", t)))
def test_a_number_written_out_is_read_back(number: float, words: str) -> None:
    assert numbers_in(f"{words} {number!r} {words}") == [number]
    whole = int(abs(number)) % 10**15
    assert numbers_in(f"{words} {whole:,} {words}") == [float(whole)]


# --- the context ladder -----------------------------------------------------------------

@FUZZ
@seed(39)
@given(ANSWERS, ANSWERS, st.lists(st.text(max_size=6), max_size=20))
def test_a_ladder_probe_reads_any_answers_in_bounded_time(a: str, b: str,
                                                         pieces: list[str]) -> None:
    """Either verdict, or none, for any answer (the absent needle's pattern on any text
    ends in time), and any token pieces give the needle's span or none."""
    for probe, expect in ((ABSENT_PROBE, Expect(regex=ABSENT_PATTERN)),
                          (NEEDLE_PROBE, Expect(contains=["48213"]))):
        started = time.monotonic()
        result = probe_result(probe, "r", expect, [Completion("p", "h", 0, text=a)],
                              [Completion("p", "h", 0, text=b)], None, None)
        assert time.monotonic() - started < 5
        assert result.a_passed in (True, False) and result.b_passed in (True, False)
        assert result.departs == (result.a_passed != result.b_passed)
    span = needle_positions(pieces, "48")
    assert all(0 <= n < len(pieces) for n in span)


# --- triage ---------------------------------------------------------------------------

@FUZZ
@seed(33)
@given(ANSWERS, ANSWERS, st.sampled_from([None, "stop", "length", "tool_calls"]) | TEXTS,
       st.sampled_from([None, "stop", "length"]) | TEXTS, st.booleans())
def test_triage_reads_any_two_answers(a: str, b: str, finish: str | None,
                                      other: str | None, capped: bool) -> None:
    assert 0.0 <= similarity(a, b) <= 1.0
    assert numbers_changed(a, b) == (numbers_in(a) != numbers_in(b))
    assert degenerate_reason(a, finish, other) in ("", "empty", "repetition", "length")
    assert degenerate_reason(None, finish, other) == ""
    assert isinstance(is_repetition_loop(a, capped), bool)


@FUZZ
@seed(34)
@given(CALLS, CALLS, TEXTS)
def test_tool_calls_as_stored_compare_and_read_back(a: list[dict[str, Any]],
                                                    b: list[dict[str, Any]], text: str) -> None:
    a_json, b_json = calls_json(a), calls_json(b)
    assert tool_call_change(a_json, b_json) in ("", *TOOL_CALL_CHANGES)
    assert with_calls(text, a_json).startswith(text)
    assert all(isinstance(call, ToolCall) for call in parse_calls(a_json))


# --- expects --------------------------------------------------------------------------

SCHEMAS = st.sampled_from([
    {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}},
    {"type": "string", "format": "email"}, {"type": "string", "pattern": "^(a+)+$"},
    {"type": "object", "patternProperties": {"^(a|aa)+$": {"type": "null"}}},
    {"type": "array", "items": {"$ref": "#"}}, {"not": {}}, {}])
PATTERNS = st.sampled_from([r"\bAu\b", "^(a+)+$", "a+b", "(?i)yes", r"\d{3}-\d{4}", "^$",
                            r"[\u0660-\u0669]+", "(x+x+)+y"]) | st.text(
    alphabet="ab()|+*?[]^$\\.{}1,-", max_size=10)
CHECKED = st.builds(
    Expect,
    contains=st.lists(TEXTS, max_size=2), any_of=st.lists(TEXTS, max_size=2),
    not_contains=st.lists(TEXTS, max_size=2), regex=st.none() | PATTERNS,
    number=st.none() | st.floats(allow_nan=False, allow_infinity=False),
    tolerance=st.floats(0, 1e6), case_sensitive=st.booleans(), json=st.booleans(),
    json_schema=st.none() | SCHEMAS,
    tool_call=st.none() | st.lists(st.builds(
        ToolCallExpect, st.none() | st.sampled_from(["f", "get_weather"]),
        st.none() | SCHEMAS, st.none() | st.dictionaries(st.sampled_from(["a", "b"]),
                                                         ANY_JSON, max_size=2)),
        min_size=1, max_size=2),
    ordered=st.booleans(),
    code=st.none() | st.just(CodeExpect(entry_point="f", tests="assert f() == 1")),
    choice=st.none() | st.sampled_from(list("ABCDEFGHIJ")))


def _valid_pattern(pattern: str | None) -> bool:
    """What a prompt file may hold: a pattern Python's re compiles (prompt_entries)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "possible nested set": a FutureWarning, not an error
        try:
            re.compile(pattern or "")
        except (re.error, RecursionError, OverflowError):
            return False
    return True


@FUZZ
@seed(35)
@given(CHECKED, ANSWERS, CALLS)
def test_every_check_kind_judges_any_answer(expect: Expect, text: str,
                                            calls: list[dict[str, Any]]) -> None:
    assume(_valid_pattern(expect.regex))
    begin()
    started = time.monotonic()
    results = check_answer(expect, text, parse_calls(calls_json(calls)))
    assert time.monotonic() - started < 10 * PATTERN_SECONDS + 10  # each search is bounded
    assert all(r.status in ("pass", "fail", "skipped") and (r.status == "pass") == (not r.reason)
               for r in results)
    assert [r.status for r in results if r.check == "code"] in ([], ["skipped"])


@FUZZ
@seed(36)
@given(PATTERNS, ANSWERS, st.booleans())
def test_a_regex_check_ends_within_its_bound_on_any_answer(pattern: str, text: str,
                                                           case_sensitive: bool) -> None:
    assume(_valid_pattern(pattern))
    begin()
    started = time.monotonic()
    try:
        failure: str | None = regex_failure(pattern, text, case_sensitive)
    except SearchSkipped as skipped:  # stopped, or a pattern only re reads: said why
        assert "stopped after" in str(skipped) or "cannot be searched" in str(skipped)
        failure = None
    assert time.monotonic() - started < PATTERN_SECONDS + 4
    flags = 0 if case_sensitive else re.IGNORECASE
    if failure is not None and "(a+)+" not in pattern and "(x+x+)+" not in pattern:
        assert (failure == "") == (re.search(pattern, text, flags) is not None)


@FUZZ
@seed(37)
@given(ANSWERS | ANY_JSON.map(json.dumps), SCHEMAS, st.sampled_from(["f", "solve"]))
def test_json_code_and_choice_readers_take_any_answer(text: str, schema: dict[str, Any],
                                                      entry_point: str) -> None:
    value, problem = parse_json(unfenced(text))
    assert (value is None and problem.startswith("not JSON")) or problem == ""
    if not problem:
        begin()
        try:
            assert isinstance(schema_failure(schema, value), str)
        except SearchSkipped as skipped:  # a pattern stopped, or one no bound can hold
            assert str(skipped).startswith(("the schema's pattern", "the schema cannot"))
    assert isinstance(code_of(text, entry_point), str)
    assert choice_of(text) in (None, *"ABCDEFGHIJ")


@FUZZ
@seed(38)
@given(st.lists(st.builds(ToolCallExpect, st.none() | st.sampled_from(["f", "g"]), st.none()
                          | SCHEMAS, st.none() | st.dictionaries(st.text(max_size=3),
                                                                 ANY_JSON, max_size=2)),
                min_size=1, max_size=3), CALLS, st.booleans())
def test_any_calls_match_or_say_why_not(expected: list[ToolCallExpect],
                                        calls: list[dict[str, Any]], ordered: bool) -> None:
    assert isinstance(tool_call_failure(expected, parse_calls(calls_json(calls)), ordered), str)


# --- the judge's replies and what it is shown ------------------------------------------

REPLIES = (TEXTS | ANY_JSON.map(json.dumps)
           | st.builds(lambda c, r, fence: (f"```json\n{json.dumps({'class': c, 'reason': r})}"
                                            "\n```" if fence else
                                            json.dumps({"class": c, "reason": r})),
                       st.sampled_from([*CLASSES, "SAME ", "other"]) | ANY_JSON, ANY_JSON,
                       st.booleans()))


@FUZZ
@seed(39)
@given(REPLIES, st.none() | st.integers(0, 10**6), REPLIES)
def test_any_reply_of_the_judge_is_a_verdict_or_no_verdict_with_why(
        reply: str, chars: int | None, other: str) -> None:
    read = read_reply(reply, chars)
    assert read.judge_class in (None, *CLASSES) and read.reason
    assert "\n" not in read.reason and len(read.reason) <= 300
    both = combine(read, read_reply(other))
    assert both.judge_class in (*CLASSES, UNCLEAR, NO_VERDICT) and "\n" not in both.reason


@FUZZ
@seed(40)
@given(st.none() | REQUESTS, st.none() | ANSWERS, st.none() | st.builds(calls_json, CALLS),
       ANSWERS, st.integers(1, 400))
def test_the_judge_is_shown_any_pair_inertly(request: dict[str, Any] | None,
                                             a_text: str | None, calls: str | None,
                                             b_text: str, limit: int) -> None:
    assert isinstance(question_text(request), str)
    row = PairRow(prompt_id="p", a_text=a_text, b_text=b_text, a_tool_calls=calls)
    for judge_question in judge_questions(row, request):
        user = judge_question.messages()[1]["content"]
        assert user.count("<<<REFERENCE\n") == 1 and user.count("\nSUBMISSION>>>") == 1
        assert len(judge_question.key("judge")) == 64
    shown = clean(b_text, limit)
    assert len(shown) <= limit and not re.search(r"[\x00-\x1f\u202e]", shown)


# --- templates, tokenizers, cells, logs, agreement -------------------------------------

@FUZZ
@seed(41)
@given(st.none() | ANSWERS, ANSWERS, REQUESTS, st.none() | st.lists(st.integers(0, 2**40),
                                                                     max_size=4))
def test_template_signs_of_any_answer(question: str | None, answer: str,
                                      request: dict[str, Any], ids: list[int] | None) -> None:
    assert template_signs(question, answer) in ("", "echo", "markers", "echo,markers")
    assert last_user_message(request) is None or isinstance(last_user_message(request), str)
    assert all(marker in answer for marker in markers_in(answer))
    assert known_fallback(answer) is None or isinstance(known_fallback(answer), str)
    key = rendering_key(question, ids)
    assert key is None or len(key) == 12


FINGERPRINTS = st.builds(
    Fingerprint, method=TEXTS,
    ids=st.dictionaries(TEXTS, st.lists(st.integers(0, 2**40), max_size=3), max_size=3),
    prompt_tokens=st.dictionaries(TEXTS, st.integers(0, 2**40), max_size=3))


@FUZZ
@seed(42)
@given(st.none() | FINGERPRINTS, st.none() | FINGERPRINTS,
       st.lists(TEXTS | st.sampled_from(["gpu=H100", "vram_gb=96", "tp=nan", "x=1e999",
                                         "=1", "k"]), max_size=3), TEXTS)
def test_fingerprints_cell_values_and_model_names_of_any_text(
        a: Fingerprint | None, b: Fingerprint | None, cells: list[str], name: str) -> None:
    assert tokenizer_agreement(a, b).status in ("pass", "warn", "skip")
    try:
        cell = parse_cell_options(cells)
    except QuantcheckError as exc:
        assert "expected key=value" in str(exc)
    else:
        assert all(not isinstance(v, float) or math.isfinite(v) for v in cell.values())
        json.dumps(cell, allow_nan=False)  # a cell is stored as JSON
    assert isinstance(gguf_model_name(name), str)
    assert ftype_quantization(name) is None or isinstance(ftype_quantization(name), str)


@FEW
@seed(43)
@given(st.lists(TEXTS | st.sampled_from([
    "CUDA error: out of memory", "torch.OutOfMemoryError", "Traceback", "\r"]), max_size=8)
       | st.binary(max_size=200).map(lambda raw: [raw.decode("latin-1")]))
def test_any_server_log_scans(tmp_path_factory: pytest.TempPathFactory,
                              lines: list[str]) -> None:
    path = tmp_path_factory.mktemp("log") / "server.log"
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
    for match in scan_log(path, load_signatures()):
        assert match.count >= 1 and len(match.text) <= 300


@FUZZ
@seed(44)
@given(st.dictionaries(st.sampled_from(["p1", "p2", "p3"]), st.sampled_from(
    ["wording", "factual_flip", ""]) | TEXTS, max_size=3),
       st.dictionaries(TEXTS, st.dictionaries(st.sampled_from(["p1", "p2", "p3"]), st.builds(
           ReviewVerdict, label=st.none() | st.sampled_from(["wording", "factual_flip"])
           | TEXTS), max_size=3), max_size=3))
def test_agreement_of_any_labels(judged: dict[str, str],
                                 reviews: dict[str, dict[str, ReviewVerdict]]) -> None:
    verdicts = review_verdicts({name: Review(format="quantcheck-review/1", identity="x",
                                             reviewer=name, verdicts=given)
                                for name, given in reviews.items()})
    found = agreement(judged, verdicts, ["wording", "factual_flip"])
    if found is not None:
        assert found.agreed <= found.observations
        assert found.kappa is None or -1.0 <= found.kappa <= 1.0


# --- a whole pair: any two answers to a prompt with every check ------------------------

EVERY_CHECK = Expect(contains=["x"], any_of=["y", "1,200"], not_contains=["q"],
                     regex="^(a|aa)+$", number=3.0, tolerance=0.5, json=True,
                     json_schema={"type": "object", "properties": {
                         "a": {"type": "string", "pattern": "^(a+)+$"}}},
                     choice="B")


@FEW
@seed(45)
@given(st.lists(st.tuples(ANSWERS, ANSWERS), min_size=1, max_size=3))
def test_compare_judges_any_answers_into_a_pairs_table_that_reads_back(
        tmp_path_factory: pytest.TempPathFactory, answers: list[tuple[str, str]]) -> None:
    answers = [(storable(a), storable(b)) for a, b in answers]
    folder = tmp_path_factory.mktemp("texts")
    prompts = {f"p{n}": Prompt(id=f"p{n}", category="c", api="chat", hash=f"h{n}",
                               request={"messages": [{"role": "user", "content": a}]},
                               expect=EVERY_CHECK)
               for n, (a, _) in enumerate(answers)}
    for side, texts in (("a", [a for a, _ in answers]), ("b", [b for _, b in answers])):
        (folder / f"{side}.texts.json").write_text(json.dumps(texts), encoding="utf-8")
    frame = compare(folder / "a.texts.json", folder / "b.texts.json", prompts=prompts)
    assert list(frame["prompt_id"]) == list(prompts)
    (folder / "pairs.csv").write_bytes(pairs_csv(pair_rows(frame)))
    rows = read_pair_rows(folder)  # every enumerated column holds one of its values
    assert [row.prompt_id for row in rows] == list(prompts)
    for row in rows:
        for column, allowed in ENUMERATED.items():
            assert (getattr(row, column) or "") in allowed


# --- the user's files triage/ reads: signatures, approvals --------------------------------

SIGNATURE_FILES = st.builds(
    lambda entries: json.dumps({"signatures": entries}),
    st.lists(st.dictionaries(st.sampled_from(["id", "pattern", "regex", "meaning", "action",
                                              "blocking", "other"]),
                             ANY_JSON | PATTERNS, max_size=6), max_size=3)) | TEXTS


@FEW
@seed(46)
@given(SIGNATURE_FILES.map(storable), st.lists(ANSWERS.map(storable), max_size=3))
def test_any_signature_file_loads_and_scans_or_names_the_file(
        tmp_path_factory: pytest.TempPathFactory, text: str, lines: list[str]) -> None:
    folder = tmp_path_factory.mktemp("signatures")
    (folder / "mine.yaml").write_text(text, encoding="utf-8")
    (folder / "server.log").write_text("\n".join(lines), encoding="utf-8")
    try:
        signatures = load_signatures([folder / "mine.yaml"])
        scan_log(folder / "server.log", signatures)
    except QuantcheckError as exc:
        assert "mine.yaml" in str(exc) or "signature" in str(exc)


@FEW
@seed(47)
@given(ANY_JSON | st.fixed_dictionaries({
    "format": st.sampled_from(["quantcheck-approvals/1"]) | TEXTS,
    "approvals": st.dictionaries(TEXTS, ANY_JSON | st.fixed_dictionaries(
        {"prompt_id": TEXTS, "label": TEXTS, "approved_at": TEXTS}), max_size=2)}))
def test_any_approvals_file_loads_or_names_the_file(tmp_path_factory: pytest.TempPathFactory,
                                                    data: Any) -> None:
    path = tmp_path_factory.mktemp("approvals") / "approvals.json"
    try:
        path.write_text(json.dumps(data), encoding="utf-8")
    except UnicodeEncodeError:
        return  # a lone surrogate: no file holds one
    try:
        approvals = load_approvals(path)
    except QuantcheckError as exc:
        assert str(path) in str(exc)
    else:
        assert all(isinstance(a, Approval) for a in approvals.values())
