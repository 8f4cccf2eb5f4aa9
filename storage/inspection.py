"""Reading a partition's files as they are, for `kraftpy log dump`: batches, index entries, checkpoints.

Unlike recovery, inspection never changes a file and keeps going past a bad
CRC, so an operator sees everything that can still be read. Each reader is an
iterator of entries; afterwards `problem` holds the first thing that was wrong
(position and reason), or None. Rendering is the CLI's job.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kraftpy.protocol.errors import CorruptRecordError
from kraftpy.protocol.records.batch import decode_batch
from kraftpy.protocol.records.compression import CompressionType
from kraftpy.protocol.records.header import BatchHeader, crc_matches
from kraftpy.protocol.records.record import Record
from kraftpy.storage import layout
from kraftpy.storage.checkpoints import read_checkpoint
from kraftpy.storage.errors import CorruptCheckpointError
from kraftpy.storage.scan import CorruptSegmentError, iter_file_batches, walk_headers
from kraftpy.storage.validation import hard_max_batch_bytes

COMPRESSION_NAMES = {c.value: c.name.lower() for c in CompressionType}


@dataclass(frozen=True, slots=True)
class Problem:
    position: int | None
    message: str


@dataclass(frozen=True, slots=True)
class BatchEntry:
    position: int
    header: BatchHeader
    crc_valid: bool
    records: tuple[Record, ...] | None  # when asked for and decodable

    @property
    def compression(self) -> str:
        return COMPRESSION_NAMES.get(self.header.compression, f"unknown({self.header.compression})")


class LogFileReader:
    """The batches of a .log file, in order; continues past a bad CRC, stops at a broken structure."""

    def __init__(self, path: Path, *, with_records: bool = False) -> None:
        self.path = path
        self.with_records = with_records
        self.problem: Problem | None = None

    def _note(self, position: int | None, message: str) -> None:
        if self.problem is None:
            self.problem = Problem(position, message)

    def __iter__(self) -> Iterator[BatchEntry]:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            expected = None
            batches = iter_file_batches(fd, 0, size, max_batch_bytes=hard_max_batch_bytes(0))
            while True:
                try:
                    pos, header, view = next(batches)
                except StopIteration:
                    return
                except CorruptSegmentError as exc:
                    self._note(exc.position, f"corrupt batch at position {exc.position}: {exc.message}")
                    return
                crc_ok = crc_matches(view, 0, header)
                if not crc_ok:
                    self._note(pos, f"batch at position {pos} (offset {header.base_offset}): CRC32C does not match")
                if expected is not None and header.base_offset < expected:
                    self._note(pos, f"batch at position {pos}: base offset {header.base_offset} is below {expected}")
                expected = header.next_offset
                records = None
                if self.with_records and crc_ok:
                    try:
                        records = decode_batch(view, 0).records
                    except CorruptRecordError as exc:
                        self._note(pos, f"batch at position {pos} (offset {header.base_offset}): {exc.message}")
                yield BatchEntry(pos, header, crc_ok, records)
        finally:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class IndexEntry:
    offset: int
    position: int | None  # .index entries
    timestamp: int | None  # .timeindex entries
    error: str | None


class IndexFileReader:
    """The entries of a .index or .timeindex file, each checked against the segment's .log."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem: Problem | None = None
        parsed = layout.parse_segment_name(path.name)
        if parsed is None or parsed[1] == layout.LOG_SUFFIX:
            raise ValueError(f"{path} is not an index file")
        self.base_offset, self.suffix = parsed
        self.log_path = layout.segment_path(path.parent, self.base_offset, layout.LOG_SUFFIX)

    def __iter__(self) -> Iterator[IndexEntry]:
        data = self.path.read_bytes()
        time_index = self.suffix == layout.TIME_INDEX_SUFFIX
        entry = struct.Struct(">qi" if time_index else ">ii")
        if len(data) % entry.size:
            self.problem = Problem(None, f"{len(data)} bytes is not a multiple of the {entry.size}-byte entry")
        if not self.log_path.exists():
            self.problem = self.problem or Problem(None, f"{self.log_path.name} does not exist")
            batches: dict[int, tuple[int, int]] = {}
        else:
            batches = self._batches()
        previous: tuple[int, int] | None = None
        usable = len(data) - len(data) % entry.size
        for i, fields in enumerate(entry.iter_unpack(data[:usable])):
            if time_index:
                timestamp, rel = fields
                offset, position = self.base_offset + rel, None
            else:
                rel, position = fields
                offset, timestamp = self.base_offset + rel, None
            found = batches.get(offset)
            key = (timestamp if time_index else position, offset)
            error = None
            if previous is not None and (key[0] <= previous[0] or key[1] <= previous[1]):
                error = "does not increase"
            elif found is None:
                error = f"no batch in {self.log_path.name} starts at offset {offset}"
            elif not time_index and found[0] != position:
                error = f"the batch at offset {offset} is at position {found[0]}"
            elif time_index and found[1] != timestamp:
                error = f"the batch at offset {offset} has max timestamp {found[1]}"
            if error is not None and self.problem is None:
                self.problem = Problem(i * entry.size, f"entry {i}: {error}")
            previous = key
            yield IndexEntry(offset, position, timestamp, error)

    def _batches(self) -> dict[int, tuple[int, int]]:
        """base offset -> (position, max timestamp) of the sound-looking batches of the log."""
        out: dict[int, tuple[int, int]] = {}
        fd = os.open(self.log_path, os.O_RDONLY)
        try:
            for span in walk_headers(fd, 0, os.fstat(fd).st_size):
                out[span.base_offset] = (span.position, span.max_timestamp)
        except CorruptSegmentError:
            pass  # entries past the damage show up as not found; the .log dump names the damage
        finally:
            os.close(fd)
        return out


ARITY = {layout.LEADER_EPOCH_CHECKPOINT: 2}


def read_checkpoint_file(path: Path) -> tuple[list[tuple[int, ...]], Problem | None]:
    """The entries of a checkpoint file and the problem with it, if any."""
    try:
        entries = read_checkpoint(path, ARITY.get(path.name, 1))
    except CorruptCheckpointError as exc:
        return [], Problem(None, exc.message)
    if entries is None:
        return [], Problem(None, "does not exist")
    return entries, None


def is_checkpoint(path: Path) -> bool:
    return path.name in layout.CHECKPOINT_NAMES


def files_of_directory(directory: Path) -> list[Path]:
    """The files of a partition directory that `log dump` understands, in a readable order."""
    segments = []
    for p in directory.iterdir():
        parsed = layout.parse_segment_name(p.name)
        if parsed is not None:
            segments.append((parsed[0], layout.SEGMENT_SUFFIXES.index(parsed[1]), p))
    checkpoints = sorted(p for p in directory.iterdir() if is_checkpoint(p))
    return [p for *_, p in sorted(segments)] + checkpoints
