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
