"""PartitionChangeBuilder alone: what an election may not do by default, what an offline partition
remembers, and that the partition it resolves to is its record applied (one rule for the epochs)."""

from __future__ import annotations

import uuid

from kraftpy.metadata.controller.partition_change import PartitionChangeBuilder, merged
from kraftpy.metadata.image.metadata_image import NO_LEADER, PartitionRegistration

TOPIC = uuid.UUID(int=7)


def builder(part: PartitionRegistration, usable: set[int], min_isr: int = 2) -> PartitionChangeBuilder:
    return PartitionChangeBuilder(TOPIC, 0, part, lambda b: b in usable, min_isr=min_isr)


def test_without_unclean_leader_election_no_replica_outside_the_isr_is_elected() -> None:
    part = PartitionRegistration((1, 2, 3), (1,), 1, 4, 9, (), ())
    offline = builder(part, usable={2, 3}).resolve()
    assert offline.leader == NO_LEADER and offline.isr == (1,)
    unclean = builder(part, usable={2, 3}).set_unclean(True).resolve()
    assert unclean.leader == 2 and unclean.isr == (2,)


def test_an_offline_partition_that_keeps_its_isr_records_no_last_known_leader() -> None:
    part = PartitionRegistration((1, 2, 3), (1, 2), 1, 4, 9, (), ())
    after = builder(part, usable=set()).resolve()
    assert after.leader == NO_LEADER and after.isr == (1, 2) and after.last_known_elr == ()
    emptied = builder(part, usable=set()).set_target_isr(()).resolve()
    assert emptied.leader == NO_LEADER and emptied.last_known_elr == (1,)  # Kafka's balanced recovery


def test_the_resolved_partition_is_the_record_applied() -> None:
    part = PartitionRegistration((1, 2, 3), (1, 2, 3), 1, 4, 9, (), ())
    for change in (
        builder(part, usable={2, 3}).without(1),  # an election: leader epoch and partition epoch move
        builder(part, usable={1, 2, 3}).without(3),  # an ISR change: only the partition epoch moves
        builder(part, usable={1, 2, 3}),  # nothing: no record, nothing moves
    ):
        assert change.resolve() == merged(part, change.build())
    elected = builder(part, usable={2, 3}).without(1).resolve()
    assert (elected.leader, elected.leader_epoch, elected.partition_epoch) == (2, 5, 10)
    shrunk = builder(part, usable={1, 2, 3}).without(3).resolve()
    assert (shrunk.leader, shrunk.leader_epoch, shrunk.partition_epoch, shrunk.isr) == (1, 4, 10, (1, 2))
