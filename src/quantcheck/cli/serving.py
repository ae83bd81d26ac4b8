"""Serving until Ctrl-C, for `review` and the lab endpoints."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable

import click

from ..errors import ExitCode


def serve_until_stopped(start: Callable[[], Awaitable[str]], announce: Callable[[str], str],
                        host: str, port: int, stopped: str = "") -> None:
    """Run `start` (it starts a server and returns the URL it listens on, with the port
    it really bound: --port 0 takes any free one), print `announce(url)` and serve until
    Ctrl-C, then print `stopped`. A port that cannot be listened on is one line, exit 2."""
    async def serve() -> None:
        click.echo(announce(await start()), err=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        if stopped:
            click.echo(stopped, err=True)
    except OSError as exc:
        click.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        sys.exit(ExitCode.INPUT)


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
