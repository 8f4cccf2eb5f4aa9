"""Metadata: brokers, topics, partitions, leaders and leader epochs, from the metadata image.

Answers from the image this broker has replayed (as every Kafka broker does;
it may lag the controller by a metadata fetch). Brokers are the unfenced
ones (Kafka lists live brokers only), each at its first listener. A topic
that does not exist is answered UNKNOWN_TOPIC_OR_PARTITION; a partition
without a leader LEADER_NOT_AVAILABLE (its leader_id is -1). `controller_id`
is the active controller when this node knows it, else -1. `is_internal`
marks Kafka's internal topics (`__consumer_offsets`), which consumers leave
out of pattern subscriptions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kraftpy.broker.api.common import MAX_TOPIC_NAME, MAX_TOPICS_PER_REQUEST, error_fields
from kraftpy.metadata.image.metadata_image import NO_LEADER, MetadataImage
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.topics import is_internal
from kraftpy.protocol.validate import field, invalid, show

if TYPE_CHECKING:
    from kraftpy.broker.shell.replica_manager import ReplicaManager


def broker_list(image: MetadataImage) -> list[dict[str, Any]]:
    out = []
    for broker_id, b in sorted(image.brokers.items()):
        if b.fenced or not b.listeners:
            continue
        listener = b.listeners[0]
        out.append({"node_id": broker_id, "host": listener.host, "port": listener.port, "rack": b.rack})
    return out


def topic_answer(image: MetadataImage, name: str) -> dict[str, Any]:
    topic = image.topic(name)
    if topic is None:
        return {
            "name": name,
            "topic_id": None,
            "is_internal": False,
            **error_fields(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} does not exist"),
            "partitions": [],
        }
    partitions = []
    for index, part in enumerate(topic.partitions):
        error = ErrorCode.LEADER_NOT_AVAILABLE if part.leader == NO_LEADER else ErrorCode.NONE
        partitions.append(
            {
                "partition": index,
                "leader_id": part.leader,
                "leader_epoch": part.leader_epoch,
                "replica_nodes": list(part.replicas),
                "isr_nodes": list(part.isr),
                **error_fields(error, f"{name}-{index} has no leader"),
            }
        )
    return {
        "name": name,
        "topic_id": str(topic.topic_id),
        "is_internal": is_internal(name),
        "error_code": 0,
        "partitions": partitions,
    }


class MetadataHandler:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.rm = replica_manager

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        names = field(body, "topics", list, nullable=True, default=None, max_len=MAX_TOPICS_PER_REQUEST)
        if names is not None:
            for i, name in enumerate(names):
                if not isinstance(name, str) or not 0 < len(name) <= MAX_TOPIC_NAME:
                    raise invalid(f"topics[{i}] must be a topic name (1-{MAX_TOPIC_NAME} characters), got {show(name)}")
        image = self.rm.image()
        wanted = sorted(image.topics.by_name) if names is None else list(dict.fromkeys(names))
        return {
            "cluster_id": self.rm.cluster_id,
            "controller_id": self.rm.controller_id(),
            "brokers": broker_list(image),
            "topics": [topic_answer(image, name) for name in wanted],
        }
