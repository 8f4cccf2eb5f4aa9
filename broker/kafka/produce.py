"""Produce on the Kafka listener: Kafka's ProduceRequest to the `produce` handler's body, its answer back.

v3-v13 are served (v13 names topics by id, looked up in the metadata image:
an unknown id is UNKNOWN_TOPIC_ID on each of its partitions). v0-v2 are
advertised only so old librdkafka keeps compression on, and answered
UNSUPPORTED_VERSION on every partition. The route does every check and the
append; this module only translates. The record batches pass through as the
client's bytes. Docs: docs/kafka-listener.md, "Data APIs".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.producer.produce import ProduceRequest

from kraftpy.broker.kafka.data_common import (
    TopicRef,
    answers_in_request_order,
    error_answer,
    error_code,
    error_message,
    leader_endpoints,
    leader_hint,
    resolve_topic,
    unresolved,
)
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import PRODUCE, is_refused_version
from kraftpy.protocol.kafka.codec import EncodedBody
from kraftpy.protocol.kafka.produce_response import (
    LEADER_HINT_VERSION,
    TOPIC_IDS_VERSION,
    PartitionAnswer,
    TopicAnswer,
    encode_produce_response,
)


@dataclass(frozen=True, slots=True)
class ProduceAsk:
    """A decoded Produce: the route's body, and the partitions answered without it (unknown topic ids)."""

    acks: int
    body: dict[str, Any]
    # Per request item, in order: the topic and its partitions.
    items: list[tuple[TopicRef, list[int]]]
    refused: dict[tuple[TopicRef, int], KafkaError] = field(default_factory=dict)


def read_request(request: ProduceRequest, version: int, image: MetadataImage) -> ProduceAsk:
    by_id = version >= TOPIC_IDS_VERSION
    topics: list[dict[str, Any]] = []
    items: list[tuple[TopicRef, list[int]]] = []
    refused: dict[tuple[TopicRef, int], KafkaError] = {}
    for t in request.topic_data or []:
        ref = resolve_topic(image, getattr(t, "name", None), getattr(t, "topic_id", None), by_id)
        indexes = [p.index for p in t.partition_data or []]
        items.append((ref, indexes))
        if is_refused_version(PRODUCE, version):
            error = KafkaError(f"Produce v{version} is not supported; use v3 or later", ErrorCode.UNSUPPORTED_VERSION)
            refused.update({(ref, i): error for i in indexes})
            continue
        if ref.name is None:
            error = unresolved(ref, by_id)
            refused.update({(ref, i): error for i in indexes})
            continue
        # Null records are no batch at all: the route refuses them as Kafka's LogValidator does.
        parts = [{"partition": p.index, "records": p.records or b""} for p in t.partition_data or []]
        topics.append({"name": ref.name, "partitions": parts})
    body: dict[str, Any] = {"acks": request.acks, "timeout_ms": request.timeout_ms, "topics": topics}
    if getattr(request, "transactional_id", None) is not None:
        body["transactional_id"] = request.transactional_id  # the coordinator to verify with (KIP-890)
    return ProduceAsk(request.acks, body, items, refused)


def needs_route(ask: ProduceAsk) -> bool:
    return any(t["partitions"] for t in ask.body["topics"])


def _partition(index: int, answer: Mapping[str, Any], version: int) -> PartitionAnswer:
    return PartitionAnswer(
        index,
        error_code(answer),
        int(answer.get("base_offset", -1)),
        int(answer.get("log_append_time_ms", -1)),
        int(answer.get("log_start_offset", -1)),
        error_message(answer),
        leader_hint(answer) if version >= LEADER_HINT_VERSION else None,
    )


def produce_answers(ask: ProduceAsk, answer: Mapping[str, Any] | None, version: int) -> list[TopicAnswer]:
    """Each partition as the request listed it, from the route's answer or its refusal."""
    return [
        TopicAnswer(ref.name, ref.topic_id, [_partition(index, one, version) for index, one in answers])
        for ref, answers in answers_in_request_order(ask.items, ask.refused, answer)
    ]


def produce_response(
    ask: ProduceAsk, answer: Mapping[str, Any] | None, version: int, image: MetadataImage, listener_name: str
) -> EncodedBody:
    """The Kafka answer's body, with the endpoints of the leaders it names (KIP-951)."""
    topics = produce_answers(ask, answer, version)
    leaders = [p.leader_hint[0] for t in topics for p in t.partitions if p.leader_hint is not None]
    endpoints = leader_endpoints(image, leaders, listener_name) if leaders else []
    return EncodedBody(encode_produce_response(version, topics, endpoints))


def has_error(topics: list[TopicAnswer]) -> bool:
    """True when some partition failed (an acks=0 producer then loses its connection, as with Kafka)."""
    return any(p.error_code != 0 for t in topics for p in t.partitions)


def produce_error(request: ProduceRequest, version: int, error: KafkaError) -> EncodedBody:
    """`error` on every partition (Kafka's getErrorResponse)."""
    answer = error_answer(error)
    topics = [
        TopicAnswer(
            getattr(t, "name", None),
            getattr(t, "topic_id", None),
            [_partition(p.index, answer, version) for p in t.partition_data or []],
        )
        for t in request.topic_data or []
    ]
    return EncodedBody(encode_produce_response(version, topics, []))
