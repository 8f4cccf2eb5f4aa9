"""What every partition assignor is and shares (Kafka's ConsumerPartitionAssignor / AbstractPartitionAssignor).

The group leader runs one assignor, the one the coordinator selected among
the members' configured ones, over every member's Subscription and the
partition counts it knows, and hands each member an Assignment. An assignor
is a plain object: no I/O, deterministic for a given input.

Members are ordered as Kafka orders them (MemberInfo): static members first,
by group_instance_id, then dynamic members by member id, so a static member
that restarts under a new member id keeps its place and its partitions.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterable, Mapping

from kraftpy.protocol.consumer_protocol import Assignment, Subscription
from kraftpy.protocol.types import TopicPartition


class RebalanceProtocol(enum.Enum):
    """EAGER: revoke everything before rejoining. COOPERATIVE (KIP-429): revoke only what moves."""

    EAGER = "eager"
    COOPERATIVE = "cooperative"


def member_sort_key(member_id: str, subscription: Subscription) -> tuple[int, str, str]:
    if subscription.group_instance_id is not None:
        return (0, subscription.group_instance_id, member_id)
    return (1, member_id, "")


def sorted_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    return sorted(subscriptions, key=lambda m: member_sort_key(m, subscriptions[m]))


def topic_partitions(topic: str, count: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(count)]


def subscribed_partitions(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> list[TopicPartition]:
    """Every partition of every topic some member subscribes to and metadata knows, sorted."""
    topics = sorted({t for s in subscriptions.values() for t in s.topics if t in partitions_per_topic})
    return [tp for t in topics for tp in topic_partitions(t, partitions_per_topic[t])]


def to_assignments(partitions: Mapping[str, Iterable[TopicPartition]]) -> dict[str, Assignment]:
    return {member: Assignment(tuple(sorted(tps))) for member, tps in partitions.items()}


class PartitionAssignor(abc.ABC):
    """Kafka's ConsumerPartitionAssignor: name, protocols, optional user data, assign, on_assignment."""

    name: str = ""

    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]:
        return (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        """Extra bytes this member sends in its Subscription (the sticky assignor remembers its partitions)."""
        return None

    @abc.abstractmethod
    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        """Every member of `subscriptions` gets an Assignment (possibly empty).

        partitions_per_topic holds the partition count of each topic the leader's
        metadata knows; subscribed topics missing from it are left unassigned.
        """

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:  # noqa: B027 (optional hook)
        """Called on every member with its own assignment once SyncGroup answered."""
