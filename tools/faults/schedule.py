"""The nemesis schedule (a pure core): from a seeded Random, which fault comes next, on what, for how long.

Partition faults are planned as drops over the members (the nodes and CLIENT) by partitions.py;
`kill` names a node. The shell (run.py) does what a `Fault` says and logs its start and end.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from kraftpy.tools.faults import partitions
from kraftpy.tools.faults.partitions import Drops

PARTITION_NEMESES = ("isolate", "majority", "bridge", "ring", "one-way")
NEMESES = ("kill", *PARTITION_NEMESES)
HOLD_S = (1.0, 4.0)  # how long a fault lasts
QUIET_S = (1.0, 3.0)  # how long the cluster gets between faults


@dataclass(frozen=True)
class Fault:
    nemesis: str
    node: int | None  # the node killed
    drops: Drops  # the partition (empty for kill)
    hold_s: float
    quiet_s: float  # before the fault starts

    def describe(self) -> dict[str, object]:
        return {"nemesis": self.nemesis, "node": self.node, "drops": sorted(map(list, self.drops))}


def plan_drops(nemesis: str, nodes: Sequence[int], rng: random.Random) -> Drops:
    """A partition of the nodes (clients stay connected to every node they can reach)."""
    if nemesis == "isolate":
        return partitions.isolate(nodes, rng.choice(nodes))
    if nemesis == "majority":
        return partitions.majority_split(nodes, rng.sample(list(nodes), rng.randint(1, (len(nodes) - 1) // 2)))
    if nemesis == "bridge":
        return partitions.bridge(rng.sample(list(nodes), len(nodes)))
    if nemesis == "ring":
        return partitions.ring(rng.sample(list(nodes), len(nodes)))
    if nemesis == "one-way":
        src, dst = rng.sample(list(nodes), 2)
        return partitions.one_way(src, dst)
    raise ValueError(f"unknown nemesis {nemesis!r}; known: {', '.join(NEMESES)}")


def next_fault(nemeses: Sequence[str], nodes: Sequence[int], rng: random.Random) -> Fault:
    nemesis = rng.choice(list(nemeses))
    quiet_s, hold_s = rng.uniform(*QUIET_S), rng.uniform(*HOLD_S)
    if nemesis == "kill":
        return Fault(nemesis, rng.choice(list(nodes)), frozenset(), hold_s, quiet_s)
    return Fault(nemesis, None, plan_drops(nemesis, nodes, rng), hold_s, quiet_s)
