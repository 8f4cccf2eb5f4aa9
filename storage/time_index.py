"""The sparse time index of one segment: largest timestamp so far -> offset of the batch that set it.

File layout (`<base_offset:020d>.timeindex`), Kafka's: 12-byte entries of
    timestamp      int64   the largest batch maxTimestamp seen up to here
    relativeOffset int32   base offset of the batch that reached it - segment base
An entry is added beside each offset-index entry when the largest timestamp
grew, and once more when the segment rolls, so the last entry holds the
segment's largest timestamp (what time retention and segment_ms look at).
Timestamps and offsets strictly increase.

Memory, file writes and fsync are the shared base's (index_file.IndexFile).
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from pathlib import Path
from typing import NamedTuple

from kraftpy.storage.index_file import IndexCorruptError, IndexFile

ENTRY_SIZE = 12
_ENTRY = struct.Struct(">qi")


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex(IndexFile[TimestampOffset]):
    ENTRY_SIZE = ENTRY_SIZE

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path, base_offset)
        self._ts = array("q")
        self._rel = array("i")

    @classmethod
    def load(cls, path: Path, base_offset: int, *, max_offset: int) -> TimeIndex:
        """Read and sanity-check the file; entries must point below `max_offset`."""
        index = cls(path, base_offset)
        for i, (ts, rel) in enumerate(_ENTRY.iter_unpack(cls._read_file(path))):
            if rel < 0 or base_offset + rel >= max_offset:
                raise IndexCorruptError(f"{path} entry {i} ({ts}, {rel}) is outside the segment")
            if index._ts and (ts <= index._ts[-1] or rel <= index._rel[-1]):
                raise IndexCorruptError(f"{path} entry {i} does not increase")
            index._ts.append(ts)
            index._rel.append(rel)
        index._loaded()
        return index

    def _columns(self) -> tuple[array, array]:
        return self._ts, self._rel

    def _encode(self, start: int, stop: int) -> bytes:
        return b"".join(_ENTRY.pack(self._ts[i], self._rel[i]) for i in range(start, stop))

    def entry(self, i: int) -> TimestampOffset:
        return TimestampOffset(self._ts[i], self.base_offset + self._rel[i])

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
        self._truncate_entries(bisect_left(self._rel, offset - self.base_offset))
