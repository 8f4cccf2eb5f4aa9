"""The producer's batch builder: protocol's RecordBatchBuilder with a fast append for plain records.

A producer appends every record it sends, so this is the client's hottest
code. For the common record (bytes key or None, bytes value or None, no
headers) `append` writes Kafka's varint record layout straight into the
batch buffer, with small varints from a table, instead of building and
joining parts and computing the size separately. Anything else (headers,
other types, no timestamp) goes through the general RecordBatchBuilder.append,
and both produce the same bytes (tests/unit/client/test_client_batch_builder.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from kraftpy.protocol.records.batch import RecordBatchBuilder
from kraftpy.protocol.records.header import HEADER_SIZE
from kraftpy.protocol.records.varint import encode_varint, encode_varlong

# Zigzag varints of 0..16383, the offset deltas, lengths and timestamp deltas of nearly every record.
_SMALL = 1 << 14
_VARINTS = tuple(encode_varint(v) for v in range(_SMALL))


def _varint(value: int) -> bytes:
    return _VARINTS[value] if 0 <= value < _SMALL else encode_varint(value)


class ProducerBatchBuilder(RecordBatchBuilder):
    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = None,
    ) -> bool:
        if (
            headers
            or timestamp_ms is None
            or self._built is not None
            or (key is not None and type(key) is not bytes)
            or (value is not None and type(value) is not bytes)
        ):
            return super().append(key, value, headers, timestamp_ms)
        count = self._count
        base = timestamp_ms if count == 0 else self._base_timestamp
        delta = timestamp_ms - base
        ts = _VARINTS[delta] if 0 <= delta < _SMALL else encode_varlong(delta)
        off = _varint(count)
        if key is None:
            key_prefix, key_len = b"\x01", 0
        else:
            key_len = len(key)
            key_prefix = _varint(key_len)
        if value is None:
            value_prefix, value_len = b"\x01", 0
        else:
            value_len = len(value)
            value_prefix = _varint(value_len)
        # attributes + timestamp delta + offset delta + key + value + header count (0)
        body = 2 + len(ts) + len(off) + len(key_prefix) + key_len + len(value_prefix) + value_len
        length = _varint(body)
        records = self._records
        if count and HEADER_SIZE + len(records) + len(length) + body > self.batch_size:
            return False
        records += length
        records += b"\x00"
        records += ts
        records += off
        records += key_prefix
        if key_len:
            records += key  # type: ignore[operator]
        records += value_prefix
        if value_len:
            records += value  # type: ignore[operator]
        records += b"\x00"
        self._base_timestamp = base
        self._max_timestamp = timestamp_ms if count == 0 or timestamp_ms > self._max_timestamp else self._max_timestamp
        self._count = count + 1
        return True
