"""Replication settings, with Kafka's names and defaults.

One frozen value per partition (min_insync_replicas is a topic config in
Kafka, so two partitions on one broker may differ). Every duration carries
its unit in its name (DESIGN.md principle 6).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    # A follower that has not caught up to the leader's LEO for this long leaves the ISR (replica.lag.time.max.ms).
    replica_lag_time_max_ms: int = 30_000
    # acks=all needs this many ISR members before and after the append (min.insync.replicas, a topic config).
    min_insync_replicas: int = 1
    # Follower fetches long-poll this long at most (replica.fetch.wait.max.ms) ...
    replica_fetch_wait_max_ms: int = 500
    # ... unless this many bytes are readable (replica.fetch.min.bytes).
    replica_fetch_min_bytes: int = 1
    # After a failed fetch the follower waits this long before the next one (replica.fetch.backoff.ms).
    replica_fetch_backoff_ms: int = 1_000
    # An unanswered AlterPartition is sent again after this long (the AlterPartitionManager's retry).
    alter_partition_retry_ms: int = 2_000
    # Idempotent producers idle this long are forgotten (producer.id.expiration.ms).
    producer_id_expiration_ms: int = 86_400_000
    # How many recent batches per producer are kept for duplicate detection (Kafka's NumBatchesToRetain).
    producer_batches_to_retain: int = 5
    # CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with the leader's
    # clock at append (message.timestamp.type, a topic config; the broker default is CreateTime).
    message_timestamp_type: str = "CreateTime"
    # Deliberately broken builds, for fault runs to show they catch them (KRAFTPY_TEST_BREAK, read by the
    # broker's shell; never set otherwise). ack-before-hw: acks=all answered at the leader's append.
    # truncate-to-hw: a new leader cuts its log to the high watermark of its checkpoint (what followers did
    # before KIP-101); the shell passes that high watermark. append-duplicates: a retried idempotent batch
    # is appended again (no deduplication).
    test_break_ack_before_hw: bool = False
    test_break_truncate_to_hw: bool = False
    test_break_append_duplicates: bool = False

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    def __post_init__(self) -> None:
        if self.replica_lag_time_max_ms <= 0:
            raise ValueError(f"replica_lag_time_max_ms must be positive, got {self.replica_lag_time_max_ms}")
        if self.min_insync_replicas < 1:
            raise ValueError(f"min_insync_replicas must be at least 1, got {self.min_insync_replicas}")
        if self.replica_fetch_wait_max_ms < 0 or self.replica_fetch_backoff_ms < 0:
            raise ValueError("replica_fetch_wait_max_ms and replica_fetch_backoff_ms must not be negative")
        if self.replica_fetch_min_bytes < 0:
            raise ValueError(f"replica_fetch_min_bytes must not be negative, got {self.replica_fetch_min_bytes}")
        if self.alter_partition_retry_ms <= 0:
            raise ValueError(f"alter_partition_retry_ms must be positive, got {self.alter_partition_retry_ms}")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(
                f"message_timestamp_type must be CreateTime or LogAppendTime, not {self.message_timestamp_type}"
            )
        if self.producer_batches_to_retain < 1:
            raise ValueError(f"producer_batches_to_retain must be at least 1, got {self.producer_batches_to_retain}")
