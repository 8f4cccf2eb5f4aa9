"""Metadata: brokers (at the listener the request came in on), topics, partitions, leaders and epochs.

Answers from the image this broker has replayed, as every Kafka broker does.
A broker is listed when it is unfenced and has the request's listener; the
controller id is this broker's own (KRaft brokers forward controller requests,
so clients may send them anywhere). Topics asked for that do not exist are
listed in `missing` for auto-creation; their answer says UNKNOWN_TOPIC_OR_PARTITION,
or LEADER_NOT_AVAILABLE once a creation was asked for (Kafka's answer).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from kraftpy.metadata.controller.replication_control import validate_topic_name
from kraftpy.metadata.image.metadata_image import NO_LEADER, MetadataImage, PartitionRegistration, TopicImage
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.topics import is_internal

Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition
Broker = MetadataResponse.MetadataResponseBroker
ZERO_UUID = uuid.UUID(int=0)
# Kafka's "authorized operations not asked for" (no authorizer yet): the codec's bitfield takes a set of
# bits, and None for Kafka's -2^31 (an int fails to encode, and Metadata v8+ with it).
NO_AUTHORIZED_OPERATIONS = None


@dataclass(frozen=True, slots=True)
class MetadataAsk:
    """What a Metadata request asks for: every topic (names None), or these names and ids."""

    names: tuple[str, ...] | None
    topic_ids: tuple[uuid.UUID, ...]
    allow_auto_create: bool


def read_request(request: MetadataRequest, version: int) -> MetadataAsk:
    topics = request.topics
    # v0: an empty list means every topic; from v1, null does.
    if topics is None or (version == 0 and not topics):
        return MetadataAsk(None, (), version < 4 or bool(request.allow_auto_topic_creation))
    names: list[str] = []
    ids: list[uuid.UUID] = []
    for t in topics:
        if getattr(t, "name", None) is not None:
            names.append(t.name)
        elif getattr(t, "topic_id", None) not in (None, ZERO_UUID):
            ids.append(t.topic_id)
    allow = version < 4 or bool(request.allow_auto_topic_creation)
    return MetadataAsk(tuple(dict.fromkeys(names)), tuple(dict.fromkeys(ids)), allow)


def missing_topics(image: MetadataImage, ask: MetadataAsk) -> list[str]:
    """The valid names asked for that the image lacks (candidates for auto-creation)."""
    if ask.names is None:
        return []
    out = []
    for name in ask.names:
        if image.topic(name) is None and not is_internal(name):
            try:
                validate_topic_name(name)
            except KafkaError:  # an invalid name is answered INVALID_TOPIC_EXCEPTION, never created
                continue
            out.append(name)
    return out


def _brokers(image: MetadataImage, listener_name: str) -> list[Broker]:
    out = []
    for broker_id, b in sorted(image.brokers.items()):
        if b.fenced:
            continue
        for listener in b.listeners:
            if listener.name == listener_name:
                out.append(Broker(node_id=broker_id, host=listener.host, port=listener.port, rack=b.rack))
                break
    return out


def alive_brokers(image: MetadataImage) -> set[int]:
    """The brokers whose replicas are online: registered and unfenced."""
    return {broker_id for broker_id, b in image.brokers.items() if not b.fenced}


def offline_replicas(part: PartitionRegistration, alive: set[int]) -> list[int]:
    """The replicas on fenced or unregistered brokers (Kafka's OfflineReplicas)."""
    return [r for r in part.replicas if r not in alive]


def partition_error(part: PartitionRegistration) -> ErrorCode:
    """A leaderless partition (no ISR member left, KIP-966) is LEADER_NOT_AVAILABLE, as Kafka's Metadata says."""
    return ErrorCode.LEADER_NOT_AVAILABLE if part.leader == NO_LEADER else ErrorCode.NONE


def _topic(image: MetadataImage, topic: TopicImage, alive: set[int]) -> Topic:
    partitions = []
    for index, part in enumerate(topic.partitions):
        partitions.append(
            Partition(
                error_code=int(partition_error(part)),
                partition_index=index,
                leader_id=part.leader,
                leader_epoch=part.leader_epoch,
                replica_nodes=list(part.replicas),
                isr_nodes=list(part.isr),
                offline_replicas=offline_replicas(part, alive),
            )
        )
    return Topic(
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=is_internal(topic.name),
        partitions=partitions,
        authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )


def _error_topic(name: str | None, topic_id: uuid.UUID, error: ErrorCode) -> Topic:
    return Topic(error_code=int(error), name=name, topic_id=topic_id, is_internal=False, partitions=[])


def metadata_response(
    image: MetadataImage,
    ask: MetadataAsk,
    *,
    listener_name: str,
    cluster_id: str,
    controller_id: int,
    creating: Iterable[str] = (),
) -> MetadataResponse:
    """The answer to `ask` from `image`; `creating` are names whose auto-creation was just asked for."""
    creating = set(creating)
    alive = alive_brokers(image)
    topics: list[Topic] = []
    if ask.names is None:
        for name in sorted(image.topics.by_name):
            found = image.topic(name)
            if found is not None:
                topics.append(_topic(image, found, alive))
    else:
        for name in ask.names:
            found = image.topic(name)
            if found is not None:
                topics.append(_topic(image, found, alive))
                continue
            try:
                validate_topic_name(name)
            except KafkaError:
                topics.append(_error_topic(name, ZERO_UUID, ErrorCode.INVALID_TOPIC_EXCEPTION))
                continue
            error = ErrorCode.LEADER_NOT_AVAILABLE if name in creating else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            topics.append(_error_topic(name, ZERO_UUID, error))
        for topic_id in ask.topic_ids:
            found = image.topic_by_id(topic_id)
            if found is None:
                topics.append(_error_topic(None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID))
            else:
                topics.append(_topic(image, found, alive))
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=_brokers(image, listener_name),
        cluster_id=cluster_id,
        controller_id=controller_id,
        topics=topics,
        authorized_operations=NO_AUTHORIZED_OPERATIONS,
        error_code=0,
    )
