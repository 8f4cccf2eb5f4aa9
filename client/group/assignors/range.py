"""RangeAssignor, Kafka's default: per topic, consecutive ranges of partitions to the members, in member order.

For each topic, the n partitions are split among the c subscribed members:
the first n % c members get n // c + 1, the others n // c. Balanced within
one per topic; across topics the first members get the extra partitions of
every topic (which is why co-partitioned topics line up, and why the sum can
be uneven).
"""

from __future__ import annotations

from collections.abc import Mapping

from kraftpy.client.group.assignors.base import PartitionAssignor, member_sort_key, to_assignments
from kraftpy.protocol.consumer_protocol import Assignment, Subscription
from kraftpy.protocol.types import TopicPartition


class RangeAssignor(PartitionAssignor):
    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        out: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        consumers: dict[str, list[str]] = {}
        for member, subscription in subscriptions.items():
            for topic in subscription.topics:
                if topic in partitions_per_topic:
                    consumers.setdefault(topic, []).append(member)
        for topic in sorted(consumers):
            members = sorted(consumers[topic], key=lambda m: member_sort_key(m, subscriptions[m]))
            count = partitions_per_topic[topic]
            per_member, extra = divmod(count, len(members))
            for i, member in enumerate(members):
                start = per_member * i + min(i, extra)
                length = per_member + (1 if i < extra else 0)
                out[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
        return to_assignments(out)
