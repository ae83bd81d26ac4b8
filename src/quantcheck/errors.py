"""Errors a user can act on; the CLI prints their message and exits with `exit_code`.
What each exit status means, the same for every command: `ExitCode` (docs/ci.md)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """A command's exit status: one meaning for every command, one candidate or many."""

    PASS = 0
    FAIL = 1  # a regression the gate found, or requests that failed after retries
    INPUT = 2  # a usage or input problem: options, files, an endpoint that cannot serve
    UNEXPECTED = 3  # a bug: one line on stderr, the traceback saved to a file
    INTERRUPTED = 130  # Ctrl-C; what was collected is kept


class QuantcheckError(Exception):
    """Base class: a problem with the user's input or environment, not a bug."""

    exit_code: int = ExitCode.INPUT


class PromptFileError(QuantcheckError):
    """A prompt file that cannot be used; the message names file, line, prompt and field."""


class ConfigFileError(QuantcheckError):
    """A rubric, policy or other YAML file that cannot be used."""


class EndpointError(QuantcheckError):
    """An endpoint that cannot be reached or does not behave like an OpenAI-compatible server."""


class RequestsFailed(EndpointError):
    """Requests that were sent and failed after their retries (an endpoint that stopped
    answering mid-run, a throughput phase that could not finish): what was measured is
    incomplete, so the command fails (exit 1), as a failed request fails the gate."""

    exit_code = ExitCode.FAIL


class ParameterRejected(EndpointError):
    """The server refused a request parameter (HTTP 400); retrying cannot help.
    `reason` is what was refused, `fix` the option to rerun with (None if unknown)."""

    def __init__(self, reason: str, fix: str | None = None) -> None:
        super().__init__(reason if fix is None else f"{reason}\nFix: rerun with {fix}")
        self.reason, self.fix = reason, fix


class RunMismatch(QuantcheckError):
    """A run directory made with other parameters or prompts than the current command."""


class RunFormatError(QuantcheckError):
    """A run or report directory that is missing files or holds malformed ones."""


class EvalLogError(QuantcheckError):
    """An eval harness's log (lm-evaluation-harness, Inspect, Every Eval Ever) that
    cannot be read, or two that do not pair; the message names the file, the line or
    entry, the field and the fix."""
