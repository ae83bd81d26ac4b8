"""lab/endpoint.py: the lab server itself (its dialects are tested where they are read:
test_fetch_collect.py, test_wire_formats.py). What keeps it from starting is raised by
`start`, at once."""

from __future__ import annotations

import socket
import time

import pytest

from quantcheck.lab.scripted import ScriptedServer


def test_a_port_in_use_is_raised_by_start_at_once() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(OSError, match="address already in use"):
            ScriptedServer(port=port).start()
        assert time.monotonic() - started < 5  # not the 10 s wait for a server never ready
    with ScriptedServer(port=port) as server:  # the port free again: it serves
        assert server.port == port
