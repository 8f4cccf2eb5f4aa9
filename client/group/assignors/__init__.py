"""Partition assignors, by Kafka's names: "range" (the default), "roundrobin", "sticky", "cooperative-sticky".

`partition_assignment_strategy` in the consumer config lists names (or
PartitionAssignor instances) in order of preference; every name there goes
into JoinGroup and the coordinator picks the one all members support, most
voted first. As Kafka 3.x, the default lists range then cooperative-sticky,
so a group can later move to cooperative rebalancing one rolling restart at
a time.
"""

from __future__ import annotations

from collections.abc import Iterable

from kraftpy.client.group.assignors.base import PartitionAssignor, RebalanceProtocol, member_sort_key
from kraftpy.client.group.assignors.cooperative_sticky import (
    CooperativeStickyAssignor,
    partitions_transferring_ownership,
)
from kraftpy.client.group.assignors.range import RangeAssignor
from kraftpy.client.group.assignors.round_robin import RoundRobinAssignor
from kraftpy.client.group.assignors.sticky import StickyAssignor, sticky_assign

ASSIGNORS: dict[str, type[PartitionAssignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}
DEFAULT_ASSIGNORS = ("range", "cooperative-sticky")


def make_assignors(strategy: Iterable[str | PartitionAssignor]) -> list[PartitionAssignor]:
    """Fresh assignor objects for a consumer (the sticky ones hold per-consumer state)."""
    out: list[PartitionAssignor] = []
    for item in strategy:
        if isinstance(item, PartitionAssignor):
            assignor = item
        elif isinstance(item, str) and item in ASSIGNORS:
            assignor = ASSIGNORS[item]()
        else:
            raise ValueError(f"unknown partition assignor {item!r}; known: {', '.join(ASSIGNORS)}")
        if not assignor.name or any(a.name == assignor.name for a in out):
            raise ValueError(f"assignor names must be non-empty and unique, got {assignor.name!r} twice or empty")
        out.append(assignor)
    if not out:
        raise ValueError("at least one partition assignor is needed")
    return out


def common_protocol(assignors: Iterable[PartitionAssignor]) -> RebalanceProtocol:
    """COOPERATIVE only if every configured assignor supports it (Kafka's ConsumerCoordinator rule)."""
    supported = set(RebalanceProtocol)
    for assignor in assignors:
        supported &= set(assignor.supported_protocols())
    if not supported:
        raise ValueError("the configured assignors share no rebalance protocol")
    return RebalanceProtocol.COOPERATIVE if RebalanceProtocol.COOPERATIVE in supported else RebalanceProtocol.EAGER


__all__ = [
    "ASSIGNORS",
    "DEFAULT_ASSIGNORS",
    "CooperativeStickyAssignor",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "common_protocol",
    "make_assignors",
    "member_sort_key",
    "partitions_transferring_ownership",
    "sticky_assign",
]
