"""Settings of the broker's data plane, with Kafka's names and defaults.

`ReplicaManagerSettings.from_node_config(config)` takes every field that the
node config names (kraftpy.protocol.settings), so every one of them is a
`kraftpy server` setting; the rest keep Kafka's defaults unless a caller (a
test, a benchmark) passes other values. Every duration carries its unit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kraftpy.broker.replication.config import ReplicationConfig
from kraftpy.protocol.settings import default_of, settings_from


@dataclass(frozen=True, slots=True)
class ReplicaManagerSettings:
    # ISR: a follower not caught up for this long is shrunk out (replica.lag.time.max.ms).
    replica_lag_time_max_ms: int = default_of(ReplicationConfig, "replica_lag_time_max_ms")
    # Follower fetches (replica.fetch.*): long-poll wait, min bytes, per-partition and response byte limits.
    replica_fetch_wait_max_ms: int = default_of(ReplicationConfig, "replica_fetch_wait_max_ms")
    replica_fetch_min_bytes: int = default_of(ReplicationConfig, "replica_fetch_min_bytes")
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_backoff_ms: int = default_of(ReplicationConfig, "replica_fetch_backoff_ms")
    # A follower fetch gets this long beyond its long-poll wait before it counts as failed (replica.socket.timeout.ms).
    replica_socket_timeout_ms: int = 30_000
    # Concurrent fetch requests one fetcher keeps to one source broker (each for partitions not in flight).
    replica_fetcher_max_inflight_requests: int = 3
    # Broker default for topics that do not set min_insync_replicas (min.insync.replicas).
    min_insync_replicas: int = default_of(ReplicationConfig, "min_insync_replicas")
    # HW and recovery-point checkpoints (replica.high.watermark.checkpoint.interval.ms).
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    # How often flush_messages / flush_ms and rolled segments are fsynced in the background.
    log_flush_check_interval_ms: int = 1_000
    # Retention runs this often (log.retention.check.interval.ms).
    log_retention_check_interval_ms: int = 300_000
    # The log cleaner (log.cleaner.enable, log.cleaner.backoff.ms).
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    # Idle producers are forgotten after producer_id_expiration_ms; checked this often.
    producer_id_expiration_ms: int = default_of(ReplicationConfig, "producer_id_expiration_ms")
    producer_id_expiration_check_interval_ms: int = 600_000
    # KIP-890 part 1: a partition leader asks the transaction coordinator before a transactional batch opens
    # a transaction on it (transaction.partition.verification.enable).
    transaction_partition_verification_enable: bool = True
    # An unanswered AlterPartition is proposed again after this long.
    alter_partition_retry_ms: int = default_of(ReplicationConfig, "alter_partition_retry_ms")
    # Produce requests handled at once; more wait for a slot up to their timeout (queued.max.requests).
    queued_max_requests: int = 500
    # Fetches parked in the purgatory at once; beyond this a fetch is answered with what it has.
    fetch_purgatory_max_waiting: int = 10_000
    # Period of the replica manager's tick (ISR expiry, AlterPartition retries, produce timeouts).
    replica_tick_interval_ms: int = 100
    # Timeout of controller calls (AlterPartition, AllocateProducerIds), and of each attempt of a forwarded one.
    controller_request_timeout_ms: int = 2_000
    # How long a client's admin request forwarded to the controller keeps trying while the controller
    # moves, when the request carries no timeout_ms of its own (Kafka: the broker's request.timeout.ms).
    controller_forward_timeout_ms: int = 30_000
    # The log scrubber (no Kafka twin): every batch of every hosted log is reread and checked (CRC32C,
    # framing, offsets, epochs) at most this fast, one pass after another with this pause between
    # passes; 0 bytes per second turns it off. A corrupt batch takes the replica offline for repair.
    log_scrub_bytes_per_second: int = 4 * 1024 * 1024
    log_scrub_interval_ms: int = 86_400_000

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                continue
            if value < 0:
                raise ValueError(f"{f.name} must not be negative, got {value}")
        if self.replica_lag_time_max_ms <= 0 or self.replica_tick_interval_ms <= 0:
            raise ValueError("replica_lag_time_max_ms and replica_tick_interval_ms must be positive")
        if self.min_insync_replicas < 1 or self.queued_max_requests < 1:
            raise ValueError("min_insync_replicas and queued_max_requests must be at least 1")
        if self.replica_fetcher_max_inflight_requests < 1:
            raise ValueError("replica_fetcher_max_inflight_requests must be at least 1")

    @classmethod
    def from_node_config(cls, config: Any, **overrides: Any) -> ReplicaManagerSettings:
        values = settings_from(config, cls)
        if hasattr(config, "controller_quorum_request_timeout_ms"):
            values.setdefault("controller_request_timeout_ms", config.controller_quorum_request_timeout_ms)
        values.update(overrides)
        return cls(**values)
