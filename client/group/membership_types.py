"""The membership core's vocabulary: its config, what it asks the shell to do, and what it needs from the consumer.

Design notes: docs/client.md, section "client/group/membership_types.py".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kraftpy.client.group.commits import CommitCallback, OffsetAndMetadata
from kraftpy.client.group.protocol import Node
from kraftpy.protocol.types import TopicPartition


@dataclass(frozen=True, slots=True)
class GroupMembershipConfig:
    group_id: str
    group_instance_id: str | None = None  # static membership (KIP-345)
    client_id: str = ""
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    # Also the rebalance timeout sent in JoinGroup: how long the group waits for this member to rejoin.
    max_poll_interval_ms: int = 300_000
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30_000
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    exclude_internal_topics: bool = True
    # read_committed consumers ask OffsetFetch for stable offsets only (KIP-447): a partition with
    # transactional offsets still pending answers UNSTABLE_OFFSET_COMMIT, retried until it settles.
    require_stable: bool = False

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("group_id must be a non-empty string")
        if self.group_instance_id == "":
            raise ValueError("group_instance_id must be None or a non-empty string")
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms", "request_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        if self.retry_backoff_ms < 0 or self.auto_commit_interval_ms <= 0:
            raise ValueError("retry_backoff_ms must be >= 0 and auto_commit_interval_ms positive")


@dataclass(frozen=True, slots=True)
class SendRequest:
    request_id: int
    api: str
    path: str
    body: dict[str, Any]
    node: Node | None
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class InvokeListener:
    method: str  # "on_partitions_revoked" | "on_partitions_assigned" | "on_partitions_lost"
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class RunCommitCallback:
    callback: CommitCallback
    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    error: Exception | None


GroupAction = SendRequest | InvokeListener | RunCommitCallback


class AssignmentStore(Protocol):
    """What the core needs from the consumer's SubscriptionState."""

    def assigned_partitions(self) -> set[TopicPartition]: ...

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; partitions kept keep their positions, new ones start without one."""

    def all_consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """The position of every assigned partition that has one: what auto-commit commits."""

    def mark_pending_revocation(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop handing out records of these partitions: they are about to be revoked (their commit is running)."""


@dataclass
class SimpleAssignmentStore:
    """An in-memory AssignmentStore: for tests, and the reference for what SubscriptionState has to do."""

    positions: dict[TopicPartition, OffsetAndMetadata | None] = field(default_factory=dict)
    pending_revocation: set[TopicPartition] = field(default_factory=set)

    def assigned_partitions(self) -> set[TopicPartition]:
        return set(self.positions)

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        wanted = set(partitions)
        self.positions = {tp: self.positions.get(tp) for tp in sorted(wanted)}
        self.pending_revocation &= wanted

    def all_consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        # Partitions pending revocation count too: committing them is why they stopped fetching.
        return {tp: om for tp, om in self.positions.items() if om is not None}

    def mark_pending_revocation(self, partitions: Iterable[TopicPartition]) -> None:
        self.pending_revocation |= set(partitions) & set(self.positions)

    def consume(self, tp: TopicPartition, next_offset: int, leader_epoch: int | None = None) -> None:
        """The application consumed up to `next_offset` (what a poll() moves in the real consumer)."""
        if tp not in self.positions:
            raise KeyError(f"{tp} is not assigned")
        if tp in self.pending_revocation:
            raise AssertionError(f"{tp} is pending revocation: the consumer must not return its records")
        self.positions[tp] = OffsetAndMetadata(next_offset, "", leader_epoch)
