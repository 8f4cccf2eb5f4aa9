"""Settings of the transaction coordinator shell, with Kafka's names and defaults, read from the node config.

The core's decisions take a TransactionCoordinatorConfig (broker/txn/config.py); the shell adds how
`__transaction_state` is created and written and how markers are retried.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kraftpy.broker.txn.config import TransactionCoordinatorConfig
from kraftpy.protocol.settings import settings_from


@dataclass(frozen=True, slots=True)
class TxnShellSettings:
    coordinator: TransactionCoordinatorConfig = field(default_factory=TransactionCoordinatorConfig)
    # Replicas of each __transaction_state partition, capped by the live brokers
    # (transaction.state.log.replication.factor).
    transaction_state_log_replication_factor: int = 3
    # min_insync_replicas of __transaction_state (transaction.state.log.min.isr), capped by the
    # replication factor so a one-broker cluster can still run transactions.
    transaction_state_log_min_isr: int = 2
    # segment_bytes of __transaction_state (transaction.state.log.segment.bytes).
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024
    # Bytes read per step when loading a partition (transaction.state.log.load.buffer.size).
    transaction_state_log_load_buffer_size: int = 5 * 1024 * 1024
    # A write to __transaction_state (acks=all) taking longer fails (kraftpy's; Kafka uses request.timeout.ms).
    transaction_state_log_append_timeout_ms: int = 5_000
    # Between two attempts to write a transaction's markers (Kafka's retry.backoff.ms for the marker channel).
    transaction_marker_retry_backoff_ms: int = 100
    # One /broker/write_txn_markers call may take this long (Kafka's request.timeout.ms).
    transaction_marker_request_timeout_ms: int = 30_000

    def __post_init__(self) -> None:
        for name in (
            "transaction_state_log_replication_factor",
            "transaction_state_log_min_isr",
            "transaction_state_log_load_buffer_size",
            "transaction_state_log_append_timeout_ms",
            "transaction_marker_retry_backoff_ms",
            "transaction_marker_request_timeout_ms",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.transaction_state_log_segment_bytes < 14:
            raise ValueError("transaction_state_log_segment_bytes must be at least 14")

    @classmethod
    def from_node_config(cls, config: Any, **overrides: Any) -> TxnShellSettings:
        """The settings a node config names (others: Kafka's defaults). Raises ValueError for bad values."""
        coordinator = settings_from(config, TransactionCoordinatorConfig)
        values = settings_from(config, cls, skip=("coordinator",))
        values.update(overrides)
        values.setdefault("coordinator", TransactionCoordinatorConfig(**coordinator))
        return cls(**values)
