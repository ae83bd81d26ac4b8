"""How a command ends other than well: a library error as one clear line and its exit
code, Ctrl-C as a resume hint and exit 130, candidates none of which is recommended
as exit 1."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

import click

from ..errors import QuantcheckError
from ..store.report_records import Overview, Summary

T = TypeVar("T")


def run_guarded(function: Callable[[], T], interrupted_hint: str | Callable[[], str]) -> T:
    """Turn library errors into one clear line and Ctrl-C into a resume hint (a callable
    hint says where the flow was when it was stopped)."""
    try:
        return function()
    except QuantcheckError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        hint = interrupted_hint if isinstance(interrupted_hint, str) else interrupted_hint()
        click.echo(f"\ninterrupted. {hint}", err=True)
        sys.exit(130)


def exit_like_the_gate(result: Summary | Overview) -> None:
    """Several candidates and none recommended: exit 1, as the gate would."""
    if isinstance(result, Overview) and result.recommendation.label is None:
        sys.exit(1)
