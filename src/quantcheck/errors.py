"""Errors a user can act on; the CLI prints their message and exits with `exit_code`."""

from __future__ import annotations


class QuantcheckError(Exception):
    """Base class: a problem with the user's input or environment, not a bug."""

    exit_code = 2


class PromptFileError(QuantcheckError):
    """A prompt file that cannot be used; the message names file, line, prompt and field."""


class ConfigFileError(QuantcheckError):
    """A rubric, policy or other YAML file that cannot be used."""


class EndpointError(QuantcheckError):
    """An endpoint that cannot be reached or does not behave like an OpenAI-compatible server."""


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
