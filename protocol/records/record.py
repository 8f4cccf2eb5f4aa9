"""One record inside a v2 batch: the `Record` value and Kafka's varint record layout.

Design notes: docs/record-batch.md, section "protocol/records/record.py".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kraftpy.protocol.errors import CorruptRecordError, TruncatedBatchError
from kraftpy.protocol.records.varint import (
    Buffer,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    size_of_varlong,
)

Headers = tuple[tuple[str, bytes | None], ...]

# Smallest possible record body after its length: attributes, 2 deltas, key and
# value lengths, header count, one byte each.
MIN_RECORD_BODY = 6
MIN_RECORD_SIZE = 1 + MIN_RECORD_BODY


@dataclass(frozen=True, slots=True)
class Record:
    """A record with its absolute offset and timestamp (ms), as a reader sees it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


def normalize_headers(headers: Sequence[tuple[str, bytes | None]] | None) -> Headers:
    """Headers as a tuple of (str, bytes | None), checking the types a caller passed."""
    if not headers:
        return ()
    out = []
    for item in headers:
        name, value = item
        if not isinstance(name, str):
            raise TypeError(f"header key must be str, not {type(name).__name__}")
        if value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"header {name!r} value must be bytes or None, not {type(value).__name__}")
        out.append((name, None if value is None else bytes(value)))
    return tuple(out)


def _bytes_field(data: bytes | None) -> bytes:
    if data is None:
        return b"\x01"  # zigzag(-1)
    return encode_varint(len(data)) + data


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers = (),
) -> bytes:
    """Encode one record body with its length prefix."""
    parts = [
        b"\x00",  # attributes: none are defined for v2 records
        encode_varlong(timestamp_delta),
        encode_varint(offset_delta),
        _bytes_field(None if key is None else bytes(key)),
        _bytes_field(None if value is None else bytes(value)),
        encode_varint(len(headers)),
    ]
    for name, hvalue in headers:
        encoded = name.encode("utf-8")
        parts.append(encode_varint(len(encoded)))
        parts.append(encoded)
        parts.append(_bytes_field(hvalue))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def record_size(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers = (),
) -> int:
    """Bytes encode_record would produce, computed without building them."""
    body = 1 + size_of_varlong(timestamp_delta) + size_of_varint(offset_delta)
    for data in (key, value):
        body += 1 if data is None else size_of_varint(len(data)) + len(data)
    body += size_of_varint(len(headers))
    for name, hvalue in headers:
        n = len(name.encode("utf-8"))
        body += size_of_varint(n) + n
        body += 1 if hvalue is None else size_of_varint(len(hvalue)) + len(hvalue)
    return size_of_varint(body) + body


def _read_bytes(buf: Buffer, pos: int, end: int, what: str, nullable: bool = True) -> tuple[bytes | None, int]:
    start = pos
    length, pos = decode_varint(buf, pos)
    if length < 0:
        if length == -1 and nullable:
            return None, pos
        raise CorruptRecordError(f"{what} length {length} is negative", start)
    if pos + length > end:
        raise CorruptRecordError(f"{what} length {length} runs past the end of its record", start)
    return bytes(buf[pos : pos + length]), pos + length


def _decode_fields(
    view: memoryview, pos: int, record_end: int
) -> tuple[int, int, bytes | None, bytes | None, Headers, int]:
    # pos is just past the attributes byte, which has no defined bits in v2.
    timestamp_delta, pos = decode_varlong(view, pos)
    offset_delta, pos = decode_varint(view, pos)
    key, pos = _read_bytes(view, pos, record_end, "key")
    value, pos = _read_bytes(view, pos, record_end, "value")
    header_at = pos
    count, pos = decode_varint(view, pos)
    if count < 0:
        raise CorruptRecordError(f"header count {count} is negative", header_at)
    if count > (record_end - pos) // 2:  # each header takes at least 2 bytes
        raise CorruptRecordError(f"header count {count} cannot fit in the record", header_at)
    headers = []
    for _ in range(count):
        key_at = pos
        raw_name, pos = _read_bytes(view, pos, record_end, "header key", nullable=False)
        try:
            name = raw_name.decode("utf-8")  # type: ignore[union-attr]
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key is not valid UTF-8 ({exc.reason})", key_at) from None
        hvalue, pos = _read_bytes(view, pos, record_end, "header value")
        headers.append((name, hvalue))
    return timestamp_delta, offset_delta, key, value, tuple(headers), pos


def decode_record(
    buf: Buffer, pos: int = 0, end: int | None = None, *, base_offset: int = 0, base_timestamp: int = 0
) -> tuple[Record, int]:
    """Decode the record at `pos`, reading nothing at or past `end` (default: len(buf)).

    Returns (record, position after it). The record's offset and timestamp are
    base_offset + offsetDelta and base_timestamp + timestampDelta, so with the
    default bases they are the raw deltas.
    """
    limit = len(buf) if end is None else min(end, len(buf))
    start = pos
    length, pos = decode_varint(buf, pos)
    if length < MIN_RECORD_BODY:
        raise CorruptRecordError(f"record length {length} is below the minimum {MIN_RECORD_BODY}", start)
    record_end = pos + length
    if record_end > limit:
        raise TruncatedBatchError(f"record declares {length} bytes, {limit - pos} remain in the records section", start)
    # Bounding the view makes every varint inside stop at the record's end.
    view = memoryview(buf)[:record_end]
    try:
        timestamp_delta, offset_delta, key, value, headers, pos = _decode_fields(view, pos + 1, record_end)
    except TruncatedBatchError as exc:
        raise TruncatedBatchError(
            f"a varint field runs past the end of the {length}-byte record at {start}", exc.position
        ) from None
    if pos != record_end:
        raise CorruptRecordError(
            f"record declares {length} bytes but its fields end {record_end - pos} bytes early", start
        )
    record = Record(base_offset + offset_delta, base_timestamp + timestamp_delta, key, value, headers)
    return record, pos
