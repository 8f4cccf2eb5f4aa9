"""Durable file primitives: atomic replace, directory fsync, full writes, and shared file handles.

Everything the engine writes goes through here, so the rules that make a crash
safe live in one place: a checkpoint is replaced by writing a temp file,
fsyncing it, renaming it over the old one and fsyncing the directory (POSIX
makes the rename atomic, the directory fsync makes it durable).

A new partition directory is filled with several such files at once; inside
`deferred_directory_sync(directory)` their directory fsyncs collapse into one
at the end of the block (each file's own fsync still runs before its rename).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from kraftpy.storage.errors import LogStorageError
from kraftpy.storage.layout import TEMP_SUFFIX

# Linux caps one writev at IOV_MAX buffers.
IOV_MAX = getattr(os, "IOV_MAX", None) or 1024


_deferred = threading.local()  # .dirs: {directory: whether an fsync was asked for}, per thread


def fsync_dir(directory: Path) -> None:
    """Make creations, renames and deletions inside `directory` durable."""
    pending: dict[Path, bool] | None = getattr(_deferred, "dirs", None)
    if pending is not None and directory in pending:
        pending[directory] = True  # done once when the deferring block ends
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def deferred_directory_sync(directory: Path) -> Iterator[None]:
    """Within the block (this thread only), fsync `directory` once at the end instead of at every fsync_dir().

    For a directory nobody depends on until the block returns (a partition
    directory being created): a crash inside the block leaves each file either
    absent or whole (its contents were fsynced before its rename), and the
    single fsync at the end makes every name durable before the caller hands
    the directory out. Not for a directory whose files already hold data: there
    the order in which renames become durable matters.
    """
    pending: dict[Path, bool] | None = getattr(_deferred, "dirs", None)
    if pending is None:
        pending = _deferred.dirs = {}
    if directory in pending:  # nested: the outer block syncs
        yield
        return
    pending[directory] = False
    try:
        yield
    except BaseException:
        del pending[directory]
        raise
    asked = pending.pop(directory)
    if asked:
        fsync_dir(directory)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content."""
    tmp = path.with_name(path.name + TEMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except OSError as exc:
        # A bare write error (ENOSPC above all) names no file; the operator needs to know which.
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def pwrite_all(
    fd: int, buffers: Sequence[bytes | bytearray | memoryview], position: int, total_bytes: int | None = None
) -> int:
    """Write `buffers` contiguously at `position`, retrying short writes; returns bytes written."""
    if total_bytes is not None and len(buffers) <= IOV_MAX:
        # The hot path: one syscall that writes everything.
        written = os.pwritev(fd, buffers, position)
        if written == total_bytes:
            return written
        return written + pwrite_all(fd, _skip(buffers, written), position + written)
    total = 0
    pending = list(buffers)
    while pending:
        chunk = pending[:IOV_MAX]
        expected = sum(len(b) for b in chunk)
        written = os.pwritev(fd, chunk, position + total)
        total += written
        if written == expected:
            del pending[: len(chunk)]
            continue
        # A short write (rare: a signal, a nearly full disk): drop what landed, retry the rest.
        remaining = written
        while remaining:
            head = memoryview(pending[0])
            if len(head) <= remaining:
                remaining -= len(head)
                pending.pop(0)
            else:
                pending[0] = head[remaining:]
                remaining = 0
    return total


def _skip(buffers: Sequence[bytes | bytearray | memoryview], count: int) -> list[memoryview]:
    """`buffers` without their first `count` bytes."""
    out = []
    for b in buffers:
        view = memoryview(b)
        if count >= len(view):
            count -= len(view)
            continue
        out.append(view[count:])
        count = 0
    return out


def pread_exact(fd: int, size: int, position: int) -> bytes:
    """Read up to `size` bytes at `position`; shorter only at end of file."""
    data = os.pread(fd, size, position)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class HandleClosedError(LogStorageError):
    """The file was closed while a caller still wanted it (its segment was deleted)."""


class FileHandle:
    """A file descriptor shared by threads, closed only when its last user is done.

    Readers and flushers use a segment's fd outside the log's lock; retention or
    the cleaner may drop the segment meanwhile. Closing an fd that another thread
    is about to pread would let the number be reused by an unrelated file, so
    close() only marks the handle and the last user closes it.
    """

    __slots__ = ("_closing", "_fd", "_lock", "_users", "path")

    def __init__(self, path: Path, flags: int, mode: int = 0o644) -> None:
        self.path = path
        self._fd = os.open(path, flags, mode)
        self._lock = threading.Lock()
        self._users = 0
        self._closing = False

    @property
    def fd(self) -> int:
        """The raw fd for the owner's own calls (made under the log's lock)."""
        return self._fd

    def acquire(self) -> int:
        """The fd, held open until the matching release(); raises HandleClosedError if closed."""
        with self._lock:
            if self._closing:
                raise HandleClosedError(f"{self.path} was closed (segment deleted or log closed)")
            self._users += 1
            return self._fd

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            close_now = self._closing and self._users == 0
        if close_now:
            os.close(self._fd)

    @contextmanager
    def use(self) -> Iterator[int]:
        fd = self.acquire()
        try:
            yield fd
        finally:
            self.release()

    def close(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
            close_now = self._users == 0
        if close_now:
            os.close(self._fd)

    @property
    def closed(self) -> bool:
        return self._closing


def remove_if_exists(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


class DirectoryLock:
    """An exclusive flock on `<dir>/.lock`: one PartitionLog per directory, across processes.

    The kernel drops the lock when the holder dies, so a SIGKILLed broker does
    not leave a stale lock behind.
    """

    NAME = ".lock"

    def __init__(self, directory: Path) -> None:
        import fcntl

        self.path = directory / self.NAME
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = None
            raise LogStorageError(f"{directory} is already open (another PartitionLog holds {self.path})") from None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the fd drops the flock
            self._fd = None
