"""CooperativeStickyAssignor (KIP-429): the sticky assignment, handed out in two phases.

Members of a cooperative group keep their partitions while they rejoin and
say which ones they hold (owned_partitions, with the generation, KIP-341).
The leader computes the sticky assignment, then holds back every partition
that moves from one member to another: in this generation its new owner does
not get it, while its old owner sees it missing and revokes it. Revoking
makes the old owner rejoin at once; in that next rebalance nobody owns the
partition any more and it reaches its new owner. So a partition is never
assigned to two members in one generation, and every partition that does
not move keeps being consumed throughout.
"""

from __future__ import annotations

from collections.abc import Mapping

from kraftpy.client.group.assignors.base import PartitionAssignor, RebalanceProtocol, to_assignments
from kraftpy.client.group.assignors.sticky import MemberData, sticky_assign
from kraftpy.protocol.consumer_protocol import Assignment, Subscription
from kraftpy.protocol.types import TopicPartition


def partitions_transferring_ownership(
    subscriptions: Mapping[str, Subscription], assignment: Mapping[str, list[TopicPartition]]
) -> set[TopicPartition]:
    """Partitions some member gives up (it holds them, they are not assigned to it) and another one gains."""
    revoked: set[TopicPartition] = set()
    added: set[TopicPartition] = set()
    for member, subscription in subscriptions.items():
        owned = set(subscription.owned_partitions)
        assigned = set(assignment.get(member, ()))
        revoked |= owned - assigned
        added |= assigned - owned
    return revoked & added


class CooperativeStickyAssignor(PartitionAssignor):
    name = "cooperative-sticky"

    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]:
        return (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        claims = {m: MemberData(s.owned_partitions, s.generation_id) for m, s in subscriptions.items()}
        assignment = sticky_assign(partitions_per_topic, subscriptions, claims)
        moving = partitions_transferring_ownership(subscriptions, assignment)
        return to_assignments({m: [tp for tp in tps if tp not in moving] for m, tps in assignment.items()})
