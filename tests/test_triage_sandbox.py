"""triage/sandbox.py: the answer is the attacker. A check passes only when the hidden
tests ran to their end; whatever the code leaves behind costs bounded time and memory;
it cannot kill quantcheck, reach a socket, or carry a file's contents into the report."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from quantcheck.store.records.run_records import CodeExpect
from quantcheck.triage import sandbox
from quantcheck.triage.sandbox import Limits, code_execution, remove_tree, run_tests

SQUARE = CodeExpect(entry_point="square", tests="assert square(3) == 9\nassert square(-2) == 4")
RIGHT = "def square(x):\n    return x * x\n"
WRONG = "def square(x):\n    return x + x\n"
LIMITS = Limits(wall_s=5, cpu_s=5, memory_mb=256)
NOT_TO_THE_END = "the process ended (status 0) before the tests ran to their end"


@pytest.fixture(autouse=True)
def own_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The sandbox's working folders go here, so a test can see what is left."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    assert not [p for p in folder.iterdir() if p.name.startswith("quantcheck-code-")]


@pytest.fixture(params=[True, False], ids=["pid-namespace", "no-namespace"])
def namespaces(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both ways the sandbox runs: with unshare (root, user namespaces) and without."""
    if request.param and not sandbox._unshare_works():
        pytest.skip("unshare does not work on this machine")
    monkeypatch.setattr(sandbox, "_unshare_works", lambda: request.param)
    return bool(request.param)


@pytest.mark.parametrize("ending", [
    "import sys\ndef main():\n    return 0\nsys.exit(main())\n",
    "raise SystemExit(0)\n",
    "import os\nos._exit(0)\n",
    "import atexit, os\natexit.register(lambda: os._exit(0))\n",
    "import unittest\nunittest.main()\n",
], ids=["sys.exit(main())", "SystemExit", "os._exit", "atexit", "unittest.main"])
def test_an_answer_that_ends_the_process_early_fails(ending: str, namespaces: bool) -> None:
    passed, why = run_tests(WRONG + ending, SQUARE, LIMITS)
    assert not passed
    assert why in (NOT_TO_THE_END, "AssertionError at `assert square(3) == 9`")
    assert run_tests(RIGHT, SQUARE, LIMITS) == (True, "")


def test_an_exit_at_import_with_a_right_answer_still_fails() -> None:
    """Status 0 is not trusted even when the code would have passed."""
    assert run_tests(RIGHT + "import os\nos._exit(0)\n", SQUARE, LIMITS) == (False, NOT_TO_THE_END)


@pytest.mark.parametrize("leftover", [
    "import os\nos.mkfifo('output.txt')\nos.mkfifo('answer.py.out')\n",
    "import os\nos.symlink('/dev/zero', 'output.txt')\nos.symlink('/dev/zero', 'x')\n",
    "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\n",
    "import os\nos.makedirs('a/b/c')\nos.chmod('a/b', 0)\nos.chmod('a', 0)\n",
    "import os\nfor n in range(2000):\n    os.mkdir(f'wide{n}')\n",
], ids=["fifo", "dev-zero-link", "3000-deep", "unreadable", "2000-wide"])
def test_whatever_the_code_leaves_behind_costs_bounded_time(leftover: str) -> None:
    assert run_tests(RIGHT + leftover, SQUARE, LIMITS) == (True, "")


def test_cleanup_removes_links_and_never_what_they_point_at(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "file").write_text("mine")
    code = RIGHT + f"import os\nos.symlink({str(outside)!r}, 'link')\n" \
        f"os.symlink({str(outside / 'keep' / 'file')!r}, 'file-link')\n"
    assert run_tests(code, SQUARE, LIMITS) == (True, "")
    assert (outside / "keep" / "file").read_text() == "mine"


def test_remove_tree_deletes_a_tree_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    top = tmp_path / "top"
    os.mkdir(top)
    descriptor = os.open(top, os.O_RDONLY)
    for _ in range(3000):  # paths beyond PATH_MAX: made relative to open folders
        os.mkdir("d", dir_fd=descriptor)
        inner = os.open("d", os.O_RDONLY, dir_fd=descriptor)
        os.close(descriptor)
        descriptor = inner
    os.close(descriptor)
    remove_tree(top)
    assert not top.exists()


def test_the_answer_cannot_kill_quantcheck(namespaces: bool) -> None:
    killer = "import os\nos.kill(os.getppid(), 9)\n"
    passed, why = run_tests(RIGHT + killer, SQUARE, LIMITS)
    if namespaces:  # its parent is the namespace's init, which ignores the signal
        assert (passed, why) == (True, "")
    else:  # its parent is the harness, not quantcheck
        assert (passed, why) == (False, "the harness was killed by signal SIGKILL")
    assert run_tests(RIGHT, SQUARE, LIMITS) == (True, "")  # this process lives on


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    """A UNIX socket at a path, like a container runtime's, answering anyone."""
    path = tmp_path / "runtime.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    yield path
    server.close()


def test_sockets_outside_the_sandbox_are_refused_or_named(unix_socket: Path) -> None:
    code = RIGHT + ("import socket\nwith socket.socket(socket.AF_UNIX) as s:\n"
                    f"    s.connect({str(unix_socket)!r})\n")
    passed, why = run_tests(code, SQUARE, LIMITS)
    recorded = code_execution(LIMITS)
    if sandbox._seccomp_filter():
        assert (passed, why) == (False, "PermissionError")
        assert recorded.network_isolated
        assert not any("socket" in item for item in recorded.not_isolated)
    else:  # then the summary says exactly what stays reachable
        assert any("UNIX sockets at file paths" in item for item in recorded.not_isolated)
    tcp = RIGHT + "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n"
    assert not run_tests(tcp, SQUARE, LIMITS)[0]


SECRET = "quantcheck-secret-7f3a9c"


@pytest.mark.parametrize("leak", [
    "raise ValueError(open({path!r}).read())\n",
    "import sys\nsys.stderr.write(open({path!r}).read() + ': x\\n')\nsys.exit(3)\n",
    "import sys\nsys.stderr.write('  File \"check.py\", line 3\\n')\n"
    "sys.stderr.write(open({path!r}).read() + 'Error: boom\\n')\nsys.exit(1)\n",
    "open('check.py', 'w').write('\\n\\n' + open({path!r}).read() + '\\n')\n",
], ids=["exception-message", "fake-error-line", "fake-traceback", "rewritten-tests"])
def test_a_failure_reason_never_carries_the_codes_output(leak: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    passed, why = run_tests(WRONG + leak.format(path=str(secret)), SQUARE, LIMITS)
    assert not passed
    assert SECRET not in why and len(why) <= 200
