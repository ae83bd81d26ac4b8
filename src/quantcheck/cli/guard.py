"""How a command ends other than well, the same for every command (errors.ExitCode): a
library error as one clear line and its exit code, Ctrl-C as a resume hint and 130, a
bug as one line naming the error and the file its traceback was saved to (exit 3)."""

from __future__ import annotations

import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from .._version import __version__
from ..errors import ExitCode, QuantcheckError

T = TypeVar("T")
CRASH_PREFIX = "quantcheck-crash-"


def run_guarded(function: Callable[[], T], interrupted_hint: str | Callable[[], str],
                failed_hint: Callable[[], str] | None = None) -> T:
    """Turn library errors into one clear line and Ctrl-C into a resume hint (a callable
    hint says where the flow was when it was stopped); `failed_hint`, when it has
    something to say, says on a line of its own what a failure left."""
    try:
        return function()
    except QuantcheckError as exc:
        click.echo(f"error: {exc}", err=True)
        left = failed_hint() if failed_hint else ""
        if left:
            click.echo(left, err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        hint = interrupted_hint if isinstance(interrupted_hint, str) else interrupted_hint()
        click.echo(f"\ninterrupted. {hint}", err=True)
        sys.exit(ExitCode.INTERRUPTED)


def save_crash(error: BaseException, folder: Path | None = None) -> Path:
    """Write the traceback of an unexpected error, with the version and the command
    line, to a new file in the temporary folder ($TMPDIR); its path."""
    folder = folder or Path(tempfile.gettempdir())
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=folder, delete=False,
                                     prefix=f"{CRASH_PREFIX}{stamp}-", suffix=".txt") as out:
        out.write(f"quantcheck {__version__}, Python {sys.version.split()[0]}\n"
                  f"command: {' '.join(sys.argv)}\n\n")
        out.write("".join(traceback.format_exception(error)))
    return Path(out.name)


def crash_line(error: BaseException, saved: Path | None) -> str:
    """The one line an unexpected error prints: what it is, and where its traceback is."""
    what = (str(error).strip().splitlines() or [""])[0][:200]
    name = type(error).__name__ + (f": {what}" if what else "")
    where = f"the traceback is saved in {saved}" if saved else "its traceback could not be saved"
    return f"unexpected error (a bug in quantcheck): {name}; {where}"


def report_crash(error: BaseException) -> None:
    """One line on stderr naming the error and the saved traceback."""
    try:
        saved: Path | None = save_crash(error)
    except OSError:
        saved = None
    click.echo(crash_line(error, saved), err=True)
