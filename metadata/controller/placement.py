"""Replica placement: striped, rack-aware assignment of new partitions to brokers.

Design notes: docs/metadata.md, section "metadata/controller/placement.py".
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from kraftpy.protocol.errors import ErrorCode, KafkaError


@dataclass(frozen=True, slots=True)
class PlacementBroker:
    broker_id: int
    rack: str | None = None


def place_replicas(
    brokers: Sequence[PlacementBroker],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
    start_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions `start_partition ..`; the first of each is the preferred leader."""
    if replication_factor < 1:
        raise KafkaError("Replication factor must be larger than 0", ErrorCode.INVALID_REPLICATION_FACTOR)
    if replication_factor > len(brokers):
        raise KafkaError(
            f"Unable to replicate the partition {replication_factor} time(s): the target replication factor "
            f"of {replication_factor} cannot be reached because only {len(brokers)} broker(s) are registered "
            "and unfenced",
            ErrorCode.INVALID_REPLICATION_FACTOR,
        )
    if num_partitions <= 0:
        return []
    ordered = sorted(brokers, key=lambda b: b.broker_id)
    if any(b.rack is not None for b in ordered):
        return _rack_aware(ordered, num_partitions, replication_factor, rng, start_partition)
    return _rack_unaware([b.broker_id for b in ordered], num_partitions, replication_factor, rng, start_partition)


def _leader_slots(n: int, num_partitions: int, rng: random.Random, start_partition: int) -> list[tuple[int, int]]:
    """(index of the leader, replica shift) per partition, Kafka's: a random start, and a shift
    that grows by one each time the partitions wrap around the n brokers. Draws from `rng` even
    for no partitions, as the placement always has."""
    start = rng.randrange(n)
    shift = rng.randrange(n)
    slots = []
    for pid in range(start_partition, start_partition + num_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        slots.append(((pid + start) % n, shift))
    return slots


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_unaware(
    ids: list[int], num_partitions: int, rf: int, rng: random.Random, start_partition: int
) -> list[tuple[int, ...]]:
    n = len(ids)
    return [
        (ids[first], *(ids[_replica_index(first, shift, j, n)] for j in range(rf - 1)))
        for first, shift in _leader_slots(n, num_partitions, rng, start_partition)
    ]


def rack_alternated(brokers: Sequence[PlacementBroker]) -> list[PlacementBroker]:
    """Brokers interleaved by rack: one from each rack in turn (racks sorted, None last)."""
    by_rack: dict[str | None, list[PlacementBroker]] = {}
    for b in sorted(brokers, key=lambda b: b.broker_id):
        by_rack.setdefault(b.rack, []).append(b)
    racks = sorted(by_rack, key=lambda r: (r is None, r or ""))
    out: list[PlacementBroker] = []
    depth = 0
    while len(out) < len(brokers):
        for rack in racks:
            if depth < len(by_rack[rack]):
                out.append(by_rack[rack][depth])
        depth += 1
    return out


def _rack_aware(
    brokers: list[PlacementBroker], num_partitions: int, rf: int, rng: random.Random, start_partition: int
) -> list[tuple[int, ...]]:
    arranged = rack_alternated(brokers)
    n = len(arranged)
    num_racks = len({b.rack for b in arranged})
    out = []
    for first, shift in _leader_slots(n, num_partitions, rng, start_partition):
        leader = arranged[first]
        replicas = [leader.broker_id]
        racks = {leader.rack}
        used = {leader.broker_id}
        k = 0
        while len(replicas) < rf:
            b = arranged[_replica_index(first, shift * num_racks, k, n)]
            k += 1
            if b.broker_id in used:
                continue
            if b.rack in racks and len(racks) < num_racks:
                continue
            replicas.append(b.broker_id)
            racks.add(b.rack)
            used.add(b.broker_id)
        out.append(tuple(replicas))
    return out
