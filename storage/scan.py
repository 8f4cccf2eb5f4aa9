"""Reading batch boundaries out of a segment file: a cheap header walk and a validating scan.

Design notes: docs/on-disk-format.md, section "storage/scan.py".
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable, Iterator
from typing import NamedTuple

from kraftpy.protocol.errors import CorruptRecordError
from kraftpy.protocol.records.header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    BatchHeader,
    crc_matches,
    parse_header,
    peek_size,
)
from kraftpy.protocol.validate import INT64_MAX

# The fields of the v2 header up to maxTimestamp (header.py documents the layout):
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp.
_WALK = struct.Struct(">qiibIhiqq")
# A walk mostly spans one index interval (4 KiB by default): read a little more than that at a time.
WALK_CHUNK_BYTES = 8 * 1024
SCAN_CHUNK_BYTES = 8 * 1024 * 1024


class BatchSpan(NamedTuple):
    """Where one batch sits in a segment file and what a walk needs to know of it."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    max_timestamp: int

    @property
    def end(self) -> int:
        return self.position + self.size


class CorruptSegmentError(CorruptRecordError):
    """A header in a segment file is not sane (or a batch runs past the file)."""


ZERO_CHECK_BYTES = 1 << 20
# A reader of a live segment may meet the unwritten space just as the log appends there; it reads
# the header again (when it changed) at most this often per walk before calling it corrupt.
LIVE_REREADS = 3


def unwritten_from(fd: int, position: int, end: int) -> bool:
    """Whether [position, end) of the file holds nothing but zeros: space nothing was written to,
    as a preallocated segment has past its batches (LogSegment.preallocate). No batch starts with
    a zero length, so a walk that meets one there has reached the end of the data. Holes are
    skipped (SEEK_DATA), the data in between read."""
    pos = position
    while pos < end:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return True  # nothing but a hole from here to the end of the file
            raise
        if data >= end:
            return True
        hole = min(os.lseek(fd, data, os.SEEK_HOLE), end)
        while data < hole:
            chunk = os.pread(fd, min(ZERO_CHECK_BYTES, hole - data), data)
            if not chunk:
                return True  # the file is shorter than `end`
            if chunk.count(0) != len(chunk):
                return False
            data += len(chunk)
        pos = hole
    return True


END_OF_DATA, READ_AGAIN, CORRUPT = "end of data", "read again", "corrupt"


def _bad_header(fd: int, position: int, end: int, seen: bytes | memoryview, rereads: int) -> str:
    """What a walk makes of a header at `position` it cannot parse (`seen`, as it read it):
    END_OF_DATA where nothing but zeros follows (`unwritten_from`); READ_AGAIN where the bytes
    there changed since, a live log having appended into its unwritten space (while `rereads`,
    the walk's count, is below LIVE_REREADS); else CORRUPT."""
    if unwritten_from(fd, position, end):
        return END_OF_DATA
    if rereads < LIVE_REREADS and os.pread(fd, HEADER_SIZE, position) != bytes(seen):
        return READ_AGAIN
    return CORRUPT


def span_of(position: int, header: BatchHeader) -> BatchSpan:
    return BatchSpan(
        position,
        header.size,
        header.base_offset,
        header.last_offset,
        header.partition_leader_epoch,
        header.max_timestamp,
    )


def walk_headers(fd: int, start: int, end: int, *, chunk_bytes: int = WALK_CHUNK_BYTES) -> Iterator[BatchSpan]:
    """Yield the batches in [start, end) of the file; raises CorruptSegmentError at an insane header.

    `start` must be a batch boundary. One pread covers many small batches; a
    large batch costs one small pread for its header. The walk ends early where
    the rest of the range is zeros (`unwritten_from`).
    """
    buf = b""
    buf_at = start
    pos = start
    rereads = 0
    while pos < end:
        rel = pos - buf_at
        if rel < 0 or rel + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(chunk_bytes, end - pos), pos)
            buf_at, rel = pos, 0
            if len(buf) < HEADER_SIZE:
                if unwritten_from(fd, pos, end):
                    return
                raise CorruptSegmentError(f"batch header cut off: {end - pos} bytes left before the end", pos)
        base, length, epoch, magic, _crc, _attrs, delta, _bts, max_ts = _WALK.unpack_from(buf, rel)
        size = length + LOG_OVERHEAD
        if magic != MAGIC or size < HEADER_SIZE or delta < 0:
            verdict = _bad_header(fd, pos, end, buf[rel : rel + HEADER_SIZE], rereads)
            if verdict == END_OF_DATA:
                return
            if verdict == READ_AGAIN:
                rereads += 1
                buf = b""
                continue
            raise CorruptSegmentError(f"insane batch header (magic {magic}, size {size}, delta {delta})", pos)
        if pos + size > end:
            raise CorruptSegmentError(f"batch of {size} bytes runs past the end at {end}", pos)
        yield BatchSpan(pos, size, base, base + delta, epoch, max_ts)
        pos += size


def iter_file_batches(
    fd: int, start: int, end: int, *, max_batch_bytes: int, chunk_bytes: int = SCAN_CHUNK_BYTES
) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """Yield (position, header, batch bytes) for each structurally sound batch in [start, end).

    Reads in large chunks (a batch larger than a chunk gets a read of its own).
    Checks what parse_header checks except the CRC, which the caller decides
    about; raises CorruptSegmentError with the file position at the first batch
    that is cut off or malformed. Ends early where the rest is zeros (`unwritten_from`).
    """
    pos = start
    buf = memoryview(b"")
    buf_at = pos
    rereads = 0
    while pos < end:
        rel = pos - buf_at
        size = peek_size(buf, rel)
        if size is None or size > len(buf) - rel:
            # Refill from here; a sane size larger than a chunk gets a read of its own.
            sane = size is not None and HEADER_SIZE <= size <= max_batch_bytes
            want = max(chunk_bytes, size) if sane else chunk_bytes
            buf = memoryview(os.pread(fd, min(want, end - pos), pos))
            buf_at, rel = pos, 0
        try:
            header = parse_header(buf, rel, max_batch_bytes=max_batch_bytes)
        except CorruptRecordError as exc:
            verdict = _bad_header(fd, pos, end, buf[rel : rel + HEADER_SIZE], rereads)
            if verdict == END_OF_DATA:
                return
            if verdict == READ_AGAIN:
                rereads += 1
                buf = memoryview(b"")
                buf_at = pos
                continue
            # parse_header names a position in our buffer; say where in the file instead.
            raise CorruptSegmentError(exc.message.split(" at position ")[0], pos) from None
        yield pos, header, buf[rel : rel + header.size]
        pos += header.size


def damaging_gap(base_offset: int, expected: int, allow_gaps_below: int) -> bool:
    """Whether a batch or segment starting at `base_offset`, where `expected` was next, leaves a gap
    no writer leaves: one reaching past `allow_gaps_below`.

    The cleaner removes records only below its checkpoint, so the offsets it leaves missing all lie
    below it, and the first batch it never touched starts at the checkpoint itself: a gap ending
    exactly there is the cleaner's (recovery once cut a log that had changed from compact to delete
    there, losing everything after it). INT64_MAX allows every gap (a compacted log), 0 none.
    """
    return base_offset > expected and base_offset > allow_gaps_below


class ValidatingScan:
    """Iterate the sound batches of [start, end), stopping at the first bad one.

    After iteration, `stopped_at` is the position of the first bad batch (None if
    the range was sound to its end) and `reason` says what was wrong; `unwritten_at`
    is where a sound range ended in zeros before `end` (None if it did not). Offsets must
    not go backwards (each base offset >= the previous batch's next offset, the
    first >= `next_offset`), leader epochs must not decrease nor be below -1, and:
    - a batch must start exactly at the previous batch's next offset, unless the
      offsets it skips all lie below `allow_gaps_below` (`damaging_gap`: compacted
      logs have gaps; a non-compacted log has them only where the cleaner was, so
      a gap elsewhere is a damaged baseOffset);
    - if `epoch_at` is given, a batch's leader epoch must be the one it says for
      the batch's base offset (the leader-epoch checkpoint is written before any
      batch of a new epoch, so it knows every surviving batch's epoch). Both
      fields lie outside the CRC; these checks are what catches them.
    """

    def __init__(
        self,
        fd: int,
        start: int,
        end: int,
        *,
        next_offset: int,
        leader_epoch: int = -1,
        max_batch_bytes: int,
        allow_gaps_below: int = INT64_MAX,
        epoch_at: Callable[[int], int] | None = None,
        chunk_bytes: int = SCAN_CHUNK_BYTES,
    ) -> None:
        self._allow_gaps_below = allow_gaps_below
        self._epoch_at = epoch_at
        self._fd = fd
        self._start = start
        self._end = end
        self.next_offset = next_offset
        self.leader_epoch = leader_epoch
        self._max_batch_bytes = max_batch_bytes
        self._chunk = chunk_bytes
        self.stopped_at: int | None = None
        self.reason: str | None = None
        self.valid_end = start
        # where nothing but zeros follows, if the scan ended there before `end` (unwritten space)
        self.unwritten_at: int | None = None

    def __iter__(self) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """Yield (position, header, batch bytes) for each sound batch."""
        batches = iter_file_batches(
            self._fd, self._start, self._end, max_batch_bytes=self._max_batch_bytes, chunk_bytes=self._chunk
        )
        while True:
            try:
                pos, header, view = next(batches)
            except StopIteration:
                if self.valid_end < self._end:
                    self.unwritten_at = self.valid_end
                return
            except CorruptSegmentError as exc:
                self._stop(exc.position or 0, exc.message.split(" at position ")[0])
                return
            if not crc_matches(view, 0, header):
                self._stop(pos, "CRC32C does not match the batch")
                return
            base = header.base_offset
            if base < self.next_offset:
                self._stop(pos, f"base offset {base} is below the expected {self.next_offset}")
                return
            if damaging_gap(base, self.next_offset, self._allow_gaps_below):
                self._stop(pos, f"base offset {base} leaves a gap after {self.next_offset} in a log without gaps")
                return
            epoch = header.partition_leader_epoch
            if epoch < NO_PARTITION_LEADER_EPOCH:
                self._stop(pos, f"leader epoch {epoch} is below -1, which no writer stamps")
                return
            if epoch >= 0 and epoch < self.leader_epoch:
                self._stop(pos, f"leader epoch {epoch} is below the previous batch's {self.leader_epoch}")
                return
            if epoch >= 0 and self._epoch_at is not None and self._epoch_at(base) != epoch:
                self._stop(pos, f"leader epoch {epoch} differs from the checkpoint's {self._epoch_at(base)}")
                return
            yield pos, header, view
            self.next_offset = header.next_offset
            if epoch >= 0:
                self.leader_epoch = epoch
            self.valid_end = pos + header.size

    def _stop(self, position: int, reason: str) -> None:
        self.stopped_at = position
        self.reason = reason
