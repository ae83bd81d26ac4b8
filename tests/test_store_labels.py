"""store/labels.py: the one rule for labels, checked wherever a label is given (collect,
run) or read (compare's candidates) before anything is sent or written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quantcheck.lab.launch import free_port
from quantcheck.store.labels import is_label

from .conftest import CANDIDATE_PROMPTS, WritePrompts, invoke

BAD_LABELS = {"final-newline": "fp8\n", "5000-characters": "x" * 5000, "a-path": "../fp8",
              "a-space": "fp 8", "empty": "", "dot-first": ".fp8", "non-ascii": "fp8é",
              "65-characters": "x" * 65}


@pytest.mark.parametrize("label", list(BAD_LABELS.values()), ids=list(BAD_LABELS))
def test_a_label_that_breaks_the_rule_is_refused_before_anything_is_sent(
        write_prompts: WritePrompts, tmp_path: Path, label: str) -> None:
    # nothing listens there: a command that sent anything would fail another way
    nobody = f"http://127.0.0.1:{free_port()}/v1"
    prompts = write_prompts(CANDIDATE_PROMPTS)
    commands = {
        "collect": ["collect", "--endpoint", nobody, "--label", label, "--out",
                    tmp_path / "run"],
        "run --a-label": ["run", "--a", nobody, "--a-label", label, "--b", nobody, "--out",
                          tmp_path / "one"],
        "run --b-label": ["run", "--a", nobody, "--b", nobody, "--b-label", label, "--out",
                          tmp_path / "one"],
        "run, a candidate's --b-label": ["run", "--a", nobody, "--b", nobody, "--b-label",
                                         "fp8", "--b", nobody, "--b-label", label, "--out",
                                         tmp_path / "several"],
    }
    for name, args in commands.items():
        result = invoke(*args, "--prompts", prompts, "--no-preflight")
        assert result.exit_code == 2, (name, result.output)
        assert "breaks the rule for labels" in result.output, (name, result.output)
        assert "unreachable" not in result.output and "Traceback" not in result.output
    assert not (tmp_path / "several" / "candidates").exists()


def test_compare_refuses_a_candidate_whose_manifest_label_breaks_the_rule(
        candidate_endpoints: dict[str, str], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    prompts, runs = write_prompts(CANDIDATE_PROMPTS), tmp_path / "runs"
    for label in ("bf16", "flips", "clean"):
        collected = invoke("collect", "--endpoint", candidate_endpoints[label], "--prompts",
                           prompts, "--out", runs / label, "--no-preflight")
        assert collected.exit_code == 0, collected.output
    for bad in (BAD_LABELS["5000-characters"], BAD_LABELS["final-newline"]):
        manifest = runs / "clean" / "manifest.json"
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "label": bad}))
        result = invoke("compare", runs / "bf16", runs / "flips", runs / "clean", "--out",
                        tmp_path / "report")
        assert result.exit_code == 2, result.output
        assert f"{manifest}: label" in result.output and "breaks the rule" in result.output
        assert not (tmp_path / "report").exists()


def test_a_default_label_is_made_from_the_folder_name(
        candidate_endpoints: dict[str, str], write_prompts: WritePrompts,
        tmp_path: Path) -> None:
    out = tmp_path / ("fp8 run, take 2" + "x" * 80)
    result = invoke("collect", "--endpoint", candidate_endpoints["clean"], "--prompts",
                    write_prompts(CANDIDATE_PROMPTS), "--out", out, "--no-preflight")
    assert result.exit_code == 0, result.output
    label = json.loads((out / "manifest.json").read_text())["label"]
    assert label == ("fp8_run__take_2" + "x" * 80)[:64]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(max_size=80))
def test_a_label_the_rule_keeps_names_exactly_one_folder(label: str) -> None:
    if not is_label(label):
        return
    assert len(label) <= 64 and label == label.strip() and label[0].isalnum()
    assert Path("candidates", label).name == label and not label.startswith((".", "-"))
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in label)
