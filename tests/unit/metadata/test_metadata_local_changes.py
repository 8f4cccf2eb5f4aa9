"""The broker-side hand-off: which partitions a broker now leads, follows or must delete."""

from __future__ import annotations

import uuid

from kraftpy.metadata.image.local_changes import local_replica_changes
from kraftpy.metadata.image.metadata_delta import apply_records
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import (
    ConfigRecord,
    Listener,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def base() -> MetadataImage:
    records: list[MetadataRecord] = []
    for b in range(3):
        records += [RegisterBrokerRecord(b, f"i{b}", b + 1, (Listener("P", "h", 1),)), UnfenceBrokerRecord(b, b + 1)]
    records += [TopicRecord("a", T1)]
    records += [PartitionRecord(T1, p, r, r, r[0]) for p, r in enumerate([(0, 1), (1, 2), (2, 0)])]
    return apply_records(MetadataImage.EMPTY, records)


def test_new_topic_gives_leaders_and_followers() -> None:
    image = base()
    changes = local_replica_changes(MetadataImage.EMPTY, image, 0)
    assert set(changes.leaders) == {(T1, 0)} and set(changes.followers) == {(T1, 2)} and not changes.deleted
    local = changes.leaders[(T1, 0)]
    assert (local.topic_name, local.partition, local.leader_epoch) == ("a", 0, 0)


def test_leader_change_moves_a_partition_between_sets() -> None:
    old = base()
    new = apply_records(old, [PartitionChangeRecord(T1, 0, leader=1, isr=(1,))])
    assert set(local_replica_changes(old, new, 0).followers) == {(T1, 0)}
    moved = local_replica_changes(old, new, 1)
    assert set(moved.leaders) == {(T1, 0)} and moved.leaders[(T1, 0)].leader_epoch == 1
    assert not local_replica_changes(old, new, 2)  # broker 2 does not replicate partition 0


def test_isr_only_change_is_reported_to_the_leader_with_the_same_epoch() -> None:
    old = base()
    new = apply_records(old, [PartitionChangeRecord(T1, 1, isr=(1,))])
    changes = local_replica_changes(old, new, 1)
    assert changes.leaders[(T1, 1)].registration.isr == (1,) and changes.leaders[(T1, 1)].leader_epoch == 0


def test_removed_topic_is_deleted_and_unrelated_changes_are_ignored() -> None:
    old = base()
    assert not local_replica_changes(old, apply_records(old, [ConfigRecord(2, "a", "retention_ms", 1)]), 0)
    new = apply_records(old, [RemoveTopicRecord(T1), TopicRecord("b", T2), PartitionRecord(T2, 0, (2,), (2,), 2)])
    changes = local_replica_changes(old, new, 0)
    assert changes.deleted == {(T1, 0): "a", (T1, 2): "a"} and not changes.leaders and not changes.followers
    assert set(local_replica_changes(old, new, 2).leaders) == {(T2, 0)}
