"""message.timestamp.type = LogAppendTime: the leader's core stamps each batch with the append time it is given.

The rewrite of the bytes (protocol/records/header.py stamp_log_append_time) is checked
here too: the CRC is right again, readers see every record at the append time.
"""

from __future__ import annotations

import pytest

from kraftpy.broker.replication import (
    AppendAsLeader,
    CompleteProduce,
    FetchPartition,
    LogState,
    Partition,
    PartitionRegistration,
    ProduceRequest,
    ReplicationConfig,
)
from kraftpy.broker.replication.leader import log_append_time_header
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import LOG_APPEND_TIME, build_batch, decode_batch
from kraftpy.protocol.records.compression import CompressionType
from kraftpy.protocol.records.header import parse_header, stamp_log_append_time

EPOCH = 2
APPEND_MS = 1_700_000_123_456
RECORDS = [(b"k1", b"v1", (), 1_000), (b"k2", b"v2", (("h", b"x"),), 1_005)]


def _leader(timestamp_type: str, isr=(0,)) -> Partition:
    config = ReplicationConfig(min_insync_replicas=1, message_timestamp_type=timestamp_type)
    partition = Partition(0, config)
    partition.apply_registration(PartitionRegistration((0, 1, 2), isr, 0, EPOCH, 1), LogState(0, 0, 0), 0)
    return partition


def _produce(partition: Partition, rid: object, batch: bytes, acks: int = 1, wall_clock_ms: int = APPEND_MS):
    header = parse_header(batch)
    return partition.handle_produce(ProduceRequest(rid, header, acks, 500, wall_clock_ms=wall_clock_ms), 0)


def _of(actions, cls):
    return [a for a in actions if isinstance(a, cls)]


@pytest.mark.parametrize("compression", list(CompressionType))
def test_the_stamped_batch_has_a_good_crc_and_reads_at_the_append_time(compression) -> None:
    batch = build_batch(RECORDS, compression=compression)
    stamped = stamp_log_append_time(batch, APPEND_MS)
    header = parse_header(stamped, check_crc=True)
    assert header.timestamp_type == LOG_APPEND_TIME
    assert header.max_timestamp == APPEND_MS
    assert header.base_timestamp == parse_header(batch).base_timestamp  # the records are untouched
    assert header.compression == compression
    decoded = decode_batch(stamped)
    assert [r.timestamp for r in decoded.records] == [APPEND_MS, APPEND_MS]
    assert [(r.key, r.value, r.headers) for r in decoded.records] == [(k, v, tuple(h)) for k, v, h, _ in RECORDS]
    assert bytes(stamped[61:]) == batch[61:]


def test_log_append_time_header_marks_the_type_and_takes_the_clock() -> None:
    header = parse_header(build_batch(RECORDS))
    assert log_append_time_header(header, APPEND_MS, False) == (header, -1)
    stamped, append_ms = log_append_time_header(header, APPEND_MS, True)
    assert append_ms == APPEND_MS
    assert (stamped.timestamp_type, stamped.max_timestamp) == (LOG_APPEND_TIME, APPEND_MS)
    with pytest.raises(ValueError):
        log_append_time_header(header, -1, True)


def test_create_time_appends_unchanged_and_answers_minus_one() -> None:
    actions = _produce(_leader("CreateTime"), "r", build_batch(RECORDS))
    [append] = _of(actions, AppendAsLeader)
    [done] = _of(actions, CompleteProduce)
    assert append.log_append_time_ms == -1
    assert (done.error, done.log_append_time_ms) == (ErrorCode.NONE, -1)


def test_log_append_time_stamps_the_append_and_answers_the_append_time() -> None:
    actions = _produce(_leader("LogAppendTime"), "r", build_batch(RECORDS))
    [append] = _of(actions, AppendAsLeader)
    [done] = _of(actions, CompleteProduce)
    assert append.log_append_time_ms == APPEND_MS
    assert (done.error, done.base_offset, done.log_append_time_ms) == (ErrorCode.NONE, 0, APPEND_MS)


def test_an_acks_all_answer_carries_the_append_time_when_the_high_watermark_passes() -> None:
    partition = _leader("LogAppendTime", isr=(0, 1))
    actions = _produce(partition, "r", build_batch(RECORDS), acks=-1)
    assert not _of(actions, CompleteProduce)
    fetched = partition.handle_fetch(FetchPartition(1, 2, EPOCH), None, 1).actions
    [done] = _of(fetched, CompleteProduce)
    assert (done.error, done.log_append_time_ms) == (ErrorCode.NONE, APPEND_MS)


def test_an_acks_all_timeout_still_names_the_append_time() -> None:
    partition = _leader("LogAppendTime", isr=(0, 1))
    _produce(partition, "r", build_batch(RECORDS), acks=-1)
    [done] = _of(partition.tick(10_000), CompleteProduce)
    assert (done.error, done.log_append_time_ms) == (ErrorCode.REQUEST_TIMED_OUT, APPEND_MS)


def test_a_duplicate_is_answered_with_the_original_append_time() -> None:
    partition = _leader("LogAppendTime")
    batch = build_batch(RECORDS, producer_id=7, producer_epoch=0, base_sequence=0)
    _produce(partition, "first", batch)
    actions = _produce(partition, "retry", batch, wall_clock_ms=APPEND_MS + 5_000)
    assert not _of(actions, AppendAsLeader)
    [done] = _of(actions, CompleteProduce)
    assert (done.error, done.base_offset, done.log_append_time_ms) == (ErrorCode.NONE, 0, APPEND_MS)


def test_the_producer_state_keeps_the_append_time_as_the_batch_timestamp() -> None:
    partition = _leader("LogAppendTime")
    _produce(partition, "r", build_batch(RECORDS, producer_id=7, producer_epoch=0, base_sequence=0))
    # What a follower or a replay of the stamped log would record: the same timestamp.
    assert partition.leader.producers.producers[7].last_timestamp == APPEND_MS


def test_an_unknown_timestamp_type_is_refused() -> None:
    with pytest.raises(ValueError):
        ReplicationConfig(message_timestamp_type="WallClock")
