"""Kafka's primitive field encodings for records kept inside topics (the coordinators' keys and values).

`__consumer_offsets` and `__transaction_state` records are Kafka "data" schemas written by hand: a
version int16, then fields in the classic form (int16-sized strings, int32-sized arrays and bytes) or,
from a schema's first flexible version, the compact form (unsigned-varint sizes plus one, tagged fields
after each struct). This module writes the classic form and reads both; every read is bounded by the
record's length, and anything that does not decode raises the caller's error type.
"""

from __future__ import annotations

import struct

from kraftpy.protocol.errors import KafkaError

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")


def string(text: str) -> bytes:
    data = text.encode()
    return I16.pack(len(data)) + data


def nullable_string(text: str | None) -> bytes:
    return I16.pack(-1) if text is None else string(text)


def byte_string(data: bytes) -> bytes:
    return I32.pack(len(data)) + data


class FieldReader:
    """Reads one record's fields in order; `flexible` switches to the compact forms."""

    def __init__(self, data: bytes, error: type[KafkaError], flexible: bool = False) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.error = error
        self.flexible = flexible

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise self.error(f"record ends early (wanted {n} bytes at {self.pos} of {len(self.data)})")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def fixed(self, s: struct.Struct) -> int:
        return s.unpack(self.take(s.size))[0]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if shift > 28:
                raise self.error("varint too long")
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def _size(self, classic: struct.Struct) -> int:
        return self.uvarint() - 1 if self.flexible else self.fixed(classic)

    def nullable_string(self) -> str | None:
        n = self._size(I16)
        if n < 0:
            return None
        try:
            return bytes(self.take(n)).decode()
        except UnicodeDecodeError as exc:
            raise self.error(f"a string is not UTF-8: {exc}") from None

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise self.error("a null string where one is required")
        return text

    def byte_string(self) -> bytes:
        n = self._size(I32)
        if n < 0:
            raise self.error("null bytes where bytes are required")
        return bytes(self.take(n))

    def array_len(self) -> int:
        """The item count; -1 for a null array. Never more items than bytes left (each takes one or more)."""
        n = self._size(I32)
        if n > len(self.data) - self.pos:
            raise self.error(f"an array of {n} items in a record of {len(self.data)} bytes")
        return max(n, -1)

    def tagged(self) -> dict[int, memoryview]:
        """The tagged fields after a struct (flexible versions only; none in the classic form)."""
        if not self.flexible:
            return {}
        tags = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            tags[tag] = self.take(self.uvarint())
        return tags
