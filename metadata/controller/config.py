"""The active controller's static settings (Kafka's names in snake_case, Kafka's defaults)."""

from __future__ import annotations

from dataclasses import dataclass

from kraftpy.protocol.errors import ErrorCode, KafkaError

# Kafka hands out producer ids in fixed blocks of 1000 (ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE).
PRODUCER_ID_BLOCK_SIZE = 1000


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    cluster_id: str
    # A broker that has not heartbeaten for this long is fenced (Kafka: broker.session.timeout.ms).
    broker_session_timeout_ms: int = 9000
    # How often brokers heartbeat (Kafka: broker.heartbeat.interval.ms); brokers read it from here.
    broker_heartbeat_interval_ms: int = 2000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    # A broker is rebalanced when more than this share of the partitions it prefers are led elsewhere.
    leader_imbalance_per_broker_percentage: int = 10
    # With auto_leader_rebalance_enable, a partition whose preferred replica is back in its ISR is led by
    # it again after waiting this long (batching a restart's elections), not at the next imbalance check.
    preferred_leader_election_delay_ms: int = 10_000
    # Defaults for CreateTopics' -1 (Kafka: num.partitions, default.replication.factor).
    num_partitions: int = 1
    default_replication_factor: int = 1
    # Topics without their own min.insync.replicas use this (the node's setting, as the brokers do); the
    # controller needs it for the eligible leader replicas (KIP-966).
    min_insync_replicas: int = 1
    # Upper bound on a topic's partitions, so one request cannot produce an unbounded record batch.
    max_partitions_per_topic: int = 10_000
    # An idle active controller writes a NoOp record this often; 0 disables (Kafka: same name).
    metadata_max_idle_interval_ms: int = 500

    def __post_init__(self) -> None:
        positive = (
            "broker_session_timeout_ms",
            "broker_heartbeat_interval_ms",
            "leader_imbalance_check_interval_seconds",
            "num_partitions",
            "default_replication_factor",
            "min_insync_replicas",
            "max_partitions_per_topic",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise KafkaError(f"{name} must be at least 1, got {getattr(self, name)}", ErrorCode.INVALID_CONFIG)
        if not 0 <= self.leader_imbalance_per_broker_percentage <= 100:
            raise KafkaError("leader_imbalance_per_broker_percentage must be in [0, 100]", ErrorCode.INVALID_CONFIG)
        if self.preferred_leader_election_delay_ms < 0:
            raise KafkaError("preferred_leader_election_delay_ms must be >= 0", ErrorCode.INVALID_CONFIG)
        if self.metadata_max_idle_interval_ms < 0:
            raise KafkaError("metadata_max_idle_interval_ms must be >= 0", ErrorCode.INVALID_CONFIG)
        if not self.cluster_id:
            raise KafkaError("cluster_id must be set", ErrorCode.INVALID_CONFIG)
