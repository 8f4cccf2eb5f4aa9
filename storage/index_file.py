"""What the offset and time indexes share: two columns in memory, mirrored to a file of fixed-size entries.

A subclass names its two columns (arrays of the same length, one per entry
field), how its entries are encoded, and what an entry means. This base keeps
the file in line with memory: write_pending() cuts stale entries off the file
(after a truncation) and appends the new ones, fsync() makes them durable.
Losing unflushed entries in a crash is harmless: recovery rebuilds the index
of everything past the recovery point.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from array import array
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

from kraftpy.storage.files import write_all

E = TypeVar("E")


class IndexCorruptError(ValueError):
    """An index file fails a sanity check; the owner rebuilds it from the log."""


class IndexFile(ABC, Generic[E]):
    ENTRY_SIZE: ClassVar[int]

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        # The file holds exactly the first `_in_file` entries of memory, plus possibly
        # stale entries past them (after a truncation) that write_pending() cuts off.
        self._in_file = 0
        self._file_entries = 0
        self._needs_fsync = False

    @abstractmethod
    def _columns(self) -> tuple[array, array]:
        """The two in-memory columns, one element per entry."""

    @abstractmethod
    def _encode(self, start: int, stop: int) -> bytes:
        """Entries [start, stop) in the file's layout."""

    @abstractmethod
    def entry(self, i: int) -> E: ...

    @classmethod
    def _read_file(cls, path: Path) -> bytes:
        """The file's bytes, checked for presence and whole entries (else IndexCorruptError)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise IndexCorruptError(f"{path} is missing") from None
        if len(data) % cls.ENTRY_SIZE:
            raise IndexCorruptError(f"{path} has {len(data)} bytes, not a multiple of {cls.ENTRY_SIZE}")
        return data

    def _loaded(self) -> None:
        """Mark every entry in memory as being in the file (after a load)."""
        self._in_file = self._file_entries = len(self)

    def __len__(self) -> int:
        return len(self._columns()[0])

    @property
    def last_entry(self) -> E | None:
        return self.entry(len(self) - 1) if len(self) else None

    def entries(self) -> list[E]:
        return [self.entry(i) for i in range(len(self))]

    def _truncate_entries(self, keep: int) -> None:
        if keep >= len(self):
            return
        for column in self._columns():
            del column[keep:]
        self._in_file = min(self._in_file, keep)

    def reset(self) -> None:
        self._truncate_entries(0)

    def forget_file(self) -> None:
        """Treat the file as stale: the next write_pending() rewrites it from memory."""
        self._in_file = 0
        self._file_entries = -1

    def write_pending(self) -> None:
        """Bring the file in line with memory (no fsync): cut stale entries, append new ones."""
        total = len(self)
        if self._in_file == total and self._file_entries == total:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if self._file_entries != self._in_file:
                os.ftruncate(fd, self._in_file * self.ENTRY_SIZE)
            if total > self._in_file:
                os.lseek(fd, self._in_file * self.ENTRY_SIZE, os.SEEK_SET)
                write_all(fd, self._encode(self._in_file, total))
        finally:
            os.close(fd)
        self._in_file = self._file_entries = total
        self._needs_fsync = True

    def fsync(self) -> None:
        """Make the written entries durable; a file deleted meanwhile needs nothing."""
        if not self._needs_fsync:
            return
        self._needs_fsync = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
