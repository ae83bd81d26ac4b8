"""store/inputs/prompt_entries.py (and the expect_entries.py it reads an expect with): an
expect.regex is checked by the engine that searches it (the `regex` module) and by
Python's `re`: a pattern either refuses is one error naming the file, line, prompt and
field; one both read loads without a warning. A file's `defaults` apply every key
quantcheck reads to every prompt (an expect checks every answer), and such a key never
becomes a request field: where only request fields go (`extra`, --extra-body) it is
refused naming where and the fix."""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.errors import PromptFileError
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.store.inputs.prompt_entries import OWN_FIELDS, RequestOptions
from quantcheck.store.inputs.prompt_sets import load_prompts
from quantcheck.store.records.run_records import Expect
from quantcheck.triage.expects import regex_failure

from .conftest import Serve, WritePrompts, invoke


def prompt_set(folder: Path, pattern: str) -> Path:
    path = folder / "prompts.yaml"
    path.write_text("prompts:\n  - id: p\n    prompt: 'Q'\n"
                    f"    expect: {{regex: {json.dumps(pattern)}}}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(("pattern", "said"), [
    ("[[", "unterminated character set"),  # re warns and reads it; regex refuses it
    ("[a--b]", "bad character range"),
    (r"\p{L}+", "re syntax"),  # regex reads it, re refuses it
    ("(?<=a+)b", "re syntax"),
    ("a(?i)b", "re syntax"),
    ("(", "missing )"),
])
def test_a_pattern_either_engine_refuses_names_file_line_and_field(
        tmp_path: Path, pattern: str, said: str) -> None:
    path = prompt_set(tmp_path, pattern)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(PromptFileError) as caught:
            load_prompts([path])
    message = str(caught.value)
    assert f"{path}:4" in message and "expect.regex" in message and said in message, message


@pytest.mark.parametrize("pattern", ["[[a]", "a[[:alpha:]]", "[a&&b]", r"\d+(?:\.\d+)?"])
def test_a_pattern_both_engines_read_loads_without_a_warning(tmp_path: Path,
                                                             pattern: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prompt = load_prompts([prompt_set(tmp_path, pattern)])[0]
    assert prompt.expect is not None and prompt.expect.regex == pattern


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet=st.sampled_from(list("[]()?*+{}|\\^$.:-&~=<!>,aAbpPdLNg0123 ")),
               max_size=12))
def test_any_pattern_loads_and_searches_or_is_one_clear_error(pattern: str) -> None:
    """Whatever the prompt set holds: a prompt whose check can search (never a crash,
    never a warning), or one PromptFileError naming the field."""
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            prompt = load_prompts([prompt_set(Path(folder), pattern)])[0]
        except PromptFileError as exc:
            assert "expect.regex" in str(exc)
            return
        assert prompt.expect is not None and prompt.expect.regex is not None
        assert "cannot be searched" not in regex_failure(prompt.expect.regex, "some answer")


# --- defaults -------------------------------------------------------------------------

CAPITALS = """\
    defaults:
      max_tokens: 32
      category: geography
      tags: [capitals]
      expect: {contains: Canberra, not_contains: Sydney}
      extra: {min_p: 0}
    prompts:
      - id: au
        prompt: "Capital of Australia?"
      - id: au-short
        prompt: "Capital of Australia, one word?"
        category: short
        tags: [one-word]
        expect: {contains: CANBERRA, case_sensitive: true}
"""


def test_a_default_expect_checks_every_prompt_and_is_never_sent(
        write_prompts: WritePrompts) -> None:
    au, short = load_prompts([write_prompts(CAPITALS)])
    assert au.expect == Expect(contains=["Canberra"], not_contains=["Sydney"])
    # a prompt's own check wins; the defaults' other checks still hold
    assert short.expect == Expect(contains=["CANBERRA"], not_contains=["Sydney"],
                                  case_sensitive=True)
    assert (au.category, au.tags) == ("geography", ["capitals"])
    assert (short.category, short.tags) == ("short", ["capitals", "one-word"])
    for prompt in (au, short):
        assert set(OWN_FIELDS) & set(prompt.request) == {"prompt"}, prompt.request
        assert prompt.request["min_p"] == 0 and prompt.request["max_tokens"] == 32


def test_a_default_haystack_fills_every_prompt(write_prompts: WritePrompts) -> None:
    path = write_prompts("""\
        defaults: {haystack: {tokens: 200, needle: "The code is amber-42.", seed: 1}}
        prompts:
          - {id: a, prompt: "Read: {haystack} The code?"}
          - {id: b, prompt: "Again: {haystack} The code?", haystack: {tokens: 100, needle: "x."}}
    """)
    a, b = load_prompts([path])
    assert "amber-42" in str(a.request["prompt"]) and "haystack" not in a.request
    assert "amber-42" not in str(b.request["prompt"])  # its own haystack wins


def test_the_default_gate_fails_on_a_flip_a_default_expect_names(
        serve: Serve, write_prompts: WritePrompts, tmp_path: Path) -> None:
    """The case as found: B says Sydney; the expect in defaults makes it a factual flip
    (exit 1), where it used to be sent to the server and check nothing."""
    a = serve(ScriptedModel({"Australia": " Canberra."})).url
    b = serve(ScriptedModel({"Australia": " Sydney."})).url
    path = write_prompts("""\
        defaults: {expect: {contains: Canberra}}
        prompts:
          - {id: au, prompt: "Capital of Australia?"}
    """)
    result = invoke("run", "--a", a, "--b", b, "--prompts", path, "--out", tmp_path / "r",
                    "--no-preflight")
    assert result.exit_code == 1, result.output
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["counts"]["checks"]["contains"]["regressions"] == 1, summary["counts"]


@pytest.mark.parametrize("key", ["id", "messages", "prompt"])
def test_a_prompts_own_field_in_defaults_is_refused_naming_it(
        write_prompts: WritePrompts, key: str) -> None:
    path = write_prompts(f"""\
        defaults:
          max_tokens: 8
          {key}: x
        prompts:
          - {{id: a, prompt: q}}
    """)
    with pytest.raises(PromptFileError) as caught:
        load_prompts([path])
    assert f"{path}:3: field 'defaults.{key}': is each prompt's own" in str(caught.value)


def test_a_bad_check_in_defaults_names_the_defaults_line(write_prompts: WritePrompts) -> None:
    path = write_prompts("""\
        defaults:
          expect:
            regex: "("
        prompts:
          - {id: a, prompt: q}
    """)
    with pytest.raises(PromptFileError) as caught:
        load_prompts([path])
    assert f"{path}:3: field 'defaults.expect.regex': invalid" in str(caught.value)


@pytest.mark.parametrize("key", ["expect", "category", "tags", "haystack", "id", "messages"])
def test_a_field_quantcheck_reads_is_refused_where_only_request_fields_go(
        write_prompts: WritePrompts, key: str) -> None:
    in_extra = write_prompts(f"""\
        prompts:
          - id: a
            prompt: q
            extra: {{{key}: {{contains: Canberra}}}}
    """)
    with pytest.raises(PromptFileError) as caught:
        load_prompts([in_extra])
    assert f"field 'extra': {key!r} is a prompt's own field" in str(caught.value)
    in_defaults = write_prompts(f"defaults: {{extra: {{{key}: 1}}}}\n"
                                "prompts: [{id: a, prompt: q}]\n")
    with pytest.raises(PromptFileError, match="field 'defaults.extra'"):
        load_prompts([in_defaults])
    plain = write_prompts("prompts: [{id: a, prompt: q}]\n")
    with pytest.raises(PromptFileError, match=f"--extra-body: {key!r} is a prompt's own"):
        load_prompts([plain], RequestOptions(extra_body={key: 1}))


def test_extra_body_with_an_expect_is_refused_on_the_command_line_and_in_a_config(
        write_prompts: WritePrompts, tmp_path: Path) -> None:
    path = write_prompts("prompts: [{id: a, prompt: q}]\n")
    flag = invoke("prompts", "check", path, "--extra-body", '{"expect": {"contains": "x"}}')
    assert flag.exit_code == 2 and "'expect' is a prompt's own field" in flag.output
    config = tmp_path / "collect.yaml"
    config.write_text(f"endpoint: http://127.0.0.1:9/v1\nout: {tmp_path / 'run'}\n"
                      f"prompts: [{path}]\nextra-body: {{expect: {{contains: x}}}}\n")
    result = invoke("collect", "--config", config)
    assert result.exit_code == 2 and "'expect' is a prompt's own field" in result.output
    assert not (tmp_path / "run").exists()


def test_a_source_files_default_expect_checks_every_row(tmp_path: Path) -> None:
    (tmp_path / "rows.jsonl").write_text('{"id": "a", "prompt": "Capital?"}\n'
                                         '{"id": "b", "prompt": "Capital?", '
                                         '"expect": {"contains": "Paris"}}\n')
    source = tmp_path / "source.yaml"
    source.write_text("source: rows.jsonl\ndefaults: {expect: {not_contains: Sydney}}\n")
    a, b = load_prompts([source])
    assert a.expect == Expect(not_contains=["Sydney"])
    assert b.expect == Expect(contains=["Paris"], not_contains=["Sydney"])
    assert "expect" not in a.request


DEFAULT_VALUES = {
    "expect": st.sampled_from([{"contains": "Canberra"}, {"not_contains": ["Sydney"]},
                               {"regex": "("}, {"number": 3}, "text", {}]),
    "category": st.sampled_from(["geo", "", 3]),
    "tags": st.sampled_from([["a"], "b", [1]]),
    "haystack": st.sampled_from([None, {"tokens": 50, "needle": "N."}, {"tokens": 0}]),
    "extra": st.sampled_from([{"min_p": 0}, {"expect": {"contains": "x"}}, [1]]),
    "api": st.sampled_from(["chat", "completions", "rest"]),
    "max_tokens": st.sampled_from([8, 0, "8"]),
    "id": st.just("x"), "messages": st.just([{"role": "user", "content": "q"}]),
    "min_p": st.sampled_from([0, 0.1]), "stop": st.sampled_from(["\n", 3]),
}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.dictionaries(st.sampled_from(sorted(DEFAULT_VALUES)), st.none(), max_size=5)
       .flatmap(lambda keys: st.fixed_dictionaries({k: DEFAULT_VALUES[k] for k in keys})),
       st.sampled_from([None, {"contains": "Paris"}]))
def test_any_defaults_apply_to_every_prompt_or_are_one_clear_error(
        defaults: dict[str, object], own: dict[str, object] | None) -> None:
    """Whatever `defaults` holds: prompts that send no key quantcheck reads and whose
    expect holds the defaults' checks under their own, or one error naming the field."""
    entry: dict[str, object] = {"id": "a", "prompt": "Q {haystack}"}
    if own is not None:
        entry["expect"] = own
    default_expect = defaults.get("expect")
    merged = {**(default_expect if isinstance(default_expect, dict) else {}), **(own or {})}
    with tempfile.TemporaryDirectory() as folder:
        path, alone = Path(folder) / "set.yaml", Path(folder) / "alone.yaml"
        path.write_text(json.dumps({"defaults": defaults, "prompts": [entry]}))
        alone.write_text(json.dumps({"prompts": [{"id": "a", "prompt": "Q", "expect": merged}]}))
        try:
            prompt, = load_prompts([path])
        except PromptFileError as exc:
            assert str(exc).startswith(str(path)) and "field '" in str(exc), str(exc)
            return
        # the defaults' checks under the prompt's own: as if the prompt held them all
        assert prompt.expect == (load_prompts([alone])[0].expect if merged else None)
    assert set(OWN_FIELDS) & set(prompt.request) <= {"prompt", "messages"}
