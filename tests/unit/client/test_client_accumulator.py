"""The record accumulator and buffer pool: linger, batch_size, buffer_memory back-pressure, drain rules."""

from __future__ import annotations

import pytest

from kraftpy.client.errors import RecordTooLargeError
from kraftpy.client.producer.accumulator import estimate_size_upper_bound
from kraftpy.client.producer.buffer_pool import BufferPool
from kraftpy.protocol.records.batch import decode_batch
from kraftpy.protocol.records.header import HEADER_SIZE
from kraftpy.protocol.records.record import record_size
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.test_client_fixtures import producer_core

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
LEADERS = {("t", 0): (1, 0), ("t", 1): (2, 0)}


def room_for(records: int, value_len: int) -> int:
    """A batch_size that holds exactly `records` records of `value_len` bytes (no key, same timestamp)."""
    return HEADER_SIZE + sum(record_size(i, 0, None, b"x" * value_len) for i in range(records))


def test_a_batch_is_not_sendable_before_linger_ms_and_is_after() -> None:
    core = producer_core(LEADERS, linger_ms=20)
    core.send(T0, b"v", now_ms=100)
    early = core.accumulator.ready(core.metadata.cluster, 110)
    assert early.ready_nodes == set()
    assert early.next_ready_check_delay_ms == 10
    assert core.accumulator.ready(core.metadata.cluster, 120).ready_nodes == {1}


def test_a_full_batch_is_sendable_at_once_and_later_records_open_a_new_one() -> None:
    size = room_for(3, 40)
    core = producer_core(LEADERS, linger_ms=10_000, batch_size=size)
    results = [core.accumulator.append(T0, 0, None, b"x" * 40, (), None, 0) for _ in range(3)]
    assert [r.new_batch_created for r in results] == [True, False, False]
    assert results[2].batch_is_full and core.accumulator.ready(core.metadata.cluster, 0).ready_nodes == {1}
    results += [core.accumulator.append(T0, 0, None, b"x" * 40, (), None, 0) for _ in range(2)]
    assert [r.new_batch_created for r in results[3:]] == [True, False]
    assert results[3].batch_is_full  # two batches queued: the first one is full, send it
    first, second = core.accumulator.queued(T0)
    assert first.record_count == 3 and second.record_count == 2
    assert len(first.close()) == size


def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own() -> None:
    core = producer_core(LEADERS, batch_size=100)
    big = b"y" * 500
    result = core.accumulator.append(T0, 0, None, big, (), None, 0)
    assert result.new_batch_created
    (batch,) = core.accumulator.queued(T0)
    assert batch.memory == estimate_size_upper_bound(None, big) > 100
    assert decode_batch(batch.close()).records[0].value == big


def test_new_batches_wait_for_buffer_memory_and_get_it_when_a_batch_completes() -> None:
    core = producer_core({**LEADERS, ("t", 2): (2, 0)}, batch_size=1000, buffer_memory=2000)
    acc = core.accumulator
    assert acc.append(T0, 0, None, b"a", (), None, 0).new_batch_created
    assert acc.append(T1, 0, None, b"b", (), None, 0).new_batch_created
    t2 = TopicPartition("t", 2)
    blocked = acc.append(t2, 0, None, b"c" * 900, (), None, 0)
    assert blocked.needs_memory == 1000 and not blocked.appended
    granted: list[bool] = []
    waiter = core.pool.enqueue(blocked.needs_memory, lambda: granted.append(True))
    assert not waiter.granted and core.pool.queued == 1

    # Waiting callers make every batch sendable at once (Kafka's "exhausted").
    assert acc.ready(core.metadata.cluster, 0).ready_nodes == {1, 2}
    drained = acc.drain(core.metadata.cluster, {1}, 1 << 20, 0)
    (batch,) = drained[1]
    batch.complete(0)
    acc.deallocate(batch)
    assert granted == [True] and waiter.granted and core.pool.available == 0
    again = acc.append(t2, 0, None, b"c" * 900, (), None, 0, memory=waiter.size)
    assert again.appended and again.new_batch_created


def test_memory_granted_but_not_needed_goes_back_to_the_pool() -> None:
    core = producer_core(LEADERS, batch_size=1000, buffer_memory=3000)
    core.accumulator.append(T0, 0, None, b"a", (), None, 0)
    assert core.pool.try_allocate(1000)
    # Another caller opened the batch meanwhile, so the record fits without new memory.
    result = core.accumulator.append(T0, 0, None, b"b", (), None, 0, memory=1000)
    assert result.appended and not result.new_batch_created
    assert core.pool.available == 2000


def test_buffer_pool_serves_waiters_first_come_first_served() -> None:
    pool = BufferPool(100)
    assert pool.try_allocate(60)
    order: list[str] = []
    pool.enqueue(80, lambda: order.append("big"))
    small = pool.enqueue(10, lambda: order.append("small"))
    # 40 bytes are free, enough for `small`, but `big` is ahead of it.
    assert not small.granted
    assert not pool.try_allocate(10), "a newcomer may not jump the queue either"
    pool.release(60)
    assert order == ["big", "small"] and pool.available == 10


def test_cancelled_waiter_returns_its_grant_and_unblocks_the_queue() -> None:
    pool = BufferPool(100)
    assert pool.try_allocate(100)
    first = pool.enqueue(90)
    second = pool.enqueue(10)
    pool.cancel(first)  # max_block_ms passed for the head of the queue
    assert not second.granted
    pool.release(20)
    assert second.granted and pool.available == 10
    late = pool.enqueue(10)
    assert late.granted
    pool.cancel(late)  # timed out just as it was granted: the bytes go back
    assert pool.available == 10


def test_a_record_larger_than_buffer_memory_is_refused_up_front() -> None:
    pool = BufferPool(1000)
    with pytest.raises(RecordTooLargeError, match="buffer_memory"):
        pool.enqueue(1001)


def test_drain_takes_one_batch_per_partition_within_max_request_size() -> None:
    size = room_for(2, 100)
    core = producer_core({("t", 0): (1, 0), ("t", 1): (1, 0), ("t", 2): (1, 0)}, batch_size=size)
    for p in range(3):
        for _ in range(4):
            core.accumulator.append(TopicPartition("t", p), 0, None, b"z" * 100, (), None, 0)
    drained = core.accumulator.drain(core.metadata.cluster, {1}, 2 * size + 10, 0)[1]
    # Each partition has two full batches queued; one per partition per request, and the size fits two.
    assert len(drained) == 2 and len({b.tp for b in drained}) == 2
    nxt = core.accumulator.drain(core.metadata.cluster, {1}, 2 * size + 10, 0)[1]
    assert nxt[0].tp not in {b.tp for b in drained}, "draining resumes round-robin where it stopped"


def test_a_single_batch_above_max_request_size_is_still_drained_alone() -> None:
    core = producer_core(LEADERS, batch_size=5000)
    core.accumulator.append(T0, 0, None, b"q" * 3000, (), None, 0)
    drained = core.accumulator.drain(core.metadata.cluster, {1}, 1000, 0)
    assert [b.tp for b in drained[1]] == [T0]


def test_sequences_are_assigned_when_drained_not_when_appended() -> None:
    core = producer_core(LEADERS, batch_size=room_for(2, 40))
    for _ in range(4):
        core.accumulator.append(T0, 0, None, b"s" * 40, (), None, 0)
    queued = core.accumulator.queued(T0)
    assert [b.base_sequence for b in queued] == [-1, -1]
    (first,) = core.accumulator.drain(core.metadata.cluster, {1}, 1 << 20, 0)[1]
    assert first.base_sequence == 0 and queued[1].base_sequence == -1
    (second,) = core.accumulator.drain(core.metadata.cluster, {1}, 1 << 20, 0)[1]
    assert second.base_sequence == first.record_count
    header = decode_batch(second.records).header
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1000, 0, first.record_count)


def test_a_reenqueued_batch_goes_back_in_sequence_order_and_waits_out_its_backoff() -> None:
    core = producer_core(LEADERS, batch_size=room_for(2, 40), retry_backoff_ms=100, retry_backoff_max_ms=100)
    acc = core.accumulator
    for _ in range(6):
        acc.append(T0, 0, None, b"r" * 40, (), None, 0)
    b0 = acc.drain(core.metadata.cluster, {1}, 1 << 20, 0)[1][0]
    b1 = acc.drain(core.metadata.cluster, {1}, 1 << 20, 0)[1][0]
    # Both come back; the later one first (answers can arrive in any order).
    acc.reenqueue(b1, 10)
    acc.reenqueue(b0, 10)
    assert [b.base_sequence for b in acc.queued(T0)] == [0, 2, -1]
    assert acc.ready(core.metadata.cluster, 50).ready_nodes == set(), "still backing off"
    assert acc.drain(core.metadata.cluster, {1}, 1 << 20, 50) == {}
    later = 10 + 120  # past 100 ms +- 20% jitter
    assert acc.ready(core.metadata.cluster, later).ready_nodes == {1}
    assert acc.drain(core.metadata.cluster, {1}, 1 << 20, later)[1] == [b0]


def test_batches_expire_after_delivery_timeout_and_leave_the_queue() -> None:
    core = producer_core(LEADERS, delivery_timeout_ms=1000)
    core.send(T0, b"old", now_ms=0)
    core.send(T1, b"new", now_ms=600)
    assert core.accumulator.expired_batches(999) == []
    assert core.accumulator.next_expiry_ms() == 1000
    (expired,) = core.accumulator.expired_batches(1000)
    assert expired.tp == T0 and core.accumulator.queued(T0) == []
    assert core.accumulator.next_expiry_ms() == 1600


def test_flush_makes_lingering_batches_sendable() -> None:
    core = producer_core(LEADERS, linger_ms=60_000)
    core.send(T0, b"v", now_ms=0)
    assert core.accumulator.ready(core.metadata.cluster, 1).ready_nodes == set()
    core.accumulator.begin_flush()
    assert core.accumulator.ready(core.metadata.cluster, 1).ready_nodes == {1}
    core.accumulator.end_flush()
    core.accumulator.close()
    assert core.accumulator.ready(core.metadata.cluster, 1).ready_nodes == {1}


def test_sticky_partitioning_aborts_before_opening_a_new_batch() -> None:
    core = producer_core(LEADERS, batch_size=room_for(1, 60))
    acc = core.accumulator
    assert acc.append(T0, 0, None, b"k" * 60, (), None, 0, abort_on_new_batch=True).aborted_for_new_batch
    assert acc.append(T0, 0, None, b"k" * 60, (), None, 0).new_batch_created
    assert acc.append(T0, 0, None, b"k" * 60, (), None, 0, abort_on_new_batch=True).aborted_for_new_batch
    assert len(acc.queued(T0)) == 1


def test_partitions_without_a_known_leader_are_reported() -> None:
    core = producer_core({("t", 0): (1, 0), ("t", 1): (-1, 0)})
    core.send(T1, b"v", now_ms=0)
    result = core.accumulator.ready(core.metadata.cluster, 10)
    assert result.unknown_leader_topics == {"t"} and result.ready_nodes == set()
