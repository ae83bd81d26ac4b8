"""The policy table: every gate limit declared once, and everything else made from it
(Policy's fields, the policy file's checks and JSON Schema, the gate's options and so
--print-config, the docs table); tests/test_structure.py fails on a limit written by hand
anywhere else, tests/test_worked_example.py adds one to a copy of the package."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from quantcheck.cli import cli
from quantcheck.errors import ConfigFileError
from quantcheck.gate.limits import (
    BY_KEY,
    CERTIFICATE_LIMITS,
    LIMITS,
    Counted,
    Limit,
    policy_schema,
    value_problem,
)
from quantcheck.gate.verdict import Policy, load_policy

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "src" / "quantcheck"


def test_policy_has_one_field_per_limit_with_the_tables_default() -> None:
    declared = dataclasses.fields(Policy)
    assert [f.name for f in declared] == [limit.key for limit in LIMITS]
    assert {f.name: f.default for f in declared} == {limit.key: limit.default
                                                                    for limit in LIMITS}


def _gate_options() -> dict[str, object]:
    command = cli.commands["gate"]
    return {param.name: param for param in command.params if param.name}


def test_the_gate_has_one_option_per_limit_from_its_row() -> None:
    options = _gate_options()
    for limit in LIMITS:
        option = options[limit.key]
        names = [*option.opts, *option.secondary_opts]  # type: ignore[attr-defined]
        assert "/".join(names) == limit.flag
        assert option.help == limit.help  # type: ignore[attr-defined]


def test_print_config_lists_every_limit(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["gate", str(tmp_path), "--print-config"])
    assert result.exit_code == 0, result.output
    printed = [line.split(":")[0] for line in result.output.splitlines()[1:]]
    assert [key for key in printed if key.replace("-", "_") in BY_KEY] == \
        [limit.key.replace("_", "-") for limit in LIMITS]


def test_an_option_overrides_the_file_for_each_limit(tmp_path: Path) -> None:
    """Every limit's option reaches the Policy under its own key."""
    from quantcheck.cli.options import PolicyOverrides

    for limit in LIMITS:
        value = (not limit.default) if limit.kind == "switch" else 7 if \
            limit.kind == "count" else 0.5
        chosen = PolicyOverrides({limit.key: value}).applied(Policy())
        assert getattr(chosen, limit.key) == value
        setattr(chosen, limit.key, limit.default)
        assert chosen == Policy()  # no other limit moved


@pytest.mark.parametrize("example", ["prompts/policy.yaml",
                                     "src/quantcheck/pipeline/starter/policy.yaml"])
def test_the_shipped_example_policies_are_valid_and_name_every_limit(example: str) -> None:
    """Each example names every key (a reader sees each rule), and loads."""
    load_policy(ROOT / example)
    assert set(yaml.safe_load((ROOT / example).read_text())) == set(BY_KEY)


VALUES = st.none() | st.booleans() | st.integers(-5, 200) | st.floats(-2, 200) | \
    st.text(max_size=3) | st.lists(st.integers(), max_size=2)


@given(key=st.sampled_from(sorted(BY_KEY)), value=VALUES)
def test_the_file_check_and_the_schema_agree(key: str, value: object) -> None:
    """The check load_policy makes and the shipped JSON Schema, both made from the
    table, take and refuse the same values."""
    schema = policy_schema()
    valid = jsonschema.Draft202012Validator(schema).is_valid({key: value})
    if isinstance(value, float) and value.is_integer() and BY_KEY[key].kind == "count":
        valid = False  # JSON Schema counts 3.0 an integer; a policy limit of 3.0 is refused
    assert (value_problem(key, value) is None) == valid


@pytest.mark.parametrize("limit", LIMITS, ids=lambda limit: limit.key)
def test_a_bad_file_value_names_the_file_and_the_key(limit: object, tmp_path: Path) -> None:
    key = limit.key  # type: ignore[attr-defined]
    path = tmp_path / "policy.yaml"
    path.write_text(f"{key}: -1\n", encoding="utf-8")
    with pytest.raises(ConfigFileError, match=f"{path}: field '{key}'"):
        load_policy(path)


def _policy_fields_read(module: Path) -> set[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "policy"}


def test_the_limits_marked_for_a_certificate_are_those_its_gate_reads() -> None:
    """The gate refuses on a certificate every option but these (cli/_reporting.py):
    they must be the very limits gate/certificate_gate.py applies."""
    assert set(CERTIFICATE_LIMITS) == _policy_fields_read(PACKAGE / "gate" /
                                                          "certificate_gate.py")


def test_every_limit_is_read_by_a_rule() -> None:
    """A row of the table with no rule reading its Policy field would be a limit that
    limits nothing."""
    read = {limit.key for limit in LIMITS if limit.counts is not None}  # its own rule
    for module in ("verdict.py", "certificate_gate.py", "overview.py"):
        read |= _policy_fields_read(PACKAGE / "gate" / module)
    assert set(BY_KEY) <= read, set(BY_KEY) - read


def test_every_limit_read_is_a_row_of_the_table() -> None:
    """`Policy`'s fields are made from the table, so the type checker sees them as Any:
    a misspelt `policy.KEY` is caught here instead."""
    for path in PACKAGE.rglob("*.py"):
        assert _policy_fields_read(path) <= set(BY_KEY), path


def _limit_of_rule() -> dict[str, str]:
    """Each gate.json rule and the default its limit gives it, as the docs say it: 0,
    or off (null, or a require_ switch that is false)."""
    said = {}
    for limit in LIMITS:
        if limit.kind == "switch" and limit.default:
            continue  # confident_flips_only says how factual_flips counts, not its limit
        for rule in limit.rules:
            off = limit.default is None or limit.default is False
            said[rule] = "off" if off else limit.default_words()
    return said


def test_the_docs_rule_tables_say_each_rules_default_as_the_table() -> None:
    """docs/gate.md's tables of rules (what each counts) say each rule's default limit
    in their last cell: it must be the policy table's, and every rule is described."""
    text = (ROOT / "docs" / "gate.md").read_text(encoding="utf-8")
    generated_start = text.index("<!-- policy table: made from gate/limits.py -->")
    generated_end = text.index("<!-- end of policy table -->")
    text = text[:generated_start] + text[generated_end:]
    said = _limit_of_rule()
    described = set()
    for row in (line for line in text.splitlines() if line.startswith("| `")):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        for rule in re.findall(r"`([a-z_]+)`", cells[0]):
            if rule in said:
                described.add(rule)
                assert re.match(rf"{said[rule]}\b", cells[-1]), (rule, cells[-1])
    assert described == set(said)


@pytest.mark.parametrize(("kind", "rules"), [("points", ("x",)), ("switch", ("x",)),
                                             ("count", ("x", "y")), ("share", ())])
def test_a_row_that_counts_prompts_is_a_count_or_share_of_one_rule(kind: Any,
                                                                   rules: tuple[str, ...]
                                                                   ) -> None:
    with pytest.raises(ValueError, match="max_x: a limit whose row counts prompts"):
        Limit("max_x", kind, None, "X.", rules, counts=Counted("x", lambda row: True))
