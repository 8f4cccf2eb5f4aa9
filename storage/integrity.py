"""Finding corrupt batches in a log in use: the check of every read, and the full scan (scrub, repair).

Design notes: docs/on-disk-format.md, section "storage/integrity.py".
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kraftpy.protocol.errors import CorruptRecordError
from kraftpy.protocol.records.header import CRC_START, HEADER_SIZE, LOG_OVERHEAD, MAGIC, crc32c
from kraftpy.storage.files import HandleClosedError
from kraftpy.storage.log import PartitionLog
from kraftpy.storage.scan import ValidatingScan
from kraftpy.storage.validation import hard_max_batch_bytes

# The scan reads this much at a time, so a pacer's sleeps stay short and regular.
SCAN_CHUNK_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Corruption:
    """The first bad batch of a log: where it sits and what is wrong with it."""

    path: Path
    segment_base_offset: int
    position: int
    offset: int  # the offset the bad batch should start at (the end of the sound part before it)
    reason: str

    def __str__(self) -> str:
        return f"{self.path} at byte {self.position} (offset {self.offset}): {self.reason}"


# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta: what check_read needs.
_FIELDS = struct.Struct(">qiibIhi")


def check_read(data: bytes, fetch_offset: int, *, max_batch_bytes: int) -> None:
    """Raise CorruptRecordError (with the position in `data`) unless every batch in it is sound.

    What a follower's parse_header(check_crc=True) checks, minus the record count, in one unpack and
    one CRC per batch: this runs on the event loop for every fetch.
    """
    view = memoryview(data)
    pos, end = 0, len(data)
    expected = -1
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptRecordError(f"batch header cut off: {end - pos} bytes left", pos)
        base, length, _epoch, magic, crc, _attributes, delta = _FIELDS.unpack_from(data, pos)
        size = length + LOG_OVERHEAD
        if magic != MAGIC or not HEADER_SIZE <= size <= max_batch_bytes or pos + size > end or delta < 0:
            raise CorruptRecordError(f"insane batch header (magic {magic}, size {size}, lastOffsetDelta {delta})", pos)
        actual = crc32c(view[pos + CRC_START : pos + size])
        if actual != crc:
            raise CorruptRecordError(f"CRC32C is {actual:#010x}, header says {crc:#010x}", pos)
        if expected < 0 and base + delta < fetch_offset:
            raise CorruptRecordError(
                f"first batch holds offsets {base}..{base + delta}, below the fetch offset {fetch_offset}", pos
            )
        if base < expected:
            raise CorruptRecordError(f"base offset {base} is below the expected {expected}", pos)
        expected = base + delta + 1
        pos += size


class Pacer:
    """Keeps a reader at `bytes_per_second` on average by sleeping (in the reader's own thread)."""

    def __init__(
        self,
        bytes_per_second: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if bytes_per_second <= 0:
            raise ValueError(f"bytes_per_second must be positive, got {bytes_per_second}")
        self.bytes_per_second = bytes_per_second
        self._clock = clock
        self._sleep = sleep
        self._start = clock()
        self._bytes = 0

    def __call__(self, size: int) -> None:
        self._bytes += size
        ahead_s = self._bytes / self.bytes_per_second - (self._clock() - self._start)
        if ahead_s > 0:
            self._sleep(ahead_s)
        elif ahead_s < -1:
            # Idle time (between partitions, a busy disk) is not credit for a burst later.
            self._start, self._bytes = self._clock(), 0


def find_corruption(
    plog: PartitionLog,
    *,
    pace: Callable[[int], None] | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> Corruption | None:
    """The first bad batch of the log, or None (also when the log changed under the scan or it was stopped).

    Blocking, outside the log's lock: run it in a worker thread. `pace(n)` is
    called after each n bytes read.
    """
    generation, segments = plog.scan_view()
    log_start = plog.log_start_offset
    max_batch = hard_max_batch_bytes(plog.config.max_message_bytes)
    epochs = plog.leader_epoch_cache

    def epoch_at(offset: int) -> int:
        return epochs.epoch_for_offset(max(offset, log_start))

    next_offset, epoch = 0, -1
    for seg, start, first_offset, size in segments:
        found: Corruption | None = None
        if first_offset < next_offset:
            found = Corruption(seg.log_path, seg.base_offset, 0, next_offset, "segment starts inside the previous one")
        else:
            next_offset = first_offset
            try:
                with seg.reading() as fd:
                    scan = ValidatingScan(
                        fd,
                        start,
                        size,
                        next_offset=next_offset,
                        leader_epoch=epoch,
                        max_batch_bytes=max_batch,
                        # Gaps are allowed: a follower of a topic that once was compacted holds its leader's
                        # gaps and no cleaner checkpoint. A damaged base offset still shows: the next batch
                        # goes back, or its epoch disagrees with the checkpoint.
                        epoch_at=epoch_at if epochs.latest_epoch >= 0 else None,
                        chunk_bytes=SCAN_CHUNK_BYTES,
                    )
                    for _pos, header, _view in scan:
                        if pace is not None:
                            pace(header.size)
                        if stopping():
                            return None
            except HandleClosedError:
                return None  # retention, the cleaner or a truncation replaced the segment: scan again later
            if scan.stopped_at is not None:
                found = Corruption(seg.log_path, seg.base_offset, scan.stopped_at, scan.next_offset, scan.reason or "")
            next_offset, epoch = scan.next_offset, scan.leader_epoch
        if found is not None:
            # Damage only if the log held still: a truncation rewrites bytes, retention moves the log start
            # (and with it the epochs the scan compared against).
            unchanged = plog.truncation_generation == generation and plog.log_start_offset == log_start
            return found if unchanged else None
    return None
