"""Segments interoperate with a real Kafka client library (kafka-python's record classes).

- A segment file written by this engine reads back with kafka-python's
  MemoryRecords / DefaultRecordBatch, CRCs valid, offsets and epochs as stamped.
- Batches built by kafka-python's DefaultRecordBatchBuilder (every codec)
  append here as a producer's would, and read back with both decoders.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kraftpy.protocol.records.batch import build_batch, decode_batches
from tests.unit.storage.test_storage_fixtures import open_log, read_all

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def kafka_python_batches(segment: bytes) -> list[DefaultRecordBatch]:
    records = MemoryRecords(segment)
    out = []
    while records.has_next():
        out.append(records.next_batch())
    return out


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_segment_written_here_reads_with_kafka_python(tmp_path: Path, codec: str) -> None:
    directory = tmp_path / "t-0"
    with open_log(directory) as log:
        for i in range(5):
            records = [(f"key-{i}-{j}".encode(), f"value-{i}-{j}".encode() * 20, (), 1000 + j) for j in range(3)]
            log.append_as_leader(build_batch(records, compression=CODECS[codec]), 7 + i // 2, now_ms=0)
        log.append_as_leader(build_batch([(None, None, (("h", b"1"),), 2000)]), 9, now_ms=0)  # a tombstone
    segment = (directory / f"{0:020d}.log").read_bytes()
    batches = kafka_python_batches(segment)
    assert [b.base_offset for b in batches] == [0, 3, 6, 9, 12, 15]
    assert [b.leader_epoch for b in batches] == [7, 7, 8, 8, 9, 9]
    assert all(b.validate_crc() for b in batches)
    assert {b.compression_type for b in batches[:-1]} == {CODECS[codec]}
    records = [r for b in batches for r in b]
    assert [r.offset for r in records] == list(range(16))
    assert records[4].key == b"key-1-1" and records[4].value == b"value-1-1" * 20
    assert records[4].timestamp == 1001
    assert (records[-1].key, records[-1].value, records[-1].headers) == (None, None, [("h", b"1")])


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_kafka_python_batches_append_and_read_back(tmp_path: Path, codec: str) -> None:
    built = []
    for i in range(4):
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=CODECS[codec],
            is_transactional=False,
            producer_id=4242,
            producer_epoch=1,
            base_sequence=10 * i,
            batch_size=1 << 20,
        )
        for j in range(10):
            builder.append(j, timestamp=5000 + j, key=f"k{j}".encode(), value=f"v{i}-{j}".encode() * 30, headers=[])
        built.append(bytes(builder.build()))
    with open_log(tmp_path / "t-0") as log:
        info = log.append_as_leader(built[0], 3, now_ms=0)
        assert (info.first_offset, info.last_offset, info.record_count, info.max_timestamp) == (0, 9, 10, 5009)
        log.append_as_leader(b"".join(built[1:]), 4, now_ms=0)
        data = read_all(log)
        assert log.offset_for_timestamp(5005).offset == 5
    ours = list(decode_batches(data))
    assert [(b.base_offset, b.header.partition_leader_epoch, b.header.producer_id) for b in ours] == [
        (0, 3, 4242),
        (10, 4, 4242),
        (20, 4, 4242),
        (30, 4, 4242),
    ]
    assert [b.header.base_sequence for b in ours] == [0, 10, 20, 30]
    assert ours[2].records[7].value == b"v2-7" * 30 and ours[2].records[7].offset == 27
    theirs = kafka_python_batches(data)
    assert all(b.validate_crc() for b in theirs)
    assert [r.offset for b in theirs for r in b] == list(range(40))
