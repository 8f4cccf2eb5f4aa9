"""Produce on the leader: acks validation, min ISR before and after the append, acks=all waiting, timeouts."""

from __future__ import annotations

import pytest

from kraftpy.broker.replication import (
    AlterPartitionResponse,
    AppendAsLeader,
    CompleteProduce,
    FetchPartition,
    LogState,
    Partition,
    PartitionRegistration,
    ProduceRequest,
    ReplicationConfig,
    SendAlterPartition,
    UpdateHighWatermark,
)
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.header import BatchHeader, parse_header

EPOCH = 2


def header(count: int = 1, producer_id: int = -1, epoch: int = -1, seq: int = -1) -> BatchHeader:
    records = [(None, b"v", (), 1_000)] * count
    return parse_header(build_batch(records, producer_id=producer_id, producer_epoch=epoch, base_sequence=seq))


def leader(isr=(0, 1, 2), min_isr: int = 2, leo: int = 0, hw: int | None = None) -> Partition:
    partition = Partition(0, ReplicationConfig(min_insync_replicas=min_isr, replica_lag_time_max_ms=1_000))
    log = LogState(0, leo, leo if hw is None else hw)
    partition.apply_registration(PartitionRegistration((0, 1, 2), isr, 0, EPOCH, 1), log, 0)
    return partition


def produce(partition: Partition, rid: object, acks: int = -1, h: BatchHeader | None = None, now: int = 0, timeout=500):
    return partition.handle_produce(ProduceRequest(rid, h or header(), acks=acks, timeout_ms=timeout), now)


def completions(actions) -> dict:
    return {a.request_id: a for a in actions if isinstance(a, CompleteProduce)}


def follower_fetch(partition: Partition, replica: int, offset: int, now: int = 1) -> list:
    return list(partition.handle_fetch(FetchPartition(replica, offset, EPOCH), None, now).actions)


@pytest.mark.parametrize("acks", [2, -2, 5])
def test_acks_other_than_0_1_all_are_invalid_even_on_a_follower(acks: int) -> None:
    for partition in (leader(), Partition(3)):
        [answer] = produce(partition, "r", acks=acks)
        assert answer.error == ErrorCode.INVALID_REQUIRED_ACKS


def test_a_non_leader_answers_not_leader_or_follower() -> None:
    partition = Partition(1)
    partition.apply_registration(PartitionRegistration((0, 1), (0, 1), 0, EPOCH, 1), LogState(0, 0, 0), 0)
    [answer] = produce(partition, "r")
    assert answer.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and answer.base_offset == -1


def test_acks_all_with_too_small_an_isr_is_rejected_before_the_append() -> None:
    partition = leader(isr=(0,), min_isr=2)
    actions = produce(partition, "r", acks=-1)
    assert actions == [completions(actions)["r"]]  # nothing appended
    assert actions[0].error == ErrorCode.NOT_ENOUGH_REPLICAS
    # acks=1 does not care about min ISR.
    assert completions(produce(partition, "r1", acks=1))["r1"].error == ErrorCode.NONE


def test_acks_1_and_0_are_answered_right_after_the_append_with_sequential_offsets() -> None:
    partition = leader()
    first = produce(partition, "a", acks=1, h=header(3))
    assert first[0] == AppendAsLeader("a", 0, 2, EPOCH)
    assert completions(first)["a"] == CompleteProduce("a", ErrorCode.NONE, 0, 2, acks=1)
    second = produce(partition, "b", acks=0)
    assert second[0] == AppendAsLeader("b", 3, 3, EPOCH)
    assert completions(second)["b"].acks == 0
    assert partition.leader.log_end_offset == 4


def test_acks_all_completes_only_when_the_hw_passes_the_last_offset() -> None:
    partition = leader(isr=(0, 1, 2))
    actions = produce(partition, "r", h=header(2))
    assert AppendAsLeader("r", 0, 1, EPOCH) in actions and completions(actions) == {}
    assert completions(follower_fetch(partition, 1, 2)) == {}
    assert completions(follower_fetch(partition, 2, 1)) == {}  # HW 1 = last offset: not yet
    done = completions(follower_fetch(partition, 2, 2))
    assert done["r"] == CompleteProduce("r", ErrorCode.NONE, 0, 1)


def test_isr_shrinking_below_min_while_waiting_leaves_the_hw_and_the_produce_waiting() -> None:
    """Kafka 4.x (KIP-966): below min ISR the HW stands still. The batch is not committed by the
    leader alone, so the follower that left keeps every committed record (an eligible leader)."""
    partition = leader(isr=(0, 1), min_isr=2)
    produce(partition, "r", now=0, timeout=5_000)
    shrink = [a.request for a in partition.tick(1_001) if isinstance(a, SendAlterPartition)]
    assert [r.isr for r in shrink] == [(0,)]
    done = completions(
        partition.on_alter_partition_response(shrink[0], AlterPartitionResponse(ErrorCode.NONE, EPOCH, (0,), 2), 1_002)
    )
    assert done == {} and partition.leader.high_watermark == 0
    timed_out = completions(partition.tick(5_000))
    assert timed_out["r"].error == ErrorCode.REQUEST_TIMED_OUT
    assert partition.leader.high_watermark == 0


def test_the_hw_moves_once_the_isr_is_back_at_min_isr() -> None:
    partition = leader(isr=(0,), min_isr=2, leo=3, hw=0)
    assert partition.leader.high_watermark == 0
    expand = [a.request for a in follower_fetch(partition, 1, 3) if isinstance(a, SendAlterPartition)]
    assert [r.isr for r in expand] == [(0, 1)] and partition.leader.high_watermark == 0  # not committed yet
    partition.on_alter_partition_response(expand[0], AlterPartitionResponse(ErrorCode.NONE, EPOCH, (0, 1), 2), 2)
    assert partition.leader.high_watermark == 3


def test_lowering_min_isr_lets_the_hw_move_at_once() -> None:
    partition = leader(isr=(0,), min_isr=2, leo=3, hw=0)
    assert partition.leader.high_watermark == 0
    actions = partition.update_config(ReplicationConfig(min_insync_replicas=1))
    assert UpdateHighWatermark(3) in actions and partition.leader.high_watermark == 3


def test_min_isr_above_the_replica_count_is_capped_by_it() -> None:
    """A single-replica topic with min ISR 2 (Kafka's effective min ISR): the leader alone commits."""
    partition = Partition(0, ReplicationConfig(min_insync_replicas=2))
    partition.apply_registration(PartitionRegistration((0,), (0,), 0, EPOCH, 1), LogState(0, 3, 0), 0)
    assert partition.leader.high_watermark == 3


def test_a_produce_the_hw_does_not_reach_in_time_times_out_and_says_where_it_was_appended() -> None:
    partition = leader()
    produce(partition, "r", now=100, timeout=500)
    assert completions(partition.tick(599)) == {}
    done = completions(partition.tick(600))
    assert done["r"].error == ErrorCode.REQUEST_TIMED_OUT and done["r"].base_offset == 0
    assert partition.leader.log_end_offset == 1  # the batch stays in the log and may still be committed


def test_losing_leadership_fails_waiting_produces_at_once() -> None:
    partition = leader()
    produce(partition, "r")
    actions = partition.apply_registration(
        PartitionRegistration((0, 1, 2), (1, 2), 1, EPOCH + 1, 2), LogState(0, 1, 0), 5
    )
    assert completions(actions)["r"].error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_new_epoch_for_the_same_leader_keeps_waiting_produces() -> None:
    partition = leader(isr=(0, 1), min_isr=1)
    produce(partition, "r")
    actions = partition.apply_registration(
        PartitionRegistration((0, 1, 2), (0, 1), 0, EPOCH + 1, 2), LogState(0, 1, 0), 5
    )
    assert completions(actions) == {}
    # Followers must fetch at the new epoch before the HW moves.
    stale = partition.handle_fetch(FetchPartition(1, 1, EPOCH), None, 6)
    assert stale.error == ErrorCode.FENCED_LEADER_EPOCH
    done = completions(partition.handle_fetch(FetchPartition(1, 1, EPOCH + 1), None, 7).actions)
    assert done["r"].error == ErrorCode.NONE


def test_a_duplicate_is_not_appended_and_waits_for_the_hw_like_the_original() -> None:
    partition = leader(isr=(0, 1), min_isr=1)
    h = header(2, producer_id=9, epoch=0, seq=0)
    produce(partition, "first", h=h)
    retry = produce(partition, "retry", h=h)
    assert not any(isinstance(a, AppendAsLeader) for a in retry) and completions(retry) == {}
    done = completions(follower_fetch(partition, 1, 2))
    assert done["first"] == CompleteProduce("first", ErrorCode.NONE, 0, 1)
    assert done["retry"] == CompleteProduce("retry", ErrorCode.NONE, 0, 1)
    # With acks=1 a duplicate is answered at once, with the original offsets.
    assert completions(produce(partition, "again", acks=1, h=h))["again"].base_offset == 0


def test_the_append_duplicates_break_really_appends_a_retried_batch_again() -> None:
    """The fault runs' broken build (KRAFTPY_TEST_BREAK=append-duplicates) must really be broken: the retry of
    a batch whose answer was lost lands at a second offset, which the client family's runs must catch."""
    partition = Partition(0, ReplicationConfig(min_insync_replicas=1, test_break_append_duplicates=True))
    partition.apply_registration(PartitionRegistration((0, 1, 2), (0,), 0, EPOCH, 1), LogState(0, 0, 0), 0)
    h = header(2, producer_id=9, epoch=0, seq=0)
    assert completions(produce(partition, "first", h=h))["first"].base_offset == 0
    assert completions(produce(partition, "retry", h=h))["retry"].base_offset == 2


def test_producer_state_errors_reach_the_producer_without_an_append() -> None:
    partition = leader(isr=(0,), min_isr=1)
    produce(partition, "ok", h=header(1, producer_id=9, epoch=1, seq=0))
    gap = produce(partition, "gap", h=header(1, producer_id=9, epoch=1, seq=5))
    assert gap == [completions(gap)["gap"]] and gap[0].error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    old = produce(partition, "old", h=header(1, producer_id=9, epoch=0, seq=1))
    assert old[0].error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_reusing_a_waiting_request_id_is_a_shell_bug() -> None:
    partition = leader()
    produce(partition, "r")
    with pytest.raises(ValueError, match="already waiting"):
        produce(partition, "r")
