"""What the data-path Kafka APIs share: topic names vs ids, route answers by partition, leader hints.

Produce v13+ and Fetch v13+ name topics by id; the broker's routes take
names. `TopicRef` keeps both, so an answer names the topic as its request did.
The routes answer `{"topics": [{"name", "partitions": [{"partition", ...}]}]}`;
`answers_by_partition` indexes that. A NOT_LEADER_OR_FOLLOWER answer carries
the route's leader hint in `details`, which Kafka's newer versions return as
`current_leader` plus the leader's endpoint at the request's listener.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.broker.kafka.metadata import ZERO_UUID
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.protocol.errors import ErrorCode, KafkaError


@dataclass(frozen=True, slots=True)
class TopicRef:
    """A topic as a request named it: `name` is None when its id is unknown here."""

    name: str | None
    topic_id: uuid.UUID


def resolve_topic(image: MetadataImage, name: str | None, topic_id: uuid.UUID | None, by_id: bool) -> TopicRef:
    """The topic a request item names, by id (`by_id`, Produce/Fetch v13+) or by name."""
    if by_id:
        found = image.topic_by_id(topic_id) if topic_id not in (None, ZERO_UUID) else None
        return TopicRef(found.name if found is not None else None, topic_id or ZERO_UUID)
    found = image.topic(name) if name is not None else None
    return TopicRef(name, found.topic_id if found is not None else ZERO_UUID)


def unresolved(ref: TopicRef, by_id: bool) -> KafkaError:
    """The error for a topic the image cannot name: an unknown id, or (by name) a null name."""
    if by_id:
        return KafkaError(f"unknown topic id {ref.topic_id}", ErrorCode.UNKNOWN_TOPIC_ID)
    return KafkaError("a topic name is null", ErrorCode.INVALID_TOPIC_EXCEPTION)


def answers_by_partition(answer: Mapping[str, Any] | None) -> dict[tuple[str, int], Mapping[str, Any]]:
    """A route's `{"topics": [...]}` answer as {(topic, partition): partition answer}."""
    out: dict[tuple[str, int], Mapping[str, Any]] = {}
    for topic in (answer or {}).get("topics", []):
        for part in topic.get("partitions", []):
            out[(topic["name"], part["partition"])] = part
    return out


def answers_in_request_order(
    items: Iterable[tuple[TopicRef, list[int]]],
    refused: Mapping[tuple[TopicRef, int], KafkaError],
    answer: Mapping[str, Any] | None,
) -> Iterator[tuple[TopicRef, list[tuple[int, Mapping[str, Any]]]]]:
    """Each topic as the request listed it, with each partition's answer: its refusal, else the route's."""
    by_partition = answers_by_partition(answer)
    missing = error_answer(KafkaError("the broker gave no answer", ErrorCode.UNKNOWN_SERVER_ERROR))

    def one(ref: TopicRef, index: int) -> Mapping[str, Any]:
        refusal = refused.get((ref, index))
        return error_answer(refusal) if refusal is not None else by_partition.get((ref.name or "", index), missing)

    for ref, indexes in items:
        yield ref, [(index, one(ref, index)) for index in indexes]


def error_answer(error: KafkaError) -> dict[str, Any]:
    """A partition answer carrying `error`, in the routes' shape."""
    return {"error_code": int(error.code), "message": error.message}


def error_code(answer: Mapping[str, Any]) -> int:
    return int(answer.get("error_code", 0))


def error_message(answer: Mapping[str, Any]) -> str | None:
    """The route's message for an error answer (Kafka's error_message), None on success."""
    if error_code(answer) == 0:
        return None
    return str(answer.get("message") or ErrorCode(error_code(answer)).name)


def leader_hint(answer: Mapping[str, Any]) -> tuple[int, int] | None:
    """(leader_id, leader_epoch) a NOT_LEADER_OR_FOLLOWER answer names, if it names a live leader."""
    details = answer.get("details") or {}
    leader = details.get("leader_id", -1)
    if error_code(answer) != int(ErrorCode.NOT_LEADER_OR_FOLLOWER) or leader is None or leader < 0:
        return None
    return int(leader), int(details.get("leader_epoch", -1))


def leader_endpoints(
    image: MetadataImage, leaders: Iterable[int], listener_name: str
) -> list[tuple[int, str, int, str | None]]:
    """(node_id, host, port, rack) of each leader at `listener_name`, sorted, for Kafka's node_endpoints."""
    out = []
    for broker_id in sorted(set(leaders)):
        broker = image.broker(broker_id)
        if broker is None:
            continue
        for listener in broker.listeners:
            if listener.name == listener_name:
                out.append((broker_id, listener.host, listener.port, broker.rack))
                break
    return out
