"""build_batch, decode_batch and RecordBatchBuilder: layout, round trips and the decoder's checks."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.protocol.errors import (
    BatchTooLargeError,
    CorruptRecordError,
    CrcMismatchError,
    InvalidMagicError,
    TruncatedBatchError,
)
from kraftpy.protocol.records import (
    CompressionType,
    Record,
    RecordBatchBuilder,
    build_batch,
    decode_batch,
    decode_batches,
    parse_header,
)
from kraftpy.protocol.records.compression import DecompressedTooLargeError
from kraftpy.protocol.records.header import HEADER_SIZE, write_crc
from kraftpy.protocol.records.record import encode_record

ALL_CODECS = list(CompressionType)

keys = st.none() | st.binary(max_size=40)
values = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3).map(tuple)
timestamps = st.integers(min_value=0, max_value=2**45)


@st.composite
def record_lists(draw: st.DrawFn) -> list[Record]:
    base = draw(st.integers(min_value=0, max_value=2**40))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=12))
    out = []
    offset = base
    for gap in gaps:
        out.append(Record(offset, draw(timestamps), draw(keys), draw(values), draw(headers)))
        offset += gap
    return out


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
@settings(max_examples=40, deadline=None)
@given(records=record_lists(), epoch=st.integers(-1, 2**31 - 1), pid=st.integers(-1, 2**63 - 1))
def test_batch_round_trips_records_and_header_fields(
    codec: CompressionType, records: list[Record], epoch: int, pid: int
) -> None:
    buf = build_batch(
        records,
        base_offset=records[0].offset,
        partition_leader_epoch=epoch,
        compression=codec,
        producer_id=pid,
        producer_epoch=3,
        base_sequence=17,
        is_transactional=True,
    )
    decoded = decode_batch(buf)
    assert list(decoded.records) == records
    h = decoded.header
    assert h.size == len(buf)
    assert (h.base_offset, h.partition_leader_epoch, h.producer_id, h.producer_epoch, h.base_sequence) == (
        records[0].offset,
        epoch,
        pid,
        3,
        17,
    )
    assert h.compression == codec and decoded.compression is codec
    assert h.is_transactional and not h.is_control
    assert h.records_count == len(records)
    assert h.last_offset == records[-1].offset
    assert h.base_timestamp == records[0].timestamp
    assert h.max_timestamp == max(r.timestamp for r in records)


def test_tuples_take_consecutive_offsets_and_keep_null_key_and_tombstone() -> None:
    buf = build_batch([(None, b"v", (), 10), (b"k", None, [("h", None)], 20), (b"k", b"", (), 5)], base_offset=7)
    recs = decode_batch(buf).records
    assert [r.offset for r in recs] == [7, 8, 9]
    assert [r.timestamp for r in recs] == [10, 20, 5]
    assert recs[0].key is None and recs[0].value == b"v"
    assert recs[1].value is None and recs[1].is_tombstone and recs[1].headers == (("h", None),)
    assert recs[2].value == b"" and not recs[2].is_tombstone


def test_header_layout_is_kafkas_byte_for_byte() -> None:
    buf = build_batch([(b"k", b"v", (), 1000)], base_offset=42, partition_leader_epoch=3, compression=0)
    fields = struct.unpack_from(">qiibIhiqqqhii", buf)
    assert fields[0] == 42 and fields[2] == 3 and fields[3] == 2
    assert fields[1] == len(buf) - 12
    assert fields[5] == 0 and fields[6] == 0 and fields[7] == 1000 and fields[8] == 1000
    assert fields[9:12] == (-1, -1, -1) and fields[12] == 1
    # Zigzag varints: length 8 -> 16, attributes 0, deltas 0, key length 1 -> 2, 'k', 2, 'v', 0 headers.
    assert buf[HEADER_SIZE:] == bytes([16, 0, 0, 0, 2]) + b"k" + bytes([2]) + b"v" + bytes([0])


def test_control_batch_is_flagged() -> None:
    # A COMMIT marker: key = version 0, type 1; value = version 0, coordinator epoch 5.
    buf = build_batch(
        [(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5), (), 1)],
        is_control=True,
        is_transactional=True,
        producer_id=9,
        producer_epoch=0,
    )
    decoded = decode_batch(buf)
    assert decoded.is_control and decoded.is_transactional
    assert buf[22] & 0x20 and buf[22] & 0x10  # attributes low byte: control, transactional


def test_log_append_time_reports_max_timestamp_for_every_record() -> None:
    buf = build_batch([(b"a", b"1", (), 5), (b"b", b"2", (), 9)], timestamp_type=1)
    decoded = decode_batch(buf)
    assert decoded.header.timestamp_type == 1
    assert [r.timestamp for r in decoded.records] == [9, 9]


def test_empty_batch_has_no_timestamps() -> None:
    decoded = decode_batch(build_batch([]))
    assert decoded.records == () and decoded.header.records_count == 0
    assert decoded.header.base_timestamp == -1 and decoded.header.max_timestamp == -1


def test_record_offsets_must_rise() -> None:
    with pytest.raises(ValueError, match="must be above"):
        build_batch([Record(5, 0, None, b"a"), Record(5, 0, None, b"b")], base_offset=5)
    with pytest.raises(ValueError, match="must be above"):
        build_batch([Record(4, 0, None, b"a")], base_offset=5)
    with pytest.raises(TypeError, match="must be bytes"):
        build_batch([("text key", b"v")])


def test_decode_batches_walks_a_buffer_and_reports_positions() -> None:
    a = build_batch([(b"a", b"1", (), 1)], base_offset=0)
    b = build_batch([(b"b", b"2", (), 2), (b"c", b"3", (), 3)], base_offset=1, compression=CompressionType.LZ4)
    got = list(decode_batches(a + b))
    assert [g.position for g in got] == [0, len(a)]
    assert [r.offset for g in got for r in g.records] == [0, 1, 2]


# --- the decoder's checks on untrusted bytes -------------------------------------------------


def _raw_batch(section: bytes, count: int, *, last_offset_delta: int = 0, attributes: int = 0) -> bytes:
    """A batch with a hand-made records section and a correct CRC, to reach the checks behind the CRC."""
    head = struct.pack(
        ">qiibIhiqqqhii", 0, HEADER_SIZE - 12 + len(section), -1, 2, 0, attributes, last_offset_delta,
        0, 0, -1, -1, -1, count,
    )  # fmt: skip
    buf = bytearray(head + section)
    write_crc(buf)
    return bytes(buf)


def test_truncated_input_names_what_remains() -> None:
    buf = build_batch([(b"k", b"v" * 50, (), 1)])
    for cut in (0, 5, 11, 30, 60, len(buf) - 1):
        with pytest.raises(TruncatedBatchError, match="remain"):
            decode_batch(buf[:cut])


def test_length_beyond_maximum_is_refused() -> None:
    buf = build_batch([(b"k", b"v" * 500, (), 1)])
    with pytest.raises(BatchTooLargeError, match="exceeds the maximum 100"):
        decode_batch(buf, max_batch_bytes=100)


def test_bad_magic_and_crc_mismatch() -> None:
    buf = bytearray(build_batch([(b"k", b"v", (), 1)]))
    bad_magic = bytearray(buf)
    bad_magic[16] = 1
    with pytest.raises(InvalidMagicError, match="magic byte is 1"):
        decode_batch(bad_magic)
    buf[-1] ^= 0xFF
    with pytest.raises(CrcMismatchError, match="at position 0"):
        decode_batch(buf)


def test_position_is_reported_for_a_batch_inside_a_buffer() -> None:
    good = build_batch([(b"k", b"v", (), 1)])
    bad = bytearray(good)
    bad[-1] ^= 1
    with pytest.raises(CrcMismatchError) as info:
        list(decode_batches(good + bytes(bad)))
    assert info.value.position == len(good)


def test_record_count_not_matching_the_records() -> None:
    two = encode_record(0, 0, b"a", b"1") + encode_record(1, 0, b"b", b"2")
    with pytest.raises(CorruptRecordError, match="trailing garbage after the last of 1 records"):
        decode_batch(_raw_batch(two, 1, last_offset_delta=1))
    roomy = encode_record(0, 0, b"a", b"1" * 20) + encode_record(1, 0, b"b", b"2" * 20)
    with pytest.raises(CorruptRecordError, match="recordsCount is 3 but the records section ends after 2"):
        decode_batch(_raw_batch(roomy, 3, last_offset_delta=2))


def test_records_section_with_trailing_garbage() -> None:
    one = encode_record(0, 0, b"a", b"1")
    with pytest.raises(CorruptRecordError, match="2 bytes of trailing garbage") as info:
        decode_batch(_raw_batch(one + b"\x00\x00", 1))
    assert info.value.position == HEADER_SIZE + len(one)
    with pytest.raises(CorruptRecordError, match=r"trailing garbage.*decompressed records section"):
        decode_batch(_raw_batch(bytes(build_batch_section(one + b"zz")), 1, attributes=1))


def build_batch_section(section: bytes) -> bytes:
    from kraftpy.protocol.records.compression import compress

    return compress(CompressionType.GZIP, section)


def test_offset_deltas_must_rise_within_last_offset_delta() -> None:
    section = encode_record(1, 0, b"a", b"1") + encode_record(1, 0, b"b", b"2")
    with pytest.raises(CorruptRecordError, match="record 1 has offsetDelta 1"):
        decode_batch(_raw_batch(section, 2, last_offset_delta=1))
    with pytest.raises(CorruptRecordError, match="not exceed lastOffsetDelta 0"):
        decode_batch(_raw_batch(encode_record(3, 0, b"a", b"1"), 1, last_offset_delta=0))


def test_record_error_inside_compressed_section_names_the_record_and_batch() -> None:
    bad_record = bytes([16, 0, 0, 0, 40]) + b"k" + bytes([2]) + b"v" + bytes([0])  # key length 20 > record
    with pytest.raises(CorruptRecordError, match=r"record 0: key length 20 .*byte 4 of the decompressed"):
        decode_batch(_raw_batch(build_batch_section(bad_record), 1, attributes=1))


def test_unknown_compression_codec() -> None:
    with pytest.raises(CorruptRecordError, match="unknown compression type 6"):
        decode_batch(_raw_batch(encode_record(0, 0, b"a", b"1"), 1, attributes=6))


def test_zip_bomb_is_refused_before_inflating() -> None:
    for codec in (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD):
        buf = build_batch([(None, b"\x00" * 2_000_000, (), 1)], compression=codec)
        assert len(buf) < 200_000
        with pytest.raises(DecompressedTooLargeError, match="beyond the maximum 100000"):
            decode_batch(buf, max_uncompressed_bytes=100_000)
        assert len(decode_batch(buf).records[0].value) == 2_000_000


# --- the incremental builder -----------------------------------------------------------------


def test_builder_matches_build_batch_byte_for_byte() -> None:
    items = [(b"k1", b"v1", (("h", b"1"),), 100), (None, None, (), 90), (b"k3", b"v" * 100, (), 120)]
    for codec in ALL_CODECS:
        builder = RecordBatchBuilder(compression=codec, base_offset=10, producer_id=4, producer_epoch=1)
        builder.set_producer_state(5, 2, 40, False)
        for key, value, hdrs, ts in items:
            assert builder.append(key, value, hdrs, timestamp_ms=ts)
        built = builder.build()
        expected = build_batch(
            items, base_offset=10, compression=codec, producer_id=5, producer_epoch=2, base_sequence=40
        )
        assert built == expected
        assert builder.build() is built


def test_builder_refuses_records_past_batch_size_but_takes_the_first() -> None:
    builder = RecordBatchBuilder(batch_size=200)
    assert builder.append(b"k", b"x" * 500, timestamp_ms=1)  # first always fits
    assert not builder.append(b"k", b"y", timestamp_ms=1)
    assert builder.record_count == 1
    small = RecordBatchBuilder(batch_size=200)
    added = 0
    while small.append(b"k", b"x" * 20, timestamp_ms=1):
        added += 1
    built = small.build()
    assert len(built) == small.estimated_size
    assert len(built) <= 200 and added == small.record_count > 1
    assert len(decode_batch(built).records) == added


def test_builder_is_sealed_after_build() -> None:
    builder = RecordBatchBuilder()
    builder.append(b"k", b"v", timestamp_ms=1)
    builder.build()
    with pytest.raises(RuntimeError, match="already built"):
        builder.append(b"k", b"v")


def test_parse_header_agrees_with_decode() -> None:
    buf = build_batch([(b"k", b"v", (), 1)] * 3, base_offset=100, compression=CompressionType.ZSTD)
    assert parse_header(buf, check_crc=True) == decode_batch(buf).header


def test_check_crc_false_skips_only_the_crc() -> None:
    from kraftpy.protocol.errors import CrcMismatchError
    from kraftpy.protocol.records.header import CRC_AT

    data = bytearray(build_batch([(b"k", b"v")]))
    data[CRC_AT] ^= 0xFF
    with pytest.raises(CrcMismatchError):
        decode_batch(bytes(data))
    assert decode_batch(bytes(data), check_crc=False).records[0].value == b"v"
    assert [b.records[0].key for b in decode_batches(bytes(data), check_crc=False)] == [b"k"]
    truncated = bytes(data[:-1])
    with pytest.raises(CorruptRecordError):
        decode_batch(truncated, check_crc=False)
