"""The admin APIs on Kafka's wire: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
IncrementalAlterConfigs, ElectLeaders, and DescribeTopicPartitions (answered by the broker itself).

The admin core names these by their controller paths; any broker takes them
on its Kafka listener and forwards them to the active controller (KRaft), so
the client no longer looks for the controller itself. Config names travel as
Kafka's (`retention.ms`, a broker's `log.retention.ms`) and come back as
kraftpy's (`retention_ms`), so the AdminClient's callers keep one set of
names; values are Kafka's strings, sources Kafka's numbers read as kraftpy's
`topic` / `broker` / `default`. Pure; the classes come from the codec.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kraftpy.client.wire.common import error_fields, request_class, topic_id_text
from kraftpy.protocol.config_names import (
    BROKER_NAMES_BY_KAFKA,
    BROKER_SYNONYMS,
    kafka_value,
    topic_kafka_name,
    topic_kraftpy_name,
)

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_PARTITIONS, ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS = (
    19, 20, 32, 37, 43, 44,
)  # fmt: skip
DESCRIBE_TOPIC_PARTITIONS = 75
# How long the broker may wait for the controller's answer (Kafka's AdminClient sends its request timeout).
ADMIN_TIMEOUT_MS = 30_000
RESOURCE_TYPES = {"topic": 2, "broker": 4}
RESOURCE_NAMES = {v: k for k, v in RESOURCE_TYPES.items()}
OPS = {"set": 0, "delete": 1}
ELECTION_TYPES = {"preferred": 0, "unclean": 1}
# Kafka's ConfigType (DescribeConfigs v3+): the values read back as numbers and booleans.
_INTEGER_TYPES, _BOOLEAN, _DOUBLE = {3, 4, 5}, 1, 6
# Kafka's ConfigSource numbers as kraftpy's answer names the source.
SOURCES = {1: "topic", 2: "broker", 3: "broker", 4: "broker", 5: "default"}


def _kafka_name(resource_type: str, name: str) -> str:
    if resource_type == "broker":
        return BROKER_SYNONYMS.get(name, name)
    return topic_kafka_name(name)


def _kraftpy_name(resource_type: str, name: str) -> str:
    if resource_type == "broker":
        return BROKER_NAMES_BY_KAFKA.get(name, topic_kraftpy_name(name))
    return topic_kraftpy_name(name)


def _typed(value: str | None, config_type: int | None) -> Any:
    """A value in Kafka's string form, as its type says (kraftpy's answers carry typed values)."""
    if value is None:
        return None
    try:
        if config_type in _INTEGER_TYPES:
            return int(value)
        if config_type == _DOUBLE:
            return float(value)
    except ValueError:
        return value
    if config_type == _BOOLEAN and value in ("true", "false"):
        return value == "true"
    return value


def build_create_topics(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(CREATE_TOPICS)
    topic_cls = cls.CreatableTopic
    topics = [
        topic_cls(
            name=t["name"],
            num_partitions=t.get("num_partitions", -1),
            replication_factor=t.get("replication_factor", -1),
            assignments=[
                topic_cls.CreatableReplicaAssignment(partition_index=a["partition"], broker_ids=list(a["broker_ids"]))
                for a in t.get("assignments") or []
            ],
            configs=[
                topic_cls.CreatableTopicConfig(name=topic_kafka_name(k), value=kafka_value(v))
                for k, v in (t.get("configs") or {}).items()
            ],
        )
        for t in body["topics"]
    ]
    return cls(topics=topics, timeout_ms=ADMIN_TIMEOUT_MS, validate_only=bool(body.get("validate_only", False)))


def read_create_topics(response: Any, version: int) -> dict[str, Any]:
    return {
        "error_code": 0,
        "topics": [
            {
                **error_fields(t.error_code, getattr(t, "error_message", None)),
                "name": t.name,
                "topic_id": topic_id_text(getattr(t, "topic_id", None)),
                "num_partitions": getattr(t, "num_partitions", -1),
                "replication_factor": getattr(t, "replication_factor", -1),
            }
            for t in response.topics or []
        ],
    }


def build_delete_topics(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(DELETE_TOPICS)
    names = list(body.get("topic_names") or [])
    return cls(topics=[cls.DeleteTopicState(name=n) for n in names], topic_names=names, timeout_ms=ADMIN_TIMEOUT_MS)


def read_delete_topics(response: Any, version: int) -> dict[str, Any]:
    return {
        "error_code": 0,
        "topics": [
            {
                **error_fields(t.error_code, getattr(t, "error_message", None)),
                "name": t.name,
                "topic_id": topic_id_text(getattr(t, "topic_id", None)),
            }
            for t in response.responses or []
        ],
    }


def build_create_partitions(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(CREATE_PARTITIONS)
    topic_cls = cls.CreatePartitionsTopic
    topics = [
        topic_cls(
            name=t["name"],
            count=t["count"],
            assignments=None
            if not t.get("assignments")
            else [topic_cls.CreatePartitionsAssignment(broker_ids=list(ids)) for ids in t["assignments"]],
        )
        for t in body["topics"]
    ]
    return cls(topics=topics, timeout_ms=ADMIN_TIMEOUT_MS, validate_only=bool(body.get("validate_only", False)))


def read_create_partitions(response: Any, version: int) -> dict[str, Any]:
    return {
        "error_code": 0,
        "topics": [
            {**error_fields(t.error_code, getattr(t, "error_message", None)), "name": t.name}
            for t in response.results or []
        ],
    }


def build_describe_configs(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(DESCRIBE_CONFIGS)
    keys = body.get("configuration_keys")
    resources = []
    for r in body["resources"]:
        kind = r["resource_type"]
        resources.append(
            cls.DescribeConfigsResource(
                resource_type=RESOURCE_TYPES[kind],
                resource_name=r["resource_name"],
                configuration_keys=None if keys is None else [_kafka_name(kind, k) for k in keys],
            )
        )
    return cls(resources=resources, include_synonyms=False, include_documentation=False)


def read_describe_configs(response: Any, version: int) -> dict[str, Any]:
    resources = []
    for r in response.results or []:
        kind = RESOURCE_NAMES.get(r.resource_type, str(r.resource_type))
        resources.append(
            {
                **error_fields(r.error_code, getattr(r, "error_message", None)),
                "resource_type": kind,
                "resource_name": r.resource_name,
                "configs": [
                    {
                        "name": _kraftpy_name(kind, c.name),
                        "value": _typed(c.value, getattr(c, "config_type", None)),
                        "source": SOURCES.get(getattr(c, "config_source", -1), "default"),
                        "is_default": bool(getattr(c, "is_default", False)) or getattr(c, "config_source", -1) == 5,
                    }
                    for c in r.configs or []
                ],
            }
        )
    return {"error_code": 0, "resources": resources}


def build_incremental_alter_configs(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(INCREMENTAL_ALTER_CONFIGS)
    resource_cls = cls.AlterConfigsResource
    resources = []
    for r in body["resources"]:
        kind = r["resource_type"]
        resources.append(
            resource_cls(
                resource_type=RESOURCE_TYPES[kind],
                resource_name=r["resource_name"],
                configs=[
                    resource_cls.AlterableConfig(
                        name=_kafka_name(kind, c["name"]),
                        config_operation=OPS[c["op"]],
                        value=kafka_value(c.get("value")),
                    )
                    for c in r["configs"]
                ],
            )
        )
    return cls(resources=resources, validate_only=bool(body.get("validate_only", False)))


def read_incremental_alter_configs(response: Any, version: int) -> dict[str, Any]:
    return {
        "error_code": 0,
        "resources": [
            {
                **error_fields(r.error_code, getattr(r, "error_message", None)),
                "resource_type": RESOURCE_NAMES.get(r.resource_type, str(r.resource_type)),
                "resource_name": r.resource_name,
            }
            for r in response.responses or []
        ],
    }


def build_elect_leaders(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(ELECT_LEADERS)
    wanted = body.get("topic_partitions")
    election = ELECTION_TYPES[body.get("election_type", "preferred")]
    if version == 0 and election != 0:
        raise ValueError("ElectLeaders v0 elects preferred leaders only")
    return cls(
        election_type=election,
        topic_partitions=None
        if wanted is None
        else [cls.TopicPartitions(topic=t["topic"], partitions=list(t["partitions"])) for t in wanted],
        timeout_ms=ADMIN_TIMEOUT_MS,
    )


def read_elect_leaders(response: Any, version: int) -> dict[str, Any]:
    return {
        **error_fields(getattr(response, "error_code", 0) or 0),
        "topics": [
            {
                "topic": t.topic,
                "partitions": [
                    {"partition": p.partition_id, **error_fields(p.error_code, getattr(p, "error_message", None))}
                    for p in t.partition_result or []
                ],
            }
            for t in response.replica_election_results or []
        ],
    }


def build_describe_topic_partitions(body: Mapping[str, Any], version: int) -> Any:
    cls = request_class(DESCRIBE_TOPIC_PARTITIONS)
    cursor = body.get("cursor")
    return cls(
        topics=[cls.TopicRequest(name=n) for n in body["topics"]],
        response_partition_limit=int(body["response_partition_limit"]),
        cursor=None
        if cursor is None
        else cls.Cursor(topic_name=cursor["topic_name"], partition_index=int(cursor["partition_index"])),
    )


def read_describe_topic_partitions(response: Any, version: int) -> dict[str, Any]:
    topics = []
    for t in response.topics or []:
        partitions = [
            {
                **error_fields(p.error_code),
                "partition": p.partition_index,
                "leader_id": p.leader_id,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replica_nodes or ()),
                "isr_nodes": list(p.isr_nodes or ()),
                "elr": list(p.eligible_leader_replicas or ()),
                "last_known_elr": list(p.last_known_elr or ()),
            }
            for p in t.partitions or []
        ]
        topics.append(
            {
                **error_fields(t.error_code),
                "name": t.name,
                "topic_id": topic_id_text(getattr(t, "topic_id", None)),
                "partitions": partitions,
            }
        )
    cursor = response.next_cursor
    return {
        "error_code": 0,
        "topics": topics,
        "next_cursor": None
        if cursor is None
        else {"topic_name": cursor.topic_name, "partition_index": cursor.partition_index},
    }


APIS: dict[str, tuple[int, Callable[[Mapping[str, Any], int], Any], Callable[[Any, int], dict[str, Any]]]] = {
    "/controller/create_topics": (CREATE_TOPICS, build_create_topics, read_create_topics),
    "/controller/delete_topics": (DELETE_TOPICS, build_delete_topics, read_delete_topics),
    "/controller/create_partitions": (CREATE_PARTITIONS, build_create_partitions, read_create_partitions),
    "/controller/describe_configs": (DESCRIBE_CONFIGS, build_describe_configs, read_describe_configs),
    "/controller/incremental_alter_configs": (
        INCREMENTAL_ALTER_CONFIGS,
        build_incremental_alter_configs,
        read_incremental_alter_configs,
    ),
    "/controller/elect_leaders": (ELECT_LEADERS, build_elect_leaders, read_elect_leaders),
    "/kafka/describe_topic_partitions": (
        DESCRIBE_TOPIC_PARTITIONS,
        build_describe_topic_partitions,
        read_describe_topic_partitions,
    ),
}
