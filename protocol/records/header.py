"""The fixed 61-byte header of a Kafka v2 RecordBatch: parse, validate, patch, CRC.

Design notes: docs/record-batch.md, section "protocol/records/header.py".
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c as _crc32c

from kraftpy.protocol.errors import (
    BatchTooLargeError,
    CrcMismatchError,
    InvalidMagicError,
    TruncatedBatchError,
)

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count
MAGIC = 2
CRC_START = 21
BASE_OFFSET_AT = 0
LENGTH_AT = 8
LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21
MAX_TIMESTAMP_AT = 35

# Kafka's default max.message.bytes is ~1 MiB; the codec's hard ceiling is far
# above any sane config and only guards against lengths read from garbage.
DEFAULT_MAX_BATCH_BYTES = 64 * 1024 * 1024

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")


def crc32c(data: bytes | bytearray | memoryview) -> int:
    return _crc32c.crc32c(data)


class BatchHeader(NamedTuple):
    """The parsed header. A NamedTuple, not a dataclass: it is built once per
    batch on every hot path, and tuple construction is about 3x cheaper."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch on disk and on the wire."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_BIT else 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    def pack(self) -> bytes:
        return _HEADER.pack(
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        )


def peek_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """Total size of the batch at `pos`, or None when fewer than 12 bytes remain."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    return _INT32.unpack_from(buf, pos + LENGTH_AT)[0] + LOG_OVERHEAD


def parse_header(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    check_crc: bool = False,
) -> BatchHeader:
    """Parse and validate the header of the batch at `pos`.

    Checks the declared length against the buffer and `max_batch_bytes`, the
    magic byte, the record count against the length, and (if asked) the CRC.
    Every failure raises a typed CorruptRecordError naming the position.
    """
    available = len(buf) - pos
    if available < LOG_OVERHEAD:
        raise TruncatedBatchError(f"batch header needs {LOG_OVERHEAD} bytes, {available} remain", pos)
    batch_length = _INT32.unpack_from(buf, pos + LENGTH_AT)[0]
    size = batch_length + LOG_OVERHEAD
    if batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise BatchTooLargeError(f"batchLength {batch_length} is below the minimum {HEADER_SIZE - LOG_OVERHEAD}", pos)
    if size > max_batch_bytes:
        raise BatchTooLargeError(f"batch size {size} exceeds the maximum {max_batch_bytes}", pos)
    if available < HEADER_SIZE:
        raise TruncatedBatchError(f"batch header needs {HEADER_SIZE} bytes, {available} remain", pos)
    magic = buf[pos + MAGIC_AT]
    if magic != MAGIC:
        raise InvalidMagicError(f"magic byte is {magic}, expected {MAGIC}", pos)
    if size > available:
        raise TruncatedBatchError(f"batch declares {size} bytes, {available} remain", pos)
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise BatchTooLargeError(
            f"negative lastOffsetDelta {header.last_offset_delta} or count {header.records_count}", pos
        )
    # Each record takes at least 7 bytes (length, attributes, 2 deltas, key, value, headers).
    if header.compression == 0 and header.records_count * 7 > size - HEADER_SIZE:
        raise BatchTooLargeError(f"{header.records_count} records cannot fit in {size - HEADER_SIZE} bytes", pos)
    if check_crc:
        actual = crc32c(memoryview(buf)[pos + CRC_START : pos + size])
        if actual != header.crc:
            raise CrcMismatchError(f"CRC32C is {actual:#010x}, header says {header.crc:#010x}", pos)
    return header


def crc_matches(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    return crc32c(memoryview(buf)[pos + CRC_START : pos + header.size]) == header.crc


def iter_batches(
    buf: bytes | bytearray | memoryview,
    *,
    check_crc: bool = True,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each whole batch in `buf`, validating as it goes.

    Raises on the first bad or truncated batch; every batch yielded before it is sound.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        header = parse_header(buf, pos, max_batch_bytes=max_batch_bytes, check_crc=check_crc)
        yield pos, header
        pos += header.size


def patch_offset_and_epoch(buf: bytearray, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Stamp baseOffset and partitionLeaderEpoch in place; both lie outside the CRC."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_AT, base_offset)
    _INT32.pack_into(buf, pos + LEADER_EPOCH_AT, leader_epoch)


def stamp_log_append_time(batch: bytes | bytearray | memoryview, append_time_ms: int) -> bytearray:
    """A copy of the one batch in `batch` marked LogAppendTime with maxTimestamp `append_time_ms`, CRC rewritten.

    Kafka's LogValidator for a LogAppendTime topic: the records stay as the producer
    wrote them; readers take every record's timestamp from maxTimestamp.
    """
    buf = bytearray(batch)
    (attributes,) = _INT16.unpack_from(buf, ATTRIBUTES_AT)
    _INT16.pack_into(buf, ATTRIBUTES_AT, attributes | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(buf, MAX_TIMESTAMP_AT, append_time_ms)
    write_crc(buf)
    return buf


def write_crc(buf: bytearray, pos: int = 0) -> int:
    """Compute the CRC of the batch at `pos` and store it; returns it."""
    size = _INT32.unpack_from(buf, pos + LENGTH_AT)[0] + LOG_OVERHEAD
    crc = crc32c(memoryview(buf)[pos + CRC_START : pos + size])
    _UINT32.pack_into(buf, pos + CRC_AT, crc)
    return crc


def read_offset_and_length(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    return _OFFSET_AND_LENGTH.unpack_from(buf, pos)
