"""The sparse offset index of one segment: batch base offset -> byte position in the .log file.

Design notes: docs/on-disk-format.md, section "storage/offset_index.py".
"""

from __future__ import annotations

import os
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import NamedTuple

from kraftpy.storage.files import write_all

ENTRY_SIZE = 8
_SWAP = sys.byteorder == "little"  # the file is big-endian, arrays are native


class IndexCorruptError(ValueError):
    """An index file fails a sanity check; the owner rebuilds it from the log."""


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._rel = array("i")
        self._pos = array("i")
        # The file holds exactly the first `_in_file` entries of memory, plus possibly
        # stale entries past them (after a truncation) that write_pending() cuts off.
        self._in_file = 0
        self._file_entries = 0
        self._needs_fsync = False

    @classmethod
    def load(cls, path: Path, base_offset: int, *, log_size: int) -> OffsetIndex:
        """Read and sanity-check the file (missing: IndexCorruptError, so it is rebuilt)."""
        index = cls(path, base_offset)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise IndexCorruptError(f"{path} is missing") from None
        if len(data) % ENTRY_SIZE:
            raise IndexCorruptError(f"{path} has {len(data)} bytes, not a multiple of {ENTRY_SIZE}")
        raw = array("i")
        raw.frombytes(data)
        if _SWAP:
            raw.byteswap()
        rel, pos = raw[0::2], raw[1::2]
        for i in range(len(rel)):
            if rel[i] < 0 or pos[i] < 0 or pos[i] >= log_size:
                raise IndexCorruptError(f"{path} entry {i} ({rel[i]}, {pos[i]}) is outside the segment")
            if i and (rel[i] <= rel[i - 1] or pos[i] <= pos[i - 1]):
                raise IndexCorruptError(f"{path} entry {i} does not increase")
        index._rel, index._pos = rel, pos
        index._in_file = index._file_entries = len(rel)
        return index

    def __len__(self) -> int:
        return len(self._rel)

    @property
    def size_bytes(self) -> int:
        return len(self._rel) * ENTRY_SIZE

    def entry(self, i: int) -> OffsetPosition:
        return OffsetPosition(self.base_offset + self._rel[i], self._pos[i])

    @property
    def last_entry(self) -> OffsetPosition | None:
        return self.entry(len(self._rel) - 1) if self._rel else None

    def entries(self) -> list[OffsetPosition]:
        return [self.entry(i) for i in range(len(self._rel))]

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._rel and (rel <= self._rel[-1] or position <= self._pos[-1]):
            raise ValueError(f"index entry ({offset}, {position}) does not follow {self.last_entry}")
        self._rel.append(rel)
        self._pos.append(position)

    def lookup(self, offset: int) -> OffsetPosition:
        """The last entry with offset <= `offset`; (base_offset, 0) when there is none."""
        i = bisect_right(self._rel, offset - self.base_offset)
        if i == 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(i - 1)

    def lookup_position(self, position: int) -> OffsetPosition:
        """The last entry with position <= `position`; (base_offset, 0) when there is none."""
        i = bisect_right(self._pos, position)
        if i == 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(i - 1)

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past `position` (the log was cut there)."""
        keep = bisect_right(self._pos, position - 1)
        self._truncate_entries(keep)

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches at or past `offset`."""
        self._truncate_entries(bisect_left(self._rel, offset - self.base_offset))

    def reset(self) -> None:
        self._truncate_entries(0)

    def _truncate_entries(self, keep: int) -> None:
        if keep >= len(self._rel):
            return
        del self._rel[keep:]
        del self._pos[keep:]
        self._in_file = min(self._in_file, keep)

    def forget_file(self) -> None:
        """Treat the file as stale: the next write_pending() rewrites it from memory."""
        self._in_file = 0
        self._file_entries = -1

    def write_pending(self) -> None:
        """Bring the file in line with memory (no fsync): cut stale entries, append new ones."""
        total = len(self._rel)
        if self._in_file == total and self._file_entries == total:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if self._file_entries != self._in_file:
                os.ftruncate(fd, self._in_file * ENTRY_SIZE)
            if total > self._in_file:
                raw = array("i", [0]) * (2 * (total - self._in_file))
                raw[0::2] = self._rel[self._in_file :]
                raw[1::2] = self._pos[self._in_file :]
                if _SWAP:
                    raw.byteswap()
                os.lseek(fd, self._in_file * ENTRY_SIZE, os.SEEK_SET)
                write_all(fd, raw.tobytes())
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
