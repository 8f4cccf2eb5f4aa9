"""Kafka's names of kraftpy's configs, shared by the broker's Kafka listener and kraftpy's client.

A topic config's Kafka name is its kraftpy name with dots (`retention_ms` is
`retention.ms`); a broker resource carries it under Kafka's broker synonym
(ServerTopicConfigSynonyms), listed here.
"""

from __future__ import annotations

from typing import Any

# Kafka's broker-level synonym of each topic config (ServerTopicConfigSynonyms): the name a broker
# resource carries it under.
BROKER_SYNONYMS: dict[str, str] = {
    "cleanup_policy": "log.cleanup.policy",
    "compression_type": "compression.type",
    "delete_retention_ms": "log.cleaner.delete.retention.ms",
    "file_delete_delay_ms": "log.segment.delete.delay.ms",
    "flush_messages": "log.flush.interval.messages",
    "flush_ms": "log.flush.interval.ms",
    "index_interval_bytes": "log.index.interval.bytes",
    "max_compaction_lag_ms": "log.cleaner.max.compaction.lag.ms",
    "max_message_bytes": "message.max.bytes",
    "message_timestamp_after_max_ms": "log.message.timestamp.after.max.ms",
    "message_timestamp_before_max_ms": "log.message.timestamp.before.max.ms",
    "message_timestamp_type": "log.message.timestamp.type",
    "min_cleanable_dirty_ratio": "log.cleaner.min.cleanable.ratio",
    "min_compaction_lag_ms": "log.cleaner.min.compaction.lag.ms",
    "min_insync_replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "retention_bytes": "log.retention.bytes",
    "retention_ms": "log.retention.ms",
    "segment_bytes": "log.segment.bytes",
    "segment_index_bytes": "log.index.size.max.bytes",
    "segment_jitter_ms": "log.roll.jitter.ms",
    "segment_ms": "log.roll.ms",
    "unclean_leader_election_enable": "unclean.leader.election.enable",
}


def topic_kafka_name(name: str) -> str:
    """`retention_ms` -> `retention.ms` (a dotted name passes unchanged)."""
    return name.replace("_", ".")


def topic_kraftpy_name(kafka_name: str) -> str:
    """`retention.ms` -> `retention_ms`."""
    return kafka_name.replace(".", "_")


BROKER_NAMES_BY_KAFKA = {kafka: name for name, kafka in BROKER_SYNONYMS.items()}


def kafka_value(value: Any) -> str | None:
    """A config value as Kafka's string form (booleans lower case, lists comma-separated)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)
