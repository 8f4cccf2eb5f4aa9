"""CreateTopics, DeleteTopics, CreatePartitions and DeleteRecords: Kafka messages <-> the controller's dicts.

Pure translation. The controller (`/controller/create_topics`, ...) decides
and validates; this module turns Kafka's request into its body and its answer
into Kafka's response, per version: error messages from v1 (CreateTopics) /
v5 (DeleteTopics), the created topic's partitions, replication factor and
every config with its source from CreateTopics v5, topic ids from v7
(CreateTopics) / v6 (DeleteTopics, which may name topics by id). Topic config
names are Kafka's dotted ones; an unknown one is that topic's INVALID_CONFIG.
DeleteRecords is answered by the partition leader itself: `delete_records_target`
and `low_watermark` are its decisions. Notes: docs/kafka-listener.md, "Admin APIs".
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from kraftpy.broker.kafka.admin_configs import TOPIC, ConfigSource, error_of, kafka_name, kafka_value, kraftpy_name
from kraftpy.metadata.configs import TOPIC_CONFIGS, validate_configs
from kraftpy.protocol.errors import ErrorCode, KafkaError

CreatedTopic = CreateTopicsResponse.CreatableTopicResult
CreatedConfig = CreatedTopic.CreatableTopicConfigs
DeletedTopic = DeleteTopicsResponse.DeletableTopicResult
PartitionsResult = CreatePartitionsResponse.CreatePartitionsTopicResult
RecordsTopic = DeleteRecordsResponse.DeleteRecordsTopicResult
RecordsPartition = RecordsTopic.DeleteRecordsPartitionResult
ZERO_UUID = uuid.UUID(int=0)
# DeleteRecords' offset -1: "up to the high watermark" (Kafka's DeleteRecordsRequest.HIGH_WATERMARK).
HIGH_WATERMARK = -1


@dataclass(frozen=True, slots=True)
class Plan:
    """The controller body (None when nothing is left to ask) and the items refused before asking."""

    body: dict[str, Any] | None
    errors: dict[int, KafkaError] = field(default_factory=dict)  # request item index -> error


def _no_answer() -> KafkaError:
    return KafkaError("the controller gave no answer for this item", ErrorCode.UNKNOWN_SERVER_ERROR)


# --- CreateTopics ------------------------------------------------------------------------------------


def _topic_configs(configs: Sequence[Any]) -> dict[str, Any]:
    """Kafka's [{name, value}] as the controller's {kraftpy name: value}; a null value is no override."""
    out: dict[str, Any] = {}
    for c in configs or []:
        name = kraftpy_name(TOPIC, c.name)
        if c.value is not None:
            out[name] = c.value
    return out


def create_topics_plan(request: CreateTopicsRequest) -> Plan:
    errors: dict[int, KafkaError] = {}
    topics = []
    for i, t in enumerate(request.topics or []):
        try:
            configs = _topic_configs(t.configs)
        except KafkaError as exc:
            errors[i] = exc
            continue
        topics.append(
            {
                "name": t.name,
                "num_partitions": t.num_partitions,
                "replication_factor": t.replication_factor,
                "assignments": [
                    {"partition": a.partition_index, "broker_ids": list(a.broker_ids)} for a in t.assignments or []
                ],
                "configs": configs,
            }
        )
    body = {"topics": topics, "validate_only": bool(request.validate_only)} if topics else None
    return Plan(body, errors)


def created_configs(requested: Sequence[Any], cluster_defaults: Mapping[str, Any]) -> list[CreatedConfig]:
    """Every config of a topic just created with `requested` (Kafka's [{name, value}]), with its source."""
    overrides = validate_configs(_topic_configs(requested))
    out = []
    for name in sorted(TOPIC_CONFIGS):
        if name in overrides:
            value, source = overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG
        elif name in cluster_defaults:
            value, source = cluster_defaults[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        else:
            value, source = TOPIC_CONFIGS[name].default, ConfigSource.DEFAULT_CONFIG
        out.append(
            CreatedConfig(
                name=kafka_name(TOPIC, name),
                value=kafka_value(value),
                read_only=False,
                config_source=int(source),
                is_sensitive=False,
            )
        )
    return out


def _created_error(name: str, error: KafkaError) -> CreatedTopic:
    return CreatedTopic(
        name=name,
        topic_id=ZERO_UUID,
        error_code=int(error.code),
        error_message=error.message,
        topic_config_error_code=0,
        num_partitions=-1,
        replication_factor=-1,
        configs=[],
    )


def create_topics_response(
    request: CreateTopicsRequest,
    version: int,
    plan: Plan,
    answer: Mapping[str, Any] | None,
    cluster_defaults: Mapping[str, Any],
) -> CreateTopicsResponse:
    """Kafka's response in request order; v5+ topics carry their partitions, replication factor and configs."""
    answered = [a for a in (answer or {}).get("topics", []) or [] if isinstance(a, Mapping)]
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for a in answered:
        by_name.setdefault(a.get("name"), []).append(a)
    topics = []
    for i, t in enumerate(request.topics or []):
        error = plan.errors.get(i)
        item = by_name[t.name].pop(0) if error is None and by_name.get(t.name) else None
        if error is None:
            error = _no_answer() if item is None else error_of(item)
        if error is not None or item is None:
            topics.append(_created_error(t.name, error or _no_answer()))
            continue
        topic_id = item.get("topic_id")
        topics.append(
            CreatedTopic(
                name=t.name,
                topic_id=uuid.UUID(topic_id) if isinstance(topic_id, str) else ZERO_UUID,
                error_code=0,
                error_message=None,
                topic_config_error_code=0,
                num_partitions=int(item.get("num_partitions", -1)),
                replication_factor=int(item.get("replication_factor", -1)),
                configs=created_configs(t.configs, cluster_defaults) if version >= 5 else [],
            )
        )
    return CreateTopicsResponse(throttle_time_ms=0, topics=topics)


def create_topics_error(request: CreateTopicsRequest, version: int, error: KafkaError) -> CreateTopicsResponse:
    return CreateTopicsResponse(
        throttle_time_ms=0, topics=[_created_error(t.name, error) for t in request.topics or []]
    )


# --- DeleteTopics ------------------------------------------------------------------------------------


def _deletions(request: DeleteTopicsRequest, version: int) -> list[tuple[str | None, uuid.UUID | None]]:
    """(name, None) or (None, topic id) per topic, in request order; v6 names a topic by either."""
    if version >= 6:
        return [(t.name, None) if t.name is not None else (None, t.topic_id) for t in request.topics or []]
    return [(name, None) for name in request.topic_names or []]


def delete_topics_plan(request: DeleteTopicsRequest, version: int) -> Plan:
    wanted = _deletions(request, version)
    errors: dict[int, KafkaError] = {}
    for i, (name, topic_id) in enumerate(wanted):
        if name is None and topic_id in (None, ZERO_UUID):
            errors[i] = KafkaError("Neither topic name nor id were specified.", ErrorCode.INVALID_REQUEST)
    names = [n for i, (n, _) in enumerate(wanted) if n is not None and i not in errors]
    ids = [str(t) for i, (n, t) in enumerate(wanted) if n is None and i not in errors]
    body = {"topic_names": names, "topic_ids": ids} if names or ids else None
    return Plan(body, errors)


def _deleted(name: str | None, topic_id: uuid.UUID | None, error: KafkaError | None) -> DeletedTopic:
    return DeletedTopic(
        name=name,
        topic_id=topic_id or ZERO_UUID,
        error_code=0 if error is None else int(error.code),
        error_message=None if error is None else error.message,
    )


def delete_topics_response(
    request: DeleteTopicsRequest, version: int, plan: Plan, answer: Mapping[str, Any] | None
) -> DeleteTopicsResponse:
    """In request order. The controller answers names first, then ids, one item each, in the order sent."""
    wanted = _deletions(request, version)
    answered = [a for a in (answer or {}).get("topics", []) or [] if isinstance(a, Mapping)]
    sent_names = [i for i, (n, _) in enumerate(wanted) if n is not None and i not in plan.errors]
    sent_ids = [i for i, (n, _) in enumerate(wanted) if n is None and i not in plan.errors]
    items: dict[int, Mapping[str, Any]] = dict(zip(sent_names + sent_ids, answered, strict=False))
    out = []
    for i, (name, topic_id) in enumerate(wanted):
        error = plan.errors.get(i)
        item = items.get(i)
        if error is None:
            error = _no_answer() if item is None else error_of(item)
        if item is not None:
            name = item.get("name") if name is None else name
            tid = item.get("topic_id")
            topic_id = uuid.UUID(tid) if isinstance(tid, str) else topic_id
        if version < 6 and name is None:
            name = ""
        out.append(_deleted(name, topic_id, error))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=out)


def delete_topics_error(request: DeleteTopicsRequest, version: int, error: KafkaError) -> DeleteTopicsResponse:
    return DeleteTopicsResponse(
        throttle_time_ms=0,
        responses=[
            _deleted(n if n is not None or version >= 6 else "", t, error) for n, t in _deletions(request, version)
        ],
    )


# --- CreatePartitions ----------------------------------------------------------------------------------


def create_partitions_body(request: CreatePartitionsRequest) -> dict[str, Any]:
    topics = []
    for t in request.topics or []:
        item: dict[str, Any] = {"name": t.name, "count": t.count}
        if t.assignments is not None:
            # Kafka lists the new partitions' replicas in order; the controller numbers them from the old count.
            item["assignments"] = [
                {"partition": i, "broker_ids": list(a.broker_ids)} for i, a in enumerate(t.assignments)
            ]
        topics.append(item)
    return {"topics": topics, "validate_only": bool(request.validate_only)}


def create_partitions_response(
    request: CreatePartitionsRequest, answer: Mapping[str, Any] | None
) -> CreatePartitionsResponse:
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for a in (answer or {}).get("topics", []) or []:
        if isinstance(a, Mapping):
            by_name.setdefault(a.get("name"), []).append(a)
    results = []
    for t in request.topics or []:
        item = by_name[t.name].pop(0) if by_name.get(t.name) else None
        error = _no_answer() if item is None else error_of(item)
        results.append(
            PartitionsResult(
                name=t.name,
                error_code=0 if error is None else int(error.code),
                error_message=None if error is None else error.message,
            )
        )
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


def create_partitions_error(
    request: CreatePartitionsRequest, version: int, error: KafkaError
) -> CreatePartitionsResponse:
    return CreatePartitionsResponse(
        throttle_time_ms=0,
        results=[
            PartitionsResult(name=t.name, error_code=int(error.code), error_message=error.message)
            for t in request.topics or []
        ],
    )


# --- DeleteRecords -------------------------------------------------------------------------------------


def delete_records_target(offset: int, log_start_offset: int, high_watermark: int) -> int:
    """The new log start offset of a DeleteRecords at `offset` (-1 = the high watermark).

    OFFSET_OUT_OF_RANGE above the high watermark or below -1, as Kafka's
    Partition.deleteRecordsOnLeader. An offset at or below the log start
    leaves the log as it is (the low watermark is already past it).
    """
    target = high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0 or target > high_watermark:
        raise KafkaError(
            f"Cannot increment the log start offset to {offset}: the high watermark is {high_watermark}",
            ErrorCode.OFFSET_OUT_OF_RANGE,
        )
    return max(target, log_start_offset)


def low_watermark(leader_log_start_offset: int, replica_log_start_offsets: Mapping[int, int], alive: set[int]) -> int:
    """Kafka's lowWatermarkIfLeader: the least log start offset over the leader and its followers on live brokers.

    A follower that has not fetched yet (-1) holds it at -1: a DeleteRecords waits for every live replica.
    """
    starts = [offset for broker_id, offset in replica_log_start_offsets.items() if broker_id in alive]
    return min([leader_log_start_offset, *starts])


def delete_records_response(results: Sequence[tuple[str, Sequence[tuple[int, int, int]]]]) -> DeleteRecordsResponse:
    """`results`: [(topic, [(partition, low watermark, error code)])], in request order."""
    return DeleteRecordsResponse(
        throttle_time_ms=0,
        topics=[
            RecordsTopic(
                name=topic,
                partitions=[
                    RecordsPartition(partition_index=p, low_watermark=low, error_code=code) for p, low, code in parts
                ],
            )
            for topic, parts in results
        ],
    )


def delete_records_error(request: DeleteRecordsRequest, version: int, error: KafkaError) -> DeleteRecordsResponse:
    return delete_records_response(
        [(t.name, [(p.partition_index, -1, int(error.code)) for p in t.partitions or []]) for t in request.topics or []]
    )
