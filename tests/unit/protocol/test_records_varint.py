"""Kafka's zigzag varints/varlongs: known encodings, round trips, and refusal of bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.protocol.errors import TruncatedBatchError, VarintOverflowError
from kraftpy.protocol.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    size_of_varlong,
)

# The vectors of Kafka's ByteUtilsTest (testVarintSerde / testVarlongSerde).
VARINT_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8192, "ff7f"),
    (8192, "808001"),
    (-8193, "818001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]
VARLONG_VECTORS = [
    *VARINT_VECTORS[:-2],
    (INT32_MAX, "feffffff0f"),
    (INT64_MAX, "feffffffffffffffff01"),
    (INT64_MIN, "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(("value", "hexed"), VARINT_VECTORS)
def test_varint_known_encodings(value: int, hexed: str) -> None:
    assert encode_varint(value).hex() == hexed
    assert decode_varint(bytes.fromhex(hexed)) == (value, len(hexed) // 2)


@pytest.mark.parametrize(("value", "hexed"), VARLONG_VECTORS)
def test_varlong_known_encodings(value: int, hexed: str) -> None:
    assert encode_varlong(value).hex() == hexed
    assert decode_varlong(bytes.fromhex(hexed)) == (value, len(hexed) // 2)


@settings(deadline=None)
@given(st.integers(INT32_MIN, INT32_MAX), st.binary(max_size=4), st.binary(max_size=4))
def test_varint_round_trip_at_any_position(value: int, before: bytes, after: bytes) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value) <= 5
    assert decode_varint(before + encoded + after, len(before)) == (value, len(before) + len(encoded))


@settings(deadline=None)
@given(st.integers(INT64_MIN, INT64_MAX), st.binary(max_size=4))
def test_varlong_round_trip(value: int, after: bytes) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varlong(value) <= 10
    assert decode_varlong(encoded + after) == (value, len(encoded))


def test_encode_refuses_values_outside_the_type() -> None:
    with pytest.raises(ValueError, match="int32"):
        encode_varint(INT32_MAX + 1)
    with pytest.raises(ValueError, match="int64"):
        encode_varlong(INT64_MIN - 1)


def test_continuation_past_the_maximum_width_is_overflow_with_position() -> None:
    with pytest.raises(VarintOverflowError, match="longer than 5 bytes at position 2") as info:
        decode_varint(b"\x00\x00" + b"\xff" * 5 + b"\x01", 2)
    assert info.value.position == 2
    with pytest.raises(VarintOverflowError, match="longer than 10 bytes"):
        decode_varlong(b"\xff" * 10 + b"\x01")


def test_value_wider_than_the_type_is_overflow() -> None:
    # Five bytes, but the last carries bits beyond bit 31: no int32 encodes to this.
    with pytest.raises(VarintOverflowError, match="does not fit in 32 bits"):
        decode_varint(b"\xff\xff\xff\xff\x7f")
    with pytest.raises(VarintOverflowError, match="does not fit in 64 bits"):
        decode_varlong(b"\xff" * 9 + b"\x7f")


@settings(deadline=None)
@given(st.integers(INT32_MIN, INT32_MAX).map(encode_varint).filter(lambda e: len(e) > 1), st.data())
def test_running_off_the_buffer_is_truncation_with_position(encoded: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(1, len(encoded) - 1))
    with pytest.raises(TruncatedBatchError, match="runs off the end of the buffer at position 3"):
        decode_varint(b"abc" + encoded[:cut], 3)


def test_empty_buffer_is_truncation() -> None:
    with pytest.raises(TruncatedBatchError):
        decode_varint(b"")
    with pytest.raises(TruncatedBatchError):
        decode_varlong(b"\x00", 1)


@settings(deadline=None)
@given(st.binary(max_size=12), st.integers(0, 12))
def test_any_bytes_decode_or_raise_a_typed_error(buf: bytes, pos: int) -> None:
    for decode, limit, low, high in (
        (decode_varint, 5, INT32_MIN, INT32_MAX),
        (decode_varlong, 10, INT64_MIN, INT64_MAX),
    ):
        try:
            value, end = decode(buf, pos)
        except (TruncatedBatchError, VarintOverflowError):
            continue
        assert pos < end <= pos + limit
        assert low <= value <= high
