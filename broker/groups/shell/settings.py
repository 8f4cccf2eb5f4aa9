"""Settings of the broker's group coordinator shell, with Kafka's names and defaults, read from the node config.

The coordinator's own decisions take a `GroupCoordinatorConfig` (broker/groups/config.py); the shell adds
what only it uses: how `__consumer_offsets` is created and how long its writes may take.
`GroupShellSettings.from_node_config(config)` takes every field the node config has (node/config.py
validates them), so `kraftpy server` settings reach the coordinator; the rest keep Kafka's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kraftpy.broker.groups import GroupCoordinatorConfig
from kraftpy.broker.shell import fault_injection
from kraftpy.protocol.settings import settings_from

# Kafka's offsets.topic.segment.bytes: small segments, so the compacted topic is cleaned (and loads) quickly.
DEFAULT_OFFSETS_TOPIC_SEGMENT_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class GroupShellSettings:
    coordinator: GroupCoordinatorConfig = field(default_factory=GroupCoordinatorConfig)
    # Replicas of each __consumer_offsets partition, capped by the live brokers (offsets.topic.replication.factor).
    offsets_topic_replication_factor: int = 3
    # segment_bytes of __consumer_offsets (offsets.topic.segment.bytes).
    offsets_topic_segment_bytes: int = DEFAULT_OFFSETS_TOPIC_SEGMENT_BYTES
    # A write to __consumer_offsets (acks=all) that takes longer fails with REQUEST_TIMED_OUT
    # (offsets.commit.timeout.ms).
    offsets_commit_timeout_ms: int = 5_000
    # Bytes read per step when a broker loads an offsets partition (offsets.load.buffer.size).
    offsets_load_buffer_size: int = 5 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.offsets_topic_replication_factor < 1:
            raise ValueError("offsets_topic_replication_factor must be at least 1")
        if self.offsets_topic_segment_bytes < 14:
            raise ValueError("offsets_topic_segment_bytes must be at least 14")
        if self.offsets_commit_timeout_ms < 1 or self.offsets_load_buffer_size < 1:
            raise ValueError("offsets_commit_timeout_ms and offsets_load_buffer_size must be positive")

    @classmethod
    def from_node_config(cls, config: Any, **overrides: Any) -> GroupShellSettings:
        """The settings a node config names (unknown to it: Kafka's defaults). Raises ValueError for bad values."""
        coordinator = settings_from(config, GroupCoordinatorConfig)
        coordinator.setdefault(
            "test_break_commit_any_generation", fault_injection.TEST_BREAK == fault_injection.COMMIT_ANY_GENERATION
        )
        values = settings_from(config, cls, skip=("coordinator",))
        values.update(overrides)
        values.setdefault("coordinator", GroupCoordinatorConfig(**coordinator))
        return cls(**values)
