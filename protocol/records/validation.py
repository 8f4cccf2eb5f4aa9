"""The records inside a producer's batch, checked once on produce without decoding them (Kafka's LogValidator).

Design notes: docs/record-batch.md, section "protocol/records/validation.py".
"""

from __future__ import annotations

from kraftpy.protocol.errors import CorruptRecordError, ErrorCode
from kraftpy.protocol.records.batch import DEFAULT_MAX_UNCOMPRESSED_BYTES, LOG_APPEND_TIME, decode_batch
from kraftpy.protocol.records.compression import CompressionType, compression_type, decompress
from kraftpy.protocol.records.header import HEADER_SIZE, BatchHeader
from kraftpy.protocol.records.record import MIN_RECORD_BODY, MIN_RECORD_SIZE
from kraftpy.protocol.records.varint import NotFast, fast_varint


class InvalidRecordError(CorruptRecordError):
    """Records that decode but break a rule of the log (Kafka's InvalidRecordException)."""

    code = ErrorCode.INVALID_RECORD


def validate_records(
    buf: bytes,
    header: BatchHeader,
    pos: int = 0,
    *,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    require_keys: bool = False,
) -> int:
    """Check the records of the producer batch at `pos` whose header (and CRC) is already checked.

    Returns the size of the records section, inflated. Raises a CorruptRecordError
    (CORRUPT_MESSAGE) or InvalidRecordError (INVALID_RECORD) naming the record.
    """
    codec = compression_type(header.compression)
    if codec is CompressionType.NONE:
        data, start, end = buf, pos + HEADER_SIZE, pos + header.size
    else:
        try:
            data = decompress(codec, memoryview(buf)[pos + HEADER_SIZE : pos + header.size], max_uncompressed_bytes)
        except CorruptRecordError as exc:
            raise type(exc)(f"{exc.message} in the batch's records section", pos) from None
        start, end = 0, len(data)
    count = header.records_count
    if count * MIN_RECORD_SIZE > end - start:
        raise InvalidRecordError(
            f"recordsCount {count} cannot fit in the {end - start}-byte records section "
            "(Kafka: incorrect declared batch size)",
            pos,
        )
    try:
        _walk(data, start, end, header, require_keys)
    except (NotFast, IndexError):
        _decide_slowly(buf, header, pos, max_uncompressed_bytes, require_keys)
    return end - start


def _walk(data: bytes, p: int, end: int, header: BatchHeader, require_keys: bool) -> None:
    count = header.records_count
    # CreateTime records carry their own timestamps, which must not exceed maxTimestamp.
    max_ts_delta = None if header.timestamp_type == LOG_APPEND_TIME else header.max_timestamp - header.base_timestamp
    for i in range(count):
        if p >= end:
            raise InvalidRecordError(
                f"recordsCount is {count} but the records section holds only {i} records "
                "(Kafka: incorrect declared batch size)"
            )
        b = data[p]
        if b < 0x80:
            length, p = (b >> 1) ^ -(b & 1), p + 1
        elif p + 1 < end and data[p + 1] < 0x80:  # two bytes: records of 64 B to 8 KiB
            raw = (b & 0x7F) | (data[p + 1] << 7)
            length, p = (raw >> 1) ^ -(raw & 1), p + 2
        else:
            length, p = fast_varint(data, p, end, 5)
        record_end = p + length
        if length < MIN_RECORD_BODY or record_end > end:
            raise NotFast
        p += 1  # attributes: no bits are defined for v2 records
        b = data[p]
        if b < 0x80:
            ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
        elif p + 1 < record_end and data[p + 1] < 0x80:  # two bytes: 64 ms to 8 s after the batch's first
            raw = (b & 0x7F) | (data[p + 1] << 7)
            ts_delta, p = (raw >> 1) ^ -(raw & 1), p + 2
        else:
            ts_delta, p = fast_varint(data, p, record_end, 10)
        if p >= record_end:
            raise NotFast
        b = data[p]
        if b < 0x80:
            delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            delta, p = fast_varint(data, p, record_end, 5)
        if p >= record_end:
            raise NotFast
        b = data[p]
        if b < 0x80:
            n, p = (b >> 1) ^ -(b & 1), p + 1
        elif p + 1 < record_end and data[p + 1] < 0x80:
            raw = (b & 0x7F) | (data[p + 1] << 7)
            n, p = (raw >> 1) ^ -(raw & 1), p + 2
        else:
            n, p = fast_varint(data, p, record_end, 5)
        if n >= 0:
            p += n
        elif n != -1:
            raise NotFast
        if p >= record_end:
            raise NotFast
        keyless = n == -1
        b = data[p]
        if b < 0x80:
            n, p = (b >> 1) ^ -(b & 1), p + 1
        elif p + 1 < record_end and data[p + 1] < 0x80:
            raw = (b & 0x7F) | (data[p + 1] << 7)
            n, p = (raw >> 1) ^ -(raw & 1), p + 2
        else:
            n, p = fast_varint(data, p, record_end, 5)
        if n >= 0:
            p += n
        elif n != -1:
            raise NotFast
        if p >= record_end:
            raise NotFast
        b = data[p]
        if b == 0:
            p += 1  # no headers, the common case
        else:
            p = _headers(data, p, record_end)
        if p != record_end:
            raise NotFast
        if delta != i:
            raise InvalidRecordError(
                f"record {i} has offsetDelta {delta}; a producer batch holds offset deltas 0..{count - 1} in order"
            )
        if max_ts_delta is not None and ts_delta > max_ts_delta:
            raise InvalidRecordError(
                f"record {i} has timestamp {header.base_timestamp + ts_delta}, above the batch's "
                f"maxTimestamp {header.max_timestamp}"
            )
        if keyless and require_keys:
            raise InvalidRecordError(f"record {i} has no key: Compacted topic cannot accept message without key")
    if p != end:
        raise InvalidRecordError(
            f"{end - p} bytes follow the last of the {count} records the batch declares "
            "(Kafka: incorrect declared batch size)"
        )


def _headers(data: bytes, p: int, record_end: int) -> int:
    count, p = fast_varint(data, p, record_end, 5)
    if count < 0:
        raise NotFast
    for _ in range(count):
        n, p = fast_varint(data, p, record_end, 5)
        if n < 0 or p + n > record_end:
            raise NotFast
        try:
            str(data[p : p + n], "utf-8")
        except UnicodeDecodeError:
            raise NotFast from None
        p += n
        n, p = fast_varint(data, p, record_end, 5)
        if n >= 0:
            p += n
        elif n != -1:
            raise NotFast
        if p > record_end:
            raise NotFast
    return p


def _decide_slowly(buf: bytes, header: BatchHeader, pos: int, max_uncompressed_bytes: int, require_keys: bool) -> None:
    """The reference decoder's verdict, with the producer's rules applied to what it decodes."""
    decoded = decode_batch(buf, pos, max_uncompressed_bytes=max_uncompressed_bytes, check_crc=False)
    for i, record in enumerate(decoded.records):
        if record.offset - header.base_offset != i:
            raise InvalidRecordError(
                f"record {i} has offsetDelta {record.offset - header.base_offset}; "
                f"a producer batch holds offset deltas 0..{header.records_count - 1} in order"
            )
        if header.timestamp_type != LOG_APPEND_TIME and record.timestamp > header.max_timestamp:
            raise InvalidRecordError(
                f"record {i} has timestamp {record.timestamp}, above the batch's maxTimestamp {header.max_timestamp}"
            )
        if require_keys and record.key is None:
            raise InvalidRecordError(f"record {i} has no key: Compacted topic cannot accept message without key")
