"""The `quantcheck` command group; the command modules register on it. Every command
ends through it with an exit status of one meaning (errors.ExitCode), and its `--help`
lists its options in sections (what to compare, what to send, ...) where they are given
one (`in_section`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from .._version import __version__
from ..errors import ExitCode, QuantcheckError
from .guard import report_crash, say, warnings_as_lines
from .heap import return_freed_memory

F = TypeVar("F", bound=Callable[..., object])
# a command with more options than this lists them in sections (tests/test_structure.py)
MOST_UNSECTIONED = 15
OTHER = "Other options"
# the sections, in the order a command usually lists them
COMPARE, PROMPTS, SEND, JUDGE = ("What to compare", "Which prompts", "What to send",
                                 "What to judge")
FORCED, POLICY, OUTPUT, CONFIG = ("Teacher forcing", "Gate limits", "Output",
                                  "Configuration")
THROUGHPUT, CERTIFY = "Throughput", "Certificate (--certify)"
ORDER = (COMPARE, PROMPTS, SEND, JUDGE, FORCED, THROUGHPUT, CERTIFY, POLICY, OUTPUT, CONFIG,
         OTHER)


def in_section(title: str, *decorators: Callable[[F], F]) -> Callable[[F], F]:
    """`decorators` (click options, or groups of them) applied, each option they add
    listed under `title` in --help."""
    def decorate(function: F) -> F:
        before = len(getattr(function, "__click_params__", []))
        for decorator in reversed(decorators):
            function = decorator(function)
        return _tagged(function, title, before)

    return decorate


def section(title: str) -> Callable[[F], F]:
    """A mark among a command's decorators: the options declared below it, up to the
    next mark or option group below, are listed under `title` in --help."""
    def mark(function: F) -> F:
        return _tagged(function, title, 0)

    return mark


def _tagged(function: F, title: str, since: int) -> F:
    """The options click has gathered on `function` from the `since`th on, those with
    no section yet set in `title`."""
    for param in getattr(function, "__click_params__", [])[since:]:
        if section_of(param) is None:
            setattr(param, "section", title)  # noqa: B010 (click's Parameter has no slot)
    return function


def section_of(param: click.Parameter) -> str | None:
    return getattr(param, "section", None)


class Sectioned(click.Command):
    """A command whose --help lists its options under their sections, in the order
    each section first appears (the options in a section in their own order); the
    options without one last, under "Other options". A command none of whose options
    has a section shows click's one list."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        params = self.get_params(ctx)
        if not any(section_of(param) for param in params):
            super().format_options(ctx, formatter)
            return
        sections: dict[str, list[tuple[str, str]]] = {}
        helps = self.get_help_option(ctx)
        for param in params:
            record = param.get_help_record(ctx)
            if record is not None and not isinstance(param, click.Argument):
                title = section_of(param) or (CONFIG if param is helps else OTHER)
                sections.setdefault(title, []).append(record)
        order = {title: place for place, title in enumerate(ORDER)}
        for title, records in sorted(sections.items(),
                                     key=lambda item: order.get(item[0], len(ORDER) - 1.5)):
            with formatter.section(title):
                formatter.write_dl(records)


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

    command_class = Sectioned


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
