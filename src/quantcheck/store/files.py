"""Every write of quantcheck's own files, safe against bad luck and planted links.

- `write_atomic` (or `AtomicFile`, written in pieces): a fresh temporary file in the
  target's directory, created exclusively under a unique name, written whole, then
  `os.replace`d over the target:
  readers see the old file or the new one, never a torn one; two writers never share a
  temporary name; a planted `*.tmp` symlink is never written through.
- `open_append`: an append-only file opened without following a symlink.
- A target that is a symlink leading outside `within` (the run or report directory)
  is refused: quantcheck never writes outside the directory it was given.
- Any OSError (disk full, file too large, read-only, permission) becomes one
  `StorageError` naming the path and the cause; no temporary file is left behind.
- `DirectoryLock`: an advisory lock (flock) on `DIR/.lock` holding the holder's pid,
  released by the kernel when the process dies, even by kill -9.
- `refuse_overwriting_inputs`: a file written from inputs is never one of them (the same
  file, a link to it, a hard link, a file inside an input folder), `--force` or not.
- `resolved`: a path with its symbolic links followed; links that lead in a loop are a
  `StorageError` naming the path.
- `csv_rows`: the one way every CSV (pairs.csv, determinism.csv, matrix.csv) ends its
  rows, so that any text in a cell, a bare carriage return too, is quoted and read back.

And every read of a user's file: `open_regular` opens regular files only (a FIFO, a
device such as /dev/zero, a socket is refused before a byte is read, so nothing blocks
or reads without end), checked again on the opened descriptor, so a file swapped for a
FIFO between the check and the open is refused too; `read_regular` reads one whole,
within a size cap; `bounded_lines` reads one line at a time, each within a cap (a line
of 1 GB, or a file without a newline, is one error naming the file and the line, never
held whole).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

from ..errors import QuantcheckError

LOCK_FILE = ".lock"


class StorageError(QuantcheckError):
    """A file quantcheck must write cannot be written (disk full, read-only, a link)."""


class DirectoryBusy(QuantcheckError):
    """Another quantcheck process holds the directory's lock."""


class UnreadableFile(QuantcheckError):
    """A user's file that is not a regular file, is too large, or cannot be opened."""


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: Path, what: str = "file") -> BinaryIO:
    """`path` opened for binary reading when it is a regular file (links followed); an
    UnreadableFile naming it otherwise (see the module docstring)."""
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(f"{path}: the {what} is {_kind_of(mode)}, not a regular file; "
                                 "give a file")
        # O_NONBLOCK: a FIFO swapped in after the check opens at once instead of waiting
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UnreadableFile(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(f"{path}: the {what} is {_kind_of(mode)}, not a regular "
                                 "file; give a file")
        flags = fcntl.fcntl(descriptor, fcntl.F_GETFL)
        fcntl.fcntl(descriptor, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular(path: Path, limit: int, what: str = "file") -> bytes:
    """The whole of a regular file of at most `limit` bytes (a file growing past the cap
    while read is refused too)."""
    with open_regular(path, what) as stream:
        try:
            data = stream.read(limit + 1)
        except OSError as exc:
            raise UnreadableFile(f"{path}: cannot read {what}: "
                                 f"{exc.strerror or exc}") from None
    if len(data) > limit:
        raise UnreadableFile(f"{path}: the {what} is larger than the {limit // (1 << 20)} MiB "
                             "quantcheck reads for it")
    return data


class LineTooLong(UnreadableFile):
    """A line longer than its reader holds."""


Line = TypeVar("Line", str, bytes, covariant=True)


class Lines(Protocol[Line]):
    """A stream read line by line: a binary file, or a text one (a TextIOWrapper)."""

    def readline(self, size: int = -1, /) -> Line: ...


def bounded_lines(stream: Lines[Line], path: Path, limit: int, what: str = "file"
                  ) -> Iterator[tuple[int, Line]]:
    """(line number, line) for each line of `stream`, its newline kept (the last line
    may have none). A line (its newline counted) of more than `limit` bytes (characters,
    from a text stream) is a LineTooLong naming the file and the line: no more than
    `limit` of it are read."""
    number = 0
    while True:
        try:
            line = stream.readline(limit + 1)
        except OSError as exc:
            raise UnreadableFile(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
        if not line:
            return
        number += 1
        if len(line) > limit:
            raise LineTooLong(f"{path}:{number}: a line of more than {_size(limit)}, more "
                              f"than a line of a {what} holds (is this the right file?)")
        yield number, line


def _size(limit: int) -> str:
    return f"{limit >> 20:,} MiB" if limit >= 1 << 20 else f"{limit:,} bytes"


def resolved(path: Path) -> Path:
    """`path` absolute, its symbolic links followed (Path.resolve, whose RuntimeError on
    a loop of links becomes a StorageError naming the path)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise StorageError(f"{path}: cannot follow its symbolic links ({cause}): remove "
                           "or repoint the link that leads back into the loop") from None


def refuse_overwriting_inputs(out: Path, inputs: Iterable[Path]) -> None:
    """Refuse to write `out` when it is one of `inputs` (the same file by any name: a
    link, a hard link) or lies inside an input folder; `--force` cannot override it."""
    target = resolved(out)
    for given in inputs:
        source = resolved(given)
        same = target == source or (source.is_dir() and source in target.parents)
        if not same and out.exists() and given.exists():
            try:
                same = os.path.samefile(out, given)
            except OSError:
                same = False
        if same:
            place = "is" if not source.is_dir() or target == source else "lies inside"
            raise StorageError(f"refusing to write {out}: it {place} the input {given}, "
                               "which writing would destroy (--force does not change "
                               "this); choose another output file")


def storage_error(path: Path, exc: OSError) -> StorageError:
    cause = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "free some space and rerun the same command"
    elif exc.errno == errno.EFBIG:
        hint = "the file-size limit (ulimit -f) was reached; raise it and rerun"
    elif exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        hint = "choose a writable --out, or make this one writable"
    else:
        hint = "rerun once the cause is fixed"
    return StorageError(f"cannot write {path}: {cause} ({hint}; nothing already "
                        "written is lost)")


def check_target(path: Path, within: Path | None = None) -> None:
    """Refuse a target (or its folder) that leads outside `within` through a symlink."""
    root = resolved(within or path.parent)
    parent = resolved(path.parent)
    if parent != root and root not in parent.parents:
        raise StorageError(f"refusing to write {path}: its folder leads outside {root} "
                           "(a symbolic link)")
    if path.is_symlink():
        target = resolved(path)
        if target.parent != root and root not in target.parents:
            raise StorageError(f"refusing to write {path}: it is a symbolic link to "
                               f"{target}, outside {root}")


def write_atomic(path: Path, data: bytes, within: Path | None = None) -> None:
    """Replace `path` with `data` in one step (see the module docstring)."""
    with AtomicFile(path, within) as handle:
        handle.write(data)


class AtomicFile:
    """A file written in pieces that replaces `path` whole when the block ends without
    an exception (otherwise the temporary is removed and `path` is untouched)."""

    def __init__(self, path: Path, within: Path | None = None) -> None:
        check_target(path, within)
        self.path = path
        try:
            descriptor, self._temporary = _exclusive_temporary(path)
        except OSError as exc:
            raise storage_error(path, exc) from None
        self._handle = os.fdopen(descriptor, "wb", buffering=1 << 20)

    def write(self, data: bytes) -> None:
        try:
            self._handle.write(data)
        except OSError as exc:
            raise storage_error(self.path, exc) from None

    def flush(self) -> None:
        """Everything written reaches the file now (a full disk says so here, while a
        caller writing several files can still keep them all as they were)."""
        try:
            self._handle.flush()
        except OSError as exc:
            raise storage_error(self.path, exc) from None

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        try:
            self._handle.close()
            if kind is None:
                os.replace(self._temporary, self.path)
        except OSError as error:
            _unlink_quietly(self._temporary)
            if kind is None:
                raise storage_error(self.path, error) from None
        if kind is not None:
            _unlink_quietly(self._temporary)


def _exclusive_temporary(path: Path) -> tuple[int, str]:
    """A new file beside `path` under a name nobody else holds (O_EXCL, no symlink)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    for attempt in range(100):
        name = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            return os.open(name, flags, 0o644), str(name)
        except FileExistsError:
            if attempt == 99:
                raise
    raise AssertionError("unreachable")


def _unlink_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass


# The csv module (and pandas through it) quotes a cell for the characters of its line
# terminator only: written with "\n", a cell holding a bare "\r" stayed unquoted and
# every reader split the row there. CSVs are written with CSV_WRITTEN_WITH, so such a
# cell is quoted, then `csv_rows` ends the rows with "\n" again.
CSV_WRITTEN_WITH = "\r\n"


def csv_rows(written: str) -> str:
    """CSV text written with CSV_WRITTEN_WITH as its line terminator, each row ended
    with "\n": a line end outside quotes is a row's (an unquoted cell holds no line
    break), one inside quotes is a cell's and stays as written. Splitting at every
    quote mark alternates outside and inside (a doubled quote leaves an empty piece)."""
    pieces = written.split('"')
    pieces[::2] = [piece.replace(CSV_WRITTEN_WITH, "\n") for piece in pieces[::2]]
    return '"'.join(pieces)


def make_directory(path: Path) -> None:
    """`mkdir -p`, with a failure reported as a StorageError."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise storage_error(path, exc) from None


def open_append(path: Path, within: Path | None = None) -> int:
    """A raw descriptor appending to `path` (created if missing), never through a link."""
    check_target(path, within)
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise storage_error(path, exc) from None


def append(descriptor: int, data: bytes, path: Path) -> None:
    """Write all of `data` (a short write on a full disk is continued, then reported)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(descriptor, view):]
    except OSError as exc:
        raise storage_error(path, exc) from None


class DirectoryLock:
    """Exclusive use of a directory by one process; `acquire` refuses a second one."""

    def __init__(self, directory: Path, purpose: str) -> None:
        self.path = directory / LOCK_FILE
        self.purpose = purpose
        self._descriptor: int | None = None

    def acquire(self) -> DirectoryLock:
        try:
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise storage_error(self.path, exc) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 64, 0).decode(errors="replace").strip() or "?"
            os.close(descriptor)
            raise DirectoryBusy(
                f"{self.path.parent} is in use by another quantcheck process (pid {holder}) "
                f"{self.purpose}; wait for it to finish or stop it, then rerun") from None
        try:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # a full disk: the lock holds, only its pid is not shown
        self._descriptor = descriptor
        return self

    def release(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # closing drops the flock
            self._descriptor = None

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    @staticmethod
    def held(directory: Path) -> bool:
        """Whether some process holds `directory`'s lock right now."""
        path = directory / LOCK_FILE
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(descriptor)
        return False
