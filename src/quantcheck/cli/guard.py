"""How a command ends other than well, the same for every command (errors.ExitCode): a
library error as one clear line and its exit code, Ctrl-C as a resume hint and 130, a
bug as one line naming the error and the file its traceback was saved to (exit 3).

Every line said here and every crash file written here has credentials cut out
(store.redaction): a URL's user and password, keys in its query, Authorization and
API-key headers, bearer tokens, `--api-key`-like values, and the literal values of the
environment's key variables and of the command line's URL passwords."""

from __future__ import annotations

import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO, TypeVar

import click

from .._version import __version__
from ..errors import ExitCode, QuantcheckError
from ..store.redaction import (
    CredentialsIgnored,
    command_secrets,
    environment_secrets,
    redact,
    redact_command,
)

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
        say(f"error: {exc}")
        left = failed_hint() if failed_hint else ""
        if left:
            say(left)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        hint = interrupted_hint if isinstance(interrupted_hint, str) else interrupted_hint()
        click.echo(f"\ninterrupted. {hint}", err=True)
        sys.exit(ExitCode.INTERRUPTED)


def known_secrets() -> list[str]:
    """Literal strings never shown: the values of the environment's key variables and
    the passwords of the command line's URLs (which the patterns may not all catch)."""
    return environment_secrets() + command_secrets(sys.argv)


def redacted(text: str) -> str:
    """`text` as it may be shown or saved: without credentials."""
    return redact(text, known_secrets())


def say(line: str) -> None:
    """A line on stderr, without credentials."""
    click.echo(redacted(line), err=True)


def save_crash(error: BaseException, folder: Path | None = None) -> Path:
    """Write the traceback of an unexpected error, with the version and the command
    line, to a new file in the temporary folder ($TMPDIR); its path. The file holds
    no credentials, and no variable's value (a traceback names lines, not locals)."""
    folder = folder or Path(tempfile.gettempdir())
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    secrets = known_secrets()
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=folder, delete=False,
                                     prefix=f"{CRASH_PREFIX}{stamp}-", suffix=".txt") as out:
        out.write(f"quantcheck {__version__}, Python {sys.version.split()[0]}\n"
                  f"command: {redact_command(sys.argv, secrets)}\n\n")
        out.write(redact("".join(traceback.format_exception(error)), secrets))
    return Path(out.name)


def crash_line(error: BaseException, saved: Path | None) -> str:
    """The one line an unexpected error prints: what it is, and where its traceback is."""
    what = (redacted(str(error)).strip().splitlines() or [""])[0][:200]
    name = type(error).__name__ + (f": {what}" if what else "")
    where = f"the traceback is saved in {saved}" if saved else "its traceback could not be saved"
    return f"unexpected error (a bug in quantcheck): {name}; {where}"


def report_crash(error: BaseException) -> None:
    """One line on stderr naming the error and the saved traceback."""
    try:
        saved: Path | None = save_crash(error)
    except OSError:
        saved = None
    say(crash_line(error, saved))


@contextmanager
def warnings_as_lines() -> Iterator[None]:
    """The library's warnings (store.redaction.CredentialsIgnored),
    each said once as one `warning: ...` line on stderr while a command runs."""
    shown_before = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        if issubclass(category, CredentialsIgnored):
            say(f"warning: {message}")
        else:
            shown_before(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("default", CredentialsIgnored)
        warnings.showwarning = show
        yield

