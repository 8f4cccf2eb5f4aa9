"""Kafka's varint record layout: round trips, exact sizes, and refusal of malformed records."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.protocol.errors import CorruptRecordError, TruncatedBatchError
from kraftpy.protocol.records.record import Record, decode_record, encode_record, record_size
from kraftpy.protocol.records.varint import encode_varint, encode_varlong

headers = st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=30)), max_size=4).map(tuple)


@settings(deadline=None)
@given(
    offset_delta=st.integers(0, 2**31 - 1),
    timestamp_delta=st.integers(-(2**62), 2**62),
    key=st.none() | st.binary(max_size=200),
    value=st.none() | st.binary(max_size=500),
    hdrs=headers,
    base_offset=st.integers(0, 2**50),
    base_timestamp=st.integers(0, 2**50),
)
def test_record_round_trip(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    hdrs: tuple[tuple[str, bytes | None], ...],
    base_offset: int,
    base_timestamp: int,
) -> None:
    encoded = encode_record(offset_delta, timestamp_delta, key, value, hdrs)
    assert len(encoded) == record_size(offset_delta, timestamp_delta, key, value, hdrs)
    record, end = decode_record(b"xx" + encoded + b"yy", 2, base_offset=base_offset, base_timestamp=base_timestamp)
    assert end == 2 + len(encoded)
    assert record == Record(base_offset + offset_delta, base_timestamp + timestamp_delta, key, value, hdrs)


def test_null_key_and_tombstone_encode_as_minus_one() -> None:
    encoded = encode_record(0, 0, None, None)
    # length 6, attributes, tsDelta 0, offsetDelta 0, key -1, value -1, 0 headers
    assert encoded == bytes([12, 0, 0, 0, 1, 1, 0])
    record, _ = decode_record(encoded)
    assert record.key is None and record.value is None and record.is_tombstone


def _record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def test_length_below_minimum_or_past_the_section() -> None:
    with pytest.raises(CorruptRecordError, match="record length 3 is below the minimum"):
        decode_record(_record(b"\x00\x00\x00"))
    encoded = encode_record(0, 0, b"k", b"v")
    with pytest.raises(TruncatedBatchError, match="remain in the records section at position 0"):
        decode_record(encoded, 0, len(encoded) - 1)


def test_field_lengths_must_stay_inside_the_record() -> None:
    body = b"\x00\x00\x00" + encode_varint(50) + b"k" + b"\x01\x00"
    with pytest.raises(CorruptRecordError, match="key length 50 runs past the end of its record at position 4"):
        decode_record(_record(body) + b"\x00" * 60)
    body = b"\x00\x00\x00" + encode_varint(-2) + b"\x01\x00"
    with pytest.raises(CorruptRecordError, match="key length -2 is negative"):
        decode_record(_record(body))


def test_varint_running_past_its_record_names_the_record() -> None:
    # Declared length 6, but the timestamp varint continues past it into the next bytes.
    buf = _record(b"\x00\x80\x80\x80\x80\x80") + b"\x01" * 10
    with pytest.raises(TruncatedBatchError, match="runs past the end of the 6-byte record at 0 at position 2"):
        decode_record(buf)


def test_declared_length_must_match_the_fields() -> None:
    body = b"\x00\x00\x00\x01\x01\x00" + b"extra"
    with pytest.raises(CorruptRecordError, match="fields end 5 bytes early at position 0"):
        decode_record(_record(body))


def test_header_checks() -> None:
    base = b"\x00" + encode_varlong(0) + encode_varint(0) + b"\x01\x01"
    with pytest.raises(CorruptRecordError, match="header count -1 is negative"):
        decode_record(_record(base + encode_varint(-1)))
    with pytest.raises(CorruptRecordError, match="header count 1000 cannot fit"):
        decode_record(_record(base + encode_varint(1000) + b"\x00\x00"))
    with pytest.raises(CorruptRecordError, match="header key length -1 is negative"):
        decode_record(_record(base + encode_varint(1) + b"\x01\x01"))
    with pytest.raises(CorruptRecordError, match="header key is not valid UTF-8"):
        decode_record(_record(base + encode_varint(1) + encode_varint(1) + b"\xff\x01"))


@settings(deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_a_typed_error(buf: bytes) -> None:
    try:
        _, end = decode_record(buf)
    except CorruptRecordError:
        return
    assert 0 < end <= len(buf)
