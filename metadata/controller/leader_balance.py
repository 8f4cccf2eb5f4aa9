"""Leadership the active controller restores on its own (pure decisions on an image).

- Preferred leaders: a partition whose first replica is usable and in the ISR
  (it came back and caught up) but does not lead. The controller moves such
  partitions back once they have waited `preferred_leader_election_delay_ms`
  (see metadata/controller/quorum_controller.py), so after a full restart leadership is spread again
  within that delay rather than at the next 300 s imbalance check.
- Unclean leaders: a leaderless partition whose topic allows unclean election
  gets any live replica as leader, as Kafka 3.9's periodic
  maybeElectUncleanLeaders does (data written only to the lost ISR is lost,
  which is what the topic's setting accepts).
"""

from __future__ import annotations

from kraftpy.metadata.controller.partition_change import Election
from kraftpy.metadata.controller.replication_control import partition_builder
from kraftpy.metadata.image.metadata_image import NO_LEADER, MetadataImage
from kraftpy.metadata.records import PartitionChangeRecord


def preferred_elections(image: MetadataImage, min_isr_default: int) -> list[PartitionChangeRecord]:
    """Changes moving leadership to each partition's preferred replica where it can lead and does not."""
    out: list[PartitionChangeRecord] = []
    for topic in image.topics.by_id.values():
        for pid, part in enumerate(topic.partitions):
            preferred = part.replicas[0] if part.replicas else NO_LEADER
            if part.leader == preferred or preferred not in part.isr or not image.is_usable(preferred):
                continue
            change = partition_builder(image, topic, pid, part, min_isr_default)
            record = change.set_election(Election.PREFERRED).build()
            if record is not None:
                out.append(record)
    return out


def unclean_elections(image: MetadataImage, min_isr_default: int) -> list[PartitionChangeRecord]:
    """Changes giving a leader to each leaderless partition whose topic allows unclean election."""
    out: list[PartitionChangeRecord] = []
    for topic in image.topics.by_id.values():
        leaderless = [(pid, part) for pid, part in enumerate(topic.partitions) if part.leader == NO_LEADER]
        if not leaderless or not image.topic_config_value(topic.name, "unclean_leader_election_enable"):
            continue
        for pid, part in leaderless:
            builder = partition_builder(image, topic, pid, part, min_isr_default)
            record = builder.set_unclean(True).build()
            if record is not None and record.leader not in (None, NO_LEADER):
                out.append(record)
    return out
