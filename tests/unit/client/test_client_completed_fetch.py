"""Decoding fetched batches: records below the fetch offset, control batches, cut-off tails, bad data."""

from __future__ import annotations

import json

import pytest

from kraftpy.client.consumer.completed_fetch import CompletedFetch
from kraftpy.client.errors import CorruptFetchError, RecordDeserializationError
from kraftpy.client.serde import deserializer_for
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.compression import CompressionType
from kraftpy.protocol.types import TopicPartition
from tests.unit.protocol.test_records_validation import _zeros_zstd, forge

TP = TopicPartition("t", 0)


def batch(base: int, values: list[bytes], epoch: int = 3, **kwargs) -> bytes:
    return build_batch(
        [(b"k%d" % (base + i), v, [("h", b"x")], 1_000 + i) for i, v in enumerate(values)],
        base_offset=base,
        partition_leader_epoch=epoch,
        **kwargs,
    )


def values(records) -> list:
    return [r.value for r in records]


def test_records_below_the_fetch_offset_are_skipped_even_inside_a_compressed_batch() -> None:
    # A compressed batch is one unit on the broker: asking for offset 12 returns 10..14.
    data = batch(10, [b"a", b"b", b"c", b"d", b"e"], compression=CompressionType.ZSTD) + batch(15, [b"f"])
    cf = CompletedFetch(TP, 12, data)
    records = cf.fetch_records(100)
    assert [r.offset for r in records] == [12, 13, 14, 15]
    assert values(records) == [b"c", b"d", b"e", b"f"]
    first = records[0]
    assert (first.key, first.headers, first.timestamp, first.leader_epoch) == (b"k12", (("h", b"x"),), 1_002, 3)
    assert (first.serialized_key_size, first.serialized_value_size) == (3, 1)
    assert cf.next_fetch_offset == 16 and cf.last_epoch == 3


def test_whole_batches_below_the_offset_are_passed_over() -> None:
    data = batch(0, [b"old"] * 3) + batch(3, [b"new"], epoch=4)
    cf = CompletedFetch(TP, 3, data)
    assert cf.estimated_remaining_records() == 1
    assert values(cf.fetch_records(10)) == [b"new"]
    assert cf.last_epoch == 4


def test_records_come_out_max_records_at_a_time() -> None:
    cf = CompletedFetch(TP, 0, batch(0, [b"%d" % i for i in range(5)]))
    assert [r.offset for r in cf.fetch_records(2)] == [0, 1]
    assert cf.next_fetch_offset == 2 and cf.estimated_remaining_records() == 3
    assert [r.offset for r in cf.fetch_records(10)] == [2, 3, 4]
    assert cf.fetch_records(10) == [] and cf.consumed


def test_a_cut_off_last_batch_ends_the_data() -> None:
    whole = batch(0, [b"a", b"b"])
    cut = batch(2, [b"c" * 100])[:-30]
    cf = CompletedFetch(TP, 0, whole + cut)
    assert values(cf.fetch_records(10)) == [b"a", b"b"]
    assert cf.consumed and cf.next_fetch_offset == 2


def test_a_fetch_with_no_whole_batch_says_max_partition_fetch_bytes_is_too_small() -> None:
    cut = batch(7, [b"c" * 1000])[:500]
    cf = CompletedFetch(TP, 7, cut, max_partition_fetch_bytes=500)
    with pytest.raises(KafkaError, match="max_partition_fetch_bytes"):
        cf.fetch_records(10)


def test_control_batches_are_skipped_but_move_the_offset() -> None:
    control = build_batch([(b"\x00\x00\x00\x00", b"")], base_offset=2, is_control=True, is_transactional=True)
    cf = CompletedFetch(TP, 0, batch(0, [b"a", b"b"]) + control + batch(3, [b"c"]))
    records = cf.fetch_records(10)
    assert [r.offset for r in records] == [0, 1, 3]


def test_compacted_gaps_advance_past_the_batch_end() -> None:
    from kraftpy.protocol.records.record import Record

    gappy = build_batch([Record(5, 1, b"k", b"v"), Record(9, 1, b"k", b"w")], base_offset=5)
    cf = CompletedFetch(TP, 5, gappy)
    assert [r.offset for r in cf.fetch_records(10)] == [5, 9]
    assert cf.next_fetch_offset == 10


def test_a_deserializer_error_names_the_offset_after_returning_the_records_before_it() -> None:
    data = batch(0, [b'{"a": 1}', b"not json", b'{"c": 3}'])
    cf = CompletedFetch(TP, 0, data, value_deserializer=deserializer_for("json"))
    assert values(cf.fetch_records(10)) == [{"a": 1}]
    assert cf.next_fetch_offset == 1, "the position stays on the bad record"
    with pytest.raises(RecordDeserializationError) as info:
        cf.fetch_records(10)
    err = info.value
    assert (err.topic_partition, err.offset, err.what) == (TP, 1, "value")
    assert "offset 1 of t-0" in str(err) and "seek('t', 0, 2)" in str(err)
    with pytest.raises(RecordDeserializationError):
        cf.fetch_records(10)  # again, until the application seeks past it


def test_a_key_deserializer_error_is_reported_as_such() -> None:
    def strict(data: bytes | None) -> str:
        return json.loads(data)

    cf = CompletedFetch(TP, 4, batch(4, [b"v"]), key_deserializer=strict)
    with pytest.raises(RecordDeserializationError, match="error deserializing the key of the record at offset 4"):
        cf.fetch_records(10)


def test_corrupt_bytes_are_reported_with_the_offset() -> None:
    data = bytearray(batch(20, [b"a", b"b"]))
    data[-1] ^= 0xFF
    cf = CompletedFetch(TP, 20, bytes(data))
    with pytest.raises(CorruptFetchError, match="offset 20") as info:
        cf.fetch_records(10)
    assert "CRC" in str(info.value.__cause__)


def test_records_before_a_bad_batch_are_returned_first_even_within_one_call() -> None:
    bomb = forge(batch(2, [b"x"]), section=_zeros_zstd(100 << 20), attributes=CompressionType.ZSTD)
    cf = CompletedFetch(TP, 0, batch(0, [b"a", b"b"]) + bomb + batch(3, [b"c"]))
    assert values(cf.fetch_records(100)) == [b"a", b"b"]
    assert cf.next_fetch_offset == 2
    with pytest.raises(CorruptFetchError, match=r"offset 2: .*inflates beyond the maximum") as info:
        cf.fetch_records(100)
    assert (info.value.offset, info.value.next_offset) == (2, 3)


def test_null_keys_and_tombstones_survive() -> None:
    cf = CompletedFetch(TP, 0, build_batch([(None, None)]), value_deserializer=deserializer_for("json"))
    (record,) = cf.fetch_records(1)
    assert record.key is None and record.value is None and record.serialized_value_size == -1


def test_check_crcs_off_skips_the_crc_but_not_the_structure() -> None:
    data = bytearray(batch(20, [b"a"]))
    data[17] ^= 0xFF  # the stored CRC itself
    with pytest.raises(CorruptFetchError):
        CompletedFetch(TP, 20, bytes(data)).fetch_records(10)
    assert values(CompletedFetch(TP, 20, bytes(data), check_crcs=False).fetch_records(10)) == [b"a"]
