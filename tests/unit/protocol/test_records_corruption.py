"""decode_batch on damaged and hostile bytes: every covered byte is checked, nothing escapes untyped.

Kafka's v2 CRC32C covers bytes 21 to the end of the batch. baseOffset (bytes 0-7)
and partitionLeaderEpoch (bytes 12-15) lie outside it by design, so that a leader
can stamp them without recomputing the CRC; decode_batch cannot detect a change
there (the partition log detects offset discontinuities instead). Every other
byte - batchLength, magic, the CRC itself and everything it covers - is checked.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.protocol.errors import CorruptRecordError
from kraftpy.protocol.records import CompressionType, Record, build_batch, decode_batch
from kraftpy.protocol.records.header import HEADER_SIZE, write_crc

UNCOVERED = set(range(0, 8)) | set(range(12, 16))

payloads = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=12),
        st.none() | st.binary(max_size=60),
        st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=6)), max_size=2),
        st.integers(0, 2**42),
    ),
    min_size=1,
    max_size=6,
)


def _covered_positions(size: int) -> list[int]:
    return [i for i in range(size) if i not in UNCOVERED]


def _sample_batch(codec: CompressionType) -> bytes:
    return build_batch(
        [
            (b"key-1", b"value one " * 4, [("trace", b"abc")], 1_700_000_000_000),
            (None, None, (), 1_700_000_000_005),
            (b"key-3", b"", [("n", None)], 1_699_999_999_000),
        ],
        base_offset=1000,
        partition_leader_epoch=7,
        compression=codec,
        producer_id=12,
        producer_epoch=1,
        base_sequence=30,
    )


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_every_covered_byte_position_is_checked(codec: CompressionType) -> None:
    """Each covered position, changed by three different masks, fails decode_batch with a typed error."""
    batch = _sample_batch(codec)
    decode_batch(batch)
    for i in _covered_positions(len(batch)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(batch)
            damaged[i] ^= mask
            with pytest.raises(CorruptRecordError):
                decode_batch(damaged)


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
@settings(max_examples=25, deadline=None)
@given(items=payloads, data=st.data())
def test_any_single_byte_change_outside_offset_and_epoch_is_detected(
    codec: CompressionType, items: list, data: st.DataObject
) -> None:
    """Any one changed byte of a batch, except in baseOffset (0-7) and partitionLeaderEpoch
    (12-15), which Kafka's CRC does not cover, makes decode_batch raise."""
    batch = build_batch(items, base_offset=5, compression=codec)
    i = data.draw(st.sampled_from(_covered_positions(len(batch))), label="position")
    new = data.draw(st.integers(0, 255).filter(lambda b: b != batch[i]), label="new byte")
    damaged = bytearray(batch)
    damaged[i] = new
    with pytest.raises(CorruptRecordError):
        decode_batch(damaged)


def test_offset_and_epoch_are_outside_the_crc_as_in_kafka() -> None:
    """The caveat, asserted rather than hidden: a changed baseOffset or leader epoch decodes."""
    batch = bytearray(_sample_batch(CompressionType.NONE))
    struct.pack_into(">q", batch, 0, 5000)
    struct.pack_into(">i", batch, 12, 99)
    decoded = decode_batch(batch)
    assert decoded.header.base_offset == 5000 and decoded.header.partition_leader_epoch == 99
    assert [r.offset for r in decoded.records] == [5000, 5001, 5002]


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
@settings(max_examples=60, deadline=None)
@given(items=payloads, data=st.data())
def test_damage_behind_a_recomputed_crc_is_still_caught_or_decodes_sanely(
    codec: CompressionType, items: list, data: st.DataObject
) -> None:
    """A writer with a bug (or an attacker) can produce a valid CRC over bad records: the
    structural checks must then raise a typed error, or the result must be self-consistent."""
    batch = bytearray(build_batch(items, compression=codec))
    edits = data.draw(
        st.lists(st.tuples(st.integers(HEADER_SIZE, len(batch) - 1), st.integers(0, 255)), min_size=1, max_size=3)
    )
    for i, new in edits:
        batch[i] = new
    write_crc(batch)
    try:
        decoded = decode_batch(batch)
    except CorruptRecordError:
        return
    assert len(decoded.records) == decoded.header.records_count
    deltas = [r.offset - decoded.base_offset for r in decoded.records]
    assert deltas == sorted(set(deltas)) and all(0 <= d <= decoded.header.last_offset_delta for d in deltas)


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(-(2**31), 2**31 - 1),
    last_offset_delta=st.integers(-(2**31), 2**31 - 1),
    attributes=st.integers(0, 0x3F),
    section=st.binary(max_size=120),
)
def test_hostile_header_fields_with_a_valid_crc(
    count: int, last_offset_delta: int, attributes: int, section: bytes
) -> None:
    head = struct.pack(
        ">qiibIhiqqqhii", 0, HEADER_SIZE - 12 + len(section), -1, 2, 0, attributes, last_offset_delta,
        0, 0, -1, -1, -1, count,
    )  # fmt: skip
    batch = bytearray(head + section)
    write_crc(batch)
    try:
        decoded = decode_batch(batch)
    except CorruptRecordError:
        return
    assert len(decoded.records) == count


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_typed_errors(buf: bytes) -> None:
    # Random bytes essentially never carry a valid CRC; the point is that nothing but the typed
    # error escapes (an IndexError or struct.error here would fail the test).
    with pytest.raises(CorruptRecordError):
        decode_batch(buf)


def test_huge_record_count_in_a_compressed_batch_fails_fast() -> None:
    batch = bytearray(build_batch([Record(0, 0, b"k", b"v")], compression=CompressionType.GZIP))
    struct.pack_into(">i", batch, 57, 2**31 - 1)
    write_crc(batch)
    with pytest.raises(CorruptRecordError, match="recordsCount 2147483647 cannot fit"):
        decode_batch(batch)
