"""Transaction coordinator settings, with Kafka's broker config names and defaults (units in the names)."""

from __future__ import annotations

from dataclasses import dataclass

from kraftpy.broker.groups.config import GroupCoordinatorConfig
from kraftpy.protocol.settings import default_of


@dataclass(frozen=True, slots=True)
class TransactionCoordinatorConfig:
    # Partitions of __transaction_state; a transactional id lives on hash(id) % this
    # (transaction.state.log.num.partitions).
    transaction_state_log_num_partitions: int = 50
    # The longest transaction timeout a producer may ask for (transaction.max.timeout.ms, 15 minutes).
    transaction_max_timeout_ms: int = 900_000
    # A transactional id idle this long (no transaction) is forgotten (transactional.id.expiration.ms, 7 days).
    transactional_id_expiration_ms: int = 604_800_000
    # How often transactions past their timeout are aborted
    # (transaction.abort.timed.out.transaction.cleanup.interval.ms).
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # How often expired transactional ids are removed (transaction.remove.expired.transaction.cleanup.interval.ms).
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # Where a group's offsets live, for AddOffsetsToTxn (offsets.topic.num.partitions, the group coordinator's).
    offsets_topic_num_partitions: int = default_of(GroupCoordinatorConfig, "offsets_topic_num_partitions")
    # kraftpy's bounds on what one producer may hand the coordinator (Kafka has none): partitions in one
    # transaction (each costs a marker) and the length of a transactional id.
    transaction_max_partitions: int = 10_000
    max_id_length: int = 1_024
    # Wait before writing CompleteCommit/CompleteAbort again after a failed write.
    complete_retry_backoff_ms: int = 100

    def __post_init__(self) -> None:
        for name in (
            "transaction_state_log_num_partitions",
            "transaction_max_timeout_ms",
            "transactional_id_expiration_ms",
            "transaction_abort_timed_out_transaction_cleanup_interval_ms",
            "transaction_remove_expired_transaction_cleanup_interval_ms",
            "offsets_topic_num_partitions",
            "transaction_max_partitions",
            "max_id_length",
            "complete_retry_backoff_ms",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
