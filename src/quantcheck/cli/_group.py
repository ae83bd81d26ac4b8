"""The `quantcheck` command group; the command modules register on it. Every command
ends through it with an exit status of one meaning (errors.ExitCode)."""

from __future__ import annotations

import click

from .._version import __version__
from ..errors import ExitCode, QuantcheckError
from .guard import report_crash, say, warnings_as_lines
from .heap import return_freed_memory


class Commands(click.Group):
    """Whatever escapes a command ends the same way in every command: a library error
    as its line and code, Ctrl-C as 130 (click would say "Aborted!" and exit 1, the
    code of a failed gate), anything else as a bug: one line, the traceback saved, 3.
    What it says has credentials cut out; the library's warnings are said as lines."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            with warnings_as_lines():
                return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort,
                SystemExit):
            raise
        except QuantcheckError as exc:
            say(f"error: {exc}")
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("\ninterrupted.", err=True)
            ctx.exit(ExitCode.INTERRUPTED)
        except Exception as exc:  # a bug: said in one line, the traceback kept
            if isinstance(exc, BrokenPipeError):
                raise  # the reader of stdout went away (`| head`): click's to handle
            report_crash(exc)
            ctx.exit(ExitCode.UNEXPECTED)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="quantcheck")
def cli() -> None:
    """Did this serving change make the model worse?

    Sends the same greedy prompts to two OpenAI-compatible endpoints, triages every
    pair, renders a review sheet and gates CI on factual flips.

    Exit status, the same for every command: 0 pass; 1 a regression the gate found,
    or requests that failed; 2 a usage or input problem; 3 an unexpected error (its
    traceback is saved to a file named on stderr).
    """
    return_freed_memory()
