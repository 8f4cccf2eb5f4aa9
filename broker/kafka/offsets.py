"""ListOffsets and OffsetForLeaderEpoch on the Kafka listener: to the broker's routes and back.

ListOffsets v1-v11: latest (-1; the high watermark, or the last stable offset
for isolation_level read_committed), earliest (-2), max-timestamp (-3, KIP-734:
the first record holding the log's largest timestamp) and
timestamp lookups go to the `list_offsets` handler (leader only, KIP-320 epoch
check). Without tiered storage earliest-local (-4) is earliest, and
latest-tiered (-5) and earliest-pending-upload (-6) find nothing (offset -1),
as Kafka answers without remote storage; any other negative
timestamp is INVALID_REQUEST on its partition. OffsetForLeaderEpoch v2-v4 maps to
the `offsets_for_leader_epoch` handler. Docs: docs/kafka-listener.md, "Data APIs".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer.offsets import (
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)

from kraftpy.broker.kafka.data_common import answers_by_partition, error_code
from kraftpy.protocol.errors import ErrorCode, KafkaError

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6

ListTopic = ListOffsetsResponse.ListOffsetsTopicResponse
ListPartition = ListTopic.ListOffsetsPartitionResponse
EpochTopic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochPartition = EpochTopic.EpochEndOffset

_NOT_FOUND = {"error_code": 0, "timestamp": -1, "offset": -1, "leader_epoch": -1}
_MISSING = {"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR)}


@dataclass(frozen=True, slots=True)
class ListOffsetsAsk:
    body: dict[str, Any]
    items: list[tuple[str, list[int]]]
    # Partitions answered here, without the route.
    answered: dict[tuple[str, int], Mapping[str, Any]] = field(default_factory=dict)


def _route_timestamp(timestamp: int) -> int | Mapping[str, Any]:
    """The timestamp to ask the route for, or the answer itself."""
    if timestamp >= 0 or timestamp in (LATEST, EARLIEST, MAX_TIMESTAMP):
        return timestamp
    if timestamp == EARLIEST_LOCAL:
        return EARLIEST  # no tiered storage: the local log starts where the log starts
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return _NOT_FOUND  # nothing is tiered, nothing waits to be
    return {"error_code": int(ErrorCode.INVALID_REQUEST)}


def read_list_offsets(request: ListOffsetsRequest, version: int) -> ListOffsetsAsk:
    items: list[tuple[str, list[int]]] = []
    answered: dict[tuple[str, int], Mapping[str, Any]] = {}
    topics = []
    for t in request.topics or []:
        items.append((t.name, [p.partition_index for p in t.partitions or []]))
        parts = []
        for p in t.partitions or []:
            ts = _route_timestamp(p.timestamp)
            if not isinstance(ts, int):
                answered[(t.name, p.partition_index)] = ts
                continue
            epoch = max(-1, getattr(p, "current_leader_epoch", -1))
            parts.append({"partition": p.partition_index, "current_leader_epoch": epoch, "timestamp": ts})
        topics.append({"name": t.name, "partitions": parts})
    # Followers never list offsets here (they fetch over the RPC); every asker is answered as a consumer.
    # isolation_level 1 (read_committed, v2+): latest is the last stable offset.
    isolation = 1 if getattr(request, "isolation_level", 0) == 1 else 0
    return ListOffsetsAsk({"replica_id": -1, "isolation_level": isolation, "topics": topics}, items, answered)


def needs_route(body: Mapping[str, Any]) -> bool:
    return any(t["partitions"] for t in body["topics"])


def _list_partition(index: int, answer: Mapping[str, Any]) -> ListPartition:
    return ListPartition(
        partition_index=index,
        error_code=error_code(answer),
        old_style_offsets=[],
        timestamp=int(answer.get("timestamp", -1)),
        offset=int(answer.get("offset", -1)),
        leader_epoch=int(answer.get("leader_epoch", -1)),
    )


def list_offsets_response(ask: ListOffsetsAsk, answer: Mapping[str, Any] | None) -> ListOffsetsResponse:
    by_partition = answers_by_partition(answer)
    topics = [
        ListTopic(
            name=name,
            partitions=[
                _list_partition(i, ask.answered.get((name, i)) or by_partition.get((name, i), _MISSING))
                for i in indexes
            ],
        )
        for name, indexes in ask.items
    ]
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def list_offsets_error(request: ListOffsetsRequest, version: int, error: KafkaError) -> ListOffsetsResponse:
    answer = {"error_code": int(error.code)}
    topics = [
        ListTopic(name=t.name, partitions=[_list_partition(p.partition_index, answer) for p in t.partitions or []])
        for t in request.topics or []
    ]
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def read_offsets_for_epoch(request: OffsetForLeaderEpochRequest, version: int) -> dict[str, Any]:
    topics = [
        {
            "name": t.topic,
            "partitions": [
                {
                    "partition": p.partition,
                    "current_leader_epoch": max(-1, p.current_leader_epoch),
                    "leader_epoch": max(-1, p.leader_epoch),
                }
                for p in t.partitions or []
            ],
        }
        for t in request.topics or []
    ]
    # v3+ carries Kafka's replica id (-2 for consumers); the route takes -2..; earlier versions mean a consumer.
    replica = max(-2, getattr(request, "replica_id", -2))
    return {"replica_id": replica, "topics": topics}


def _epoch_partition(index: int, answer: Mapping[str, Any]) -> EpochPartition:
    return EpochPartition(
        error_code=error_code(answer),
        partition=index,
        leader_epoch=int(answer.get("leader_epoch", -1)),
        end_offset=int(answer.get("end_offset", -1)),
    )


def offsets_for_epoch_response(
    request: OffsetForLeaderEpochRequest, answer: Mapping[str, Any] | None
) -> OffsetForLeaderEpochResponse:
    by_partition = answers_by_partition(answer)
    topics = [
        EpochTopic(
            topic=t.topic,
            partitions=[
                _epoch_partition(p.partition, by_partition.get((t.topic, p.partition), _MISSING))
                for p in t.partitions or []
            ],
        )
        for t in request.topics or []
    ]
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


def offsets_for_epoch_error(
    request: OffsetForLeaderEpochRequest, version: int, error: KafkaError
) -> OffsetForLeaderEpochResponse:
    answer = {"error_code": int(error.code)}
    topics = [
        EpochTopic(topic=t.topic, partitions=[_epoch_partition(p.partition, answer) for p in t.partitions or []])
        for t in request.topics or []
    ]
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
