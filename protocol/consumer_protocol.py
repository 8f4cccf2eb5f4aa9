"""The consumer's embedded protocol: what JoinGroup and SyncGroup carry as opaque bytes (Kafka's ConsumerProtocol).

Design notes: docs/protocol.md, section "protocol/consumer_protocol.py".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.codec import decode_embedded, encode_embedded
from kraftpy.protocol.types import TopicPartition

PROTOCOL_TYPE = "consumer"
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3
# Kafka's "no generation" marker in a subscription.
DEFAULT_GENERATION = -1


class ConsumerProtocolError(KafkaError):
    """Bytes that are not a valid subscription or assignment."""

    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


@dataclass(frozen=True, slots=True)
class Subscription:
    """One member's subscription as the leader's assignor sees it.

    member_id and group_instance_id are not encoded: the leader fills them from
    the JoinGroup answer's member list (Kafka keeps groupInstanceId on its
    Subscription the same way), so assignors can order static members stably.
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: tuple[TopicPartition, ...] = ()
    user_data: bytes | None = None

    def partition_set(self) -> frozenset[TopicPartition]:
        return frozenset(self.partitions)


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """A JoinGroup answer's member entry, decoded: the leader's input per member."""

    member_id: str
    subscription: Subscription
    group_instance_id: str | None = None
    raw: bytes = field(default=b"", repr=False)


def _group_partitions(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [{"topic": topic, "partitions": sorted(parts)} for topic, parts in sorted(by_topic.items())]


def _ungroup_partitions(value: Any, what: str) -> tuple[TopicPartition, ...]:
    if value is None:
        return ()
    out: list[TopicPartition] = []
    for entry in value:
        topic, parts = entry.get("topic"), entry.get("partitions")
        if not isinstance(topic, str):
            raise ConsumerProtocolError(f"{what} has an entry without a topic name")
        if parts is None or not all(p >= 0 for p in parts):
            raise ConsumerProtocolError(f"{what} of topic {topic!r} must be non-negative partition numbers")
        out.extend(TopicPartition(topic, p) for p in parts)
    return tuple(out)


def _decode(schema: str, data: bytes, what: str) -> dict[str, Any]:
    if not isinstance(data, bytes | bytearray):
        raise ConsumerProtocolError(f"{what} must be bytes, got {type(data).__name__}")
    try:
        _version, fields = decode_embedded(schema, bytes(data))
    except ValueError as exc:
        raise ConsumerProtocolError(f"{what} does not decode as Kafka's consumer protocol: {exc}") from None
    return fields


def encode_subscription(subscription: Subscription) -> bytes:
    return encode_embedded(
        "consumer_subscription",
        SUBSCRIPTION_VERSION,
        {
            "topics": sorted(set(subscription.topics)),
            "user_data": subscription.user_data,
            "owned_partitions": _group_partitions(subscription.owned_partitions),
            "generation_id": subscription.generation_id,
            "rack_id": subscription.rack_id,
        },
    )


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    """A member's subscription, any version a Kafka client sends (v0-v3; a newer one read as v3)."""
    body = _decode("consumer_subscription", data, "subscription")
    topics = body.get("topics")
    if topics is None or not all(isinstance(t, str) for t in topics):
        raise ConsumerProtocolError("subscription topics must be a list of topic names")
    return Subscription(
        topics=tuple(sorted(set(topics))),
        user_data=body.get("user_data"),
        owned_partitions=_ungroup_partitions(body.get("owned_partitions"), "owned_partitions"),
        generation_id=body.get("generation_id", DEFAULT_GENERATION),
        rack_id=body.get("rack_id"),
        group_instance_id=group_instance_id,
    )


def encode_assignment(assignment: Assignment) -> bytes:
    return encode_embedded(
        "consumer_assignment",
        ASSIGNMENT_VERSION,
        {"assigned_partitions": _group_partitions(assignment.partitions), "user_data": assignment.user_data},
    )


def decode_assignment(data: bytes) -> Assignment:
    # An empty assignment is how the coordinator fills members the leader left out (Kafka does the same).
    if data == b"":
        return Assignment()
    body = _decode("consumer_assignment", data, "assignment")
    return Assignment(
        partitions=_ungroup_partitions(body.get("assigned_partitions"), "assigned_partitions"),
        user_data=body.get("user_data"),
    )


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics in an encoded subscription, or None when it does not decode (the broker's use)."""
    try:
        return frozenset(decode_subscription(metadata).topics)
    except ConsumerProtocolError:
        return None
