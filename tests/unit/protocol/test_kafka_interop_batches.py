"""Interop with a real Kafka client library's batch codec (kafka-python's v2 record classes).

Batches built here decode in kafka-python and batches kafka-python builds decode
here, for every codec kafka-python can use on this machine (none, gzip, snappy
through python-snappy, lz4, zstd), with the same CRC and the same records.
Uncompressed batches are compared byte for byte: the layout has one encoding.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.codec import has_gzip, has_lz4, has_snappy, has_zstd
from kafka.record.default_records import ControlRecord, DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from kraftpy.protocol.records import CompressionType, Record, RecordBatchBuilder, build_batch, decode_batch

CODECS = list(CompressionType)

# The codecs must all be usable: a codec kafka-python cannot load would silently shrink coverage.
assert has_gzip() and has_snappy() and has_lz4() and has_zstd()

# Values repeat so that kafka-python, which sends uncompressed when compression does not pay,
# really compresses.
items_strategy = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=16),
        st.none() | st.binary(min_size=1, max_size=8).map(lambda b: b * 40),
        st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)), max_size=2),
        st.integers(0, 2**42),
    ),
    min_size=1,
    max_size=8,
)


# A long repetitive record first guarantees that the whole section compresses.
compressible_items = items_strategy.map(lambda items: [(b"lead", b"compressible " * 20, [], 1), *items])


def _kp_records(batch: DefaultRecordBatch) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in batch]


def _our_records(records: tuple[Record, ...]) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def _kp_build(items: list, codec: CompressionType, **producer: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 20,
    )
    for offset, (key, value, headers, ts) in enumerate(items):
        assert builder.append(offset, timestamp=ts, key=key, value=value, headers=headers) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@settings(max_examples=25, deadline=None)
@given(items=items_strategy)
def test_batches_built_here_decode_in_kafka_python(codec: CompressionType, items: list) -> None:
    ours = build_batch(
        items, base_offset=300, partition_leader_epoch=4, compression=codec, producer_id=77, producer_epoch=2,
        base_sequence=10,
    )  # fmt: skip
    header = decode_batch(ours).header
    kp = DefaultRecordBatch(ours)
    assert kp.validate_crc() and kp.crc == header.crc
    assert kp.compression_type == codec
    assert (kp.base_offset, kp.leader_epoch, kp.producer_id, kp.producer_epoch, kp.base_sequence) == (
        300, 4, 77, 2, 10,
    )  # fmt: skip
    assert (kp.last_offset_delta, kp.first_timestamp, kp.max_timestamp) == (
        len(items) - 1, items[0][3], max(i[3] for i in items),
    )  # fmt: skip
    expected = [(300 + n, ts, k, v, [tuple(h) for h in hs]) for n, (k, v, hs, ts) in enumerate(items)]
    assert _kp_records(kp) == expected


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@settings(max_examples=25, deadline=None)
@given(items=compressible_items)
def test_batches_built_by_kafka_python_decode_here(codec: CompressionType, items: list) -> None:
    theirs = _kp_build(items, codec, producer_id=5, producer_epoch=1, base_sequence=0)
    kp = DefaultRecordBatch(theirs)
    assert kp.compression_type == codec, "kafka-python fell back to no compression; the test data must compress"
    decoded = decode_batch(theirs)
    assert decoded.header.crc == kp.crc and decoded.compression is codec
    assert (decoded.header.producer_id, decoded.header.producer_epoch, decoded.header.base_sequence) == (5, 1, 0)
    assert _our_records(decoded.records) == _kp_records(kp)
    assert _our_records(decoded.records) == [
        (n, ts, k, v, [tuple(h) for h in hs]) for n, (k, v, hs, ts) in enumerate(items)
    ]


@settings(max_examples=40, deadline=None)
@given(items=items_strategy)
def test_uncompressed_batches_are_byte_identical(items: list) -> None:
    # kafka-python writes partitionLeaderEpoch 0 where the Java client writes -1.
    assert build_batch(items, partition_leader_epoch=0) == _kp_build(items, CompressionType.NONE)


def test_incremental_builders_agree_on_when_a_batch_is_full() -> None:
    ours = RecordBatchBuilder(batch_size=500, partition_leader_epoch=0)
    theirs = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=500,
    )  # fmt: skip
    for n in range(40):
        key, value = b"key-%d" % n, b"v" * (n % 7 * 5)
        took = ours.append(key, value, timestamp_ms=1000 + n)
        assert took == (theirs.append(n, timestamp=1000 + n, key=key, value=value, headers=[]) is not None)
        if not took:
            break
    assert not took and ours.record_count > 1
    assert ours.build() == bytes(theirs.build())


def test_memory_records_reads_a_run_of_our_batches() -> None:
    run = b"".join(
        build_batch([(b"k%d" % n, b"value" * 30, (), 50 + n)], base_offset=n, compression=codec)
        for n, codec in enumerate(CODECS)
    )
    records = MemoryRecords(run)
    seen = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        seen += [(batch.compression_type, r.offset, r.key) for r in batch]
    assert seen == [(int(c), n, b"k%d" % n) for n, c in enumerate(CODECS)]


def test_memory_records_builder_output_decodes_here() -> None:
    builder = MemoryRecordsBuilder(magic=2, compression_type=int(CompressionType.ZSTD), batch_size=1 << 16, offset=900)
    for n in range(10):
        builder.append(timestamp=10 + n, key=None, value=b"payload-%d" % n * 20, headers=[("i", b"%d" % n)])
    builder.close()
    decoded = decode_batch(bytes(builder.buffer()))
    assert [r.offset for r in decoded.records] == list(range(900, 910))
    assert [r.headers for r in decoded.records] == [(("i", b"%d" % n),) for n in range(10)]


def test_our_control_batch_reads_as_a_commit_marker_in_kafka_python() -> None:
    marker = build_batch(
        [(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 3), (), 99)],
        is_control=True,
        is_transactional=True,
        producer_id=8,
        producer_epoch=0,
    )
    kp = DefaultRecordBatch(marker)
    assert kp.is_control_batch and kp.is_transactional and kp.validate_crc()
    (record,) = list(kp)
    assert isinstance(record, ControlRecord) and record.commit and not record.abort
