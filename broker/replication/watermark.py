"""The leader's high-watermark rule, in one function.

Design notes: docs/replication.md, section "broker/replication/watermark.py".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from kraftpy.broker.replication.model import UNKNOWN_OFFSET
from kraftpy.broker.replication.replica import RemoteReplicaState


def effective_min_isr(min_insync_replicas: int, replica_count: int) -> int:
    """Kafka's effectiveMinIsr: min.insync.replicas may exceed the replication factor (nothing forbids
    it), and a partition cannot have more in-sync replicas than replicas."""
    return min(min_insync_replicas, replica_count)


def compute_high_watermark(
    current_high_watermark: int,
    leader_id: int,
    leader_end_offset: int,
    committed_isr: Collection[int],
    maximal_isr: Iterable[int],
    replicas: Mapping[int, RemoteReplicaState],
    min_isr: int,
) -> int:
    """The leader's new HW; `min_isr` is the effective min ISR (`effective_min_isr`).

    Below min ISR (counted on the committed ISR, as Kafka 4.x's isUnderMinIsr) the HW stands still,
    whatever acks wrote the records: a replica that leaves such an ISR then holds every committed
    record, so the controller may keep it as an eligible leader replica (KIP-966) and elect it.
    """
    if len(committed_isr) < min_isr:
        return current_high_watermark
    candidate = leader_end_offset
    for broker_id in maximal_isr:
        if broker_id == leader_id:
            continue
        replica = replicas.get(broker_id)
        leo = replica.log_end_offset if replica is not None else UNKNOWN_OFFSET
        if leo < candidate:
            candidate = leo
    return max(current_high_watermark, candidate)
