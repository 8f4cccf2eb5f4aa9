"""ISR policy: caught-up time, shrink and expand proposals, the pending states, AlterPartition answers."""

from __future__ import annotations

from kraftpy.broker.replication import (
    AlterPartitionResponse,
    BrokerState,
    FetchPartition,
    LogState,
    Partition,
    PartitionRegistration,
    ReplicationConfig,
    SendAlterPartition,
    UpdateHighWatermark,
)
from kraftpy.broker.replication.isr import CommittedIsr, PendingExpandIsr, PendingShrinkIsr
from kraftpy.broker.replication.replica import RemoteReplicaState
from kraftpy.protocol.errors import ErrorCode

EPOCH = 3
LAG = 1_000


def leader(isr=(0, 1, 2), leo: int = 10, hw: int = 0, now: int = 0) -> Partition:
    partition = Partition(0, ReplicationConfig(replica_lag_time_max_ms=LAG, alter_partition_retry_ms=500))
    partition.apply_registration(PartitionRegistration((0, 1, 2), isr, 0, EPOCH, 4), LogState(0, leo, hw), now)
    return partition


def fetch(partition: Partition, replica: int, offset: int, now: int, broker_epoch: int = -1) -> list:
    request = FetchPartition(replica, offset, EPOCH, -1, 0, broker_epoch)
    return list(partition.handle_fetch(request, None, now).actions)


def proposals(actions) -> list:
    return [a.request for a in actions if isinstance(a, SendAlterPartition)]


def test_caught_up_time_follows_kafkas_three_cases() -> None:
    replica = RemoteReplicaState(1)
    replica.update_fetch_state(10, 0, fetch_time_ms=100, leader_end_offset=10, broker_epoch=-1)
    assert replica.last_caught_up_time_ms == 100  # at the leader's LEO: caught up now
    replica.update_fetch_state(10, 0, fetch_time_ms=200, leader_end_offset=15)
    assert replica.last_caught_up_time_ms == 100  # reached what the leader had at the previous fetch (10)...
    replica.update_fetch_state(15, 0, fetch_time_ms=300, leader_end_offset=20)
    assert replica.last_caught_up_time_ms == 200  # ...so it was caught up as of that previous fetch (200)
    replica.update_fetch_state(16, 0, fetch_time_ms=400, leader_end_offset=30)
    assert replica.last_caught_up_time_ms == 200  # still behind what the leader had at 300: no progress
    assert replica.is_caught_up(30, 200 + LAG, LAG) and not replica.is_caught_up(30, 201 + LAG, LAG)
    assert replica.is_caught_up(16, 10_000, LAG)  # at the LEO counts whatever the time


def test_a_silent_isr_follower_is_proposed_out_after_the_lag_and_the_hw_waits_until_committed() -> None:
    partition = leader(leo=10)
    fetch(partition, 1, 10, now=0)
    assert proposals(partition.tick(LAG)) == []  # exactly at the limit: still in sync
    fetch(partition, 1, 10, now=LAG)
    actions = partition.tick(LAG + 1)
    [request] = proposals(actions)
    assert request.isr == (0, 1) and (request.leader_epoch, request.partition_epoch) == (EPOCH, 4)
    state = partition.leader.isr_state
    assert isinstance(state, PendingShrinkIsr) and state.maximal_isr == {0, 1, 2}
    # While the shrink is in flight, the HW still counts replica 2 (its LEO is unknown: the HW stays).
    assert partition.leader.high_watermark == 0
    assert proposals(partition.tick(LAG + 2)) == []  # one proposal at a time
    done = partition.on_alter_partition_response(
        request, AlterPartitionResponse(ErrorCode.NONE, EPOCH, (0, 1), 5), LAG + 3
    )
    assert partition.leader.isr == {0, 1} and partition.leader.partition_epoch == 5
    assert UpdateHighWatermark(10) in done


def test_a_follower_that_keeps_fetching_but_falls_behind_is_shrunk_too() -> None:
    partition = leader(isr=(0, 1), leo=20)
    for step, t in enumerate(range(0, 2 * LAG, 100)):
        # Each fetch asks for less than the leader had at the previous fetch: it never catches up.
        fetch(partition, 1, 5 + 10 * step, now=t)
        partition.leader.log_end_offset += 10
        # First tick past the lag proposes; then it is in flight, re-sent once unanswered for 500 ms.
        expected = [(0,)] if t in (LAG + 100, LAG + 600) else []
        assert [r.isr for r in proposals(partition.tick(t))] == expected
    assert isinstance(partition.leader.isr_state, PendingShrinkIsr)


def test_a_follower_one_fetch_behind_stays_in_sync() -> None:
    """Kafka's rule: reaching the LEO the leader had at the previous fetch counts as caught up back then."""
    partition = leader(isr=(0, 1), leo=10)
    for step, t in enumerate(range(0, 5 * LAG, 100)):
        fetch(partition, 1, 10 + 10 * step - 10, now=t)
        partition.leader.log_end_offset += 10
        assert proposals(partition.tick(t)) == []


def test_an_out_of_sync_follower_rejoins_once_it_reaches_the_hw_with_its_broker_epoch() -> None:
    partition = leader(isr=(0, 1), leo=10)
    fetch(partition, 1, 10, now=1)
    assert partition.leader.high_watermark == 10
    assert proposals(fetch(partition, 2, 7, now=2, broker_epoch=42)) == []
    [request] = proposals(fetch(partition, 2, 10, now=3, broker_epoch=42))
    assert request.new_isr == (BrokerState(0, -1), BrokerState(1, -1), BrokerState(2, 42))
    state = partition.leader.isr_state
    assert isinstance(state, PendingExpandIsr) and state.maximal_isr == {0, 1, 2}


def test_while_an_expand_is_in_flight_the_hw_cannot_pass_the_new_member() -> None:
    partition = leader(isr=(0, 1), leo=10)
    fetch(partition, 1, 10, now=1)
    proposals(fetch(partition, 2, 10, now=2))
    partition.leader.log_end_offset = 20  # more writes
    fetch(partition, 1, 20, now=3)
    assert partition.leader.high_watermark == 10  # replica 2 (pending member) is still at 10
    fetch(partition, 2, 15, now=4)
    assert partition.leader.high_watermark == 15


def test_rejoining_also_needs_the_start_of_the_leader_epoch() -> None:
    # A new leader with a stale HW (2) and epoch start 10: reaching the HW is not enough.
    partition = leader(isr=(0, 1), leo=10, hw=2)
    assert proposals(fetch(partition, 2, 5, now=1)) == []
    assert isinstance(partition.leader.isr_state, CommittedIsr)
    [request] = proposals(fetch(partition, 2, 10, now=2))
    assert 2 in request.isr


def test_fenced_or_shutting_down_brokers_are_not_added() -> None:
    partition = leader(isr=(0, 1), leo=10)
    partition.set_ineligible_replicas(frozenset({2}))
    assert proposals(fetch(partition, 2, 10, now=1)) == []
    partition.set_ineligible_replicas(frozenset())
    assert len(proposals(fetch(partition, 2, 10, now=2))) == 1


def test_an_answer_to_a_superseded_proposal_or_with_a_stale_epoch_is_ignored() -> None:
    partition = leader(isr=(0, 1), leo=10)
    [request] = proposals(fetch(partition, 2, 10, now=1))
    # The metadata log delivers a newer committed state first: the proposal is superseded.
    partition.apply_registration(PartitionRegistration((0, 1, 2), (0, 1), 0, EPOCH, 6), LogState(0, 10, 0), 2)
    assert isinstance(partition.leader.isr_state, CommittedIsr) and partition.leader.partition_epoch == 6
    ok = AlterPartitionResponse(ErrorCode.NONE, EPOCH, (0, 1, 2), 5)
    assert partition.on_alter_partition_response(request, ok, 3) == []
    assert partition.leader.isr == {0, 1}
    [again] = proposals(fetch(partition, 2, 10, now=4))
    assert again.partition_epoch == 6
    stale = AlterPartitionResponse(ErrorCode.NONE, EPOCH - 1, (0, 1, 2), 7)
    assert partition.on_alter_partition_response(again, stale, 5) == []
    assert isinstance(partition.leader.isr_state, PendingExpandIsr)


def test_ineligible_replica_reverts_so_the_expansion_can_be_proposed_again() -> None:
    partition = leader(isr=(0, 1), leo=10)
    [request] = proposals(fetch(partition, 2, 10, now=1, broker_epoch=1))
    partition.on_alter_partition_response(request, AlterPartitionResponse(ErrorCode.INELIGIBLE_REPLICA), 2)
    assert isinstance(partition.leader.isr_state, CommittedIsr)
    [retry] = proposals(fetch(partition, 2, 10, now=3, broker_epoch=2))
    assert BrokerState(2, 2) in retry.new_isr


def test_fenced_or_outdated_proposals_wait_for_metadata_instead_of_retrying() -> None:
    partition = leader(isr=(0, 1), leo=10)
    [request] = proposals(fetch(partition, 2, 10, now=1))
    partition.on_alter_partition_response(request, AlterPartitionResponse(ErrorCode.INVALID_UPDATE_VERSION), 2)
    assert isinstance(partition.leader.isr_state, PendingExpandIsr)
    assert proposals(partition.tick(10_000)) == []
    partition.apply_registration(PartitionRegistration((0, 1, 2), (0, 1, 2), 0, EPOCH, 9), LogState(0, 10, 0), 3)
    assert partition.leader.isr == {0, 1, 2} and isinstance(partition.leader.isr_state, CommittedIsr)


def test_a_committed_state_that_still_lacks_the_follower_lets_the_leader_propose_again() -> None:
    partition = leader(isr=(0, 1), leo=10)
    [request] = proposals(fetch(partition, 2, 10, now=1))
    partition.on_alter_partition_response(request, AlterPartitionResponse(ErrorCode.INVALID_UPDATE_VERSION), 2)
    partition.apply_registration(PartitionRegistration((0, 1, 2), (0, 1), 0, EPOCH, 9), LogState(0, 10, 0), 3)
    [again] = proposals(fetch(partition, 2, 10, now=4))
    assert again.partition_epoch == 9 and BrokerState(2, -1) in again.new_isr
    # The metadata that ended the wait ended it for good: this new proposal is retried on the timer.
    assert proposals(partition.tick(4 + 500)) == [again]


def test_a_new_leader_epoch_ends_a_wait_for_metadata() -> None:
    partition = leader(isr=(0, 1), leo=10)
    [request] = proposals(fetch(partition, 2, 10, now=1))
    partition.on_alter_partition_response(request, AlterPartitionResponse(ErrorCode.FENCED_LEADER_EPOCH), 2)
    assert proposals(partition.tick(10_000)) == []  # waiting for metadata, not retrying
    partition.apply_registration(PartitionRegistration((0, 1, 2), (0, 1), 0, EPOCH + 1, 9), LogState(0, 10, 0), 10_001)
    partition.handle_fetch(FetchPartition(1, 10, EPOCH + 1, -1, 0, -1), None, 10_002)  # the HW reaches 10
    [again] = proposals(partition.handle_fetch(FetchPartition(2, 10, EPOCH + 1, -1, 0, -1), None, 10_003).actions)
    assert again.leader_epoch == EPOCH + 1 and BrokerState(2, -1) in again.new_isr
    assert proposals(partition.tick(10_003 + 500)) == [again]  # unanswered: sent again on the timer


def test_a_reassignment_at_the_same_leader_epoch_tracks_the_new_replicas_and_drops_the_old() -> None:
    partition = leader(isr=(0, 1, 2), leo=10)
    fetch(partition, 1, 10, now=1)
    partition.apply_registration(PartitionRegistration((0, 1, 3), (0, 1), 0, EPOCH, 5), LogState(0, 10, 0), 2)
    assert set(partition.leader.remote) == {1, 3}
    assert partition.leader.remote[1].log_end_offset == 10  # a kept replica keeps what it proved
    assert partition.leader.remote[3].log_end_offset == -1
    assert partition.leader.high_watermark == 10  # replica 2 no longer holds the HW back
    [proposal] = proposals(fetch(partition, 3, 10, now=3))  # the new replica caught up: into the ISR
    assert BrokerState(3, -1) in proposal.new_isr


def test_an_unanswered_proposal_is_sent_again_after_the_retry_interval() -> None:
    partition = leader(isr=(0, 1), leo=10)
    [request] = proposals(fetch(partition, 2, 10, now=100))
    assert proposals(partition.tick(599)) == []
    assert proposals(partition.tick(600)) == [request]
    partition.on_alter_partition_response(request, AlterPartitionResponse(ErrorCode.NOT_CONTROLLER), 601)
    assert proposals(partition.tick(1_000)) == []
    assert proposals(partition.tick(1_100)) == [request]


def test_the_same_partition_epoch_in_a_success_answer_commits_the_proposal() -> None:
    """The controller found nothing to change (the ISR already matched): Kafka still leaves the pending state."""
    partition = leader(isr=(0, 1), leo=10)
    [request] = proposals(fetch(partition, 2, 10, now=1))
    partition.on_alter_partition_response(request, AlterPartitionResponse(ErrorCode.NONE, EPOCH, (0, 1, 2), 4), 2)
    assert isinstance(partition.leader.isr_state, CommittedIsr) and partition.leader.isr == {0, 1, 2}
