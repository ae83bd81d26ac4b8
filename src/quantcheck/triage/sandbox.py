"""Run an answer's Python code against a prompt's hidden tests, in a limited process.

Only with `--allow-code-exec`: model output is untrusted code, and the answer is the
attacker. Each run gets:
- a new process (`python -I -S`: no user site, no site-packages, no PYTHON* variables,
  the current directory not on the path) in its own session, killed as a group when
  the wall-clock limit passes or the tests end. The code runs in a child of that
  process, so the code's parent is never quantcheck; where `unshare` works (root, or
  user namespaces allowed) it also runs in its own PID namespace, where no process
  outside can be signalled;
- resource limits set before the answer is imported: CPU seconds, address space
  (memory), file size (its output included), open files, no core dumps;
- an empty temporary working directory, deleted afterwards however deep or odd the
  tree the code leaves (links are removed, never followed); HOME pointing there;
- an environment of PATH and LC_ALL only (no tokens, keys or proxies inherited);
- stdin from /dev/null and no inherited file descriptors but the output and the
  harness's own pipe;
- no network: on Linux (x86-64, arm64) a seccomp filter refuses every new socket
  (TCP, UDP, UNIX sockets at file paths and abstract ones, netlink) and io_uring; where
  `unshare --net` works, no network interfaces either.

A check passes only when the tests ran to their end: the harness writes a token it
alone holds to a pipe after the last test line, so an answer that ends the process
early with status 0 (`sys.exit`, `os._exit`, an `atexit` hook, `unittest.main()`) fails.
The parent reads its output from its own file handle (a file the code replaces with a
FIFO or a link is never opened) and at most its last 4 KB.

What reaches the report of a failed check: fixed sentences, limits, a builtin
exception's name and the line of the hidden tests that failed, read from the tests
quantcheck wrote (never the code's output or an exception's message: they could carry
a file's contents into an uploaded report).

What it does not protect against: the code runs as your user and can read what you
can read (your home, the run directories) and write outside the temporary directory;
without a PID namespace it can signal your other processes by their number; a process
that leaves the session (setsid) outlives the kill; code written to fool this harness
on purpose can read the token from its own process. Run untrusted suites in a
container or VM you can throw away.
"""

from __future__ import annotations

import builtins
import functools
import os
import platform
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..store.records.report_records import CodeExecution
from ..store.records.run_records import CodeExpect
from .expects import CodeRunner

_OUTPUT_TAIL = 4096
_TOKEN_BYTES = 16
_HEADER_LINES = 2  # check.py's lines before the tests (see run_tests)

# The harness: limits, the seccomp filter, a child that imports the answer and runs
# the tests, then writes the token. A separate string so the untrusted code never
# shares a process with quantcheck.
_SECCOMP_FILTER = r"""
def refuse_sockets(filter_args):
    import ctypes, struct
    arch, denied = filter_args.split(":")
    numbers = [int(n) for n in denied.split(",")]
    allow, refuse = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO|EPERM
    program = [(0x20, 0, 0, 4), (0x15, 1, 0, int(arch)), (0x06, 0, 0, refuse),
               (0x20, 0, 0, 0), (0x35, len(numbers) + 1, 0, 0x40000000)]
    program += [(0x15, len(numbers) - n, 0, number) for n, number in enumerate(numbers)]
    program += [(0x06, 0, 0, allow), (0x06, 0, 0, refuse)]
    raw = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *s) for s in program))
    fprog = struct.pack("HxxxxxxQ", len(program), ctypes.addressof(raw))
    libc = ctypes.CDLL(None, use_errno=True)
    return not libc.prctl(38, 1, 0, 0, 0) and not libc.prctl(22, 2, fprog, 0, 0)
"""
# The harness: reads the token, forks (the code's parent is this process, never
# quantcheck), sets the limits and the filter in the child, imports the answer and
# runs the tests, then writes the token. A separate string so the untrusted code
# never shares a process with quantcheck.
_BOOT = _SECCOMP_FILTER + r"""
import os, resource, runpy, sys
cpu, memory, output, files, done = map(int, sys.argv[1:6])
token = os.read(0, 64)
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
child = os.fork()
if child:
    os.close(done)
    code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    os._exit(code if code >= 0 else 128 - code)
for limit, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (memory,) * 2),
                     (resource.RLIMIT_FSIZE, (output,) * 2), (resource.RLIMIT_NOFILE, (files,) * 2),
                     (resource.RLIMIT_CORE, (0, 0))):
    resource.setrlimit(limit, value)
if sys.argv[6] and not refuse_sockets(sys.argv[6]):
    os._exit(97)
sys.path.insert(0, os.getcwd())
sys.argv = ["check.py"]
runpy.run_path("check.py", run_name="__main__")
os.write(done, token)
"""
_FILTER_FAILED = 97  # the boot's exit status when the seccomp filter cannot be set
# (audit arch, [socket, io_uring_setup]) by machine: what the seccomp filter refuses.
_SECCOMP = {"x86_64": (0xC000003E, (41, 425)), "aarch64": (0xC00000B7, (198, 425))}
_NOT_ISOLATED = "files its user can read or write outside the working directory"


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
def _unshare_works() -> bool:
    """Whether `unshare` can give a process its own network and PID namespaces here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        return subprocess.run([unshare, "--net", "--pid", "--fork", "true"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _seccomp_filter() -> str:
    """The boot's filter argument: "" where none can be set (not Linux x86-64 or arm64,
    or a kernel without seccomp filters)."""
    found = _SECCOMP.get(platform.machine()) if sys.platform == "linux" else None
    argument = f"{found[0]}:{','.join(map(str, found[1]))}" if found else ""
    return argument if argument and _seccomp_works(argument) else ""


@functools.cache
def _seccomp_works(argument: str) -> bool:
    """Whether a process with the filter set is refused a socket here."""
    probe = (_SECCOMP_FILTER + "import socket, sys\n"
             "assert refuse_sockets(sys.argv[1])\n"
             "try:\n    socket.socket()\nexcept PermissionError:\n    sys.exit(0)\n"
             "sys.exit(1)\n")
    try:
        return subprocess.run([sys.executable, "-I", "-S", "-c", probe, argument],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def network_isolated() -> bool:
    """Whether the code can open no socket at all (seccomp) or has no network (netns)."""
    return bool(_seccomp_filter()) or _unshare_works()


def code_execution(limits: Limits | None) -> CodeExecution:
    """What summary.json records about the code checks of a comparison."""
    if limits is None:
        return CodeExecution(allowed=False)
    not_isolated = [_NOT_ISOLATED]
    if not _seccomp_filter():
        not_isolated.append("UNIX sockets at file paths (e.g. a container runtime's)"
                            + ("" if _unshare_works() else " and the network"))
    if not _unshare_works():
        not_isolated.append("your other processes, by their number (no PID namespace)")
    return CodeExecution(allowed=True, network_isolated=network_isolated(),
                         processes_isolated=_unshare_works(), not_isolated=not_isolated,
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
    """(passed, why not): `code` imported as a module, then `expect.tests` run to
    their end."""
    limits = limits or Limits()
    work = Path(tempfile.mkdtemp(prefix="quantcheck-code-"))
    try:
        (work / "answer.py").write_text(code, encoding="utf-8", errors="surrogatepass")
        (work / "check.py").write_text(
            f"from answer import *\nfrom answer import {expect.entry_point}\n{expect.tests}\n",
            encoding="utf-8")
        outcome = _run(work, limits)
    finally:
        remove_tree(work)
    return _verdict(outcome, expect, limits)


@dataclass(frozen=True)
class _Outcome:
    returncode: int
    timed_out: bool
    finished: bool  # the harness's token came back: the tests ran to their end
    output: str  # the last 4 KB (parsed for numbers and names only)
    output_full: bool


def _run(work: Path, limits: Limits) -> _Outcome:
    token = secrets.token_bytes(_TOKEN_BYTES)
    done_read, done_write = os.pipe()
    command = [sys.executable, "-I", "-S", "-c", _BOOT, str(limits.cpu_s),
               str(limits.memory_mb << 20), str(limits.output_kb << 10), str(limits.open_files),
               str(done_write), _seccomp_filter()]
    if _unshare_works():
        command = ["unshare", "--net", "--pid", "--fork", "--kill-child", *command]
    environment = {"PATH": os.defpath, "LC_ALL": "C.UTF-8", "HOME": str(work)}
    output = tempfile.TemporaryFile(prefix="quantcheck-code-output-")
    try:
        process = subprocess.Popen(command, cwd=work, env=environment, stdin=subprocess.PIPE,
                                   stdout=output, stderr=subprocess.STDOUT,
                                   pass_fds=(done_write,), start_new_session=True)
        os.close(done_write)
        returncode, timed_out = _wait(process, token, limits)
        size = os.fstat(output.fileno()).st_size
        tail = os.pread(output.fileno(), _OUTPUT_TAIL, max(size - _OUTPUT_TAIL, 0))
        return _Outcome(returncode, timed_out, _token_came_back(done_read, token),
                        tail.decode("utf-8", "replace"), size >= limits.output_kb << 10)
    finally:
        os.close(done_read)
        output.close()


def _wait(process: subprocess.Popen[bytes], token: bytes, limits: Limits) -> tuple[int, bool]:
    try:
        assert process.stdin is not None
        process.stdin.write(token)
        process.stdin.close()
        return process.wait(limits.wall_s), False
    except (BrokenPipeError, OSError):  # the boot died at once: its status says why
        return process.wait(limits.wall_s), False
    except subprocess.TimeoutExpired:
        return -signal.SIGKILL, True
    finally:
        _kill_group(process.pid)
        process.wait()


def _token_came_back(descriptor: int, token: bytes) -> bool:
    """Whether the pipe holds exactly the token (read without waiting: a process the
    code left running may still hold the pipe open)."""
    os.set_blocking(descriptor, False)
    try:
        return os.read(descriptor, 4 * _TOKEN_BYTES) == token
    except BlockingIOError:
        return False


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def remove_tree(top: Path) -> None:
    """Delete a directory tree the code may have shaped: any depth or width (no
    recursion, each folder read once, paths relative to open folders), links removed
    and never followed, folders it made unreadable opened again. What cannot be
    deleted is left."""
    try:
        os.chmod(top, stat.S_IRWXU)
        stack = [_Folder.open(top, None, "")]
    except OSError:
        return
    while stack:
        folder = stack[-1]
        if folder.subfolders:
            name = folder.subfolders.pop()
            try:
                stack.append(_Folder.open(name, folder.fd, name))
            except OSError:
                _quietly(os.unlink, name, dir_fd=folder.fd)
            continue
        os.close(folder.fd)
        stack.pop()
        if stack:
            _quietly(os.rmdir, folder.name, dir_fd=stack[-1].fd)
    _quietly(os.rmdir, top)


@dataclass
class _Folder:
    """An open folder being emptied: its files are gone, these subfolders are left."""

    fd: int
    name: str
    subfolders: list[str]

    @classmethod
    def open(cls, path: str | Path, parent: int | None, name: str) -> _Folder:
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
        try:
            fd = os.open(path, flags, dir_fd=parent)
        except PermissionError:  # made unreadable: its owner (us) may open it again
            os.chmod(path, stat.S_IRWXU, dir_fd=parent)
            fd = os.open(path, flags, dir_fd=parent)
        with os.scandir(fd) as entries:
            found = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
        for entry, is_folder in found:
            if not is_folder:
                _quietly(os.unlink, entry, dir_fd=fd)
        return cls(fd, name, [entry for entry, is_folder in found if is_folder])


def _quietly(action: Callable[..., object], *args: object, **kwargs: object) -> None:
    try:
        action(*args, **kwargs)
    except OSError:
        pass


_FAILED_LINE = re.compile(r'File "check\.py", line (\d+)')
_BUILTIN_ERRORS = {name for name, value in vars(builtins).items()
                   if isinstance(value, type) and issubclass(value, BaseException)}


def _verdict(outcome: _Outcome, expect: CodeExpect, limits: Limits) -> tuple[bool, str]:
    if outcome.timed_out:
        return False, f"timed out after {limits.wall_s:g} s (wall clock)"
    if outcome.returncode == 0 and outcome.finished:
        return True, ""
    if outcome.output_full:  # Python ignores SIGXFSZ: the write failed, then the error's too
        return False, f"output limit ({limits.output_kb} KB) exceeded"
    if outcome.returncode == 0:
        return False, "the process ended (status 0) before the tests ran to their end"
    return False, _why(outcome.returncode, outcome.output, expect, limits)


def _why(returncode: int, output: str, expect: CodeExpect, limits: Limits) -> str:
    """One line saying why the tests did not pass, made of fixed sentences, numbers,
    a builtin exception's name and a line of the hidden tests."""
    if returncode == _FILTER_FAILED:
        return "the sandbox could not refuse sockets on this machine (seccomp)"
    if returncode in (128 + signal.SIGXCPU, 128 + signal.SIGKILL):
        return f"CPU time limit ({limits.cpu_s} s) exceeded"
    if returncode > 128:
        return f"killed by signal {_signal_name(returncode - 128)}"
    if returncode < 0:
        return f"the harness was killed by signal {_signal_name(-returncode)}"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    error = lines[-1].split(":")[0] if lines else ""
    if error == "MemoryError":
        return f"memory limit ({limits.memory_mb} MB) exceeded"
    if error == "ImportError" and f"cannot import name '{expect.entry_point}'" in lines[-1]:
        return f"the code defines no {expect.entry_point}"
    name = error if error in _BUILTIN_ERRORS else f"exit status {returncode}"
    return name + _failed_test_line(output, expect)


def _failed_test_line(output: str, expect: CodeExpect) -> str:
    """' at `line`': the hidden tests' line the traceback names last, as written."""
    numbers = _FAILED_LINE.findall(output)
    tests = expect.tests.splitlines()
    at = int(numbers[-1]) - _HEADER_LINES - 1 if numbers else -1
    if not 0 <= at < len(tests) or not tests[at].strip():
        return ""
    return f" at `{tests[at].strip()[:120]}`"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
