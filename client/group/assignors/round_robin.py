"""RoundRobinAssignor: all partitions, sorted, dealt in turn to the members subscribed to their topic.

With identical subscriptions every member ends within one partition of the
others over all topics (unlike range, which balances per topic). With
different subscriptions a partition skips members not subscribed to its
topic, as Kafka's does, and balance is not guaranteed.
"""

from __future__ import annotations

from collections.abc import Mapping

from kraftpy.client.group.assignors.base import PartitionAssignor, sorted_members, subscribed_partitions, to_assignments
from kraftpy.protocol.consumer_protocol import Assignment, Subscription
from kraftpy.protocol.types import TopicPartition


class RoundRobinAssignor(PartitionAssignor):
    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        out: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        members = sorted_members(subscriptions)
        if not members:
            return {}
        topics = {m: set(subscriptions[m].topics) for m in members}
        position = 0
        for tp in subscribed_partitions(partitions_per_topic, subscriptions):
            # Someone subscribes to every listed topic, so this finds a member within one turn.
            while tp.topic not in topics[members[position % len(members)]]:
                position += 1
            out[members[position % len(members)]].append(tp)
            position += 1
        return to_assignments(out)
