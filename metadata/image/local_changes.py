"""The broker-side hand-off: what a new image means for one broker's replicas.

Given the previous and the new image and a broker id, `local_replica_changes`
says which partitions this broker now leads, which it follows (each with the
registration to act on: leader, leader epoch, ISR, partition epoch) and which
it must delete (topic removed, or no longer a replica). A partition appears
only when its partition_epoch changed (or it is new), as Kafka's
TopicsDelta.localChanges does; the replica manager makes it a leader or a
follower at that leader epoch.

It compares the two images by identity first (unchanged shards and topics are
shared objects), so its cost follows the size of the change, not of the image.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kraftpy.metadata.image.metadata_image import MetadataImage, PartitionRegistration
from kraftpy.metadata.image.pmap import PVector


@dataclass(frozen=True, slots=True)
class LocalPartition:
    topic_name: str
    topic_id: uuid.UUID
    partition: int
    registration: PartitionRegistration

    @property
    def leader_epoch(self) -> int:
        return self.registration.leader_epoch


TopicIdPartition = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    leaders: dict[TopicIdPartition, LocalPartition] = field(default_factory=dict)
    followers: dict[TopicIdPartition, LocalPartition] = field(default_factory=dict)
    # partitions to stop and delete, with the topic name (the log directory is named after it)
    deleted: dict[TopicIdPartition, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.leaders or self.followers or self.deleted)


def local_replica_changes(old: MetadataImage, new: MetadataImage, broker_id: int) -> LocalReplicaChanges:
    changes = LocalReplicaChanges()
    if old.topics.by_id is new.topics.by_id:
        return changes
    for topic_id in new.topics.by_id.changed_keys(old.topics.by_id):
        before = old.topics.by_id.get(topic_id)
        after = new.topics.by_id.get(topic_id)
        old_parts = before.partitions if before is not None and before.topic_id == topic_id else PVector.EMPTY
        if after is None:
            for p, part in enumerate(old_parts):
                if broker_id in part.replicas:
                    changes.deleted[(topic_id, p)] = before.name  # type: ignore[union-attr]
            continue
        for p in after.partitions.changed_indices(old_parts):
            part = after.partitions[p]
            prev = old_parts[p] if p < len(old_parts) else None
            if broker_id in part.replicas:
                if prev is None or prev.partition_epoch != part.partition_epoch:
                    local = LocalPartition(after.name, topic_id, p, part)
                    target = changes.leaders if part.leader == broker_id else changes.followers
                    target[(topic_id, p)] = local
            elif prev is not None and broker_id in prev.replicas:
                changes.deleted[(topic_id, p)] = after.name
    return changes
