"""Data files and prompt files as an attacker and an unlucky user try them: an output
that is one of the inputs, NaN answers, devices and FIFOs as prompt sets, configs and
Parquet shards, Excel's cp1252 CSV, integers beyond 64 bits, the mapping hint and the
id column beside --map; and any bytes as JSONL or CSV (hypothesis): prompts, or one
clear error naming the file, never another exception. YAML's own bounds:
test_store_yamlfile.py."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quantcheck import CollectSettings, collect, load_run
from quantcheck.errors import PromptFileError
from quantcheck.store.inputs.prompt_sets import (
    RequestOptions,
    SourceOptions,
    load_prompts,
    load_sources,
)

from .conftest import assert_one_clear_line, cli_in_child, invoke
from .hostile import HostileServer

FUZZ = settings(max_examples=int(os.environ.get("QUANTCHECK_FUZZ_EXAMPLES", "200")),
                deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def data_rows(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"p{n}", "messages": [
        {"role": "user", "content": f"question {n}"}]}) + "\n" for n in range(count)))
    return path


# --- an output that is one of the inputs --------------------------------------------

@pytest.mark.parametrize("how", ["same", "symlink", "hardlink", "dotdot", "source-file",
                                 "inside-folder"])
def test_convert_never_writes_over_what_it_reads(tmp_path: Path, how: str) -> None:
    rows = data_rows(tmp_path / "rows.jsonl", 1000)
    before = rows.read_bytes()
    given: Path = rows
    out: Path = rows
    if how == "symlink":
        (out := tmp_path / "link.jsonl").symlink_to(rows)
    elif how == "hardlink":
        os.link(rows, out := tmp_path / "hard.jsonl")
    elif how == "dotdot":
        out = tmp_path / "missing" / ".." / "rows.jsonl"
    elif how == "source-file":
        (given := tmp_path / "source.yaml").write_text("source: rows.jsonl\n")
    elif how == "inside-folder":
        import pyarrow as pa
        import pyarrow.parquet as pq

        (folder := tmp_path / "shards").mkdir()
        pq.write_table(pa.Table.from_pylist([{"prompt": "hi"}]), folder / "a.parquet")
        given, out = folder, folder / "b.parquet"
    result = invoke("prompts", "convert", given, "--out", out, "--force", "--sample", 3)
    assert result.exit_code == 2, result.output
    assert "refusing to write" in result.output and "--force does not change" in result.output
    assert rows.read_bytes() == before
    if how == "inside-folder":
        assert not out.exists()


def test_convert_still_writes_a_new_file_and_replaces_an_old_output(tmp_path: Path) -> None:
    rows = data_rows(tmp_path / "rows.jsonl", 10)
    out = tmp_path / "set.yaml"
    assert invoke("prompts", "convert", rows, "--out", out, "--sample", 3).exit_code == 0
    assert invoke("prompts", "convert", rows, "--out", out, "--force").exit_code == 0
    assert len(load_prompts([out])) == 10


# --- NaN and infinity as an expected answer -----------------------------------------

def test_a_nan_answer_cell_is_an_error_naming_file_row_and_field(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "answers.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": "1+1?", "answer": 2.0},
                                         {"question": "2+2?", "answer": float("nan")}]), path)
    options = RequestOptions(source=SourceOptions(map=["prompt=question",
                                                       "expect.number=answer"]))
    with pytest.raises(PromptFileError) as error:
        load_prompts([path], options)
    assert f"{path}: row 2" in str(error.value)
    assert "field 'expect.number'" in str(error.value) and "finite" in str(error.value)


@pytest.mark.parametrize(("text", "field"), [
    ("expect: {number: .nan}", "expect.number"),
    ("expect: {number: -.inf}", "expect.number"),
    ("expect: {number: 1, tolerance: .inf}", "expect.tolerance"),
    ("expect: {number: " + "9" * 400 + "}", "expect.number"),
])
def test_nan_and_infinity_in_a_prompt_set_are_errors(tmp_path: Path, text: str,
                                                     field: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"prompts:\n  - id: a\n    prompt: hi\n    {text}\n")
    with pytest.raises(PromptFileError, match=rf"{path}:4: prompt a: field '{field}'"):
        load_prompts([path])


def test_an_infinite_number_in_a_csv_expect_column_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("id,prompt,expect\na,hi,\"{'number': 1e999}\"\n")
    with pytest.raises(PromptFileError, match=r"rows.csv:2 \(row 1\): prompt a: field "
                                              "'expect.number'"):
        load_prompts([path])


# --- bounded time and memory --------------------------------------------------------

@pytest.mark.parametrize("name", ["zero.yaml", "zero.jsonl", "zero.csv", "zero"])
def test_a_device_as_a_prompt_file_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / name).symlink_to("/dev/zero")
    result = cli_in_child("prompts", "check", name, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert_one_clear_line(result.stderr, "not a regular file")


def test_dev_zero_as_a_config_is_refused(tmp_path: Path) -> None:
    result = cli_in_child("collect", "--config", "/dev/zero", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "a device, not a regular file" in result.stderr


@pytest.mark.parametrize("name", ["prompts.yaml", "rows.jsonl", "rows.csv"])
def test_a_fifo_as_a_prompt_file_is_refused(tmp_path: Path, name: str) -> None:
    os.mkfifo(tmp_path / name)
    result = cli_in_child("prompts", "check", name, cwd=tmp_path, timeout=30)
    assert result.returncode == 2, result.stderr
    assert_one_clear_line(result.stderr, "not a regular file")


def with_endless_line(path: Path, first: str, size: int = 4 << 30) -> Path:
    """`first`, then one line of `size` NUL bytes without a newline (sparse on disk)."""
    with path.open("wb") as handle:
        handle.write(first.encode())
        handle.truncate(size)
    return path


@pytest.mark.parametrize(("name", "first"), [
    ("rows.jsonl", '{"id": "a", "prompt": "hi"}\n'),
    ("rows.csv", "id,prompt\na,hi\n"),
    ("rows.tsv", "id\tprompt\n"),
    ("set.yaml", "prompts: [{id: a, prompt: hi}]\n"),
])
def test_a_line_of_4_gib_is_one_error_naming_file_and_line(tmp_path: Path, name: str,
                                                            first: str) -> None:
    """Read no further than a line holds (memory capped at 3 GiB in the child: a reader
    that holds the line ends in MemoryError, exit 3)."""
    with_endless_line(tmp_path / name, first)
    # a draw reads every line too; a YAML file is looked into for `source:` first
    result = cli_in_child("prompts", "check", name, "--sample", 1, cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    line = first.count("\n") + 1
    said = (f"{name}:{line}: a line of more than 64 MiB, more than a line of a data file "
            "holds" if name != "set.yaml" else f"{name} holds YAML prompt sets only")
    assert_one_clear_line(result.stderr, said)


def test_a_fifo_named_parquet_inside_a_parquet_folder_is_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder := tmp_path / "shards").mkdir()
    pq.write_table(pa.Table.from_pylist([{"prompt": "hi"}]), folder / "a.parquet")
    os.mkfifo(folder / "b.parquet")
    result = cli_in_child("prompts", "check", "shards", cwd=tmp_path, timeout=30)
    assert result.returncode == 2, result.stderr
    assert_one_clear_line(result.stderr, "b.parquet: not a regular file")


# --- encodings ----------------------------------------------------------------------

@pytest.mark.parametrize("rows_before", [0, 30_000])
def test_a_cp1252_csv_is_one_error_naming_its_line_wherever_the_byte_is(
        tmp_path: Path, rows_before: int) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes(b"prompt,answer\r\n" + b"".join(b"q%d,a\r\n" % n for n in range(rows_before))
                     + "Café au lait?,oui\r\n".encode("cp1252"))
    with pytest.raises(PromptFileError) as error:
        load_prompts([path])
    message = str(error.value)
    assert message.startswith(f"{path}:{rows_before + 2}: ")
    assert "byte 0xE9 at column 4" in message
    assert f"iconv -f cp1252 -t utf-8 {path}" in message


def test_a_cp1252_csv_is_exit_2_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes("prompt\r\nCafé?\r\n".encode("cp1252"))
    result = invoke("prompts", "check", path)
    assert result.exit_code == 2 and "iconv" in result.output


def test_a_utf16_csv_is_told_to_convert_from_utf16(tmp_path: Path) -> None:
    path = tmp_path / "unicode.csv"
    path.write_bytes("prompt\r\nhi\r\n".encode("utf-16"))
    with pytest.raises(PromptFileError, match="iconv -f utf-16 -t utf-8"):
        load_prompts([path])


@pytest.mark.parametrize(("name", "data", "line"), [
    ("rows.jsonl", b'{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "caf\xe9"}\n', 2),
    ("set.yaml", b"prompts:\n  - id: a\n    prompt: caf\xe9\n", 3),
])
def test_a_bad_byte_in_jsonl_or_yaml_names_its_line(tmp_path: Path, name: str, data: bytes,
                                                    line: int) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(PromptFileError, match=rf"{name}:{line}: .*not UTF-8 text.*iconv"):
        load_prompts([path])


# --- integers beyond 64 bits ----------------------------------------------------------

def test_an_integer_beyond_64_bits_in_a_request_body_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": "x", "messages": [{"role": "user", "content": "hi"}], '
                    '"logit_bias": {"15": 123456789012345678901234567890}}\n')
    with pytest.raises(PromptFileError, match=r"rows.jsonl:1: prompt x: field 'logit_bias': "
                                              "the integer 123456789012345678901234567890 "
                                              "does not fit in 64 bits"):
        load_prompts([path])


def test_integers_of_64_bits_are_sent_exactly(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": "x", "messages": [{"role": "user", "content": "hi"}], '
                    '"user_tag": 18446744073709551615, "low": -9223372036854775808, '
                    '"note": "1234567890123456789012345"}\n')
    with HostileServer() as server:
        result = collect([path], tmp_path / "run", CollectSettings(
            endpoint=server.url, label="a", preflight=False, top_logprobs=0, retries=0,
            stream=False))
        bodies = [request.body for request in server.requests]
    assert result.failed == 0 and load_run(tmp_path / "run").manifest
    assert [body["user_tag"] for body in bodies] == [18446744073709551615]
    assert bodies[0]["low"] == -9223372036854775808
    assert bodies[0]["note"] == "1234567890123456789012345"


# --- the mapping hint and the id column ------------------------------------------------

QA_DISK = "id,question,answer\nq1,Who wrote Emma?,Jane Austen\nq2,Capital of France?,Paris\n" \
          "q3,Largest planet?,Jupiter\n"


def _as_json_lines(table: str) -> str:
    return "".join(json.dumps(row) + "\n" for row in csv.DictReader(io.StringIO(table)))


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_the_hint_names_a_mapping_that_reads_the_rows_not_a_preset_that_does_not(
        tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"qa.{suffix}"
    path.write_text(QA_DISK if suffix == "csv" else _as_json_lines(QA_DISK))
    result = invoke("prompts", "check", path)
    assert result.exit_code == 2
    assert "--map-preset" not in result.output
    hint = result.output.split("these columns read as ")[1].split()
    followed = invoke("prompts", "check", path, *hint, "--show", 0)
    assert followed.exit_code == 0, followed.output
    assert "3 with an expect (contains 3)" in followed.output


def test_the_hint_names_a_preset_whose_rules_read_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "gsm.csv"
    path.write_text('question,answer\nHow many?,"12 + 60 = 72\n#### 72"\n')
    result = invoke("prompts", "check", path)
    assert result.exit_code == 2 and "these columns fit --map-preset gsm8k" in result.output
    assert invoke("prompts", "check", path, "--map-preset", "gsm8k").exit_code == 0


def test_an_id_column_stays_the_id_beside_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "qa.csv"
    path.write_text(QA_DISK)
    options = RequestOptions(source=SourceOptions(map=["prompt=question",
                                                       "expect.contains=answer"]))
    source = load_sources([path], options)[0]
    assert [prompt.id for prompt in source.prompts] == ["q1", "q2", "q3"]
    assert source.hashed_ids == 0
    result = invoke("prompts", "check", path, "--map", "prompt=question")
    assert "made from a hash" not in result.output and "id=id" in result.output


def test_an_id_key_stays_the_id_of_mapped_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": "j1", "question": "Who?", "answer": "Ann"}\n')
    options = RequestOptions(source=SourceOptions(map=["prompt=question"]))
    assert [prompt.id for prompt in load_prompts([path], options)] == ["j1"]


def test_a_mapping_naming_the_id_wins_over_the_id_column(tmp_path: Path) -> None:
    path = tmp_path / "qa.csv"
    path.write_text("id,key,question\n1,k1,Who?\n")
    options = RequestOptions(source=SourceOptions(map=["prompt=question", "id=key"]))
    assert [prompt.id for prompt in load_prompts([path], options)] == ["k1"]


# --- any bytes in: prompts or one clear error -------------------------------------------

def _loads_or_is_clear(path: Path, data: bytes, options: RequestOptions | None = None) -> None:
    path.write_bytes(data)
    try:
        load_prompts([path], options)
    except PromptFileError as exc:
        assert str(exc).startswith(str(path)) or str(path) in str(exc), exc


LINE_PIECES = st.sampled_from([
    '{"id": "a", "messages": [{"role": "user", "content": "hi"}]}', '{"prompt": "x"}',
    '{"custom_id": "c", "url": "/v1/completions", "body": {"prompt": "p"}}',
    '"expect": {"number": 1e999}', "123456789012345678901234567890", "NaN", "\xe9",
    '{"id": 1, "question": "q", "answer": "#### 7"}', ",", "\n", "\r\n", '"', "{", "}",
])
ROWS = st.binary(max_size=200) | st.lists(LINE_PIECES, max_size=10).map(
    lambda parts: "".join(parts).encode("utf-8"))
MAPS = st.sampled_from([None, ["prompt=question"], ["prompt=question",
                                                    "expect.number=answer:after-hashes"]])


@FUZZ
@given(ROWS, MAPS)
def test_any_bytes_as_jsonl_load_or_are_one_clear_error(tmp_path: Path, data: bytes,
                                                       mapped: list[str] | None) -> None:
    options = RequestOptions(source=SourceOptions(map=mapped)) if mapped else None
    _loads_or_is_clear(tmp_path / "rows.jsonl", data, options)


CSV_PIECES = st.sampled_from([
    "id,question,answer\n", "prompt\n", "q1,Who?,Ann\n", '"a\nb",x,y\n', "NaN", "inf",
    "\xe9", ",", "\r\n", '"', "#### 72", "[1, 2]", "{'number': 1e999}", "\ufeff", "\0",
])
TABLES = st.binary(max_size=200) | st.lists(CSV_PIECES, max_size=12).map(
    lambda parts: "".join(parts).encode("utf-8"))


@FUZZ
@given(TABLES, MAPS, st.sampled_from(["utf-8", "cp1252"]))
def test_any_bytes_as_csv_load_or_are_one_clear_error(tmp_path: Path, data: bytes,
                                                     mapped: list[str] | None,
                                                     encoding: str) -> None:
    if encoding == "cp1252":
        data = data.decode("utf-8", "replace").encode("cp1252", "replace")
    options = RequestOptions(source=SourceOptions(map=mapped)) if mapped else None
    _loads_or_is_clear(tmp_path / "rows.csv", data, options)
