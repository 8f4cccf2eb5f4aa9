"""The sparse time index of one segment: largest timestamp so far -> offset of the batch that set it.

File layout (`<base_offset:020d>.timeindex`), Kafka's: 12-byte entries of
    timestamp      int64   the largest batch maxTimestamp seen up to here
    relativeOffset int32   base offset of the batch that reached it - segment base
An entry is added beside each offset-index entry when the largest timestamp
grew, and once more when the segment rolls, so the last entry holds the
segment's largest timestamp (what time retention and segment_ms look at).
Timestamps and offsets strictly increase.

Memory, file writes and fsync follow the same rules as OffsetIndex.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left
from pathlib import Path
from typing import NamedTuple

from kraftpy.storage.files import write_all
from kraftpy.storage.offset_index import IndexCorruptError

ENTRY_SIZE = 12
_ENTRY = struct.Struct(">qi")


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._ts = array("q")
        self._rel = array("i")
        self._in_file = 0
        self._file_entries = 0
        self._needs_fsync = False

    @classmethod
    def load(cls, path: Path, base_offset: int, *, max_offset: int) -> TimeIndex:
        """Read and sanity-check the file; entries must point below `max_offset`."""
        index = cls(path, base_offset)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise IndexCorruptError(f"{path} is missing") from None
        if len(data) % ENTRY_SIZE:
            raise IndexCorruptError(f"{path} has {len(data)} bytes, not a multiple of {ENTRY_SIZE}")
        for i, (ts, rel) in enumerate(_ENTRY.iter_unpack(data)):
            if rel < 0 or base_offset + rel >= max_offset:
                raise IndexCorruptError(f"{path} entry {i} ({ts}, {rel}) is outside the segment")
            if index._ts and (ts <= index._ts[-1] or rel <= index._rel[-1]):
                raise IndexCorruptError(f"{path} entry {i} does not increase")
            index._ts.append(ts)
            index._rel.append(rel)
        index._in_file = index._file_entries = len(index._ts)
        return index

    def __len__(self) -> int:
        return len(self._ts)

    def entry(self, i: int) -> TimestampOffset:
        return TimestampOffset(self._ts[i], self.base_offset + self._rel[i])

    @property
    def last_entry(self) -> TimestampOffset | None:
        return self.entry(len(self._ts) - 1) if self._ts else None

    def entries(self) -> list[TimestampOffset]:
        return [self.entry(i) for i in range(len(self._ts))]

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add (timestamp, offset) if the timestamp is larger than the last entry's."""
        if self._ts and timestamp <= self._ts[-1]:
            return False
        rel = offset - self.base_offset
        if self._rel and rel <= self._rel[-1]:
            raise ValueError(f"time index offset {offset} does not follow {self.last_entry}")
        self._ts.append(timestamp)
        self._rel.append(rel)
        return True

    def lookup(self, timestamp: int) -> TimestampOffset | None:
        """The last entry with a timestamp strictly below `timestamp`, or None.

        Every batch up to that entry's offset has maxTimestamp < `timestamp`, so a
        search for the first batch reaching `timestamp` may start there.
        """
        i = bisect_left(self._ts, timestamp)
        return self.entry(i - 1) if i else None

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches at or past `offset`."""
        keep = bisect_left(self._rel, offset - self.base_offset)
        if keep >= len(self._ts):
            return
        del self._ts[keep:]
        del self._rel[keep:]
        self._in_file = min(self._in_file, keep)

    def reset(self) -> None:
        self.truncate_to_offset(self.base_offset)

    def forget_file(self) -> None:
        """Treat the file as stale: the next write_pending() rewrites it from memory."""
        self._in_file = 0
        self._file_entries = -1

    def write_pending(self) -> None:
        total = len(self._ts)
        if self._in_file == total and self._file_entries == total:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if self._file_entries != self._in_file:
                os.ftruncate(fd, self._in_file * ENTRY_SIZE)
            if total > self._in_file:
                data = b"".join(_ENTRY.pack(self._ts[i], self._rel[i]) for i in range(self._in_file, total))
                os.lseek(fd, self._in_file * ENTRY_SIZE, os.SEEK_SET)
                write_all(fd, data)
        finally:
            os.close(fd)
        self._in_file = self._file_entries = total
        self._needs_fsync = True

    def fsync(self) -> None:
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
