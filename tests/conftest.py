from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quantcheck.lab.scripted import ScriptedServer

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def serve() -> Iterator[Callable[..., ScriptedServer]]:
    """Start scripted loopback servers; all are stopped when the test ends."""
    servers: list[ScriptedServer] = []

    def start(*args: Any, **kwargs: Any) -> ScriptedServer:
        server = ScriptedServer(*args, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def write_prompts(tmp_path: Path) -> Callable[[str], Path]:
    """Write a prompt file from an indented YAML string."""
    counter = iter(range(1000))

    def write(text: str) -> Path:
        path = tmp_path / f"prompts-{next(counter)}.yaml"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write
