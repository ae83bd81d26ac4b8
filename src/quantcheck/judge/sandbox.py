"""Run an answer's Python code against a prompt's hidden tests, in a limited process.

Only with `--allow-code-exec`: model output is untrusted code. Each run gets:
- a new process (`python -I -S`: no user site, no site-packages, no PYTHON* variables,
  the current directory not on the path) in its own process group, killed as a group
  when the wall-clock limit passes or the tests end;
- resource limits set before the answer is imported: CPU seconds, address space
  (memory), file size (its output included), open files, no core dumps;
- an empty temporary working directory, deleted afterwards; HOME pointing there;
- an environment of PATH and LC_ALL only (no tokens, keys or proxies inherited);
- stdin from /dev/null and no other inherited file descriptors;
- no network, where `unshare --net` works on this machine (root, or user namespaces
  allowed); `network_isolated()` says whether it does, and the summary records it.

What it does not protect against: the code runs as your user and can read what you
can read (your home, the run directories) and write outside the temporary directory;
without `unshare` it can reach the network; it can start processes (RLIMIT_NPROC does
not bind root), and one that leaves the process group (setsid) outlives the kill.
Run untrusted suites in a container or VM you can throw away.

The answer is written to answer.py and the tests to check.py (`from answer import *`
first), so an answer's `if __name__ == "__main__":` block does not run.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..store.report_records import CodeExecution
from ..store.run_records import CodeExpect
from .expects import CodeRunner

OUTPUT = "output.txt"
_OUTPUT_TAIL = 4096

# Sets the limits, then runs check.py. A separate string so the untrusted code never
# shares a process with quantcheck.
_BOOT = """\
import os, resource, runpy, sys
cpu, memory, output, files = map(int, sys.argv[1:5])
for limit, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (memory,) * 2),
                     (resource.RLIMIT_FSIZE, (output,) * 2), (resource.RLIMIT_NOFILE, (files,) * 2),
                     (resource.RLIMIT_CORE, (0, 0))):
    resource.setrlimit(limit, value)
sys.path.insert(0, os.getcwd())
sys.argv = ["check.py"]
runpy.run_path("check.py", run_name="__main__")
"""


@dataclass(frozen=True)
class Limits:
    """What one code check may use. `wall_s` bounds a sleeping answer, `cpu_s` a
    spinning one."""

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 512
    output_kb: int = 1024
    open_files: int = 64


@functools.cache
def network_isolated() -> bool:
    """Whether `unshare --net` can start a process without network here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        return subprocess.run([unshare, "--net", "true"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def code_execution(limits: Limits | None) -> CodeExecution:
    """What summary.json records about the code checks of a comparison."""
    if limits is None:
        return CodeExecution(allowed=False)
    return CodeExecution(allowed=True, network_isolated=network_isolated(),
                         wall_s=limits.wall_s, cpu_s=limits.cpu_s, memory_mb=limits.memory_mb)


def code_runner(limits: Limits | None) -> CodeRunner | None:
    """run_tests within `limits`, each distinct (code, tests) once; None: not allowed."""
    if limits is None:
        return None
    results: dict[tuple[str, str, str], tuple[bool, str]] = {}

    def run(code: str, expect: CodeExpect) -> tuple[bool, str]:
        key = (code, expect.entry_point, expect.tests)
        if key not in results:
            results[key] = run_tests(code, expect, limits)
        return results[key]
    return run


def run_tests(code: str, expect: CodeExpect, limits: Limits | None = None) -> tuple[bool, str]:
    """(passed, why not): `code` imported as a module, then `expect.tests` run."""
    limits = limits or Limits()
    with tempfile.TemporaryDirectory(prefix="quantcheck-code-") as folder:
        work = Path(folder)
        (work / "answer.py").write_text(code, encoding="utf-8", errors="surrogatepass")
        (work / "check.py").write_text(
            f"from answer import *\nfrom answer import {expect.entry_point}\n{expect.tests}\n",
            encoding="utf-8")
        returncode, timed_out = _run(work, limits)
        output_full = (work / OUTPUT).stat().st_size >= limits.output_kb << 10
        output = _tail(work / OUTPUT)
    if timed_out:
        return False, f"timed out after {limits.wall_s:g} s (wall clock)"
    if returncode == 0:
        return True, ""
    if output_full:  # Python ignores SIGXFSZ: the write failed, then the error's too
        return False, f"output limit ({limits.output_kb} KB) exceeded"
    return False, _why(returncode, output, expect.entry_point, limits)


def _run(work: Path, limits: Limits) -> tuple[int, bool]:
    command = [sys.executable, "-I", "-S", "-c", _BOOT, str(limits.cpu_s),
               str(limits.memory_mb << 20), str(limits.output_kb << 10), str(limits.open_files)]
    if network_isolated():
        command = ["unshare", "--net", *command]
    environment = {"PATH": os.defpath, "LC_ALL": "C.UTF-8", "HOME": str(work)}
    with (work / OUTPUT).open("wb") as output:
        process = subprocess.Popen(command, cwd=work, env=environment, stdin=subprocess.DEVNULL,
                                   stdout=output, stderr=subprocess.STDOUT, close_fds=True,
                                   start_new_session=True)
        try:
            return process.wait(limits.wall_s), False
        except subprocess.TimeoutExpired:
            return -signal.SIGKILL, True
        finally:
            _kill_group(process.pid)
            process.wait()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path) -> str:
    with path.open("rb") as handle:
        handle.seek(max(path.stat().st_size - _OUTPUT_TAIL, 0))
        return handle.read().decode("utf-8", "replace")


_FAILED_LINE = re.compile(r'File "check\.py", line \d+.*\n\s+(\S.*)\n')


def _why(returncode: int, output: str, entry_point: str, limits: Limits) -> str:
    """One line saying why the tests did not pass."""
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return f"CPU time limit ({limits.cpu_s} s) exceeded"
    if returncode < 0:
        return f"killed by signal {signal.Signals(-returncode).name}"
    lines = [line for line in output.splitlines() if line.strip()]
    last = lines[-1].strip() if lines else f"exit status {returncode}"
    if last.startswith("MemoryError"):
        return f"memory limit ({limits.memory_mb} MB) exceeded"
    if f"cannot import name '{entry_point}'" in last:
        return f"the code defines no {entry_point}"
    failed = _FAILED_LINE.findall(output)
    where = f" at `{failed[-1]}`" if failed and not last.startswith(
        ("SyntaxError", "IndentationError", "TabError")) else ""
    return f"{last[:200]}{where}"
