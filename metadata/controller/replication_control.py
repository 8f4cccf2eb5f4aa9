"""Replication control: topics, partitions, ISR changes and leader elections.

Kafka's ReplicationControlManager as pure functions: each takes the image the
active controller decides on (its latest, possibly uncommitted, image) and a
request, and returns a `ControllerResult` (records + response). Nothing here
keeps state. Broker lifecycle changes call `changes_for_unusable_broker` /
`changes_for_usable_broker` to move leaderships and adjust ISRs.
"""

from __future__ import annotations

import random
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from kraftpy.metadata.configs import ConfigResourceType, validate_configs
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.partition_change import Election, PartitionChangeBuilder, merged
from kraftpy.metadata.controller.placement import PlacementBroker, place_replicas
from kraftpy.metadata.controller.requests import (
    AlterPartitionItem,
    AlterPartitionItemResult,
    AlterPartitionRequest,
    AlterPartitionResponse,
    ControllerResult,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsResult,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectionType,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersResult,
)
from kraftpy.metadata.image.metadata_image import (
    NO_LEADER,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
    collision_key,
    has_collision_chars,
)
from kraftpy.metadata.records import (
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.topics import CLUSTER_METADATA_TOPIC

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def _err(code: ErrorCode, message: str, **details: Any) -> KafkaError:
    return KafkaError(message, code, **details)


def partition_builder(
    image: MetadataImage,
    topic: TopicImage,
    pid: int,
    part: PartitionRegistration,
    min_isr_default: int,
    usable: Callable[[int], bool] | None = None,
) -> PartitionChangeBuilder:
    """The builder for one partition, with its topic's effective min ISR (at most its replica count)."""
    min_isr = min(image.min_insync_replicas(topic.name, min_isr_default), len(part.replicas))
    return PartitionChangeBuilder(topic.topic_id, pid, part, usable or image.is_usable, min_isr=min_isr)


# --- validation helpers ------------------------------------------------------------------------


def validate_topic_name(name: Any) -> str:
    """Kafka's topic name rules; INVALID_TOPIC_EXCEPTION with the reason otherwise."""
    if not isinstance(name, str) or not name:
        raise _err(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise _err(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise _err(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
            f"topic name: {name[:40]}...",
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise _err(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        )
    return name


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _usable_placement(image: MetadataImage) -> list[PlacementBroker]:
    return [PlacementBroker(b.broker_id, b.rack) for b in image.cluster.usable_brokers()]


def _validate_manual_assignment(
    image: MetadataImage, assignments: Any, expected_rf: int | None, first_partition: int
) -> list[tuple[int, ...]]:
    """Replica lists given by the user: non-empty, no broker twice, registered brokers, one RF."""
    if not isinstance(assignments, list | tuple) or not assignments:
        raise _err(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment must not be empty")
    out = []
    rf = expected_rf
    for i, replicas in enumerate(assignments):
        pid = first_partition + i
        if not isinstance(replicas, list | tuple) or not replicas or not all(_is_int(b) for b in replicas):
            raise _err(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment for partition {pid} must be a non-empty list of broker ids",
            )
        if len(set(replicas)) != len(replicas):
            dup = next(b for b, n in Counter(replicas).items() if n > 1)
            raise _err(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {dup} more than once (partition {pid})",
            )
        for b in replicas:
            if image.broker(b) is None:
                raise _err(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {b}, but no such broker is registered",
                )
        if rf is None:
            rf = len(replicas)
        elif len(replicas) != rf:
            raise _err(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this "
                f"is not consistent with previous partitions, which have {rf} replica(s)",
            )
        if not any(image.is_usable(b) for b in replicas):
            raise _err(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"All brokers specified in the manual partition assignment for partition {pid} are fenced or "
                "in controlled shutdown",
            )
        out.append(tuple(replicas))
    return out


def _new_partition(image: MetadataImage, replicas: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """ISR and leader of a new partition: its usable replicas, the first of them leading."""
    isr = tuple(b for b in replicas if image.is_usable(b))
    return isr, isr[0]


def _new_topic_id(image: MetadataImage, rng: random.Random, taken: set[uuid.UUID]) -> uuid.UUID:
    while True:
        topic_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        if topic_id not in image.topics.by_id and topic_id not in taken:
            return topic_id


def _check_partition_count(count: int, config: ControllerConfig) -> None:
    if count > config.max_partitions_per_topic:
        raise _err(
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions {count} is above the limit of {config.max_partitions_per_topic} partitions "
            "per topic (max_partitions_per_topic)",
        )


# --- CreateTopics ----------------------------------------------------------------------------


def create_topics(
    image: MetadataImage, request: CreateTopicsRequest, config: ControllerConfig, rng: random.Random
) -> ControllerResult:
    records: list[MetadataRecord] = []
    results: list[CreateTopicResult] = []
    names = Counter(t.name for t in request.topics if isinstance(t, CreatableTopic) and isinstance(t.name, str))
    created: dict[str, str] = {}  # collision key -> name, for topics created earlier in this request
    ids: set[uuid.UUID] = set()
    for topic in request.topics:
        name = getattr(topic, "name", None)
        try:
            if not isinstance(topic, CreatableTopic):
                raise _err(ErrorCode.INVALID_REQUEST, f"Not a topic to create: {topic!r:.60}")
            if names[topic.name] > 1:
                raise _err(ErrorCode.INVALID_REQUEST, f"Found multiple entries for topic {topic.name!r} in the request")
            topic_records, result = _create_topic(image, topic, config, rng, created, ids, request.validate_only)
        except KafkaError as e:
            results.append(CreateTopicResult(name if isinstance(name, str) else repr(name), error=e))
            continue
        records.extend(topic_records)
        results.append(result)
    return ControllerResult(tuple(records), CreateTopicsResponse(tuple(results)))


def _create_topic(
    image: MetadataImage,
    topic: CreatableTopic,
    config: ControllerConfig,
    rng: random.Random,
    created: dict[str, str],
    ids: set[uuid.UUID],
    validate_only: bool,
) -> tuple[list[MetadataRecord], CreateTopicResult]:
    name = validate_topic_name(topic.name)
    if name == CLUSTER_METADATA_TOPIC:  # the metadata log is Raft's, never a topic clients could write (Kafka's rule)
        raise _err(ErrorCode.INVALID_REQUEST, f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.")
    if image.topic(name) is not None:
        raise _err(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    colliding = image.topics.colliding_names(name)
    if has_collision_chars(name) and collision_key(name) in created:
        colliding.append(created[collision_key(name)])
    if colliding:
        raise _err(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with existing topic: {colliding[0]} (topic names may not differ only "
            "in '.' versus '_')",
        )
    if not isinstance(topic.configs, Mapping):
        raise _err(ErrorCode.INVALID_REQUEST, "configs must be a mapping of config name to value")
    overrides = validate_configs(topic.configs, ConfigResourceType.TOPIC)

    if topic.assignments is not None:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise _err(
                ErrorCode.INVALID_REQUEST,
                "Both num_partitions or replication_factor and assignments were set; use only one of them",
            )
        if isinstance(topic.assignments, Sequence):
            _check_partition_count(len(topic.assignments), config)
        assignments = _validate_manual_assignment(image, topic.assignments, None, 0)
    else:
        num_partitions = config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        rf = config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
        if not _is_int(num_partitions) or num_partitions < 1:
            raise _err(
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions was set to an invalid non-positive value ({topic.num_partitions!r}); "
                "use -1 for the default",
            )
        _check_partition_count(num_partitions, config)
        if not _is_int(rf) or rf < 1:
            raise _err(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor must be larger than 0, or -1 to use the default value (got "
                f"{topic.replication_factor!r})",
            )
        assignments = place_replicas(_usable_placement(image), num_partitions, rf, rng)

    topic_id = _new_topic_id(image, rng, ids)
    result = CreateTopicResult(
        name,
        topic_id=None if validate_only else topic_id,
        num_partitions=len(assignments),
        replication_factor=len(assignments[0]),
        configs=overrides,
    )
    if validate_only:
        return [], result
    ids.add(topic_id)
    if has_collision_chars(name):
        created[collision_key(name)] = name
    records: list[MetadataRecord] = [TopicRecord(name, topic_id)]
    for pid, replicas in enumerate(assignments):
        isr, leader = _new_partition(image, replicas)
        records.append(PartitionRecord(topic_id, pid, replicas, isr, leader, 0, 0))
    for key in sorted(overrides):
        records.append(ConfigRecord(int(ConfigResourceType.TOPIC), name, key, overrides[key]))
    return records, result


# --- DeleteTopics -----------------------------------------------------------------------------


def delete_topics(image: MetadataImage, request: DeleteTopicsRequest) -> ControllerResult:
    records: list[MetadataRecord] = []
    results: list[DeleteTopicResult] = []
    deleted: set[uuid.UUID] = set()
    wanted: list[tuple[str | None, uuid.UUID | None]] = [(n, None) for n in request.names]
    wanted += [(None, i) for i in request.topic_ids]
    for name, topic_id in wanted:
        topic = image.topic(name) if isinstance(name, str) else None
        if topic_id is not None:
            topic = image.topic_by_id(topic_id) if isinstance(topic_id, uuid.UUID) else None
        if topic is None:
            if topic_id is not None:
                error = _err(ErrorCode.UNKNOWN_TOPIC_ID, f"Topic id {topic_id} does not exist")
            else:
                error = _err(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist")
            results.append(DeleteTopicResult(name, topic_id, error))
            continue
        if topic.topic_id in deleted:
            error = _err(ErrorCode.INVALID_REQUEST, f"Topic '{topic.name}' is named more than once in the request")
            results.append(DeleteTopicResult(topic.name, topic.topic_id, error))
            continue
        deleted.add(topic.topic_id)
        records.append(RemoveTopicRecord(topic.topic_id))
        results.append(DeleteTopicResult(topic.name, topic.topic_id))
    return ControllerResult(tuple(records), DeleteTopicsResponse(tuple(results)))


# --- CreatePartitions ---------------------------------------------------------------------------


def create_partitions(
    image: MetadataImage, request: CreatePartitionsRequest, config: ControllerConfig, rng: random.Random
) -> ControllerResult:
    records: list[MetadataRecord] = []
    results: list[CreatePartitionsResult] = []
    names = Counter(getattr(t, "name", None) for t in request.topics)
    for item in request.topics:
        name = getattr(item, "name", None)
        try:
            if names[name] > 1:
                raise _err(ErrorCode.INVALID_REQUEST, f"Found multiple entries for topic {name!r} in the request")
            topic = image.topic(name) if isinstance(name, str) else None
            if topic is None:
                raise _err(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist")
            new_records = _create_partitions(image, topic, item.count, item.assignments, config, rng)
        except KafkaError as e:
            results.append(CreatePartitionsResult(str(name), e))
            continue
        if not request.validate_only:
            records.extend(new_records)
        results.append(CreatePartitionsResult(name))
    return ControllerResult(tuple(records), CreatePartitionsResponse(tuple(results)))


def _create_partitions(
    image: MetadataImage,
    topic: TopicImage,
    count: Any,
    assignments: Any,
    config: ControllerConfig,
    rng: random.Random,
) -> list[MetadataRecord]:
    current = len(topic.partitions)
    if not _is_int(count):
        raise _err(ErrorCode.INVALID_PARTITIONS, f"The partition count must be an integer, got {count!r}")
    if count < current:
        raise _err(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic currently has {current} partitions, which is higher than the requested {count}; "
            "partitions can only be added",
        )
    if count == current:
        raise _err(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
    _check_partition_count(count, config)
    rf = topic.replication_factor
    added = count - current
    if assignments is not None:
        if not isinstance(assignments, list | tuple) or len(assignments) != added:
            got = len(assignments) if isinstance(assignments, list | tuple) else assignments
            raise _err(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {added} additional partition(s), but {got} assignment(s) were specified",
            )
        new = _validate_manual_assignment(image, assignments, rf, current)
    else:
        new = place_replicas(_usable_placement(image), added, rf, rng, start_partition=current)
    records: list[MetadataRecord] = []
    for i, replicas in enumerate(new):
        isr, leader = _new_partition(image, replicas)
        records.append(PartitionRecord(topic.topic_id, current + i, replicas, isr, leader, 0, 0))
    return records


# --- AlterPartition -------------------------------------------------------------------------------


def alter_partition(image: MetadataImage, request: AlterPartitionRequest, min_isr_default: int) -> ControllerResult:
    """ISR changes proposed by partition leaders, checked against the current epochs.

    Per partition, as Kafka answers: a leader or partition epoch *ahead* of this
    controller's -> NOT_CONTROLLER (it is probably no longer active); an older
    leader epoch -> FENCED_LEADER_EPOCH; a sender that is not the leader ->
    INVALID_REQUEST; an older partition epoch -> INVALID_UPDATE_VERSION; an ISR
    that is not a subset of the replicas or lacks the leader -> INVALID_REQUEST;
    a new ISR member that is fenced or shutting down -> INELIGIBLE_REPLICA.
    The broker itself must be registered at `broker_epoch` (checked by the caller).
    """
    records: list[MetadataRecord] = []
    results: list[AlterPartitionItemResult] = []
    current: dict[tuple[uuid.UUID, int], PartitionRegistration] = {}
    for item in request.partitions:
        key = (item.topic_id, item.partition)
        topic = image.topic_by_id(item.topic_id)
        if topic is None:
            results.append(AlterPartitionItemResult(
                item.topic_id, item.partition, _err(ErrorCode.UNKNOWN_TOPIC_ID, f"Unknown topic id {item.topic_id}")
            ))  # fmt: skip
            continue
        part = current.get(key) or image.partition(item.topic_id, item.partition)
        if part is None:
            results.append(AlterPartitionItemResult(
                item.topic_id, item.partition,
                _err(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {topic.name} has no partition {item.partition}"),
            ))  # fmt: skip
            continue
        error = _check_alter_partition(image, request.broker_id, topic.name, part, item)
        if error is not None:
            results.append(AlterPartitionItemResult(item.topic_id, item.partition, error))
            continue
        builder = partition_builder(image, topic, item.partition, part, min_isr_default)
        change = builder.set_target_isr(item.new_isr).build()
        if change is not None:
            records.append(change)
        after = merged(part, change)
        current[key] = after
        results.append(AlterPartitionItemResult(
            item.topic_id, item.partition, None, after.leader, after.leader_epoch, after.isr, after.partition_epoch
        ))  # fmt: skip
    return ControllerResult(tuple(records), AlterPartitionResponse(tuple(results)))


def _check_alter_partition(
    image: MetadataImage, broker_id: int, topic: str, part: PartitionRegistration, item: AlterPartitionItem
) -> KafkaError | None:
    where = f"{topic}-{item.partition}"
    if item.leader_epoch > part.leader_epoch or item.partition_epoch > part.partition_epoch:
        return _err(
            ErrorCode.NOT_CONTROLLER,
            f"{where}: the request's epochs (leader {item.leader_epoch}, partition {item.partition_epoch}) are ahead "
            f"of this controller's ({part.leader_epoch}, {part.partition_epoch}); it is probably not the active one",
        )
    if item.leader_epoch < part.leader_epoch:
        return _err(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"{where}: leader epoch {item.leader_epoch} is older than the current {part.leader_epoch}",
        )
    if broker_id != part.leader:
        return _err(ErrorCode.INVALID_REQUEST, f"{where}: broker {broker_id} is not the leader ({part.leader})")
    if item.partition_epoch < part.partition_epoch:
        return _err(
            ErrorCode.INVALID_UPDATE_VERSION,
            f"{where}: partition epoch {item.partition_epoch} is older than the current {part.partition_epoch}",
        )
    new_isr = item.new_isr
    if (
        not isinstance(new_isr, list | tuple)
        or not all(_is_int(b) for b in new_isr)
        or len(set(new_isr)) != len(new_isr)
        or not set(new_isr) <= set(part.replicas)
    ):
        return _err(
            ErrorCode.INVALID_REQUEST,
            f"{where}: the new ISR {list(new_isr)} must be distinct replicas of {list(part.replicas)}",
        )
    if part.leader not in new_isr:
        return _err(ErrorCode.INVALID_REQUEST, f"{where}: the new ISR {list(new_isr)} must contain the leader")
    ineligible = [b for b in new_isr if b not in part.isr and not image.is_usable(b)]
    if ineligible:
        return _err(
            ErrorCode.INELIGIBLE_REPLICA,
            f"{where}: broker(s) {ineligible} cannot join the ISR: fenced, shutting down or not registered",
        )
    return None


# --- elections ------------------------------------------------------------------------------------


def _unclean_allowed(image: MetadataImage, topic: TopicImage) -> bool:
    return bool(image.topic_config_value(topic.name, "unclean_leader_election_enable"))


def _all_partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, int]]:
    for name in sorted(image.topics.by_name):
        topic = image.topics.get(name)
        assert topic is not None
        for p in range(len(topic.partitions)):
            yield topic, p


def elect_leaders(image: MetadataImage, request: ElectLeadersRequest, min_isr_default: int) -> ControllerResult:
    """PREFERRED: move leadership to the first replica. UNCLEAN: give a leaderless partition a leader,
    from the ISR if possible, else any live replica (the request itself is the permission).

    With `partitions=None` every partition is considered and ELECTION_NOT_NEEDED is left out.
    """
    records: list[MetadataRecord] = []
    results: list[ElectLeadersResult] = []
    everything = request.partitions is None
    targets: Iterable[tuple[Any, Any]] = (
        ((t.name, p) for t, p in _all_partitions(image)) if everything else request.partitions or ()
    )
    for name, pid in targets:
        topic = image.topic(name) if isinstance(name, str) else None
        part = image.partition(topic.topic_id, pid) if topic is not None and _is_int(pid) else None
        if topic is None or part is None:
            error = _err(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Partition {name}-{pid} does not exist")
            results.append(ElectLeadersResult(str(name), pid, error))
            continue
        change, error = _elect(image, topic, pid, part, request.election_type, min_isr_default)
        if error is not None:
            if not (everything and error.code == ErrorCode.ELECTION_NOT_NEEDED):
                results.append(ElectLeadersResult(name, pid, error, part.leader))
            continue
        records.append(change)
        results.append(ElectLeadersResult(name, pid, None, merged(part, change).leader))
    return ControllerResult(tuple(records), ElectLeadersResponse(tuple(results)))


def _elect(
    image: MetadataImage,
    topic: TopicImage,
    pid: int,
    part: PartitionRegistration,
    kind: ElectionType,
    min_isr_default: int,
) -> tuple[PartitionChangeRecord | None, KafkaError | None]:
    where = f"{topic.name}-{pid}"
    builder = partition_builder(image, topic, pid, part, min_isr_default)
    if kind == ElectionType.PREFERRED:
        preferred = part.replicas[0]
        if part.leader == preferred:
            return None, _err(ErrorCode.ELECTION_NOT_NEEDED, f"{where}: the preferred leader {preferred} already leads")
        if preferred not in part.isr or not image.is_usable(preferred):
            return None, _err(
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                f"{where}: the preferred leader {preferred} is not in the ISR {list(part.isr)} or is fenced",
            )
        return builder.set_election(Election.PREFERRED).build(), None
    if kind == ElectionType.UNCLEAN:
        if part.leader != NO_LEADER:
            return None, _err(ErrorCode.ELECTION_NOT_NEEDED, f"{where}: the partition has a leader ({part.leader})")
        change = builder.set_unclean(True).build()
        if change is None or change.leader is None:
            return None, _err(
                ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"{where}: no replica of {list(part.replicas)} is alive"
            )
        return change, None
    return None, _err(ErrorCode.INVALID_REQUEST, f"Unknown election type {kind!r}")


def changes_for_unusable_broker(
    image: MetadataImage, broker_id: int, min_isr_default: int, *, unclean_shutdown: bool = False
) -> list[PartitionChangeRecord]:
    """`image` already shows `broker_id` fenced, shutting down or unregistered: take it out of every
    ISR (into the ELR where the ISR falls below min ISR) and move every leadership it held to another
    usable ISR member (or ELR member, or an out-of-ISR replica when the topic allows unclean
    election, else leader -1). With `unclean_shutdown` it restarted without its unsynced tails: it
    leaves the ELRs too and is elected nowhere (KIP-966)."""
    out: list[PartitionChangeRecord] = []
    unclean: dict[uuid.UUID, bool] = {}
    for topic, pid, part in image.partitions_on_broker(broker_id):
        in_elr = unclean_shutdown and broker_id in part.elr
        if part.leader != broker_id and broker_id not in part.isr and not in_elr:
            continue
        builder = partition_builder(image, topic, pid, part, min_isr_default)
        if unclean_shutdown:
            builder.set_unclean_shutdown(broker_id)
        else:
            builder.without(broker_id)
        if topic.topic_id not in unclean:
            unclean[topic.topic_id] = _unclean_allowed(image, topic)
        change = builder.set_unclean(unclean[topic.topic_id]).build()
        if change is not None:
            out.append(change)
    return out


def changes_for_offline_replicas(
    image: MetadataImage, broker_id: int, replicas: Iterable[tuple[uuid.UUID, int]], min_isr_default: int
) -> list[PartitionChangeRecord]:
    """`broker_id` reports that it cannot serve these replicas (a corrupt batch, a failed disk): as for
    an unclean restart, but per partition: it leaves their ISRs and ELRs (its copy may lack what it
    acknowledged) and every leadership it holds among them moves to another usable ISR or ELR member
    (an out-of-ISR replica when the topic allows unclean election, else leader -1). Unknown
    partitions and replicas it does not hold are ignored: the report may predate a deletion or
    reassignment."""
    out: list[PartitionChangeRecord] = []
    unusable_here = {broker_id}

    def usable(b: int) -> bool:
        return b not in unusable_here and image.is_usable(b)

    for topic_id, pid in dict.fromkeys(replicas):
        topic = image.topic_by_id(topic_id)
        part = image.partition(topic_id, pid) if topic is not None else None
        if topic is None or part is None or broker_id not in part.replicas:
            continue
        if part.leader != broker_id and broker_id not in part.isr and broker_id not in part.elr:
            continue
        builder = partition_builder(image, topic, pid, part, min_isr_default, usable).set_unclean_shutdown(broker_id)
        change = builder.set_unclean(_unclean_allowed(image, topic)).build()
        if change is not None:
            out.append(change)
    return out


def changes_for_usable_broker(
    image: MetadataImage, broker_id: int, min_isr_default: int
) -> list[PartitionChangeRecord]:
    """`image` shows `broker_id` usable again: give leaderless partitions it replicates a leader
    (it leads when it is in the ISR, or in the ELR of an empty ISR, or out of both when the topic
    allows unclean election)."""
    out: list[PartitionChangeRecord] = []
    for topic, pid, part in image.partitions_on_broker(broker_id):
        if part.leader != NO_LEADER:
            continue
        builder = partition_builder(image, topic, pid, part, min_isr_default)
        change = builder.set_unclean(_unclean_allowed(image, topic)).build()
        if change is not None:
            out.append(change)
    return out


def changes_for_min_isr(image: MetadataImage, min_isr_default: int) -> list[PartitionChangeRecord]:
    """After a min.insync.replicas change: an ISR at or above the new value may advance the high
    watermark again, so its ELR (which holds only what was committed before) must empty now."""
    out: list[PartitionChangeRecord] = []
    for topic, pid in _all_partitions(image):
        part = topic.partitions[pid]
        if part.elr:
            change = partition_builder(image, topic, pid, part, min_isr_default).build()
            if change is not None:
                out.append(change)
    return out


def imbalanced_partitions(
    image: MetadataImage, max_imbalance_percentage: int, min_isr_default: int
) -> list[PartitionChangeRecord]:
    """Kafka's automatic preferred-leader rebalance: for each usable broker whose share of
    preferred partitions led by someone else exceeds the threshold, move those partitions'
    leadership back to it when it is in their ISR."""
    preferred_count: Counter[int] = Counter()
    not_led: dict[int, list[tuple[TopicImage, int, PartitionRegistration]]] = {}
    for topic in image.topics.by_id.values():
        for pid, part in enumerate(topic.partitions):
            preferred = part.replicas[0]
            preferred_count[preferred] += 1
            if part.leader != preferred:
                not_led.setdefault(preferred, []).append((topic, pid, part))
    out: list[PartitionChangeRecord] = []
    for broker_id in sorted(not_led):
        if not image.is_usable(broker_id):
            continue
        candidates = not_led[broker_id]
        if len(candidates) * 100 <= max_imbalance_percentage * preferred_count[broker_id]:
            continue
        for topic, pid, part in candidates:
            if broker_id in part.isr:
                builder = partition_builder(image, topic, pid, part, min_isr_default)
                change = builder.set_election(Election.PREFERRED).build()
                if change is not None:
                    out.append(change)
    return out
