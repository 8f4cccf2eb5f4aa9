"""The consumer's batch decoder: a fast path for plain uncompressed batches, protocol's decoder for the rest.

Every fetched record is decoded here, so this is the consumer's hottest
code. For an uncompressed batch whose records have no headers, the records
are read in one loop with the one-byte varint case inline, checking the same
structure as `kraftpy.protocol.records.batch.decode_batch` (record lengths
inside the section, null or non-negative key/value lengths, offset deltas
rising up to lastOffsetDelta, nothing left over). Anything else - compression,
headers, log-append time, or any check failing - is handed to decode_batch,
which decodes it or raises the precise CorruptRecordError, so the fast path
never accepts what the general one would refuse
(tests/unit/client/test_client_batch_decoder.py).
"""

from __future__ import annotations

from typing import NamedTuple

from kraftpy.protocol.records.batch import DecodedBatch, decode_batch
from kraftpy.protocol.records.header import HEADER_SIZE, BatchHeader, parse_header
from kraftpy.protocol.records.varint import NotFast, fast_varint

LOG_APPEND_TIME_BIT = 0x08


class FastRecord(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()


class FastBatch(NamedTuple):
    header: BatchHeader
    records: list[FastRecord]

    @property
    def size(self) -> int:
        return self.header.size

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def is_control(self) -> bool:
        return self.header.is_control


def decode_for_consumer(buf: bytes, pos: int, *, check_crc: bool) -> FastBatch | DecodedBatch:
    header = parse_header(buf, pos, check_crc=check_crc)
    if header.compression != 0 or header.attributes & LOG_APPEND_TIME_BIT:
        return decode_batch(buf, pos, check_crc=False)  # (the CRC was just checked, if asked)
    try:
        return FastBatch(header, _plain_records(buf, pos, header))
    except (NotFast, IndexError):
        return decode_batch(buf, pos, check_crc=False)


def _plain_records(buf: bytes, pos: int, header: BatchHeader) -> list[FastRecord]:
    p = pos + HEADER_SIZE
    end = pos + header.size
    base_offset, base_ts, last_delta = header.base_offset, header.base_timestamp, header.last_offset_delta
    count = header.records_count
    if count * 7 > end - p:
        raise NotFast
    records: list[FastRecord] = []
    append = records.append
    previous = -1
    for _ in range(count):
        b = buf[p]
        if b < 0x80:
            length, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            length, p = fast_varint(buf, p, end, 5)
        record_end = p + length
        if length < 6 or record_end > end:
            raise NotFast
        p += 1  # attributes
        b = buf[p]
        if b < 0x80:
            ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            ts_delta, p = fast_varint(buf, p, record_end, 10)
        b = buf[p]
        if b < 0x80:
            delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            delta, p = fast_varint(buf, p, record_end, 5)
        b = buf[p]
        if b < 0x80:
            n, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            n, p = fast_varint(buf, p, record_end, 5)
        if n == -1:
            key = None
        elif 0 <= n <= record_end - p:
            key, p = buf[p : p + n], p + n
        else:
            raise NotFast
        b = buf[p]
        if b < 0x80:
            n, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            n, p = fast_varint(buf, p, record_end, 5)
        if n == -1:
            value = None
        elif 0 <= n <= record_end - p:
            value, p = buf[p : p + n], p + n
        else:
            raise NotFast
        # No headers (one 0 byte) and nothing after them; anything else takes the general path.
        if buf[p] != 0 or p + 1 != record_end or not previous < delta <= last_delta:
            raise NotFast
        p = record_end
        previous = delta
        append(FastRecord(base_offset + delta, base_ts + ts_delta, key, value))
    if p != end:
        raise NotFast
    return records
