"""Group coordinator settings, with Kafka's broker config names and defaults.

Durations carry their unit in the name (DESIGN.md principle 6); the request
size bounds are kraftpy's own, so a member cannot make the coordinator hold
unbounded metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraftpy.protocol.validate import INT32_MAX


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    # A member's session_timeout_ms must lie within these bounds (group.min/max.session.timeout.ms).
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    # How long the first rebalance of an empty group waits for more members (group.initial.rebalance.delay.ms).
    group_initial_rebalance_delay_ms: int = 3_000
    # Members a group may have (group.max.size).
    group_max_size: int = INT32_MAX
    # Partitions of __consumer_offsets; a group lives on partition hash(group_id) % this (offsets.topic.num.partitions).
    offsets_topic_num_partitions: int = 50
    # Offsets of a group that has had no members for this long are deleted (offsets.retention.minutes, 7 days).
    offsets_retention_minutes: int = 10_080
    # How often expired offsets are looked for (offsets.retention.check.interval.ms).
    offsets_retention_check_interval_ms: int = 600_000
    # Longest metadata string an offset commit may carry (offset.metadata.max.bytes).
    offset_metadata_max_bytes: int = 4_096
    # A member that joined but never received a JoinGroup answer is dropped after this long
    # (Kafka's GroupCoordinator.NewMemberJoinTimeoutMs; it cannot heartbeat yet).
    new_member_join_timeout_ms: int = 300_000
    # kraftpy's bounds on what one member may hand the coordinator.
    max_protocols_per_member: int = 64
    max_protocol_metadata_bytes: int = 1_048_576
    max_id_length: int = 1_024
    # A deliberately broken build (KRAFTPY_TEST_BREAK=commit-any-generation, set by the group shell, only in
    # fault-run tests): OffsetCommit skips the member and generation checks, so a fenced zombie's commit lands.
    test_break_commit_any_generation: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms:
            raise ValueError("need 0 < group_min_session_timeout_ms <= group_max_session_timeout_ms")
        if self.group_initial_rebalance_delay_ms < 0:
            raise ValueError("group_initial_rebalance_delay_ms must not be negative")
        if self.group_max_size < 1:
            raise ValueError("group_max_size must be at least 1")
        if self.offsets_topic_num_partitions < 1:
            raise ValueError("offsets_topic_num_partitions must be at least 1")
        if self.offsets_retention_minutes < 1 or self.offsets_retention_check_interval_ms < 1:
            raise ValueError("offsets_retention_minutes and offsets_retention_check_interval_ms must be positive")
        if self.offset_metadata_max_bytes < 0 or self.new_member_join_timeout_ms < 1:
            raise ValueError("offset_metadata_max_bytes must be >= 0 and new_member_join_timeout_ms positive")

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000
