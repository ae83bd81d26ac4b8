"""`quantcheck plan`: the paired prompts a decision needs, sized before anything is sent
(Connor's paired formula; its reference values are in test_triage_stats.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .conftest import invoke


def test_two_points_at_ten_percent_disagreement() -> None:
    result = invoke("plan", "--detect", "2", "--disagreement", "10")
    assert result.exit_code == 0, result.output
    assert result.output == (
        "To detect a change of 2 points in expect pass rate when 10% of prompts pass on one "
        "side only (80% power, 5% two-sided): about 1,960 paired prompts.\n")


def test_the_change_a_suite_detects() -> None:
    result = invoke("plan", "--prompts", "500", "--disagreement", "6")
    assert result.exit_code == 0, result.output
    assert "500 paired prompts detect a change of 3.1 points" in result.output
    small = invoke("plan", "--prompts", "30", "--disagreement", "10")
    assert small.exit_code == 0
    assert "detect no change" in small.output and "needs 77" in small.output


def test_power_and_level_change_the_size() -> None:
    result = invoke("plan", "--detect", "2", "--disagreement", "10", "--power", "90",
                    "--alpha", "1")
    assert result.exit_code == 0
    assert "(90% power, 1% two-sided): about 3,7" in result.output  # more than 1,960


@pytest.mark.parametrize(("args", "says"), [
    (["--disagreement", "10"], "give --detect POINTS"),
    (["--detect", "2", "--prompts", "9", "--disagreement", "10"], "give --detect POINTS"),
    (["--detect", "20", "--disagreement", "10"], "a pass rate moves only on prompts"),
    (["--detect", "0", "--disagreement", "10"], "--detect"),
    (["--detect", "2"], "--disagreement"),
    (["--detect", "2", "--disagreement", "10", "--power", "100"], "--power"),
])
def test_impossible_requests_are_one_usage_error(args: list[str], says: str) -> None:
    result = invoke("plan", *args)
    assert result.exit_code == 2 and says in result.output, result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("args", "option"), [
    (["--detect", "1e-200", "--disagreement", "10"], "--detect"),
    (["--detect", "1e-160", "--disagreement", "10"], "--detect"),
    (["--disagreement", "1e-200", "--prompts", "9"], "--disagreement"),
    (["--prompts", "1" + "0" * 400, "--disagreement", "10"], "--prompts"),
    (["--detect", "2", "--disagreement", "10", "--alpha", "1e-300"], "--alpha"),
    (["--detect", "2", "--disagreement", "10", "--power", "99.9999999"], "--power"),
])
def test_numbers_too_small_or_large_to_size_are_refused_naming_the_option(
        args: list[str], option: str) -> None:
    result = invoke("plan", *args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in result.output and "range" in result.output


percents = st.floats(0.001, 100)


@settings(max_examples=60, deadline=None)
@given(percents, st.one_of(percents.map(lambda p: ["--detect", repr(p)]),
                           st.integers(1, 10**12).map(lambda n: ["--prompts", str(n)])),
       st.floats(50, 99.999), st.floats(0.001, 50))
def test_every_value_in_the_options_ranges_is_sized_or_a_usage_error(
        disagreement: float, asked: list[str], power: float, alpha: float) -> None:
    result = invoke("plan", "--disagreement", repr(disagreement), *asked,
                    "--power", repr(power), "--alpha", repr(alpha))
    detect_too_large = asked[0] == "--detect" and float(asked[1]) > disagreement
    assert result.exit_code == (2 if detect_too_large else 0), result.output
    assert "paired prompts" in result.output or detect_too_large


def test_the_count_is_named_count_and_its_former_name_still_works() -> None:
    """--count N sizes what --prompts N did; --prompts N, hidden, says the new name."""
    result = invoke("plan", "--count", "500", "--disagreement", "6")
    assert result.exit_code == 0, result.output
    assert "500 paired prompts detect a change of 3.1 points" in result.output
    assert "--prompts" not in result.output
    former = invoke("plan", "--prompts", "500", "--disagreement", "6")
    assert former.exit_code == 0, former.output
    assert former.stdout == result.stdout
    assert former.stderr == "note: plan's --prompts N is now --count N\n"
    both = invoke("plan", "--count", "5", "--prompts", "5", "--disagreement", "6")
    assert both.exit_code == 2 and "give --count N once" in both.output
    shown = invoke("plan", "--help").output
    assert "--count N" in shown and "--prompts" not in shown
