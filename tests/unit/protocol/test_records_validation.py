"""validate_records: what the leader checks inside a producer batch, and that it agrees with decode_batch.

Every hostile batch here has a valid CRC32C: the header and CRC checks pass,
so before records were validated on produce each of these was stored and
then broke every consumer of the partition.
"""

from __future__ import annotations

import struct

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.client.producer.batch_builder import ProducerBatchBuilder
from kraftpy.protocol.errors import CorruptRecordError, ErrorCode
from kraftpy.protocol.records import CompressionType, build_batch, decode_batch, parse_header
from kraftpy.protocol.records.compression import XERIAL_MAGIC, DecompressedTooLargeError, compress
from kraftpy.protocol.records.header import HEADER_SIZE, LOG_OVERHEAD, write_crc
from kraftpy.protocol.records.record import encode_record
from kraftpy.protocol.records.validation import InvalidRecordError, validate_records

CODECS = [c for c in CompressionType if c is not CompressionType.NONE]


def forge(batch: bytes, *, section: bytes | None = None, **fields: int) -> bytes:
    """`batch` with its records section and header fields replaced, and a CRC that matches again."""
    header = parse_header(batch)
    body = batch[HEADER_SIZE:] if section is None else section
    header = header._replace(batch_length=HEADER_SIZE - LOG_OVERHEAD + len(body), crc=0, **fields)
    out = bytearray(header.pack() + body)
    write_crc(out)
    return bytes(out)


def check(batch: bytes, **kwargs) -> int:
    return validate_records(batch, parse_header(batch, check_crc=True), **kwargs)


def sample(codec: CompressionType = CompressionType.NONE, n: int = 3) -> bytes:
    return build_batch(
        [(b"k%d" % i, b"value %d" % i * 30, [("trace", b"t"), ("\u00e9", None)], 1_000 + i) for i in range(n)],
        compression=codec,
    )


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_a_well_formed_batch_passes(codec: CompressionType) -> None:
    batch = sample(codec)
    assert (
        check(batch) == sum(len(encode_record(i, i, b"k%d" % i, b"value %d" % i * 30, ())) for i in range(3)) + 3 * 12
    )
    check(build_batch([(None, None)], compression=codec))  # a keyless tombstone is fine on a non-compacted topic


GARBAGE = {
    CompressionType.GZIP: b"\x1f\x8b\x08\x00" + b"\x00garbage!" * 5,
    CompressionType.SNAPPY: XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", 9) + b"\xffnot snappy",
    CompressionType.LZ4: b"\x04\x22\x4d\x18" + b"not an lz4 frame" * 3,
    CompressionType.ZSTD: b"\x28\xb5\x2f\xfd" + b"not a zstd frame" * 3,
}


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_garbage_compressed_data_with_a_valid_crc_is_corrupt_message(codec: CompressionType) -> None:
    batch = forge(sample(codec), section=GARBAGE[codec])
    parse_header(batch, check_crc=True)  # the CRC is fine: only the records show it
    with pytest.raises(CorruptRecordError, match=f"{codec.name}") as info:
        check(batch)
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_a_compressed_section_of_garbage_records_is_refused(codec: CompressionType) -> None:
    # Valid compression around bytes that are no records: framing, not the codec, catches it.
    batch = forge(sample(codec), section=compress(codec, b"\x7f" * 64))
    with pytest.raises(CorruptRecordError) as info:
        check(batch)
    assert info.value.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)


def _zeros_zstd(total_bytes: int) -> bytes:
    compressor = zstandard.ZstdCompressor().compressobj()
    chunk = bytes(1 << 20)
    out = [compressor.compress(chunk) for _ in range(total_bytes >> 20)]
    return b"".join(out) + compressor.flush()


def _zeros_gzip(total_bytes: int) -> bytes:
    # Concatenated gzip members inflate one after another (as GZIPInputStream reads them): one 8 MiB member, repeated.
    member = compress(CompressionType.GZIP, bytes(8 << 20))
    return member * (total_bytes // (8 << 20))


@pytest.mark.parametrize(("codec", "bomb"), [(CompressionType.ZSTD, _zeros_zstd), (CompressionType.GZIP, _zeros_gzip)])
def test_a_200_mb_decompression_bomb_stops_at_the_bound(codec: CompressionType, bomb) -> None:
    section = bomb(200 << 20)
    assert len(section) < 250_000  # a small request
    batch = forge(sample(codec), section=section)
    with pytest.raises(DecompressedTooLargeError, match="inflates beyond the maximum") as info:
        check(batch)  # the default bound: 64 MiB, what consumers decode
    assert info.value.code is ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(DecompressedTooLargeError):
        check(batch, max_uncompressed_bytes=1 << 20)


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_a_record_count_that_does_not_match_the_records_is_invalid_record(codec: CompressionType) -> None:
    batch = sample(codec, n=3)
    more = forge(batch, records_count=4, last_offset_delta=3)  # claims a fourth record
    with pytest.raises(InvalidRecordError, match="recordsCount is 4 but the records section holds only 3") as info:
        check(more)
    assert info.value.code is ErrorCode.INVALID_RECORD
    fewer = forge(batch, records_count=2, last_offset_delta=1)  # a third record nobody counts
    with pytest.raises(InvalidRecordError, match="follow the last of the 2 records"):
        check(fewer)
    huge = forge(batch, records_count=1_000_000, last_offset_delta=999_999)
    with pytest.raises(CorruptRecordError, match="cannot fit"):  # the header check sees it, when uncompressed
        check(huge)


def test_offset_deltas_must_be_the_offsets_the_leader_assigns() -> None:
    records = encode_record(0, 0, b"a", b"1") + encode_record(5, 0, b"b", b"2")  # rising, but not 0, 1
    batch = forge(build_batch([(b"a", b"1", (), 1), (b"b", b"2", (), 1)]), section=records)
    with pytest.raises(InvalidRecordError, match="record 1 has offsetDelta 5"):
        check(batch)


def test_no_record_may_be_newer_than_the_batch_max_timestamp() -> None:
    batch = build_batch([(b"a", b"1", (), 1_000), (b"b", b"2", (), 1_005)])
    with pytest.raises(InvalidRecordError, match="timestamp 1005, above the batch's maxTimestamp 1001"):
        check(forge(batch, max_timestamp=1_001))


@pytest.mark.parametrize("delta_ms", [63, 64, 8_191, 8_192])  # a varint of one, two, two and three bytes
def test_a_timestamp_delta_of_any_width_is_read_as_written(delta_ms: int) -> None:
    batch = build_batch([(b"a", b"1", (), 1_000), (b"b", b"2", (), 1_000 + delta_ms)])
    check(batch)
    newest, cap = 1_000 + delta_ms, 999 + delta_ms
    with pytest.raises(
        InvalidRecordError, match=f"record 1 has timestamp {newest}, above the batch's maxTimestamp {cap}"
    ):
        check(forge(batch, max_timestamp=cap))


def test_compacted_topics_refuse_records_without_a_key() -> None:
    batch = build_batch([(b"a", b"1"), (None, b"keyless")], compression=CompressionType.LZ4)
    check(batch)
    with pytest.raises(InvalidRecordError, match="record 1 has no key: Compacted topic cannot accept message") as info:
        check(batch, require_keys=True)
    assert info.value.code is ErrorCode.INVALID_RECORD


@pytest.mark.parametrize(
    "record",
    [
        b"\x02\x00",  # a record shorter than any record can be
        encode_record(0, 0, b"k", b"v")[:-1] + b"\x02",  # header count 1, no header
        b"\x0e\x00\x00\x00\x02\xffk\x00\x00\x00\x00",  # a key length past the record's end
        b"\x10\x00\x00\x00\x00\x00\x02\x04\xff\xfe\x00",  # a header key that is not UTF-8
        b"\x0c\x00\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00",  # an offset delta varint of 6 bytes
    ],
)
def test_broken_framing_is_refused_with_the_reference_decoders_error(record: bytes) -> None:
    batch = forge(build_batch([(b"k", b"v")]), section=record)
    with pytest.raises(CorruptRecordError) as mine:
        check(batch)
    with pytest.raises(CorruptRecordError):
        decode_batch(batch)
    assert mine.value.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)


records_strategy = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=200),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=8)), max_size=2),
        st.integers(0, 2**45),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(
    records=records_strategy,
    codec=st.sampled_from(list(CompressionType)),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=3),
)
def test_whatever_validation_accepts_every_consumer_decodes(records, codec, flips) -> None:
    """Damage the records section (then fix the CRC): validation accepts a batch only if decode_batch does."""
    batch = build_batch(records, compression=codec)
    section = bytearray(batch[HEADER_SIZE:])
    for at, mask in flips:
        if section:
            section[at % len(section)] ^= mask
    forged = forge(batch, section=bytes(section))
    try:
        check(forged)
    except CorruptRecordError:
        return
    decoded = decode_batch(forged)
    assert [r.offset for r in decoded.records] == list(range(len(decoded.records)))
    assert all(r.timestamp <= decoded.header.max_timestamp for r in decoded.records)


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(
        st.tuples(
            st.none() | st.binary(max_size=300),
            st.none() | st.binary(max_size=20_000),
            st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=8)), max_size=2),
            st.integers(0, 2**42),
        ),
        min_size=1,
        max_size=40,
    ),
    codec=st.sampled_from(list(CompressionType)),
)
def test_every_batch_the_producer_builds_passes(records, codec) -> None:
    """The client's builder (fast path and general path) never makes a batch the leader would refuse."""
    builder = ProducerBatchBuilder(1 << 20, compression=codec)
    for key, value, headers, timestamp in records:
        assert builder.append(key, value, headers, timestamp)
    builder.set_producer_state(7, 0, 0, False)
    batch = builder.build()
    assert check(batch) >= len(records)
    if all(key is not None for key, *_ in records):
        check(batch, require_keys=True)
