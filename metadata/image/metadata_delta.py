"""MetadataDelta: replay records on top of an image, then build the next image.

Design notes: docs/metadata.md, section "metadata/image/metadata_delta.py".
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from kraftpy.metadata.bulk import gc_paused
from kraftpy.metadata.configs import ConfigResourceType
from kraftpy.metadata.controller.partition_change import merged
from kraftpy.metadata.image.metadata_image import (
    NO_LEADER,
    BrokerRegistration,
    ClusterImage,
    ConfigurationsImage,
    MetadataImage,
    PartitionRegistration,
    ProducerIdsImage,
    TopicImage,
    TopicsImage,
    collision_key,
    has_collision_chars,
)
from kraftpy.metadata.image.pmap import PMap, PVector
from kraftpy.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FenceBrokerRecord,
    MetadataRecord,
    MetadataRecordError,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterValueRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

_REMOVED = None


def check_partition(p: PartitionRegistration, where: str) -> PartitionRegistration:
    """The invariants every partition keeps; a violation means a corrupt log or a controller bug."""
    replicas, isr = p.replicas, p.isr
    distinct_replicas = len(set(replicas)) == len(replicas) > 0
    if not distinct_replicas:
        raise MetadataRecordError(f"{where}: replicas {list(replicas)} must be non-empty and distinct")
    if isr != replicas and not (len(set(isr)) == len(isr) and set(isr) <= set(replicas)):
        raise MetadataRecordError(f"{where}: isr {list(isr)} must be a distinct subset of {list(replicas)}")
    if p.leader != NO_LEADER and p.leader not in isr:
        raise MetadataRecordError(f"{where}: leader {p.leader} is not in isr {list(isr)}")
    # An empty ISR comes only with no leader (KIP-966: the last member was fenced or restarted uncleanly).
    if p.elr or p.last_known_elr:
        elr, known = p.elr, p.last_known_elr
        if len(set(elr)) != len(elr) or not set(elr) <= set(replicas) or set(elr) & set(isr):
            raise MetadataRecordError(
                f"{where}: elr {list(elr)} must be distinct replicas of {list(replicas)} outside isr {list(isr)}"
            )
        if len(set(known)) != len(known) or not set(known) <= set(replicas):
            raise MetadataRecordError(f"{where}: last_known_elr {list(known)} must be distinct replicas")
    return p


@dataclass(slots=True)
class _TopicDraft:
    name: str
    topic_id: uuid.UUID
    base: TopicImage | None
    changed: dict[int, PartitionRegistration] = field(default_factory=dict)
    size: int = 0  # partitions after the changes (kept as records arrive: no gaps allowed)

    def __post_init__(self) -> None:
        self.size = len(self.base.partitions) if self.base is not None else 0

    def count(self) -> int:
        return self.size

    def put(self, partition: int, registration: PartitionRegistration) -> None:
        self.changed[partition] = registration
        if partition == self.size:
            self.size += 1

    def get(self, partition: int) -> PartitionRegistration | None:
        got = self.changed.get(partition)
        if got is None and self.base is not None and 0 <= partition < len(self.base.partitions):
            got = self.base.partitions[partition]
        return got


class MetadataDelta:
    """Changes on top of `image`; `replay` records in log order, then `apply()` once."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._brokers: dict[int, BrokerRegistration | None] = {}
        self._next_broker_epoch = image.cluster.next_broker_epoch
        self._topics: dict[uuid.UUID, _TopicDraft] = {}
        self._removed: dict[uuid.UUID, TopicImage] = {}  # topics of the base image removed here
        self._new_names: dict[str, uuid.UUID] = {}
        self._configs: dict[tuple[int, str], dict[str, Any] | None] = {}
        self._next_producer_id = image.producer_ids.next_producer_id
        self._registers: dict[str, int] = {}
        self._last_offset: int | None = None
        self._handlers: dict[type, Callable[[Any, int | None], None]] = {
            RegisterBrokerRecord: self._register_broker,
            UnregisterBrokerRecord: self._unregister_broker,
            FenceBrokerRecord: self._fence_broker,
            UnfenceBrokerRecord: self._unfence_broker,
            BrokerRegistrationChangeRecord: self._broker_registration_change,
            TopicRecord: self._topic,
            PartitionRecord: self._partition,
            PartitionChangeRecord: self._partition_change,
            RemoveTopicRecord: self._remove_topic,
            ConfigRecord: self._config,
            ProducerIdsRecord: self._producer_ids,
            RegisterValueRecord: self._register_value,
            NoOpRecord: lambda record, offset: None,
        }

    # --- reads through the delta ---------------------------------------------------------------
    def broker(self, broker_id: int) -> BrokerRegistration | None:
        if broker_id in self._brokers:
            return self._brokers[broker_id]
        return self.image.cluster.brokers.get(broker_id)

    def topic_draft(self, topic_id: uuid.UUID) -> _TopicDraft | None:
        draft = self._topics.get(topic_id)
        if draft is None and topic_id not in self._removed:
            base = self.image.topics.by_id.get(topic_id)
            if base is not None:
                draft = self._topics[topic_id] = _TopicDraft(base.name, topic_id, base)
        return draft

    def topic_id(self, name: str) -> uuid.UUID | None:
        if name in self._new_names:
            return self._new_names[name]
        topic_id = self.image.topics.by_name.get(name)
        return None if topic_id is None or topic_id in self._removed else topic_id

    # --- replay --------------------------------------------------------------------------------
    def replay(self, record: MetadataRecord, offset: int | None = None) -> None:
        """Apply one record; `offset` is its log offset (None for not-yet-committed records)."""
        handler = self._handlers.get(type(record))
        if handler is None:
            raise MetadataRecordError(f"no replay rule for {type(record).__name__}")
        handler(record, offset)
        if offset is not None:
            self._last_offset = offset

    def _existing_broker(self, broker_id: int, epoch: int, what: str) -> BrokerRegistration:
        current = self.broker(broker_id)
        if current is None:
            raise MetadataRecordError(f"{what} for broker {broker_id}, which is not registered")
        if current.broker_epoch != epoch:
            raise MetadataRecordError(
                f"{what} for broker {broker_id} at epoch {epoch}, but its epoch is {current.broker_epoch}"
            )
        return current

    def _register_broker(self, r: RegisterBrokerRecord, offset: int | None) -> None:
        self._brokers[r.broker_id] = BrokerRegistration(
            r.broker_id, r.incarnation_id, r.broker_epoch, r.listeners, r.rack,
            fenced=True, in_controlled_shutdown=False, registration_offset=-1 if offset is None else offset,
        )  # fmt: skip
        self._next_broker_epoch = max(self._next_broker_epoch, r.broker_epoch + 1)

    def _unregister_broker(self, r: UnregisterBrokerRecord, offset: int | None) -> None:
        self._existing_broker(r.broker_id, r.broker_epoch, "UnregisterBroker")
        self._brokers[r.broker_id] = _REMOVED

    def _set_flags(self, b: BrokerRegistration, fenced: bool | None, shutdown: bool | None) -> None:
        self._brokers[b.broker_id] = BrokerRegistration(
            b.broker_id, b.incarnation_id, b.broker_epoch, b.listeners, b.rack,
            fenced=b.fenced if fenced is None else fenced,
            in_controlled_shutdown=b.in_controlled_shutdown if shutdown is None else shutdown,
            registration_offset=b.registration_offset,
        )  # fmt: skip

    def _fence_broker(self, r: FenceBrokerRecord, offset: int | None) -> None:
        self._set_flags(self._existing_broker(r.broker_id, r.broker_epoch, "FenceBroker"), True, None)

    def _unfence_broker(self, r: UnfenceBrokerRecord, offset: int | None) -> None:
        self._set_flags(self._existing_broker(r.broker_id, r.broker_epoch, "UnfenceBroker"), False, False)

    def _broker_registration_change(self, r: BrokerRegistrationChangeRecord, offset: int | None) -> None:
        b = self._existing_broker(r.broker_id, r.broker_epoch, "BrokerRegistrationChange")
        self._set_flags(b, r.fenced, r.in_controlled_shutdown)

    def _topic(self, r: TopicRecord, offset: int | None) -> None:
        if self.topic_id(r.name) is not None:
            raise MetadataRecordError(f"Topic record for {r.name!r}, which already exists")
        if r.topic_id in self._topics or r.topic_id in self.image.topics.by_id:
            raise MetadataRecordError(f"Topic record for {r.name!r} reuses topic id {r.topic_id}")
        self._topics[r.topic_id] = _TopicDraft(r.name, r.topic_id, None)
        self._new_names[r.name] = r.topic_id

    def _partition(self, r: PartitionRecord, offset: int | None) -> None:
        draft = self.topic_draft(r.topic_id)
        if draft is None:
            raise MetadataRecordError(f"Partition record for unknown topic id {r.topic_id}")
        if not 0 <= r.partition <= draft.count():
            raise MetadataRecordError(
                f"Partition record {draft.name}-{r.partition} leaves a gap (topic has {draft.count()})"
            )
        part = PartitionRegistration(
            r.replicas, r.isr, r.leader, r.leader_epoch, r.partition_epoch, r.elr, r.last_known_elr
        )
        draft.put(r.partition, check_partition(part, f"partition {draft.name}-{r.partition}"))

    def _partition_change(self, r: PartitionChangeRecord, offset: int | None) -> None:
        draft = self.topic_draft(r.topic_id)
        current = None if draft is None else draft.get(r.partition)
        if draft is None or current is None:
            raise MetadataRecordError(f"PartitionChange for unknown partition {r.topic_id}-{r.partition}")
        draft.put(r.partition, check_partition(merged(current, r), f"partition {draft.name}-{r.partition}"))

    def _remove_topic(self, r: RemoveTopicRecord, offset: int | None) -> None:
        draft = self.topic_draft(r.topic_id)
        if draft is None:
            raise MetadataRecordError(f"RemoveTopic for unknown topic id {r.topic_id}")
        del self._topics[r.topic_id]
        if draft.base is not None:
            self._removed[r.topic_id] = draft.base
        if self._new_names.get(draft.name) == r.topic_id:
            del self._new_names[draft.name]
        self._configs[(int(ConfigResourceType.TOPIC), draft.name)] = _REMOVED

    def _config(self, r: ConfigRecord, offset: int | None) -> None:
        key = (r.resource_type, r.resource_name)
        base = self._configs[key] if key in self._configs else self.image.configs.resources.get(key)
        current = dict(base or {})
        if r.value is None:
            current.pop(r.name, None)
        else:
            current[r.name] = r.value
        self._configs[key] = current or _REMOVED

    def _producer_ids(self, r: ProducerIdsRecord, offset: int | None) -> None:
        if r.next_producer_id <= self._next_producer_id:
            raise MetadataRecordError(
                f"ProducerIds record moves next_producer_id backwards ({self._next_producer_id} -> "
                f"{r.next_producer_id})"
            )
        self._next_producer_id = r.next_producer_id

    def _register_value(self, r: RegisterValueRecord, offset: int | None) -> None:
        self._registers[r.key] = r.value

    # --- building the next image ---------------------------------------------------------------
    def apply(self, offset: int | None = None, epoch: int | None = None) -> MetadataImage:
        """The next image. `offset`/`epoch` default to the last replayed offset and the base epoch."""
        image = self.image
        if offset is None:
            offset = image.offset if self._last_offset is None else self._last_offset
        with gc_paused():
            return self._build(image, offset, epoch)

    def _build(self, image: MetadataImage, offset: int, epoch: int | None) -> MetadataImage:
        return MetadataImage(
            offset=offset,
            epoch=image.epoch if epoch is None else epoch,
            cluster=self._apply_cluster(image.cluster),
            topics=self._apply_topics(image.topics),
            configs=self._apply_configs(image.configs),
            producer_ids=(
                image.producer_ids
                if self._next_producer_id == image.producer_ids.next_producer_id
                else ProducerIdsImage(self._next_producer_id)
            ),
            registers=PMap.from_dict({**image.registers, **self._registers}) if self._registers else image.registers,
        )

    def _apply_cluster(self, cluster: ClusterImage) -> ClusterImage:
        if not self._brokers and self._next_broker_epoch == cluster.next_broker_epoch:
            return cluster
        brokers = dict(cluster.brokers)
        for broker_id, registration in self._brokers.items():
            if registration is None:
                brokers.pop(broker_id, None)
            else:
                brokers[broker_id] = registration
        return ClusterImage(brokers, self._next_broker_epoch)

    def _apply_topics(self, topics: TopicsImage) -> TopicsImage:
        if not self._topics and not self._removed:
            return topics
        by_id = topics.by_id.builder()
        by_name = topics.by_name.builder()
        collisions = topics.by_collision_key.builder()
        index = _ReplicaIndexBuilder(topics.replicas_by_broker)
        for topic_id, old in self._removed.items():
            by_id.pop(topic_id)
            by_name.pop(old.name)
            if has_collision_chars(old.name):
                key = collision_key(old.name)
                rest = collisions[key] - {old.name}
                if rest:
                    collisions[key] = rest
                else:
                    collisions.pop(key)
            for broker_id in {b for p in old.partitions for b in p.replicas}:
                index.set(broker_id, topic_id, ())
        for topic_id, draft in self._topics.items():
            if not draft.changed and draft.base is not None:
                continue
            base_parts = draft.base.partitions if draft.base is not None else PVector.EMPTY
            new_topic = TopicImage(draft.name, topic_id, base_parts.evolve(draft.changed))
            by_id[topic_id] = new_topic
            if draft.base is None:
                by_name[draft.name] = topic_id
                if has_collision_chars(draft.name):
                    key = collision_key(draft.name)
                    collisions[key] = collisions.get(key, frozenset()) | {draft.name}
            # Replica index: only partitions whose replica set is new or changed matter.
            touched: dict[int, tuple[set[int], set[int]]] = {}
            for p, registration in draft.changed.items():
                before = base_parts[p].replicas if p < len(base_parts) else ()
                if before == registration.replicas:
                    continue
                for b in registration.replicas:
                    if b not in before:
                        touched.setdefault(b, (set(), set()))[0].add(p)
                for b in before:
                    if b not in registration.replicas:
                        touched.setdefault(b, (set(), set()))[1].add(p)
            for broker_id, (added, removed) in touched.items():
                current = set(index.get(broker_id, topic_id))
                index.set(broker_id, topic_id, tuple(sorted((current - removed) | added)))
        return TopicsImage(by_id.build(), by_name.build(), collisions.build(), index.build())

    def _apply_configs(self, configs: ConfigurationsImage) -> ConfigurationsImage:
        if not self._configs:
            return configs
        resources = configs.resources.builder()
        for key, values in self._configs.items():
            if values is None:
                resources.pop(key)
            else:
                resources[key] = values
        return ConfigurationsImage(resources.build())


class _ReplicaIndexBuilder:
    """Copy-on-write edits of broker -> PMap(topic id -> partition ids)."""

    def __init__(self, base: Mapping[int, PMap[uuid.UUID, tuple[int, ...]]]) -> None:
        self._base = base
        self._builders: dict[int, Any] = {}

    def get(self, broker_id: int, topic_id: uuid.UUID) -> tuple[int, ...]:
        builder = self._builders.get(broker_id)
        if builder is not None:
            return builder.get(topic_id, ())
        return self._base.get(broker_id, PMap.EMPTY).get(topic_id, ())

    def set(self, broker_id: int, topic_id: uuid.UUID, partitions: tuple[int, ...]) -> None:
        builder = self._builders.get(broker_id)
        if builder is None:
            builder = self._builders[broker_id] = self._base.get(broker_id, PMap.EMPTY).builder()
        if partitions:
            builder[topic_id] = partitions
        else:
            builder.pop(topic_id)

    def build(self) -> Mapping[int, PMap[uuid.UUID, tuple[int, ...]]]:
        if not self._builders:
            return self._base
        out = dict(self._base)
        for broker_id, builder in self._builders.items():
            built = builder.build()
            if len(built):
                out[broker_id] = built
            else:
                out.pop(broker_id, None)
        return out


def apply_records(
    image: MetadataImage,
    records: Iterable[MetadataRecord],
    offset: int | None = None,
    epoch: int | None = None,
) -> MetadataImage:
    """Replay `records` on `image` and return the next image.

    With `offset`, the records are taken to end at that log offset (each record
    gets `offset - len + 1 + i`); without it they are uncommitted (offset -1 in
    registrations, the image keeps its offset).
    """
    records = list(records)
    with gc_paused() if len(records) > 1000 else nullcontext():
        delta = MetadataDelta(image)
        if offset is None:
            for record in records:
                delta.replay(record)
        else:
            first = offset - len(records) + 1
            for i, record in enumerate(records):
                delta.replay(record, first + i)
        return delta.apply(offset, epoch)
