"""DescribeTopicPartitions (KIP-966): each topic's partitions with their eligible leader replicas, paged.

A pure function of the broker's image and the request. The partitions read as
Metadata's do (broker/kafka/metadata.py: leaders, offline replicas, internal
topics, authorized operations); the paging is Kafka's
DescribeTopicPartitionsRequestHandler's: the topics named (every topic when
none is) from the cursor's on, by name, at most ResponsePartitionLimit
partitions (between 1 and Kafka's max.request.partition.size.limit), and
NextCursor at the first partition left out.
Notes: docs/kafka-listener.md, section "DescribeTopicPartitions".
"""

from __future__ import annotations

import uuid

from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse

from kraftpy.broker.kafka.metadata import alive_brokers, offline_replicas
from kraftpy.metadata.controller.replication_control import validate_topic_name
from kraftpy.metadata.image.metadata_image import MetadataImage, TopicImage
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.topics import is_internal

Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
Partition = Topic.DescribeTopicPartitionsResponsePartition
Cursor = DescribeTopicPartitionsResponse.Cursor
ZERO_UUID = uuid.UUID(int=0)
# Kafka's max.request.partition.size.limit default: the most partitions one answer carries, whatever
# the request asks for, so an all-topics describe of a large cluster costs one page, not the cluster.
MAX_RESPONSE_PARTITIONS = 2000
# This field is a plain int32 in the codec (Metadata's is a bitfield set): Kafka's "not asked for",
# the value Metadata answers with no authorizer on the listener.
NO_AUTHORIZED_OPERATIONS = -(2**31)


def _asked_names(image: MetadataImage, request: DescribeTopicPartitionsRequest) -> tuple[list[str], bool]:
    """The names to describe, sorted, from the cursor's on; and whether every topic was asked for."""
    cursor = request.cursor
    if cursor is not None and cursor.topic_name is None:  # not nullable: only a hostile client sends it
        raise KafkaError("DescribeTopicPartitionsRequest cursor has no topic name", ErrorCode.INVALID_REQUEST)
    start = "" if cursor is None else cursor.topic_name
    asked = request.topics or []
    if any(t.name is None for t in asked):
        raise KafkaError("DescribeTopicPartitionsRequest names a null topic", ErrorCode.INVALID_REQUEST)
    every = not asked
    source = image.topics.by_name if every else (t.name for t in asked)
    names = sorted({name for name in source if name >= start})
    if cursor is not None and not every and cursor.topic_name not in names:
        raise KafkaError(
            f"DescribeTopicPartitionsRequest topic list should contain the cursor topic: {cursor.topic_name}",
            ErrorCode.INVALID_REQUEST,
        )
    if cursor is not None and cursor.partition_index < 0:
        raise KafkaError(
            f"DescribeTopicPartitionsRequest cursor partition must be valid: {cursor.partition_index}",
            ErrorCode.INVALID_REQUEST,
        )
    return names, every


def _partitions(topic: TopicImage, start: int, count: int, alive: set[int]) -> list[Partition]:
    return [
        Partition(
            # Kafka's handler sets no partition error, a leaderless partition included (leader -1).
            error_code=0,
            partition_index=index,
            leader_id=part.leader,
            leader_epoch=part.leader_epoch,
            replica_nodes=list(part.replicas),
            isr_nodes=list(part.isr),
            eligible_leader_replicas=list(part.elr),
            last_known_elr=list(part.last_known_elr),
            offline_replicas=offline_replicas(part, alive),
        )
        for index, part in enumerate(topic.partitions[start : start + count], start)
    ]


def _unknown_topic(name: str) -> Topic:
    try:
        validate_topic_name(name)
        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    except KafkaError:
        error = ErrorCode.INVALID_TOPIC_EXCEPTION
    return Topic(
        error_code=int(error),
        name=name,
        topic_id=ZERO_UUID,
        is_internal=is_internal(name),
        partitions=[],
        topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )


def describe_topic_partitions_response(
    image: MetadataImage,
    request: DescribeTopicPartitionsRequest,
    *,
    max_partitions: int = MAX_RESPONSE_PARTITIONS,
) -> DescribeTopicPartitionsResponse:
    """The answer from `image`; a malformed cursor or topic list raises INVALID_REQUEST (Kafka's)."""
    names, every = _asked_names(image, request)
    cursor = request.cursor
    remaining = max(min(max_partitions, request.response_partition_limit), 1)
    alive = alive_brokers(image)
    topics: list[Topic] = []
    next_cursor = None
    for name in names:
        if remaining == 0:  # the last topic filled the page exactly: the next one starts the next page
            next_cursor = Cursor(topic_name=name, partition_index=0)
            break
        topic = image.topic(name)
        if topic is None:
            if not every:  # unknown names cost no room on the page, as in Kafka
                topics.append(_unknown_topic(name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        partitions = _partitions(topic, start, remaining, alive)
        topics.append(
            Topic(
                error_code=0,
                name=name,
                topic_id=topic.topic_id,
                is_internal=is_internal(name),
                partitions=partitions,
                topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
            )
        )
        end = start + len(partitions)
        if end < len(topic.partitions):
            next_cursor = Cursor(topic_name=name, partition_index=end)
            break
        remaining -= len(partitions)
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)


def describe_topic_partitions_error(
    request: DescribeTopicPartitionsRequest, version: int, error: KafkaError
) -> DescribeTopicPartitionsResponse:
    """The error on every topic named, as Kafka's getErrorResponse (an all-topics request gets none)."""
    topics = [
        Topic(error_code=int(error.code), name=t.name, topic_id=ZERO_UUID, is_internal=False, partitions=[])
        for t in request.topics or []
    ]
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=topics, next_cursor=None)
