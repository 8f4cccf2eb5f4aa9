"""Metadata, Produce, InitProducerId, Fetch, ListOffsets, OffsetForLeaderEpoch on Kafka's wire.

Each API is a pair: `build(body, version)` turns the body a client core made
into Kafka's request message; `read(response, version)` turns Kafka's
response into the answer shape that core reads (docs/handlers.md's tables).
Pure: no I/O, the message classes come from the codec. Version differences
are the codec's (fields absent in a version are not encoded); only the
semantics that differ are handled here (Metadata v0's empty list, the
idempotent producer's transaction timeout).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kraftpy.client.wire.common import (
    endpoints,
    error_fields,
    leader_details,
    request_class,
    topic_id_text,
)
from kraftpy.protocol.validate import INT32_MAX

PRODUCE, FETCH, LIST_OFFSETS, METADATA, INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH = 0, 1, 2, 3, 22, 23
READ_UNCOMMITTED = 0
# A consumer's full fetch with no session (KIP-227): session id 0, epoch -1 (FINAL_EPOCH).
NO_FETCH_SESSION_ID, FULL_FETCH_EPOCH = 0, -1


def _leader_hint(part_answer: dict[str, Any], current_leader: Any, known: Mapping[int, str]) -> None:
    details = leader_details(current_leader, known) if part_answer["error_code"] else {}
    if details:
        part_answer["details"] = details


# Metadata -------------------------------------------------------------------


def build_metadata(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(METADATA)
    names = body.get("topics")
    # v0: an empty list means every topic; from v1, null does.
    every = [] if version == 0 else None
    topics = every if names is None else [cls.MetadataRequestTopic(name=n) for n in names]
    # No auto-creation from the client's own lookups: a topic is created by the admin client
    # (or by a Kafka client that asks for it); a missing topic is UNKNOWN_TOPIC_OR_PARTITION.
    return cls(topics=topics, allow_auto_topic_creation=bool(body.get("allow_auto_topic_creation", False)))


def read_metadata(response: Any, version: int) -> dict[str, Any]:
    topics = []
    for t in response.topics or []:
        partitions = [
            {
                **error_fields(p.error_code),
                "partition": p.partition_index,
                "leader_id": p.leader_id,
                "leader_epoch": p.leader_epoch if version >= 7 else -1,
                "replica_nodes": list(p.replica_nodes or ()),
                "isr_nodes": list(p.isr_nodes or ()),
            }
            for p in t.partitions or []
        ]
        topics.append(
            {
                **error_fields(t.error_code),
                "name": t.name,
                "topic_id": topic_id_text(getattr(t, "topic_id", None)),
                "is_internal": bool(getattr(t, "is_internal", False)),
                "partitions": partitions,
            }
        )
    return {
        **error_fields(getattr(response, "error_code", 0) if version >= 13 else 0),
        "cluster_id": getattr(response, "cluster_id", None),
        "controller_id": getattr(response, "controller_id", -1),
        "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack} for b in response.brokers],
        "topics": topics,
    }


# Produce and InitProducerId ----------------------------------------------------


def build_produce(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(PRODUCE)
    topics = [
        cls.TopicProduceData(
            name=t["name"],
            partition_data=[
                cls.TopicProduceData.PartitionProduceData(index=p["partition"], records=p["records"])
                for p in t["partitions"]
            ],
        )
        for t in body["topics"]
    ]
    return cls(
        transactional_id=body.get("transactional_id"),
        acks=body["acks"],
        timeout_ms=body["timeout_ms"],
        topic_data=topics,
    )


def read_produce(response: Any, version: int) -> dict[str, Any]:
    known = endpoints(getattr(response, "node_endpoints", None))
    topics = []
    for t in response.responses or []:
        partitions = []
        for p in t.partition_responses or []:
            answer = {
                **error_fields(p.error_code, getattr(p, "error_message", None)),
                "partition": p.index,
                "base_offset": p.base_offset,
                "log_append_time_ms": getattr(p, "log_append_time_ms", -1),
                "log_start_offset": getattr(p, "log_start_offset", -1),
            }
            _leader_hint(answer, getattr(p, "current_leader", None), known)
            partitions.append(answer)
        topics.append({"name": t.name, "partitions": partitions})
    return {"error_code": 0, "topics": topics}


def build_init_producer_id(body: Mapping[str, Any], version: int) -> Any:
    # An idempotent producer without a transactional id: Kafka's producer sends Integer.MAX_VALUE.
    return request_class(INIT_PRODUCER_ID)(
        transactional_id=body.get("transactional_id"),
        transaction_timeout_ms=int(body.get("transaction_timeout_ms", INT32_MAX)),
        producer_id=int(body.get("producer_id", -1)),
        producer_epoch=int(body.get("producer_epoch", -1)),
    )


def read_init_producer_id(response: Any, version: int) -> dict[str, Any]:
    return {
        **error_fields(response.error_code),
        "producer_id": response.producer_id,
        "producer_epoch": response.producer_epoch,
    }


# Fetch ----------------------------------------------------------------------------


def build_fetch(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(FETCH)
    part_cls = cls.FetchTopic.FetchPartition
    topics = [
        cls.FetchTopic(
            topic=t["name"],
            partitions=[
                part_cls(
                    partition=p["partition"],
                    current_leader_epoch=p.get("current_leader_epoch", -1),
                    fetch_offset=p["fetch_offset"],
                    last_fetched_epoch=p.get("last_fetched_epoch", -1),
                    log_start_offset=p.get("log_start_offset", -1),
                    partition_max_bytes=p["partition_max_bytes"],
                )
                for p in t["partitions"]
            ],
        )
        for t in body["topics"]
    ]
    return cls(
        replica_id=body.get("replica_id", -1),
        max_wait_ms=body["max_wait_ms"],
        min_bytes=body["min_bytes"],
        max_bytes=body.get("max_bytes", INT32_MAX),
        isolation_level=body.get("isolation_level", READ_UNCOMMITTED),
        session_id=NO_FETCH_SESSION_ID,
        session_epoch=FULL_FETCH_EPOCH,
        topics=topics,
        forgotten_topics_data=[],
        rack_id="",
    )


def _diverging(part: Any) -> dict[str, int] | None:
    epoch = getattr(part, "diverging_epoch", None)
    if epoch is None or epoch.epoch is None or epoch.epoch < 0:
        return None
    return {"epoch": epoch.epoch, "end_offset": epoch.end_offset}


def read_fetch(response: Any, version: int) -> dict[str, Any]:
    known = endpoints(getattr(response, "node_endpoints", None))
    topics = []
    for t in response.responses or []:
        partitions = []
        for p in t.partitions or []:
            aborted = getattr(p, "aborted_transactions", None)
            answer = {
                **error_fields(p.error_code),
                "partition": p.partition_index,
                "high_watermark": p.high_watermark,
                "last_stable_offset": getattr(p, "last_stable_offset", -1),
                "log_start_offset": getattr(p, "log_start_offset", -1),
                "diverging_epoch": _diverging(p),
                "aborted_transactions": None
                if aborted is None
                else [{"producer_id": a.producer_id, "first_offset": a.first_offset} for a in aborted],
                "records": p.records or b"",
            }
            _leader_hint(answer, getattr(p, "current_leader", None), known)
            partitions.append(answer)
        topics.append({"name": t.topic, "partitions": partitions})
    return {**error_fields(getattr(response, "error_code", 0) or 0), "topics": topics}


# ListOffsets and OffsetForLeaderEpoch -------------------------------------------------------


def build_list_offsets(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(LIST_OFFSETS)
    part_cls = cls.ListOffsetsTopic.ListOffsetsPartition
    topics = [
        cls.ListOffsetsTopic(
            name=t["name"],
            partitions=[
                part_cls(
                    partition_index=p["partition"],
                    current_leader_epoch=p.get("current_leader_epoch", -1),
                    timestamp=p["timestamp"],
                )
                for p in t["partitions"]
            ],
        )
        for t in body["topics"]
    ]
    return cls(
        replica_id=body.get("replica_id", -1),
        isolation_level=body.get("isolation_level", READ_UNCOMMITTED),
        topics=topics,
        timeout_ms=body.get("timeout_ms", 0),
    )


def read_list_offsets(response: Any, version: int) -> dict[str, Any]:
    topics = [
        {
            "name": t.name,
            "partitions": [
                {
                    **error_fields(p.error_code),
                    "partition": p.partition_index,
                    "timestamp": p.timestamp,
                    "offset": p.offset,
                    "leader_epoch": getattr(p, "leader_epoch", -1) if version >= 4 else -1,
                }
                for p in t.partitions or []
            ],
        }
        for t in response.topics or []
    ]
    return {"error_code": 0, "topics": topics}


def build_offsets_for_leader_epoch(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(OFFSET_FOR_LEADER_EPOCH)
    part_cls = cls.OffsetForLeaderTopic.OffsetForLeaderPartition
    topics = [
        cls.OffsetForLeaderTopic(
            topic=t["name"],
            partitions=[
                part_cls(
                    partition=p["partition"],
                    current_leader_epoch=p.get("current_leader_epoch", -1),
                    leader_epoch=p["leader_epoch"],
                )
                for p in t["partitions"]
            ],
        )
        for t in body["topics"]
    ]
    return cls(replica_id=-1, topics=topics)  # -1: a consumer, not a follower (v3+)


def read_offsets_for_leader_epoch(response: Any, version: int) -> dict[str, Any]:
    topics = [
        {
            "name": t.topic,
            "partitions": [
                {
                    **error_fields(p.error_code),
                    "partition": p.partition,
                    "leader_epoch": p.leader_epoch,
                    "end_offset": p.end_offset,
                }
                for p in t.partitions or []
            ],
        }
        for t in response.topics or []
    ]
    return {"error_code": 0, "topics": topics}
