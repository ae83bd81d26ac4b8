"""Prompts from data files in the shapes other tools write them: JSONL request bodies
and OpenAI Batch API files, GSM8K-style Parquet, MMLU-style CSV (as `datasets` and
pandas write it), a `datasets` save_to_disk folder; column mappings, presets, seeded
samples, `quantcheck prompts check/convert`; collected and run against scripted servers."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest

from quantcheck import load_prompts, load_run
from quantcheck.errors import PromptFileError
from quantcheck.lab.scripted import ScriptedModel
from quantcheck.store.inputs.data_rows import reservoir
from quantcheck.store.inputs.prompt_sets import GREEDY_FIELDS, RequestOptions, SourceOptions

from .conftest import Serve, invoke

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

REPO = Path(__file__).parent.parent

GSM8K = [
    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half "
                 "as many clips in May. How many clips did Natalia sell altogether?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = "
               "<<48+24=72>>72 clips altogether in April and May.\n#### 72"},
    {"question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 "
                 "minutes of babysitting. How much did she earn?",
     "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she "
               "earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"},
    {"question": "A robe takes 2 bolts of blue fiber and half that much white fiber. How "
                 "many bolts in total does it take?",
     "answer": "It takes 2/2=<<2/2=1>>1 bolt of white fiber\nSo the total is 2+1="
               "<<2+1=3>>3 bolts\n#### 3"},
]
MMLU = {
    "question": ["What is the boiling point of water at sea level in Celsius?",
                 "Which planet is known as the Red Planet?",
                 "Who wrote 'Hamlet'?"],
    "subject": ["physics", "astronomy", "literature"],
    "choices": [["50", "100", "150", "200"], ["Venus", "Mars", "Jupiter", "Saturn"],
                ["Charles Dickens", "Jane Austen", "William Shakespeare", "Mark Twain"]],
    "answer": [1, 1, 2],
}
MMLU_FEATURES = {
    "question": {"dtype": "string", "_type": "Value"},
    "subject": {"dtype": "string", "_type": "Value"},
    "choices": {"feature": {"dtype": "string", "_type": "Value"}, "_type": "List"},
    "answer": {"names": ["A", "B", "C", "D"], "_type": "ClassLabel"},
}


def gsm8k_parquet(path: Path) -> Path:
    """GSM8K's test split as the Hub's Parquet export holds it (two columns)."""
    pq.write_table(pa.Table.from_pylist(GSM8K), path, row_group_size=2)
    return path


def mmlu_csv(path: Path) -> Path:
    """MMLU rows as `Dataset.to_csv` writes them: through pandas, so the list column
    `choices` becomes numpy's text of an array ("['50' '100' ...]")."""
    pa.table(MMLU).to_pandas().to_csv(path, index=False)
    return path


def save_to_disk_by_hand(table: Any, folder: Path, split: str = "test",
                         shards: int = 2) -> Path:
    """What `Dataset.save_to_disk` writes (datasets' arrow_dataset.py, 5.x): Arrow IPC
    *stream* files data-0000i-of-0000n.arrow whose schema carries the features under
    the `huggingface` metadata key, state.json listing them, dataset_info.json."""
    folder.mkdir(parents=True)
    fingerprint = "5b2f1c0d9e8a7b6c"
    schema = table.schema.with_metadata({"huggingface": json.dumps(
        {"info": {"features": MMLU_FEATURES}, "fingerprint": fingerprint})})
    per_shard = -(-table.num_rows // shards)
    files = []
    for shard in range(shards):
        name = f"data-{shard:05d}-of-{shards:05d}.arrow"
        with pa.OSFile(str(folder / name), "wb") as sink, \
                pa.RecordBatchStreamWriter(sink, schema) as writer:
            for batch in table.slice(shard * per_shard, per_shard).to_batches(max_chunksize=1):
                writer.write_batch(batch)
        files.append({"filename": name})
    state = {"_data_files": files, "_fingerprint": fingerprint, "_format_columns": None,
             "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
             "_split": split}
    (folder / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    info = {"builder_name": None, "citation": "", "config_name": None, "dataset_name": None,
            "dataset_size": None, "description": "", "download_checksums": None,
            "download_size": None, "features": MMLU_FEATURES, "homepage": "", "license": "",
            "post_processed": None, "post_processing_size": None, "size_in_bytes": None,
            "splits": None, "supervised_keys": None, "version": None}
    (folder / "dataset_info.json").write_text(json.dumps(info, indent=2))
    return folder


def write_jsonl(path: Path, lines: list[object]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CHAT_BODY = {
    "model": "gpt-4o-2024-08-06",
    "messages": [{"role": "system", "content": "You are a weather bot."},
                 {"role": "user", "content": "What is the weather in Paris?"}],
    "max_tokens": 64, "tools": [WEATHER_TOOL], "tool_choice": "auto",
    "parallel_tool_calls": False, "temperature": 0.7, "stream": False, "user": "u-17",
}
BATCH_LINES = [
    {"custom_id": "request-1", "method": "POST", "url": "/v1/chat/completions",
     "body": CHAT_BODY},
    {"custom_id": "request-2", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": "gpt-4o-mini", "max_completion_tokens": 32,
              "response_format": {"type": "json_object"},
              "messages": [{"role": "user", "content": "Give the capital of France as JSON."}]}},
]


# --- JSONL request bodies and Batch API lines -----------------------------------------

def test_a_batch_api_file_sends_each_body_as_given_tool_call_included(
        serve: Serve, tmp_path: Path) -> None:
    server = serve(ScriptedModel({"capital of France": ' {"capital": "Paris"}'},
                                 calls={"weather in Paris": [("get_weather",
                                                              '{"city": "Paris"}')]}))
    batch = write_jsonl(tmp_path / "batch.jsonl", BATCH_LINES)
    result = invoke("collect", "--endpoint", server.url, "--prompts", batch, "--out",
                    tmp_path / "run", "--no-preflight", "--concurrency", 1,
                    "--top-logprobs", 2, "--no-stream")
    assert result.exit_code == 0, result.output
    weather, capital = server.requests
    assert weather == {
        "model": "scripted-model",  # the endpoint's model, not the one in the file
        "messages": CHAT_BODY["messages"], "max_tokens": 64, "tools": [WEATHER_TOOL],
        "tool_choice": "auto", "parallel_tool_calls": False, "user": "u-17",
        **GREEDY_FIELDS,  # greedy, whatever the file's temperature
        "logprobs": True, "top_logprobs": 2,  # and no "stream": False from the file
    }
    assert capital["max_tokens"] == 32 and "max_completion_tokens" not in capital
    assert capital["response_format"] == {"type": "json_object"}
    run = load_run(tmp_path / "run")
    assert sorted(run.prompts) == ["request-1", "request-2"]
    calls = {r.prompt_id: r.tool_calls for r in run.completions()}
    assert [call.name for call in calls["request-1"] or []] == ["get_weather"]


def test_jsonl_chat_bodies_carry_every_field_and_get_stable_content_ids(
        tmp_path: Path) -> None:
    body = {"messages": [{"role": "system", "content": "Answer briefly."},
                         {"role": "user", "content": "Hello"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "c1", "type": "function", "function": {
                                 "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
            "tools": [WEATHER_TOOL], "tool_choice": {"type": "function",
                                                      "function": {"name": "get_weather"}},
            "max_tokens": 40, "response_format": {"type": "text"}, "stop": ["\n\n"],
            "logit_bias": {"50256": -100}, "top_logprobs": 9, "n": 3}
    path = write_jsonl(tmp_path / "traffic.jsonl", [body, body, {**body, "max_tokens": 41}])
    first, again, other = load_prompts([path])
    assert first.request == {
        "messages": body["messages"], "tools": [WEATHER_TOOL],
        "tool_choice": body["tool_choice"], "max_tokens": 40, "stop": ["\n\n"],
        "response_format": {"type": "text"}, "logit_bias": {"50256": -100}, **GREEDY_FIELDS}
    assert first.api == "chat" and first.source == f"{path}:1"
    assert len(first.id) == 12 and again.id == f"{first.id}-2" and other.id not in (
        first.id, again.id)
    assert [p.id for p in load_prompts([path])] == [first.id, again.id, other.id]


def test_jsonl_lines_may_carry_the_projects_own_fields(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "mine.jsonl", [
        {"id": "capital", "category": "geo", "tags": ["eu"],
         "messages": [{"role": "user", "content": "Capital of France?"}],
         "expect": {"contains": "Paris"}, "seed": 5, "min_p": 0.1},
        {"id": "sum", "prompt": "Q: 2+3=\nA:", "max_tokens": 4, "expect": {"number": 5}}])
    capital, total = load_prompts([path])
    assert (capital.id, capital.category, capital.tags) == ("capital", "geo", ["eu"])
    assert capital.expect is not None and capital.expect.contains == ["Paris"]
    assert capital.request["seed"] == 0 and capital.request["min_p"] == 0.1
    assert total.api == "completions" and total.request["prompt"] == "Q: 2+3=\nA:"
    assert total.expect is not None and total.expect.number == 5


# --- eval sets: GSM8K Parquet, MMLU CSV, a save_to_disk folder -----------------------

def test_gsm8k_parquet_runs_with_the_number_after_the_hashes(serve: Serve,
                                                              tmp_path: Path) -> None:
    answers = {"Natalia": " 72", "Weng": " $10", "robe": " 3"}
    a = serve(ScriptedModel(answers))
    b = serve(ScriptedModel({**answers, "robe": " 4"}), "sglang")
    data = gsm8k_parquet(tmp_path / "test-00000-of-00001.parquet")
    result = invoke("run", "--a", a.url, "--b", b.url, "--prompts", data, "--map-preset",
                    "gsm8k", "--out", tmp_path / "report", "--no-preflight",
                    "--top-logprobs", 2)
    assert result.exit_code == 1, result.output  # the planted flip fails the default gate
    pairs = pd.read_csv(tmp_path / "report" / "pairs.csv", keep_default_na=False)
    expects = {row.prompt_id: (row.a_expect, row.b_expect) for row in pairs.itertuples()}
    prompts = load_run(tmp_path / "report" / "a").prompts
    numbers = {p.expect.number for p in prompts.values() if p.expect}
    assert numbers == {72.0, 10.0, 3.0}
    robe = next(p for p in prompts.values() if "robe" in str(p.request["messages"]))
    assert robe.source == f"{data}: row 3"
    assert robe.request["messages"] == [{"role": "user", "content": GSM8K[2]["question"]
                                         + "\n\nAnswer with the final number only."}]
    assert expects[robe.id] == ("pass", "fail")
    assert sorted(expects.values()) == [("pass", "fail"), ("pass", "pass"), ("pass", "pass")]


def test_mmlu_csv_from_pandas_collects_with_the_answer_index_as_a_letter(
        serve: Serve, tmp_path: Path) -> None:
    server = serve(ScriptedModel({"boiling": " B", "Red Planet": " The answer is B.",
                                  "Hamlet": " (C) William Shakespeare"}))
    data = mmlu_csv(tmp_path / "mmlu-test.csv")
    assert "['50' '100' '150' '200']" in data.read_text()  # numpy's text of the list
    result = invoke("collect", "--endpoint", server.url, "--prompts", data, "--map-preset",
                    "mmlu", "--out", tmp_path / "run", "--no-preflight", "--top-logprobs", 2)
    assert result.exit_code == 0, result.output
    prompts = load_run(tmp_path / "run").prompts.values()
    assert {p.category: p.expect.choice for p in prompts if p.expect} == {
        "physics": "B", "astronomy": "B", "literature": "C"}
    physics = next(p for p in prompts if p.category == "physics")
    assert physics.request["messages"][0]["content"] == (
        "What is the boiling point of water at sea level in Celsius?\n\nA. 50\nB. 100\n"
        "C. 150\nD. 200\n\nAnswer with the letter of the correct option.")
    assert physics.source == f"{data}:2 (row 1)"
    compare = invoke("compare", tmp_path / "run", tmp_path / "run", "--out",
                     tmp_path / "report")
    pairs = pd.read_csv(tmp_path / "report" / "pairs.csv", keep_default_na=False)
    assert compare.exit_code == 0 and set(pairs["a_expect"]) == {"pass"}


def test_a_save_to_disk_folder_runs_through_run(serve: Serve, tmp_path: Path) -> None:
    folder = save_to_disk_by_hand(pa.table(MMLU), tmp_path / "mmlu" / "test")
    (tmp_path / "mmlu" / "dataset_dict.json").write_text('{"splits": ["test"]}')
    a = serve(ScriptedModel({"boiling": " B", "Red Planet": " B", "Hamlet": " C"}))
    b = serve(ScriptedModel({"boiling": " B", "Red Planet": " A", "Hamlet": " C"}))
    result = invoke("run", "--a", a.url, "--b", b.url, "--prompts", folder, "--map-preset",
                    "mmlu", "--map", "id=question", "--out", tmp_path / "report",
                    "--no-preflight", "--top-logprobs", 2)
    assert result.exit_code == 1, result.output  # as the gate below
    assert invoke("gate", tmp_path / "report").exit_code == 1  # one factual flip
    pairs = pd.read_csv(tmp_path / "report" / "pairs.csv", keep_default_na=False)
    flipped = pairs[pairs["flip"] == "regression"]["prompt_id"].tolist()
    assert flipped == ["Which planet is known as the Red Planet?"]
    prompts = load_run(tmp_path / "report" / "a").prompts
    assert prompts["Who wrote 'Hamlet'?"].source == \
        f"{folder / 'data-00001-of-00002.arrow'}: row 1"
    whole = invoke("prompts", "check", tmp_path / "mmlu", "--map-preset", "mmlu")
    assert whole.exit_code == 2
    assert "a DatasetDict folder with the splits test: give one split's folder" in whole.output


def test_datasets_own_save_to_disk_folder_reads_the_same(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    features = datasets.Features.from_dict(MMLU_FEATURES)
    datasets.Dataset.from_dict(MMLU, features=features).save_to_disk(tmp_path / "real")
    by_hand = save_to_disk_by_hand(pa.table(MMLU), tmp_path / "hand")
    options = RequestOptions(source=SourceOptions(preset="mmlu"))
    real = load_prompts([tmp_path / "real"], options)
    assert [(p.request, p.expect) for p in real] == \
        [(p.request, p.expect) for p in load_prompts([by_hand], options)]


def test_a_folder_of_parquet_shards_is_one_table(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    for n, rows in enumerate((GSM8K[:2], GSM8K[2:])):
        pq.write_table(pa.Table.from_pylist(rows), folder / f"test-0000{n}-of-00002.parquet")
    prompts = load_prompts([folder], RequestOptions(source=SourceOptions(preset="gsm8k")))
    assert [p.expect.number for p in prompts if p.expect] == [72, 10, 3]
    assert prompts[2].source == f"{folder / 'test-00001-of-00002.parquet'}: row 1"


# --- mappings, the YAML source file ----------------------------------------------------

def test_mapping_flags_pick_columns_and_extraction_rules(tmp_path: Path) -> None:
    data = tmp_path / "qa.csv"
    pd.DataFrame({"qid": ["q1", "q2"], "text": ["Capital of Peru?", "How much is 6 x 7?"],
                  "gold": ["Lima", "6 x 7 is 42 (six times seven)."],
                  "letter": ["b", "D"]}).to_csv(data, index=False)
    q1, q2 = load_prompts([data], RequestOptions(source=SourceOptions(map=[
        "id=qid", "prompt=text", "expect.contains=gold"])))
    assert (q1.id, q1.expect and q1.expect.contains) == ("q1", ["Lima"])
    assert q1.request["messages"] == [{"role": "user", "content": "Capital of Peru?"}]
    numbers = tmp_path / "numbers.csv"
    pd.DataFrame({"text": ["How much is 6 x 7?"], "gold": ["6 x 7 is 42 (six times seven)."]}
                 ).to_csv(numbers, index=False)
    (q2,) = load_prompts([numbers], RequestOptions(api="completions", source=SourceOptions(
        map=["prompt=text", "expect.number=gold:last-number"])))
    assert q2.request["prompt"] == "How much is 6 x 7?" and q2.expect
    assert q2.expect.number == 42  # the last number: "seven" is not one
    q1, q2 = load_prompts([data], RequestOptions(source=SourceOptions(map=[
        "id=qid", "prompt=text", "expect.choice=letter:letter"])))
    assert (q1.expect and q1.expect.choice, q2.expect and q2.expect.choice) == ("B", "D")


def test_a_yaml_source_file_names_the_data_its_mapping_and_defaults(tmp_path: Path) -> None:
    gsm8k_parquet(tmp_path / "gsm8k.parquet")
    source = tmp_path / "gsm8k.yaml"
    source.write_text(
        "source: gsm8k.parquet\n"
        "preset: gsm8k\n"
        "map: {id: question}\n"
        "template: 'Solve: {question}'\n"
        "system: You are a careful tutor.\n"
        "category: math\n"
        "expect: {tolerance: 0.5}\n"
        "defaults: {max_tokens: 512, min_p: 0}\n"
        "sample: 2\n"
        "seed: 3\n")
    prompts = load_prompts([source])
    assert len(prompts) == 2 and all(p.category == "math" for p in prompts)
    first = prompts[0]
    assert first.request["messages"] == [
        {"role": "system", "content": "You are a careful tutor."},
        {"role": "user", "content": f"Solve: {first.id}"}]
    assert first.request["max_tokens"] == 512 and first.request["min_p"] == 0
    assert first.expect is not None and first.expect.tolerance == 0.5
    # the command line's --sample wins over the file's
    assert len(load_prompts([source], RequestOptions(source=SourceOptions(sample=3)))) == 3


@pytest.mark.parametrize(("text", "message"), [
    ("source: nowhere.parquet\n", "field 'source': "),
    ("source: d.csv\nmap: {prompt: nope}\n", "no column 'nope'; the columns are a, b"),
    ("source: d.csv\nmap: {answer: a}\n", "unknown target 'answer'"),
    ("source: d.csv\nmap: {prompt: a}\nsample: 0\n", "field 'sample': must be a positive"),
    ("source: d.csv\nmap: {prompt: a}\nflavour: x\n", "field 'flavour': unknown field"),
    ("source: d.csv\npreset: arc\n", "field 'preset': unknown preset 'arc'"),
], ids=["no-data", "no-column", "no-target", "sample", "unknown-key", "preset"])
def test_a_bad_source_file_names_file_line_and_field(tmp_path: Path, text: str,
                                                     message: str) -> None:
    (tmp_path / "d.csv").write_text("a,b\nx,y\n")
    source = tmp_path / "source.yaml"
    source.write_text(text)
    with pytest.raises(PromptFileError, match=f"^{source}:\\d+: .*" + message.replace(
            "(", r"\(")):
        load_prompts([source])


# --- sampling ---------------------------------------------------------------------------

def test_a_sample_is_the_same_every_time_in_file_order(tmp_path: Path) -> None:
    lines = [{"messages": [{"role": "user", "content": f"question {n}"}]} for n in range(500)]
    path = write_jsonl(tmp_path / "big.jsonl", lines)

    def drawn(sample: int, seed: int | None = None) -> list[str]:
        options = RequestOptions(source=SourceOptions(sample=sample, seed=seed))
        return [p.request["messages"][0]["content"] for p in load_prompts([path], options)]

    first = drawn(20)
    assert len(first) == 20 and first == drawn(20) == drawn(20, 0)
    assert first == sorted(first, key=lambda text: int(text.split()[1]))
    assert drawn(20, 1) != first
    assert len(drawn(600)) == 500  # more than the file holds: all of it
    table = tmp_path / "big.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": f"question {n}"} for n in range(500)]),
                   table, row_group_size=64)
    sampled = load_prompts([table], RequestOptions(source=SourceOptions(sample=20)))
    assert [p.request for p in sampled] == [p.request for p in load_prompts(
        [table], RequestOptions(source=SourceOptions(sample=20)))]
    assert len({p.id for p in sampled}) == 20


def test_the_reservoir_draws_every_item_alike() -> None:
    counts: Counter[int] = Counter()
    for seed in range(3000):
        counts.update(reservoir(range(40), 10, seed))
    assert set(counts) == set(range(40))
    assert all(0.2 < counts[item] / 3000 < 0.3 for item in range(40))  # each 10/40
    assert reservoir(range(3), 10, 0) == [0, 1, 2]


# --- errors: one line naming file, line (row) and field ------------------------------

@pytest.mark.parametrize(("name", "content", "message"), [
    ("a.jsonl", b'{"messages": [{"role": "user", "content": "x"}]}\n{"messages": [}\n',
     ":2: not valid JSON"),
    ("a.jsonl", b'[1, 2]\n', ":1: expected a JSON object, not list"),
    ("a.jsonl", b'{"question": "x"}\n', ":1: neither a request body"),
    ("a.jsonl", b'{"messages": [{"role": "user"}]}\n', ":1: prompt "),
    ("a.jsonl", b'{"custom_id": "r1", "url": "/v1/embeddings", "body": {"input": "x"}}\n',
     ":1: prompt r1: field 'url': must be one of /v1/chat/completions"),
    ("a.jsonl", b'{"id": "x", "prompt": "a"}\n{"id": "x", "prompt": "b"}\n',
     ":2: prompt id 'x' is used twice (first at "),
    ("a.jsonl", b'{"prompt": "a", "max_tokens": -1}\n', "field 'max_tokens': must be a "),
    ("a.csv", b"prompt,expect\nhello,\"{\"\"contains\"\": 3}\"\n", ":2 (row 1): prompt "),
    ("a.csv", b"prompt,b\nx,y,z\n", ":2 (row 1): 3 fields where the header names 2"),
    ("a.csv", b"question,answer\nx,y\n", "which column is the prompt?"),
    ("a.csv", b"", "empty: the first row must name the columns"),
    ("a.parquet", b"not parquet", "not a readable Parquet file"),
    ("a.xlsx", b"", "(prompt files are YAML, .jsonl, .ndjson, .csv, .tsv, .parquet"),
], ids=["json", "not-object", "no-shape", "message", "batch-url", "duplicate", "max-tokens",
        "csv-expect", "csv-fields", "csv-no-mapping", "csv-empty", "parquet", "suffix"])
def test_a_malformed_file_is_one_clear_error(tmp_path: Path, name: str, content: bytes,
                                             message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(PromptFileError) as error:
        load_prompts([path])
    assert str(error.value).startswith(str(path)) and message in str(error.value)
    assert "\n" not in str(error.value)


def test_an_extraction_that_fails_names_the_row_column_and_rule(tmp_path: Path) -> None:
    rows = [GSM8K[0], {"question": "q", "answer": "no hashes here"}]
    data = tmp_path / "g.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data)
    result = invoke("prompts", "check", data, "--map-preset", "gsm8k")
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: {data}: row 2: field 'expect.number': column 'answer' (after-hashes): "
        "no '####' in 'no hashes here'")
    bad = invoke("prompts", "check", data, "--map", "expect.number=answer:index")
    assert bad.exit_code == 2 and "the rule 'index' does not apply to expect.number" in \
        bad.output


def test_a_mapping_with_yaml_prompt_sets_only_is_refused() -> None:
    with pytest.raises(PromptFileError, match="apply to data files"):
        load_prompts([REPO / "prompts/default.yaml"],
                     RequestOptions(source=SourceOptions(preset="gsm8k")))


def test_without_pyarrow_a_parquet_file_names_the_extra(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    data = gsm8k_parquet(tmp_path / "g.parquet")
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(PromptFileError) as error:
        load_prompts([data], RequestOptions(source=SourceOptions(preset="gsm8k")))
    assert str(error.value) == (f"{data}: reading Parquet and Arrow needs pyarrow: "
                                "pip install 'quantcheck[data]'")


# --- the YAML prompt sets are unchanged --------------------------------------------------

def test_the_shipped_prompt_sets_keep_their_hashes() -> None:
    """Hashes identify prompts across runs: a loader change must not move them."""
    hashes = {p.id: p.hash for path in ("default.yaml", "suites/tools.yaml",
                                        "suites/long-context.yaml")
              for p in load_prompts([REPO / "prompts" / path])}
    assert {key: hashes[key] for key in (
        "reasoning-larger", "reasoning-sheep", "tools-weather-paris",
        "tools-weather-fahrenheit", "needle-2.5k-05", "needle-2.5k-15")} == {
        "reasoning-larger": "a639bee0f2921ed6", "reasoning-sheep": "d75ac17f8eeb6411",
        "tools-weather-paris": "9106fc7d20168241",
        "tools-weather-fahrenheit": "fc4cff20a17bcd60",
        "needle-2.5k-05": "29a7af69a2941fbc", "needle-2.5k-15": "38034810daa206ed"}


# --- quantcheck prompts check / convert -------------------------------------------------

def test_check_counts_and_shows_the_first_requests(tmp_path: Path) -> None:
    batch = write_jsonl(tmp_path / "batch.jsonl", BATCH_LINES)
    result = invoke("prompts", "check", batch, "--show", 1)
    assert result.exit_code == 0, result.output
    assert f"{batch}: JSONL, 2 rows read: 2 Batch API lines" in result.output
    assert "2 prompts (chat 2), 0 with an expect" in result.output
    assert "--- request-1 (" in result.output and "--- request-2" not in result.output
    shown = result.output.split("request: ", 1)[1].split("\nexpect: ")[0]
    assert json.loads(shown)["tools"] == [WEATHER_TOOL]
    sampled = invoke("prompts", "check", mmlu_csv(tmp_path / "m.csv"), "--map-preset", "mmlu",
                     "--sample", 2, "--seed", 4)
    assert "sample: 2 of 3 rows, seed 4" in sampled.output
    assert "mapping: prompt=question choices=choices expect.choice=answer category=subject" \
        in sampled.output and 'expect: {"choice": ' in sampled.output
    unsampled = invoke("prompts", "check", mmlu_csv(tmp_path / "m.csv"), "--seed", 4)
    assert unsampled.exit_code == 2 and "give --sample N as well" in unsampled.output


def test_convert_writes_yaml_that_loads_back_to_the_same_prompts(tmp_path: Path) -> None:
    sources = [write_jsonl(tmp_path / "batch.jsonl", BATCH_LINES),
               gsm8k_parquet(tmp_path / "g.parquet")]
    out = tmp_path / "prompts.yaml"
    args = [*sources, "--map-preset", "gsm8k", "--extra-body", '{"repeat_penalty": null}']
    mapped = write_jsonl(tmp_path / "rows.jsonl", GSM8K)
    result = invoke("prompts", "convert", sources[0], mapped, *args[1:], "--out", out)
    assert result.exit_code == 2 and "neither a request body" not in result.output
    result = invoke("prompts", "convert", sources[0], "--out", out)
    assert result.exit_code == 0, result.output
    again = invoke("prompts", "convert", sources[0], "--out", out)
    assert again.exit_code == 2 and "exists; --force replaces it" in again.output
    result = invoke("prompts", "convert", sources[1], "--map-preset", "gsm8k",
                    "--extra-body", '{"repeat_penalty": null, "min_p": 0}', "--out", out,
                    "--force")
    assert result.exit_code == 0 and f"written: {out} (3 prompts)" in result.output
    options = RequestOptions(extra_body={"repeat_penalty": None, "min_p": 0},
                             source=SourceOptions(preset="gsm8k"))
    original, back = load_prompts([sources[1]], options), load_prompts([out])
    fields = [(p.id, p.category, p.api, p.request, p.hash, p.tags, p.expect) for p in original]
    assert fields == [(p.id, p.category, p.api, p.request, p.hash, p.tags, p.expect)
                      for p in back]
    assert out.read_text().startswith("# Written by `quantcheck prompts convert` from ")
    assert "\n  messages:\n  - role: user\n    content: |-\n      Natalia sold" in \
        out.read_text()
    invoke("prompts", "convert", sources[0], "--out", out, "--force")
    assert [p.request for p in load_prompts([out])] == [p.request for p in
                                                        load_prompts([sources[0]])]


def test_the_documented_source_file_loads(tmp_path: Path) -> None:
    """docs/prompts.md's YAML source file, on a table with the columns it names."""
    docs = (REPO / "docs" / "prompts.md").read_text(encoding="utf-8")
    example = docs.split("### The YAML source file", 1)[1].split("```yaml\n", 1)[1]
    source = tmp_path / "support.yaml"
    source.write_text(example.split("```", 1)[0])
    (tmp_path / "data").mkdir()
    pq.write_table(pa.Table.from_pylist([
        {"ticket_id": f"t{n}", "question": f"How many seats in plan {n}?",
         "answer": f"Plan {n} has {n + 2} seats.\n#### {n + 2}", "product": "Teams"}
        for n in range(600)]), tmp_path / "data" / "support-eval.parquet")
    prompts = load_prompts([source])
    assert len(prompts) == 500 and prompts[0].category == "support"
    first = prompts[0]
    number = int(first.id[1:])
    assert first.request["messages"] == [
        {"role": "system", "content": "You are a support assistant."},
        {"role": "user", "content": f"Ticket: How many seats in plan {number}?\n"
                                    "Product: Teams\nAnswer with one number."}]
    assert first.request["max_tokens"] == 512 and first.request["stop"] == ["\n\n"]
    assert first.expect is not None and (first.expect.number, first.expect.tolerance) == (
        number + 2, 0.01)


def test_a_byte_order_mark_and_blank_lines_are_no_rows(tmp_path: Path) -> None:
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes(b'\xef\xbb\xbf{"prompt": "a"}\n\n  \n{"prompt": "b"}\n')
    assert [p.source for p in load_prompts([jsonl])] == [f"{jsonl}:1", f"{jsonl}:4"]
    table = tmp_path / "bom.csv"
    table.write_bytes(b'\xef\xbb\xbfprompt,prompt\nx,y\n')
    with pytest.raises(PromptFileError, match="the header names 'prompt' twice"):
        load_prompts([table])
