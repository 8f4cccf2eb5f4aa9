"""The sparse offset index of one segment: batch base offset -> byte position in the .log file.

Design notes: docs/on-disk-format.md, section "storage/offset_index.py".
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import NamedTuple

from kraftpy.storage.index_file import IndexCorruptError, IndexFile

__all__ = ["ENTRY_SIZE", "IndexCorruptError", "OffsetIndex", "OffsetPosition"]

ENTRY_SIZE = 8
_SWAP = sys.byteorder == "little"  # the file is big-endian, arrays are native


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex(IndexFile[OffsetPosition]):
    ENTRY_SIZE = ENTRY_SIZE

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path, base_offset)
        self._rel = array("i")
        self._pos = array("i")

    @classmethod
    def load(cls, path: Path, base_offset: int, *, log_size: int) -> OffsetIndex:
        """Read and sanity-check the file (missing: IndexCorruptError, so it is rebuilt)."""
        index = cls(path, base_offset)
        raw = array("i")
        raw.frombytes(cls._read_file(path))
        if _SWAP:
            raw.byteswap()
        rel, pos = raw[0::2], raw[1::2]
        for i in range(len(rel)):
            if rel[i] < 0 or pos[i] < 0 or pos[i] >= log_size:
                raise IndexCorruptError(f"{path} entry {i} ({rel[i]}, {pos[i]}) is outside the segment")
            if i and (rel[i] <= rel[i - 1] or pos[i] <= pos[i - 1]):
                raise IndexCorruptError(f"{path} entry {i} does not increase")
        index._rel, index._pos = rel, pos
        index._loaded()
        return index

    def _columns(self) -> tuple[array, array]:
        return self._rel, self._pos

    def _encode(self, start: int, stop: int) -> bytes:
        raw = array("i", [0]) * (2 * (stop - start))
        raw[0::2] = self._rel[start:stop]
        raw[1::2] = self._pos[start:stop]
        if _SWAP:
            raw.byteswap()
        return raw.tobytes()

    @property
    def size_bytes(self) -> int:
        return len(self._rel) * ENTRY_SIZE

    def entry(self, i: int) -> OffsetPosition:
        return OffsetPosition(self.base_offset + self._rel[i], self._pos[i])

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
        self._truncate_entries(bisect_right(self._pos, position - 1))

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches at or past `offset`."""
        self._truncate_entries(bisect_left(self._rel, offset - self.base_offset))
