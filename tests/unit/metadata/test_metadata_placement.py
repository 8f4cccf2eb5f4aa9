"""Replica placement: striped leaders, spread followers, racks respected, never a broker twice."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.metadata.controller.placement import PlacementBroker, place_replicas, rack_alternated
from kraftpy.protocol.errors import ErrorCode, KafkaError


def brokers(n: int, racks: int = 0) -> list[PlacementBroker]:
    return [PlacementBroker(b, f"rack{b % racks}" if racks else None) for b in range(n)]


def test_leaders_and_replicas_spread_evenly() -> None:
    assignment = place_replicas(brokers(5), 50, 3, random.Random(1))
    assert all(len(set(r)) == 3 for r in assignment)
    assert set(Counter(r[0] for r in assignment).values()) == {10}
    assert set(Counter(b for r in assignment for b in r).values()) == {30}


class _FixedStart(random.Random):
    """Draws 0 for the start broker and the first shift, as Kafka's tests fix them."""

    def randrange(self, *args: int, **kwargs: int) -> int:  # type: ignore[override]
        return 0


def test_rack_unaware_placement_is_kafkas() -> None:
    """Kafka's AdminUtils placement with a fixed start and shift (its testReplicaAssignment table):
    leaders striped from broker 0, followers shifted by one more each time the partitions wrap."""
    assignment = place_replicas(brokers(5), 10, 3, _FixedStart())
    assert assignment == [
        (0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1),
        (0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2),
    ]  # fmt: skip
    # partitions added later continue the stripe and the shifts where the first ones left them
    assert place_replicas(brokers(5), 5, 3, _FixedStart(), start_partition=5) == assignment[5:]


def test_rack_aware_puts_each_replica_on_another_rack() -> None:
    rack_of = {b.broker_id: b.rack for b in brokers(6, racks=3)}
    assignment = place_replicas(brokers(6, racks=3), 60, 3, random.Random(2))
    assert all(len({rack_of[b] for b in r}) == 3 for r in assignment)
    assert set(Counter(r[0] for r in assignment).values()) == {10}


def test_more_replicas_than_racks_uses_every_rack_first() -> None:
    rack_of = {b.broker_id: b.rack for b in brokers(6, racks=2)}
    for r in place_replicas(brokers(6, racks=2), 30, 3, random.Random(3)):
        assert len(set(r)) == 3 and len({rack_of[b] for b in r}) == 2


def test_rack_alternated_order() -> None:
    order = rack_alternated(
        [PlacementBroker(0, "a"), PlacementBroker(1, "a"), PlacementBroker(2, "b"), PlacementBroker(3, None)]
    )
    assert [b.broker_id for b in order] == [0, 2, 3, 1]
    # racks in name order, whatever the brokers' order (Kafka sorts them too)
    order = rack_alternated([PlacementBroker(0, "rb"), PlacementBroker(1, "ra"), PlacementBroker(2, "rb")])
    assert [b.broker_id for b in order] == [1, 0, 2]


def test_too_few_brokers_is_invalid_replication_factor() -> None:
    with pytest.raises(KafkaError) as info:
        place_replicas(brokers(2), 1, 3, random.Random(0))
    assert info.value.code == ErrorCode.INVALID_REPLICATION_FACTOR and "only 2 broker(s)" in info.value.message


@given(
    st.integers(1, 9),
    st.integers(0, 4),
    st.integers(1, 40),
    st.integers(1, 9),
    st.integers(0, 2**32),
    st.integers(0, 20),
)
def test_never_two_replicas_on_one_broker_and_racks_respected(n, racks, partitions, rf, seed, start) -> None:
    rf = min(rf, n)
    pool = brokers(n, racks)
    assignment = place_replicas(pool, partitions, rf, random.Random(seed), start_partition=start)
    rack_of = {b.broker_id: b.rack for b in pool}
    distinct_racks = len(set(rack_of.values()))
    assert len(assignment) == partitions
    for replicas in assignment:
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(rack_of)
        assert len({rack_of[b] for b in replicas}) == min(rf, distinct_racks)
