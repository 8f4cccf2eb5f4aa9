"""Kafka's zigzag varints and varlongs (protobuf encoding), as its record layout uses them.

Also the unsigned varint under them, which flexible message versions use for lengths and tags.

A varint holds a signed 32-bit value in at most 5 bytes, a varlong a signed
64-bit value in at most 10. Decoding reads untrusted bytes, so it refuses a
value wider than its type, a continuation past the maximum width, and a
varint that runs off the end of the buffer, each with the position it began.
"""

from __future__ import annotations

from kraftpy.protocol.errors import TruncatedBatchError, VarintOverflowError
from kraftpy.protocol.validate import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10

Buffer = bytes | bytearray | memoryview


def encode_unsigned_varint(value: int) -> bytes:
    """Base-128 bytes of a value >= 0, low group first (Kafka's ByteUtils.writeUnsignedVarint)."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Encode a signed 32-bit value as Kafka's zigzag varint."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint value {value} is outside the int32 range")
    # Python's >> is arithmetic, so (v >> 31) is 0 or -1 as in Java's zigzag.
    return encode_unsigned_varint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Encode a signed 64-bit value as Kafka's zigzag varlong."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong value {value} is outside the int64 range")
    return encode_unsigned_varint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def size_of_varint(value: int) -> int:
    """Bytes encode_varint(value) takes, without encoding it."""
    zigzagged = ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF
    return max(1, (zigzagged.bit_length() + 6) // 7)


def size_of_varlong(value: int) -> int:
    """Bytes encode_varlong(value) takes, without encoding it."""
    zigzagged = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    return max(1, (zigzagged.bit_length() + 6) // 7)


def _decode(buf: Buffer, pos: int, max_bytes: int, bits: int, what: str) -> tuple[int, int]:
    first = buf[pos] if pos < len(buf) else None
    if first is not None and first < 0x80:
        # One-byte values (small deltas, short lengths) are the common case.
        return (first >> 1) ^ -(first & 1), pos + 1
    start = pos
    end = len(buf)
    raw = 0
    shift = 0
    while True:
        if pos >= end:
            raise TruncatedBatchError(f"{what} runs off the end of the buffer", start)
        if pos - start >= max_bytes:
            raise VarintOverflowError(f"{what} is longer than {max_bytes} bytes", start)
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    if raw >> bits:
        raise VarintOverflowError(f"{what} does not fit in {bits} bits", start)
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varint(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varint at `pos`; returns (value, position after it)."""
    return _decode(buf, pos, MAX_VARINT_BYTES, 32, "varint")


def decode_varlong(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varlong at `pos`; returns (value, position after it)."""
    return _decode(buf, pos, MAX_VARLONG_BYTES, 64, "varlong")


class NotFast(Exception):
    """A fast path cannot vouch for these bytes: the reference decoder decides (and names the error)."""


def fast_varint(buf: Buffer, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """A zigzag varint (max_bytes 5: int32) or varlong (10: int64) for the hot loops that inline one byte.

    Raises NotFast, without a message, where decode_varint/decode_varlong would raise.
    """
    raw = shift = 0
    start = pos
    while True:
        if pos >= end or pos - start >= max_bytes:
            raise NotFast
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    if raw >> (32 if max_bytes == MAX_VARINT_BYTES else 64):
        raise NotFast  # wider than int32 / int64
    return (raw >> 1) ^ -(raw & 1), pos
