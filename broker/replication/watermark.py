"""The leader's high-watermark rule, in one function.

Design notes: docs/replication.md, section "broker/replication/watermark.py".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kraftpy.broker.replication.model import UNKNOWN_OFFSET
from kraftpy.broker.replication.replica import RemoteReplicaState


def compute_high_watermark(
    current_high_watermark: int,
    leader_id: int,
    leader_end_offset: int,
    maximal_isr: Iterable[int],
    replicas: Mapping[int, RemoteReplicaState],
) -> int:
    candidate = leader_end_offset
    for broker_id in maximal_isr:
        if broker_id == leader_id:
            continue
        replica = replicas.get(broker_id)
        leo = replica.log_end_offset if replica is not None else UNKNOWN_OFFSET
        if leo < candidate:
            candidate = leo
    return max(current_high_watermark, candidate)


def min_isr_reached(isr_size: int, min_insync_replicas: int, replica_count: int) -> bool:
    """Whether the leader's high watermark may advance (Kafka 4.x, KIP-966): only while the committed
    ISR holds at least min.insync.replicas members (capped by the replica count). Below it the HW
    stands still, so every replica that leaves such an ISR holds every committed record: the
    controller keeps them as eligible leader replicas and may elect one of them."""
    return isr_size >= min(min_insync_replicas, replica_count)
