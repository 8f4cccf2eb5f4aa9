"""Fetch on the Kafka listener, for consumers: Kafka's FetchRequest to the `fetch` handler's body and back.

v4-v18. Only consumers fetch here (replica_id -1; Kafka's other negative ids
are read as -1): followers fetch over kraftpy's internal RPC, so a replica id
>= 0 (or a ReplicaState naming one) is refused with INVALID_REQUEST on every
partition. Incremental fetch sessions (KIP-227) are refused as a Kafka broker
with no session cache slots refuses them: every answer is a full one with
session_id 0, and an incremental request (a session epoch above 0) gets
FETCH_SESSION_ID_NOT_FOUND at the top level, after which clients fall back to
full fetches. read_committed reads below the LSO with the aborted list
(docs/transactions.md). The batches are the stored bytes, never re-encoded. Docs: docs/kafka-listener.md, "Data APIs".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse

from kraftpy.broker.kafka.data_common import (
    TopicRef,
    answers_in_request_order,
    error_answer,
    error_code,
    leader_endpoints,
    leader_hint,
    resolve_topic,
    unresolved,
)
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.protocol.errors import ErrorCode, KafkaError

TopicResponse = FetchResponse.FetchableTopicResponse
PartitionData = TopicResponse.PartitionData

TOPIC_IDS_VERSION = 13
REPLICA_STATE_VERSION = 15
# KIP-227's session epochs: 0 opens a session, -1 closes one; both ask for a full fetch.
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1


@dataclass(frozen=True, slots=True)
class FetchAsk:
    body: dict[str, Any]
    items: list[tuple[TopicRef, list[int]]]
    read_committed: bool
    refused: dict[tuple[TopicRef, int], KafkaError] = field(default_factory=dict)


def replica_id(request: FetchRequest, version: int) -> int:
    if version >= REPLICA_STATE_VERSION:
        state = getattr(request, "replica_state", None)
        return CONSUMER_REPLICA_ID if state is None else int(state.replica_id)
    return int(request.replica_id)


def session_error(request: FetchRequest, version: int) -> FetchResponse | None:
    """The answer to an incremental fetch (we keep no sessions, so none it names exists), else None."""
    if version < 7 or request.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        return None
    return FetchResponse(
        throttle_time_ms=0,
        error_code=int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
        session_id=NO_SESSION,
        responses=[],
        node_endpoints=[],
    )


def read_request(request: FetchRequest, version: int, image: MetadataImage) -> FetchAsk:
    """The route's body for a consumer fetch; raises INVALID_REQUEST for a replica's fetch."""
    replica = replica_id(request, version)
    if replica >= 0:
        raise KafkaError(
            f"replica {replica} fetches over kraftpy's internal RPC, not the Kafka listener",
            ErrorCode.INVALID_REQUEST,
        )
    by_id = version >= TOPIC_IDS_VERSION
    items: list[tuple[TopicRef, list[int]]] = []
    refused: dict[tuple[TopicRef, int], KafkaError] = {}
    topics: list[dict[str, Any]] = []
    for t in request.topics or []:
        ref = resolve_topic(image, getattr(t, "topic", None), getattr(t, "topic_id", None), by_id)
        items.append((ref, [p.partition for p in t.partitions or []]))
        if ref.name is None:
            error = unresolved(ref, by_id)
            refused.update({(ref, p.partition): error for p in t.partitions or []})
            continue
        parts = []
        for p in t.partitions or []:
            if p.fetch_offset < 0:
                refused[(ref, p.partition)] = KafkaError(
                    f"fetch offset {p.fetch_offset} is negative", ErrorCode.OFFSET_OUT_OF_RANGE
                )
                continue
            parts.append(
                {
                    "partition": p.partition,
                    "fetch_offset": p.fetch_offset,
                    "current_leader_epoch": max(-1, getattr(p, "current_leader_epoch", -1)),
                    "last_fetched_epoch": max(-1, getattr(p, "last_fetched_epoch", -1)),
                    "log_start_offset": max(-1, getattr(p, "log_start_offset", -1)),
                    "partition_max_bytes": max(0, p.partition_max_bytes),
                }
            )
        topics.append({"name": ref.name, "partitions": parts})
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    body = {
        "replica_id": CONSUMER_REPLICA_ID,
        "isolation_level": READ_COMMITTED if read_committed else 0,
        "max_wait_ms": max(0, request.max_wait_ms),
        "min_bytes": max(0, request.min_bytes),
        "max_bytes": max(0, request.max_bytes),
        "topics": topics,
    }
    return FetchAsk(body, items, read_committed, refused)


def needs_route(ask: FetchAsk) -> bool:
    return any(t["partitions"] for t in ask.body["topics"])


def _partition(index: int, answer: Mapping[str, Any], read_committed: bool) -> PartitionData:
    high_watermark = int(answer.get("high_watermark", -1))
    aborted = None  # Kafka: null for read_uncommitted, the list for read_committed
    if read_committed:
        aborted = [
            PartitionData.AbortedTransaction(producer_id=int(a["producer_id"]), first_offset=int(a["first_offset"]))
            for a in answer.get("aborted_transactions") or []
        ]
    out = PartitionData(
        partition_index=index,
        error_code=error_code(answer),
        high_watermark=high_watermark,
        # The route answers the LSO to read_committed fetches; for read_uncommitted ones it is not asked.
        last_stable_offset=int(answer.get("last_stable_offset", high_watermark)),
        log_start_offset=int(answer.get("log_start_offset", -1)),
        aborted_transactions=aborted,
        preferred_read_replica=-1,
        records=answer.get("records") or b"",
    )
    diverging = answer.get("diverging_epoch")
    if diverging is not None:
        out.diverging_epoch = PartitionData.EpochEndOffset(epoch=diverging["epoch"], end_offset=diverging["end_offset"])
    hint = leader_hint(answer)
    if hint is not None:
        out.current_leader = PartitionData.LeaderIdAndEpoch(leader_id=hint[0], leader_epoch=hint[1])
    return out


def fetch_response(
    ask: FetchAsk, answer: Mapping[str, Any] | None, image: MetadataImage, listener_name: str
) -> FetchResponse:
    responses = []
    leaders: list[int] = []
    for ref, answers in answers_in_request_order(ask.items, ask.refused, answer):
        partitions = [_partition(index, one, ask.read_committed) for index, one in answers]
        leaders += [p.current_leader.leader_id for p in partitions if p.current_leader is not None]
        responses.append(TopicResponse(topic=ref.name, topic_id=ref.topic_id, partitions=partitions))
    endpoints = [
        FetchResponse.NodeEndpoint(node_id=n, host=h, port=p, rack=r)
        for n, h, p, r in leader_endpoints(image, leaders, listener_name)
    ]
    return FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=NO_SESSION, responses=responses, node_endpoints=endpoints
    )


def fetch_error(request: FetchRequest, version: int, error: KafkaError) -> FetchResponse:
    """`error` at the top level and on every partition (Kafka's getErrorResponse)."""
    answer = error_answer(error)
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    responses = [
        TopicResponse(
            topic=getattr(t, "topic", None),
            topic_id=getattr(t, "topic_id", None),
            partitions=[_partition(p.partition, answer, read_committed) for p in t.partitions or []],
        )
        for t in request.topics or []
    ]
    return FetchResponse(
        throttle_time_ms=0, error_code=int(error.code), session_id=NO_SESSION, responses=responses, node_endpoints=[]
    )
