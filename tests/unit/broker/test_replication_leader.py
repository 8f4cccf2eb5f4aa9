"""The leader core: becoming leader, fetch validation, DivergingEpoch, offset range, the HW rule."""

from __future__ import annotations

import pytest

from kraftpy.broker.replication import (
    AssignEpochStartOffset,
    EpochEndOffset,
    FetchPartition,
    LogState,
    Partition,
    PartitionRegistration,
    ReplicationConfig,
    UpdateHighWatermark,
)
from kraftpy.broker.replication.model import CONSUMER_REPLICA_ID, UNDEFINED_EPOCH_END
from kraftpy.protocol.errors import ErrorCode

EPOCH = 5


def leader(
    isr=(0, 1, 2), leo: int = 10, hw: int = 4, log_start: int = 0, now: int = 0, min_isr: int = 1
) -> tuple[Partition, list]:
    partition = Partition(0, ReplicationConfig(min_insync_replicas=min_isr))
    registration = PartitionRegistration((0, 1, 2), isr, 0, EPOCH, 7)
    actions = partition.apply_registration(registration, LogState(log_start, leo, hw, EPOCH - 1), now)
    return partition, actions


def fetch(replica: int, offset: int, epoch: int = EPOCH, last_epoch: int = -1, broker_epoch: int = -1):
    return FetchPartition(replica, offset, epoch, last_epoch, 0, broker_epoch)


def current_epoch_end(partition: Partition) -> EpochEndOffset:
    return EpochEndOffset(EPOCH, partition.leader.log_end_offset)


def test_becoming_leader_assigns_the_epoch_start_and_keeps_the_stale_hw_until_followers_fetch() -> None:
    partition, actions = leader(leo=10, hw=4)
    assert actions == [AssignEpochStartOffset(EPOCH, 10)]
    core = partition.leader
    assert core.high_watermark == 4 and core.epoch_start_offset == 10
    assert not core.high_watermark_known
    assert partition.list_offsets_latest(EPOCH) == (ErrorCode.OFFSET_NOT_AVAILABLE, -1)
    # One follower at the LEO is not enough: the other ISR member's LEO is still unknown.
    partition.handle_fetch(fetch(1, 10), None, 1)
    assert core.high_watermark == 4
    decision = partition.handle_fetch(fetch(2, 10), None, 2)
    assert UpdateHighWatermark(10) in decision.actions
    assert core.high_watermark_known and partition.list_offsets_latest(EPOCH) == (ErrorCode.NONE, 10)


def test_a_restarted_replica_whose_hw_checkpoint_exceeds_its_log_starts_with_hw_at_its_log_end() -> None:
    partition, _ = leader(isr=(0, 1, 2), leo=3, hw=9)
    assert partition.leader.high_watermark == 3


def test_a_leader_alone_in_the_isr_commits_its_whole_log_at_once() -> None:
    _, actions = leader(isr=(0,), leo=10, hw=4)
    assert actions == [AssignEpochStartOffset(EPOCH, 10), UpdateHighWatermark(10)]


def test_hw_is_the_minimum_leo_over_the_isr_and_ignores_replicas_outside_it() -> None:
    partition, _ = leader(isr=(0, 1), leo=10, hw=0)
    partition.handle_fetch(fetch(2, 0), None, 1)  # not in the ISR: does not hold the HW back
    decision = partition.handle_fetch(fetch(1, 6, last_epoch=EPOCH - 1), EpochEndOffset(EPOCH - 1, 10), 1)
    assert UpdateHighWatermark(6) in decision.actions
    assert decision.high_watermark == 6 and decision.max_offset == 10


def test_hw_never_goes_back_when_a_follower_reports_a_lower_offset() -> None:
    partition, _ = leader(isr=(0, 1), leo=10, hw=0)
    partition.handle_fetch(fetch(1, 8), None, 1)
    assert partition.leader.high_watermark == 8
    decision = partition.handle_fetch(fetch(1, 3), None, 2)
    assert partition.leader.high_watermark == 8 and decision.high_watermark == 8
    assert not any(isinstance(a, UpdateHighWatermark) for a in decision.actions)
    assert partition.leader.remote[1].log_end_offset == 3


@pytest.mark.parametrize(
    ("request_epoch", "expected"),
    [
        (EPOCH - 1, ErrorCode.FENCED_LEADER_EPOCH),
        (EPOCH + 1, ErrorCode.UNKNOWN_LEADER_EPOCH),
        (-1, ErrorCode.NONE),
        (EPOCH, ErrorCode.NONE),
    ],
)
def test_fetch_leader_epoch_is_validated(request_epoch: int, expected: ErrorCode) -> None:
    partition, _ = leader()
    decision = partition.handle_fetch(fetch(1, 10, epoch=request_epoch), None, 1)
    assert decision.error == expected
    if expected != ErrorCode.NONE:
        assert partition.leader.remote[1].log_end_offset == -1  # a rejected fetch moves nothing


def test_fetch_from_a_replica_outside_the_assignment_is_not_leader_or_follower() -> None:
    partition, _ = leader()
    assert partition.handle_fetch(fetch(9, 10), None, 1).error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_late_fetch_from_an_earlier_incarnation_is_stale_broker_epoch() -> None:
    partition, _ = leader(isr=(0, 1))
    partition.handle_fetch(fetch(2, 3, broker_epoch=8), None, 1)
    decision = partition.handle_fetch(fetch(2, 10, broker_epoch=7), None, 2)
    assert decision.error == ErrorCode.STALE_BROKER_EPOCH
    assert partition.leader.remote[2].log_end_offset == 3


def test_diverging_epoch_when_the_leader_does_not_know_the_followers_last_epoch() -> None:
    partition, _ = leader(isr=(0, 1), leo=10, hw=0)
    # The follower's last batch has epoch 4; the leader's cache says its largest epoch <= 4 is 3, ending at 7.
    decision = partition.handle_fetch(fetch(1, 9, last_epoch=4), EpochEndOffset(3, 7), 1)
    assert decision.diverging_epoch == EpochEndOffset(3, 7)
    assert not decision.readable
    assert partition.leader.remote[1].log_end_offset == -1 and partition.leader.high_watermark == 0


def test_diverging_epoch_when_the_epoch_ends_earlier_on_the_leader() -> None:
    partition, _ = leader(isr=(0, 1), leo=10, hw=0)
    decision = partition.handle_fetch(fetch(1, 9, last_epoch=3), EpochEndOffset(3, 7), 1)
    assert decision.diverging_epoch == EpochEndOffset(3, 7)


def test_an_undefined_epoch_answer_is_reported_as_diverging_too() -> None:
    partition, _ = leader()
    decision = partition.handle_fetch(fetch(1, 9, last_epoch=EPOCH + 3), UNDEFINED_EPOCH_END, 1)
    assert decision.diverging_epoch == UNDEFINED_EPOCH_END


def test_matching_epoch_history_gets_data() -> None:
    partition, _ = leader(isr=(0, 1), leo=10, hw=0)
    decision = partition.handle_fetch(fetch(1, 7, last_epoch=3), EpochEndOffset(3, 7), 1)
    assert decision.error == ErrorCode.NONE and decision.diverging_epoch is None
    assert decision.readable and (decision.fetch_offset, decision.max_offset) == (7, 10)


def test_last_fetched_epoch_without_the_leaders_answer_is_a_shell_bug() -> None:
    partition, _ = leader()
    with pytest.raises(ValueError, match="end_offset_for"):
        partition.handle_fetch(fetch(1, 7, last_epoch=3), None, 1)


@pytest.mark.parametrize("offset", [2, 11])
def test_fetch_offset_outside_the_log_is_offset_out_of_range(offset: int) -> None:
    partition, _ = leader(leo=10, log_start=3)
    decision = partition.handle_fetch(fetch(1, offset), None, 1)
    assert decision.error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (decision.log_start_offset, decision.log_end_offset) == (3, 10)


def test_log_start_moved_by_retention_is_enforced() -> None:
    partition, _ = leader(leo=10, log_start=0)
    partition.set_log_start_offset(5)
    assert partition.handle_fetch(fetch(1, 4), None, 1).error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert partition.handle_fetch(fetch(1, 5), None, 1).error == ErrorCode.NONE


def test_consumers_read_only_below_the_hw() -> None:
    partition, _ = leader(isr=(0,), leo=10, hw=0)
    partition.leader.high_watermark = 6  # as if followers had confirmed 6 so far
    consumer = FetchPartition(CONSUMER_REPLICA_ID, 2, EPOCH)
    decision = partition.handle_fetch(consumer, None, 1)
    assert decision.readable and decision.max_offset == 6 and decision.actions == ()
    beyond_hw = partition.handle_fetch(FetchPartition(CONSUMER_REPLICA_ID, 8, EPOCH), None, 1)
    assert beyond_hw.error == ErrorCode.NONE and not beyond_hw.readable


def test_check_fetch_changes_nothing() -> None:
    partition, _ = leader(isr=(0, 1), leo=10, hw=0)
    decision = partition.check_fetch(fetch(1, 10), None)
    assert decision.error == ErrorCode.NONE and decision.actions == ()
    assert partition.leader.remote[1].log_end_offset == -1 and partition.leader.high_watermark == 0


@pytest.mark.parametrize(
    ("request_epoch", "expected"),
    [
        (EPOCH - 1, ErrorCode.FENCED_LEADER_EPOCH),
        (EPOCH + 1, ErrorCode.UNKNOWN_LEADER_EPOCH),
        (EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (-1, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    ],
)
def test_a_follower_answers_fetches_with_the_fencing_codes(request_epoch: int, expected: ErrorCode) -> None:
    partition = Partition(1)
    partition.apply_registration(PartitionRegistration((0, 1), (0, 1), 0, EPOCH, 3), LogState(0, 0, 0), 0)
    assert partition.handle_fetch(fetch(2, 0, epoch=request_epoch), None, 1).error == expected
    assert partition.check_fetch(fetch(2, 0, epoch=request_epoch), None).error == expected
    assert partition.list_offsets_latest(request_epoch)[0] == expected
