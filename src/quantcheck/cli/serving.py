"""Serving until Ctrl-C, for `review` and the lab endpoints."""

from __future__ import annotations

import asyncio
import socket
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
        _cannot_listen(host, port, exc)


def refuse_a_port_in_use(host: str, port: int) -> None:
    """Exit 2 now, before a long start (loading a model), when the port is taken: the
    same line serve_until_stopped would print after it."""
    if port == 0:
        return
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        _cannot_listen(host, port, exc)


def _cannot_listen(host: str, port: int, exc: OSError) -> None:
    click.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
    sys.exit(ExitCode.INPUT)


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
