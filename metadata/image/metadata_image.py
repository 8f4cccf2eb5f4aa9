"""The metadata image: an immutable view of all cluster metadata at one log offset.

Design notes: docs/metadata.md, section "metadata/image/metadata_image.py".
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from kraftpy.metadata import configs as configs_mod
from kraftpy.metadata.configs import ConfigResourceType
from kraftpy.metadata.image.pmap import PMap, PVector
from kraftpy.metadata.records import Listener

NO_LEADER = -1


class PartitionRegistration(NamedTuple):
    """One partition's replica set and leadership (a tuple, so it is cheap to create and share)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    # KIP-966 (docs/replication.md, "Eligible leader replicas"): replicas out of the ISR that hold
    # every committed record, and the leader the partition had when its ISR became empty.
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    listeners: tuple[Listener, ...]
    rack: str | None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    # Offset of the RegisterBroker record in the metadata log, -1 while uncommitted. A broker
    # counts as caught up once its metadata offset reaches it (as KRaft's heartbeat manager does).
    registration_offset: int = -1

    @property
    def usable(self) -> bool:
        """Eligible to lead and to receive new replicas: unfenced and not shutting down."""
        return not self.fenced and not self.in_controlled_shutdown


@dataclass(frozen=True, slots=True)
class ClusterImage:
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=dict)
    next_broker_epoch: int = 1

    def usable_brokers(self) -> list[BrokerRegistration]:
        return sorted((b for b in self.brokers.values() if b.usable), key=lambda b: b.broker_id)


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: PVector[PartitionRegistration] = field(default_factory=lambda: PVector.EMPTY)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


def collision_key(name: str) -> str:
    return name.replace(".", "_")


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


@dataclass(frozen=True, slots=True)
class TopicsImage:
    by_id: PMap[uuid.UUID, TopicImage] = field(default_factory=lambda: PMap.EMPTY)
    by_name: PMap[str, uuid.UUID] = field(default_factory=lambda: PMap.EMPTY)
    # Derived: names containing '.' or '_', grouped by collision_key(name).
    by_collision_key: PMap[str, frozenset[str]] = field(default_factory=lambda: PMap.EMPTY)
    # Derived: broker id -> topic id -> sorted partition ids the broker replicates.
    replicas_by_broker: Mapping[int, PMap[uuid.UUID, tuple[int, ...]]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.by_id)

    def get(self, name: str) -> TopicImage | None:
        topic_id = self.by_name.get(name)
        return None if topic_id is None else self.by_id[topic_id]

    def colliding_names(self, name: str) -> list[str]:
        """Existing topic names that differ from `name` only in '.' versus '_'."""
        if not has_collision_chars(name):
            return []
        return sorted(n for n in self.by_collision_key.get(collision_key(name), ()) if n != name)

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.by_id.values())


@dataclass(frozen=True, slots=True)
class ConfigurationsImage:
    # (resource type, resource name) -> {config name: value}; only overrides are stored.
    resources: PMap[tuple[int, str], Mapping[str, Any]] = field(default_factory=lambda: PMap.EMPTY)

    def get(self, resource_type: ConfigResourceType | int, name: str) -> Mapping[str, Any]:
        return self.resources.get((int(resource_type), name), _EMPTY)


_EMPTY: Mapping[str, Any] = {}


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    next_producer_id: int = 0


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """All metadata as of `offset` (the last applied record's log offset) in Raft `epoch`."""

    offset: int = -1
    epoch: int = -1
    cluster: ClusterImage = field(default_factory=ClusterImage)
    topics: TopicsImage = field(default_factory=TopicsImage)
    configs: ConfigurationsImage = field(default_factory=ConfigurationsImage)
    producer_ids: ProducerIdsImage = field(default_factory=ProducerIdsImage)
    registers: PMap[str, int] = field(default_factory=lambda: PMap.EMPTY)  # the linearizable registers' values

    EMPTY: ClassVar[MetadataImage]  # set below: the image of an empty log

    # --- brokers ---------------------------------------------------------------------------
    @property
    def brokers(self) -> Mapping[int, BrokerRegistration]:
        return self.cluster.brokers

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.cluster.brokers.get(broker_id)

    def is_usable(self, broker_id: int) -> bool:
        b = self.cluster.brokers.get(broker_id)
        return b is not None and b.usable

    # --- topics and partitions --------------------------------------------------------------
    def topic(self, name: str) -> TopicImage | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.topics.by_id.get(topic_id)

    def partition(self, topic_id: uuid.UUID, partition: int) -> PartitionRegistration | None:
        topic = self.topics.by_id.get(topic_id)
        if topic is None or not 0 <= partition < len(topic.partitions):
            return None
        return topic.partitions[partition]

    def partitions_on_broker(self, broker_id: int) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
        """Every partition that `broker_id` replicates, via the replica index (no full scan)."""
        index = self.topics.replicas_by_broker.get(broker_id)
        if index is None:
            return
        by_id = self.topics.by_id
        for topic_id, partition_ids in index.items():
            topic = by_id[topic_id]
            for p in partition_ids:
                yield topic, p, topic.partitions[p]

    def leads_any(self, broker_id: int) -> bool:
        return any(part.leader == broker_id for _, _, part in self.partitions_on_broker(broker_id))

    # --- configs -----------------------------------------------------------------------------
    def topic_config_overrides(self, name: str) -> Mapping[str, Any]:
        return self.configs.get(ConfigResourceType.TOPIC, name)

    def broker_config_overrides(self, name: str = "") -> Mapping[str, Any]:
        """Overrides on a broker resource; "" is the cluster-wide default broker resource."""
        return self.configs.get(ConfigResourceType.BROKER, name)

    def topic_config(self, name: str) -> dict[str, Any]:
        """Every config of topic `name` with its effective value (topic > broker default > Kafka)."""
        return configs_mod.effective(self.topic_config_overrides(name), self.broker_config_overrides(""))

    def topic_config_value(self, topic: str, key: str) -> Any:
        return configs_mod.resolve(key, self.topic_config_overrides(topic), self.broker_config_overrides(""))[0]

    def min_insync_replicas(self, topic: str, static_default: int) -> int:
        """The topic's min.insync.replicas: its override, the cluster's dynamic default, else the node's
        static setting (`static_default`: the node config's min_insync_replicas, as Kafka's)."""
        value, source = configs_mod.resolve(
            "min_insync_replicas", self.topic_config_overrides(topic), self.broker_config_overrides("")
        )
        return static_default if source == configs_mod.ConfigSource.DEFAULT else int(value)

    # --- snapshots -----------------------------------------------------------------------------
    def encode(self) -> bytes:
        """The image as snapshot bytes (deterministic: equal images give equal bytes)."""
        from kraftpy.metadata.image.snapshot import encode_image

        return encode_image(self)

    @staticmethod
    def decode(data: bytes) -> MetadataImage:
        from kraftpy.metadata.image.snapshot import decode_image

        return decode_image(data)


MetadataImage.EMPTY = MetadataImage()
