"""What a group member subscribes to: a topic list or a regex pattern, and when that calls for a rejoin.

A pattern is matched in full (`re.fullmatch`, as Java's Pattern.matches)
against every topic the metadata knows, internal topics excluded
(exclude_internal_topics, Kafka's default). The member rejoins when:

* its subscription differs from the one it joined with (subscribe() again,
  or a topic matching the pattern appeared or disappeared);
* it is the leader and the partition counts of the group's topics differ
  from those it assigned with (partitions added, a topic created or deleted):
  Kafka's assignmentSnapshot check. Only the leader watches, since only its
  assignment depends on them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from kraftpy.protocol.topics import is_internal
from kraftpy.protocol.types import TopicPartition


class GroupSubscription:
    def __init__(self, *, exclude_internal_topics: bool = True) -> None:
        self.exclude_internal_topics = exclude_internal_topics
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.joined: frozenset[str] | None = None  # the topics of the last JoinGroup
        self.group_topics: frozenset[str] = frozenset()  # the leader's: every member's topics
        self.assignment_snapshot: dict[str, int | None] | None = None  # the leader's partition counts
        self.partitions_per_topic: dict[str, int] = {}

    @property
    def active(self) -> bool:
        return self.pattern is not None or bool(self.topics)

    def subscribe(self, topics: Iterable[str]) -> None:
        wanted = frozenset(topics)
        if any(not isinstance(t, str) or not t for t in wanted):
            raise ValueError("topic names must be non-empty strings")
        self.pattern = None
        self.topics = wanted

    def subscribe_pattern(self, pattern: str | re.Pattern[str]) -> None:
        self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        self.topics = self._matching(self.partitions_per_topic)

    def unsubscribe(self) -> None:
        self.topics = frozenset()
        self.pattern = None
        self.reset_group()
        self.joined = None

    def reset_group(self) -> None:
        """Not (or no longer) the leader of a generation."""
        self.group_topics = frozenset()
        self.assignment_snapshot = None

    def _matching(self, topics: Iterable[str]) -> frozenset[str]:
        assert self.pattern is not None
        return frozenset(
            t for t in topics if self.pattern.fullmatch(t) and not (self.exclude_internal_topics and is_internal(t))
        )

    def update_metadata(self, partitions_per_topic: Mapping[str, int]) -> None:
        self.partitions_per_topic = dict(partitions_per_topic)
        if self.pattern is not None:
            self.topics = self._matching(partitions_per_topic)

    def metadata_topics(self) -> frozenset[str] | None:
        """Topics the consumer needs metadata for; None means all (a pattern must see every topic)."""
        if self.pattern is not None:
            return None
        return self.topics | self.group_topics

    def snapshot(self, topics: Iterable[str]) -> dict[str, int | None]:
        return {t: self.partitions_per_topic.get(t) for t in sorted(topics)}

    def became_leader(self, group_topics: Iterable[str]) -> dict[str, int]:
        """Record the group's topics and their partition counts; returns the counts to assign with."""
        self.group_topics = frozenset(group_topics)
        self.assignment_snapshot = self.snapshot(self.group_topics)
        return {t: n for t, n in self.assignment_snapshot.items() if n is not None}

    def rejoin_reason(self) -> str | None:
        if self.assignment_snapshot is not None and self.assignment_snapshot != self.snapshot(self.group_topics):
            return "the partitions of the group's topics changed since the last assignment"
        if self.joined is not None and self.joined != self.topics:
            return f"the subscription changed from {sorted(self.joined)} to {sorted(self.topics)}"
        return None

    def matches(self, partitions: Iterable[TopicPartition]) -> bool:
        """Every partition is of a subscribed topic (or one the pattern matches, known yet or not)."""
        for tp in partitions:
            if tp.topic in self.topics:
                continue
            if self.pattern is not None and self._matching([tp.topic]):
                continue
            return False
        return True
