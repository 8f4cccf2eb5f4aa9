"""Plain-data views of an image for the CLI and status endpoints (JSON-ready dicts).

The shapes are the ones the admin CLI prints with --json: a topic as
{"name", "topic_id", "partitions": [{"partition", "leader", "leader_epoch",
"replicas", "isr", "elr", "last_known_elr"}], "configs": {...overrides}}, brokers as
{"node_id", "fenced", "in_controlled_shutdown", "rack", "epoch", "listeners"}.
"""

from __future__ import annotations

from typing import Any

from kraftpy.metadata.image.metadata_image import MetadataImage


def topic_names(image: MetadataImage) -> list[str]:
    return sorted(image.topics.by_name)


def topic_description(image: MetadataImage, name: str) -> dict[str, Any] | None:
    """The topic as the CLI shows it, or None when it does not exist."""
    topic = image.topic(name)
    if topic is None:
        return None
    return {
        "name": topic.name,
        "topic_id": str(topic.topic_id),
        "partitions": [
            {
                "partition": p,
                "leader": part.leader,
                "leader_epoch": part.leader_epoch,
                "replicas": list(part.replicas),
                "isr": list(part.isr),
                # KIP-966: replicas out of the ISR that hold every committed record, and the last
                # leader of an ISR that became empty (Kafka's DescribeTopicPartitions fields).
                "elr": list(part.elr),
                "last_known_elr": list(part.last_known_elr),
            }
            for p, part in enumerate(topic.partitions)
        ],
        "configs": dict(sorted(image.topic_config_overrides(name).items())),
    }


def broker_descriptions(image: MetadataImage) -> list[dict[str, Any]]:
    return [
        {
            "node_id": b.broker_id,
            "fenced": b.fenced,
            "in_controlled_shutdown": b.in_controlled_shutdown,
            "rack": b.rack,
            "epoch": b.broker_epoch,
            "listeners": [{"name": x.name, "host": x.host, "port": x.port} for x in b.listeners],
        }
        for _, b in sorted(image.brokers.items())
    ]
