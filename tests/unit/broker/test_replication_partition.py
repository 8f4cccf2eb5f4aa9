"""Partition: role changes driven by committed metadata, and which registrations it ignores."""

from __future__ import annotations

from kraftpy.broker.replication import (
    AssignEpochStartOffset,
    CompleteProduce,
    LogState,
    Partition,
    PartitionRegistration,
    ProduceRequest,
    ProducerStateManager,
    ReplicationConfig,
    Role,
    predates_log,
)
from kraftpy.broker.replication.model import NO_LEADER
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.header import parse_header

LOG = LogState(0, 5, 3, 1)


def reg(leader: int, leader_epoch: int, partition_epoch: int, isr=(0, 1, 2), replicas=(0, 1, 2)):
    return PartitionRegistration(replicas, isr, leader, leader_epoch, partition_epoch)


def waiting_produce(partition: Partition) -> None:
    header = parse_header(build_batch([(None, b"v", (), 1)]))
    partition.handle_produce(ProduceRequest("w", header, acks=-1), 0)


def test_roles_follow_the_registrations() -> None:
    partition = Partition(0)
    assert partition.role == Role.NONE and partition.high_watermark is None
    partition.apply_registration(reg(1, 1, 1), LOG, 0)
    assert partition.role == Role.FOLLOWER and partition.follower.leader_id == 1 and partition.high_watermark == 3
    partition.apply_registration(reg(0, 2, 2), LOG, 0)
    assert partition.role == Role.LEADER and partition.leader_epoch == 2
    partition.apply_registration(reg(NO_LEADER, 3, 3, isr=(0,)), LOG, 0)
    assert partition.role == Role.NONE


def test_old_or_repeated_registrations_are_ignored() -> None:
    partition = Partition(0)
    partition.apply_registration(reg(0, 4, 10), LOG, 0)
    leader = partition.leader
    assert partition.apply_registration(reg(1, 5, 10), LOG, 0) == []  # same partition epoch
    assert partition.apply_registration(reg(1, 3, 11), LOG, 0) == []  # older leader epoch
    assert partition.leader is leader


def test_a_new_leader_of_the_follower_starts_a_new_fetcher_state() -> None:
    partition = Partition(0)
    partition.apply_registration(reg(1, 1, 1), LOG, 0)
    first = partition.follower
    partition.apply_registration(reg(2, 2, 2), LOG, 0)
    assert partition.follower is not first and partition.follower.leader_id == 2


def test_being_removed_from_the_replicas_stops_the_partition_and_fails_waiting_produces() -> None:
    partition = Partition(0, ReplicationConfig(min_insync_replicas=1))
    partition.apply_registration(reg(0, 1, 1), LOG, 0)
    waiting_produce(partition)
    actions = partition.apply_registration(reg(1, 2, 2, isr=(1, 2), replicas=(1, 2)), LOG, 0)
    assert [a.error for a in actions if isinstance(a, CompleteProduce)] == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    assert partition.role == Role.NONE


def test_stop_fails_waiting_produces() -> None:
    partition = Partition(0)
    partition.apply_registration(reg(0, 1, 1), LOG, 0)
    waiting_produce(partition)
    assert [a.error for a in partition.stop()] == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    assert partition.tick(10) == []


def test_loaded_producer_state_reaches_the_current_role() -> None:
    partition = Partition(0)
    partition.apply_registration(reg(0, 1, 1), LOG, 0)
    fresh = ProducerStateManager()
    partition.load_producer_state(fresh)
    assert partition.producers is fresh and partition.leader.producers is fresh
    partition.apply_registration(reg(1, 2, 2), LOG, 0)
    assert partition.follower.producers is fresh


def test_a_registration_whose_leader_is_outside_the_isr_is_rejected() -> None:
    try:
        PartitionRegistration((0, 1), (1,), 0, 1, 1)
    except ValueError as exc:
        assert "not in the ISR" in str(exc)
    else:
        raise AssertionError("a leader outside the ISR was accepted")


def test_a_registration_older_than_the_logs_latest_epoch_is_stale_metadata_and_ignored() -> None:
    # A restarted broker replays metadata it had acted on before it died: its log already holds epoch 3,
    # so a registration at epoch 2 naming it leader must not make it assign epoch 2 at its log end.
    log = LogState(0, 800, 800, 3)
    partition = Partition(0)
    assert partition.apply_registration(reg(0, 2, 7), log, 0) == []
    assert partition.role == Role.NONE and partition.registration is None
    assert partition.apply_registration(reg(1, 2, 7), log, 0) == []  # following a stale leader: no either
    assert partition.role == Role.NONE
    actions = partition.apply_registration(reg(0, 4, 9), log, 0)  # the newer one, once metadata catches up
    assert partition.role == Role.LEADER and partition.leader_epoch == 4
    assert any(isinstance(a, AssignEpochStartOffset) and (a.leader_epoch, a.start_offset) == (4, 800) for a in actions)
    assert predates_log(reg(0, 2, 7), 3) and not predates_log(reg(0, 3, 7), 3) and not predates_log(reg(0, 0, 1), -1)
