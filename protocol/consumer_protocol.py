"""The consumer's embedded protocol: what JoinGroup and SyncGroup carry as opaque bytes (Kafka's ConsumerProtocol).

Design notes: docs/protocol.md, section "protocol/consumer_protocol.py".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import cbor2

from kraftpy.protocol.errors import ErrorCode, KafkaError
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


def _group_partitions(partitions: Iterable[TopicPartition]) -> list[list[Any]]:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [[topic, sorted(parts)] for topic, parts in sorted(by_topic.items())]


def _ungroup_partitions(value: Any, what: str) -> tuple[TopicPartition, ...]:
    if not isinstance(value, list):
        raise ConsumerProtocolError(f"{what} must be a list of [topic, [partitions]]")
    out: list[TopicPartition] = []
    for entry in value:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
            raise ConsumerProtocolError(f"{what} entries must be [topic, [partitions]], got {entry!r:.80}")
        topic, parts = entry
        if not isinstance(parts, list) or not all(type(p) is int and p >= 0 for p in parts):
            raise ConsumerProtocolError(f"{what} of topic {topic!r} must be non-negative integers")
        out.extend(TopicPartition(topic, p) for p in parts)
    return tuple(out)


def encode_subscription(subscription: Subscription) -> bytes:
    body: dict[str, Any] = {
        "version": SUBSCRIPTION_VERSION,
        "topics": sorted(set(subscription.topics)),
        "user_data": subscription.user_data,
        "owned_partitions": _group_partitions(subscription.owned_partitions),
        "generation_id": subscription.generation_id,
        "rack_id": subscription.rack_id,
    }
    return cbor2.dumps(body, canonical=True)


def _load_map(data: bytes, what: str) -> dict[str, Any]:
    if not isinstance(data, bytes | bytearray):
        raise ConsumerProtocolError(f"{what} must be bytes, got {type(data).__name__}")
    try:
        body = cbor2.loads(data)
    except Exception as exc:  # cbor2 raises several types for garbage; all mean the same here
        raise ConsumerProtocolError(f"{what} is not valid CBOR: {exc}") from None
    if not isinstance(body, dict):
        raise ConsumerProtocolError(f"{what} must be a CBOR map, got {type(body).__name__}")
    version = body.get("version")
    if type(version) is not int or version < 0:
        raise ConsumerProtocolError(f"{what} has no valid version")
    return body


def _optional(body: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = body.get(key, default)
    if value is not None and not isinstance(value, kind):
        raise ConsumerProtocolError(f"field {key!r} must be {kind.__name__} or null")
    return value


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    body = _load_map(data, "subscription")
    topics = body.get("topics")
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise ConsumerProtocolError("subscription topics must be a list of strings")
    generation = body.get("generation_id", DEFAULT_GENERATION)
    if type(generation) is not int:
        raise ConsumerProtocolError("subscription generation_id must be an integer")
    return Subscription(
        topics=tuple(sorted(set(topics))),
        user_data=_optional(body, "user_data", bytes, None),
        owned_partitions=_ungroup_partitions(body.get("owned_partitions", []), "owned_partitions"),
        generation_id=generation,
        rack_id=_optional(body, "rack_id", str, None),
        group_instance_id=group_instance_id,
    )


def encode_assignment(assignment: Assignment) -> bytes:
    body = {
        "version": ASSIGNMENT_VERSION,
        "assigned_partitions": _group_partitions(assignment.partitions),
        "user_data": assignment.user_data,
    }
    return cbor2.dumps(body, canonical=True)


def decode_assignment(data: bytes) -> Assignment:
    # An empty assignment is how the coordinator fills members the leader left out (Kafka does the same).
    if data == b"":
        return Assignment()
    body = _load_map(data, "assignment")
    return Assignment(
        partitions=_ungroup_partitions(body.get("assigned_partitions", []), "assigned_partitions"),
        user_data=_optional(body, "user_data", bytes, None),
    )


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics in an encoded subscription, or None when it does not decode (the broker's use)."""
    try:
        return frozenset(decode_subscription(metadata).topics)
    except ConsumerProtocolError:
        return None
