"""ISR policy: when to propose a shrink or an expansion, and the pending states while one is in flight.

Design notes: docs/replication.md, section "broker/replication/isr.py".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kraftpy.broker.replication.model import AlterPartitionRequest, BrokerState
from kraftpy.broker.replication.replica import RemoteReplicaState


@dataclass(frozen=True, slots=True)
class CommittedIsr:
    """No change in flight: the ISR is what the controller committed."""

    isr: frozenset[int]

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class PendingExpandIsr:
    """Asked the controller to add `new_in_sync_replica`; the HW already waits for it."""

    isr: frozenset[int]
    new_in_sync_replica: int
    proposal: AlterPartitionRequest
    sent_ms: int

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr | {self.new_in_sync_replica}

    @property
    def is_inflight(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class PendingShrinkIsr:
    """Asked the controller to remove `out_of_sync_replicas`; the HW still waits for them."""

    isr: frozenset[int]
    out_of_sync_replicas: frozenset[int]
    proposal: AlterPartitionRequest
    sent_ms: int

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return True


IsrState = CommittedIsr | PendingExpandIsr | PendingShrinkIsr


def out_of_sync_replicas(
    state: IsrState,
    leader_id: int,
    replicas: Mapping[int, RemoteReplicaState],
    leader_end_offset: int,
    now_ms: int,
    replica_lag_time_max_ms: int,
) -> frozenset[int]:
    """Kafka's getOutOfSyncReplicas: ISR followers not caught up within the lag; none while a change is in flight."""
    if state.is_inflight:
        return frozenset()
    out: set[int] = set()
    for replica_id in state.isr - {leader_id}:
        replica = replicas.get(replica_id)
        if replica is None or not replica.is_caught_up(leader_end_offset, now_ms, replica_lag_time_max_ms):
            out.add(replica_id)
    return frozenset(out)


def is_follower_in_sync(replica: RemoteReplicaState, high_watermark: int, leader_epoch_start_offset: int) -> bool:
    """Kafka's isFollowerInSync: the follower reached the HW *and* the start of the current leader epoch.

    The second condition matters right after a leader change: the new
    leader's HW may lag what the old leader committed (it learns the true
    HW only as followers fetch). Everything below the epoch start offset may
    have been committed, so a replica joins only once it holds all of it.
    """
    return replica.log_end_offset >= high_watermark and replica.log_end_offset >= leader_epoch_start_offset


def can_add_to_isr(state: IsrState, replica_id: int, ineligible: frozenset[int]) -> bool:
    """Kafka's canAddReplicaToIsr: nothing in flight, not a member yet, and not fenced or shutting down."""
    return not state.is_inflight and replica_id not in state.isr and replica_id not in ineligible


def _broker_states(isr: frozenset[int], leader_id: int, replicas: Mapping[int, RemoteReplicaState]):
    states = []
    for broker_id in sorted(isr):
        remote = replicas.get(broker_id)
        epoch = remote.broker_epoch if remote is not None and broker_id != leader_id else -1
        states.append(BrokerState(broker_id, epoch))
    return tuple(states)


def propose_expand(
    state: IsrState,
    replica_id: int,
    leader_id: int,
    leader_epoch: int,
    partition_epoch: int,
    replicas: Mapping[int, RemoteReplicaState],
    now_ms: int,
) -> PendingExpandIsr:
    proposal = AlterPartitionRequest(
        leader_id, leader_epoch, partition_epoch, _broker_states(state.isr | {replica_id}, leader_id, replicas)
    )
    return PendingExpandIsr(state.isr, replica_id, proposal, now_ms)


def propose_shrink(
    state: IsrState,
    out_of_sync: frozenset[int],
    leader_id: int,
    leader_epoch: int,
    partition_epoch: int,
    replicas: Mapping[int, RemoteReplicaState],
    now_ms: int,
) -> PendingShrinkIsr:
    proposal = AlterPartitionRequest(
        leader_id, leader_epoch, partition_epoch, _broker_states(state.isr - out_of_sync, leader_id, replicas)
    )
    return PendingShrinkIsr(state.isr, out_of_sync, proposal, now_ms)
