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
    """The server refused a request parameter (HTTP 400); retrying cannot help."""


class RunMismatch(QuantcheckError):
    """A run directory made with other parameters or prompts than the current command."""


class RunFormatError(QuantcheckError):
    """A run or report directory that is missing files or holds malformed ones."""
