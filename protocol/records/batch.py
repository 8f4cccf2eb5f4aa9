"""Whole v2 record batches: build them, decode them, and build them record by record.

`build_batch` and `RecordBatchBuilder` write Kafka's layout byte for byte
(header.py has the fixed header), so a batch built here has the CRC a Kafka
client computes for the same records. `decode_batch` reads untrusted bytes:
it checks the header and CRC (parse_header), inflates the records section
within a bound, and then demands that exactly `recordsCount` records fill the
section with offset deltas that rise and stay within lastOffsetDelta. Any
failure is a CorruptRecordError subclass naming what is wrong and where.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from kraftpy.protocol.errors import CorruptRecordError
from kraftpy.protocol.records.compression import (
    CompressionType,
    UnsupportedCompressionError,
    compress,
    decompress,
)
from kraftpy.protocol.records.header import (
    CONTROL_BIT,
    DEFAULT_MAX_BATCH_BYTES,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    parse_header,
    write_crc,
)
from kraftpy.protocol.records.record import (
    MIN_RECORD_SIZE,
    Record,
    decode_record,
    encode_record,
    normalize_headers,
    record_size,
)
from kraftpy.protocol.validate import INT32_MAX

# Inflated records sections are bounded separately from the batch: a 1 MiB
# zstd batch can legally hold far more, but not more than this by default.
DEFAULT_MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024
DEFAULT_BATCH_SIZE = 16384  # Kafka producer's batch.size

NO_TIMESTAMP = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1


RecordLike = (
    Record
    | tuple[bytes | None, bytes | None]
    | tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]
    | tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int | None]
)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A validated batch: its header, its records (absolute offsets and timestamps), its position."""

    header: BatchHeader
    records: tuple[Record, ...]
    position: int = 0

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.header.compression)

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    @property
    def is_transactional(self) -> bool:
        return self.header.is_transactional

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def size(self) -> int:
        return self.header.size


def _bytes_or_none(data: object, what: str) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"record {what} must be bytes or None, not {type(data).__name__}")


def _attributes(compression: int, timestamp_type: int, is_transactional: bool, is_control: bool) -> int:
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), not {timestamp_type}")
    attributes = int(CompressionType(compression))
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    return attributes


def _assemble(
    records_section: bytes | bytearray,
    *,
    count: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    base_offset: int,
    partition_leader_epoch: int,
    compression: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    attributes: int,
) -> bytes:
    section = compress(compression, records_section)
    header = BatchHeader(
        base_offset=base_offset,
        batch_length=HEADER_SIZE - LOG_OVERHEAD + len(section),
        partition_leader_epoch=partition_leader_epoch,
        magic=MAGIC,
        crc=0,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=count,
    )
    try:
        packed = header.pack()
    except struct.error as exc:
        raise ValueError(f"a batch header field is out of range: {exc}") from None
    buf = bytearray(packed)
    buf += section
    write_crc(buf)
    return bytes(buf)


def build_batch(
    records: Iterable[RecordLike],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: CompressionType | int = CompressionType.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = CREATE_TIME,
) -> bytes:
    """Build one v2 batch from `records`.

    Each item is a Record (its absolute offset and timestamp are kept, so
    offsets may have gaps as in a compacted log) or a tuple
    (key, value[, headers[, timestamp_ms]]) that takes the offset after the
    previous record and, without a timestamp, the current time.
    """
    attributes = _attributes(int(compression), timestamp_type, is_transactional, is_control)
    parts: list[bytes] = []
    base_timestamp = max_timestamp = NO_TIMESTAMP
    last_delta = -1
    for item in records:
        if isinstance(item, Record):
            offset_delta = item.offset - base_offset
            if offset_delta <= last_delta:
                raise ValueError(
                    f"record offset {item.offset} must be above base_offset {base_offset} "
                    f"and the previous record's offset {base_offset + last_delta}"
                )
            key, value, headers, timestamp = item.key, item.value, item.headers, item.timestamp
        else:
            if not 2 <= len(item) <= 4:
                raise TypeError(f"a record tuple is (key, value[, headers[, timestamp]]), got {len(item)} items")
            key, value = item[0], item[1]
            headers = item[2] if len(item) > 2 else ()  # type: ignore[misc]
            timestamp = item[3] if len(item) > 3 else None  # type: ignore[misc]
            offset_delta = last_delta + 1
        if offset_delta > INT32_MAX:
            raise ValueError(f"offset delta {offset_delta} does not fit in an int32")
        if timestamp is None:
            timestamp = now_ms()
        if not parts:
            base_timestamp = max_timestamp = timestamp
        max_timestamp = max(max_timestamp, timestamp)
        parts.append(
            encode_record(
                offset_delta,
                timestamp - base_timestamp,
                _bytes_or_none(key, "key"),
                _bytes_or_none(value, "value"),
                normalize_headers(headers),
            )
        )
        last_delta = offset_delta
    return _assemble(
        b"".join(parts),
        count=len(parts),
        last_offset_delta=max(last_delta, 0),
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        attributes=attributes,
    )


def _with_context(exc: CorruptRecordError, prefix: str, position: int | None, suffix: str = "") -> CorruptRecordError:
    raw = exc.message
    if exc.position is not None:
        raw = raw.removesuffix(f" at position {exc.position}")
    return type(exc)(f"{prefix}{raw}{suffix}", position)


def decode_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    check_crc: bool = True,
) -> DecodedBatch:
    """Validate and decode the batch at `pos`; bytes after it in `buf` are not read.

    baseOffset and partitionLeaderEpoch lie outside the CRC by Kafka's design
    and cannot be checked here; everything else is. `check_crc=False` (the
    consumer's check_crcs) skips only the CRC: the structure is always validated.
    """
    header = parse_header(buf, pos, max_batch_bytes=max_batch_bytes, check_crc=check_crc)
    try:
        codec = CompressionType(header.compression)
    except ValueError:
        raise UnsupportedCompressionError(f"unknown compression type {header.compression}", pos) from None
    section_start = pos + HEADER_SIZE
    section_end = pos + header.size
    if codec is CompressionType.NONE:
        data: bytes | bytearray | memoryview = buf
        start, end = section_start, section_end
        where = ""
    else:
        try:
            data = decompress(codec, memoryview(buf)[section_start:section_end], max_uncompressed_bytes)
        except CorruptRecordError as exc:
            raise _with_context(exc, "", pos, " in the batch") from None
        start, end = 0, len(data)
        where = " of the decompressed records section"
    count = header.records_count
    if count * MIN_RECORD_SIZE > end - start:
        raise CorruptRecordError(
            f"recordsCount {count} cannot fit in the {end - start}-byte records section{where}", pos
        )
    timestamp_override = header.max_timestamp if header.timestamp_type == LOG_APPEND_TIME else None
    records = []
    p = start
    previous_delta = -1
    for i in range(count):
        if p >= end:
            raise CorruptRecordError(f"recordsCount is {count} but the records section ends after {i}", pos)
        at = p
        try:
            record, p = decode_record(
                data, p, end, base_offset=header.base_offset, base_timestamp=header.base_timestamp
            )
        except CorruptRecordError as exc:
            if codec is CompressionType.NONE:
                raise _with_context(exc, f"record {i}: ", exc.position) from None
            raise _with_context(exc, f"record {i}: ", pos, f" (byte {exc.position}{where})") from None
        delta = record.offset - header.base_offset
        if not previous_delta < delta <= header.last_offset_delta:
            raise CorruptRecordError(
                f"record {i} has offsetDelta {delta}; it must exceed the previous {previous_delta} "
                f"and not exceed lastOffsetDelta {header.last_offset_delta}",
                at if codec is CompressionType.NONE else pos,
            )
        previous_delta = delta
        if timestamp_override is not None:
            record = Record(record.offset, timestamp_override, record.key, record.value, record.headers)
        records.append(record)
    if p != end:
        raise CorruptRecordError(
            f"{end - p} bytes of trailing garbage after the last of {count} records{where}",
            p if codec is CompressionType.NONE else pos,
        )
    return DecodedBatch(header, tuple(records), pos)


def decode_batches(
    buf: bytes | bytearray | memoryview,
    *,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    check_crc: bool = True,
) -> Iterator[DecodedBatch]:
    """Decode every batch in `buf` in order; raises at the first bad one, after yielding those before."""
    pos = 0
    while pos < len(buf):
        batch = decode_batch(
            buf,
            pos,
            max_batch_bytes=max_batch_bytes,
            max_uncompressed_bytes=max_uncompressed_bytes,
            check_crc=check_crc,
        )
        yield batch
        pos += batch.size


class RecordBatchBuilder:
    """Accumulates records for one batch, as the producer's record accumulator does.

    `append` refuses a record (returns False) once the batch would exceed
    `batch_size`, except the first, which always fits so that one large record
    still gets sent. For compressed batches the size estimate is the
    uncompressed size, an upper bound for all but incompressible data.
    """

    def __init__(
        self,
        batch_size: int = DEFAULT_BATCH_SIZE,
        *,
        compression: CompressionType | int = CompressionType.NONE,
        base_offset: int = 0,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        timestamp_type: int = CREATE_TIME,
    ) -> None:
        self.batch_size = batch_size
        self.compression = CompressionType(compression)
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.timestamp_type = timestamp_type
        _attributes(self.compression, timestamp_type, is_transactional, False)  # validate early
        self._records = bytearray()
        self._count = 0
        self._base_timestamp = NO_TIMESTAMP
        self._max_timestamp = NO_TIMESTAMP
        self._built: bytes | None = None

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def is_empty(self) -> bool:
        return self._count == 0

    @property
    def estimated_size(self) -> int:
        """Bytes the built batch is expected to take (exact without compression)."""
        if self._built is not None:
            return len(self._built)
        return HEADER_SIZE + len(self._records)

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = None,
    ) -> bool:
        """Add a record unless the batch is full; True when it was added."""
        if self._built is not None:
            raise RuntimeError("the batch is already built; start a new builder")
        key = _bytes_or_none(key, "key")
        value = _bytes_or_none(value, "value")
        norm = normalize_headers(headers)
        timestamp = now_ms() if timestamp_ms is None else timestamp_ms
        base_timestamp = timestamp if self._count == 0 else self._base_timestamp
        delta = timestamp - base_timestamp
        if self._count and self.estimated_size + record_size(self._count, delta, key, value, norm) > self.batch_size:
            return False
        self._records += encode_record(self._count, delta, key, value, norm)
        self._base_timestamp = base_timestamp
        self._max_timestamp = timestamp if self._count == 0 else max(self._max_timestamp, timestamp)
        self._count += 1
        return True

    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, is_transactional: bool
    ) -> None:
        """Stamp the idempotence fields, which the producer assigns only when it sends the batch."""
        if self._built is not None:
            raise RuntimeError("the batch is already built; its producer state is sealed by the CRC")
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional

    def build(self) -> bytes:
        """The finished batch; later calls return the same bytes."""
        if self._built is None:
            self._built = _assemble(
                self._records,
                count=self._count,
                last_offset_delta=max(self._count - 1, 0),
                base_timestamp=self._base_timestamp,
                max_timestamp=self._max_timestamp,
                base_offset=self.base_offset,
                partition_leader_epoch=self.partition_leader_epoch,
                compression=self.compression,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence,
                attributes=_attributes(self.compression, self.timestamp_type, self.is_transactional, False),
            )
            self._records = bytearray()
        return self._built
