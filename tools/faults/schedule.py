"""The nemesis schedule (a pure core): from a seeded Random, which fault comes next, on what, for how long.

Every nemesis asked for runs once per round, in a random order, so a short run has done each (and the
leader-targeted ones take the three roles in turn, so three of them hit each role once).
Partition faults are planned as drops over the nodes by partitions.py (clients keep reaching
every node they could), client partitions as drops between the client namespace and some nodes
(the nodes keep hearing each other); node faults name a node. A leader-targeted fault names a role (the Raft
leader, a partition's leader, the group coordinator): the shell (run.py) looks its holder up in
the cluster's own metadata and calls `aim()`; the fault's `node` is the holder to use when the
lookup fails. The shell does what a `Fault` says and logs its start and end.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from kraftpy.tools.faults import partitions
from kraftpy.tools.faults.partitions import Drops

PARTITION_NEMESES = ("isolate", "majority", "bridge", "ring", "one-way")
LEADER_NEMESES = ("kill-leader", "pause-leader", "isolate-leader")
DISK_NEMESES = ("lose-tail", "disk-full")
# The clients cut from a minority of the nodes, or from the leader of a partition they write to.
CLIENT_NEMESES = ("client-partition", "client-partition-leader")
NEMESES = ("kill", "pause", *PARTITION_NEMESES, *LEADER_NEMESES, *DISK_NEMESES, *CLIENT_NEMESES)
# What `--nemesis` also accepts: a family stands for all of its nemeses.
FAMILIES: dict[str, tuple[str, ...]] = {
    "partition": PARTITION_NEMESES,
    "leader": LEADER_NEMESES,
    "disk": DISK_NEMESES,
    "client": CLIENT_NEMESES,
    "all": NEMESES,
}
LEADER_ROLES = ("raft-leader", "partition-leader", "coordinator")
ACTIONS = {"kill": "kill", "pause": "pause", "lose-tail": "lose-tail", "disk-full": "disk-full"}
HOLD_S = (1.0, 4.0)  # how long a fault lasts: up to twice the local cluster's broker session timeout
QUIET_S = (0.5, 2.0)  # how long the cluster gets between faults


def expand(names: Iterable[str]) -> tuple[str, ...]:
    """Nemesis and family names -> the nemeses, each once, in NEMESES' order."""
    wanted: set[str] = set()
    for name in names:
        if name in FAMILIES:
            wanted.update(FAMILIES[name])
        elif name in NEMESES:
            wanted.add(name)
        else:
            raise ValueError(f"unknown nemesis {name!r}; known: {', '.join((*NEMESES, *FAMILIES))}")
    return tuple(n for n in NEMESES if n in wanted)


def may_leave_down(fault: Fault) -> frozenset[int]:
    """The nodes a fault may leave down at its heal without that being a failure: the node it killed, and
    the node whose disk it filled (a node whose metadata log directory fails shuts itself down, as Kafka's
    brokers do (KIP-858); the heal starts it again once the disk has room, as Kafka's operators do)."""
    if fault.action in ("kill", "disk-full") and fault.node is not None:
        return frozenset({fault.node})
    return frozenset()


def needs_partitions(nemeses: Iterable[str]) -> list[str]:
    """The nemeses that cut the network (which loopback mode cannot do)."""
    return [n for n in nemeses if action_of(n) == "partition"]


def action_of(nemesis: str) -> str:
    """What the shell does: kill, pause, partition, lose-tail or disk-full."""
    if nemesis.endswith("-leader"):
        nemesis = nemesis.removesuffix("-leader")
    return ACTIONS.get(nemesis, "partition")


@dataclass(frozen=True)
class Fault:
    nemesis: str
    node: int | None  # the node killed, paused, cut or filled (for a leader-targeted fault: the fallback)
    drops: Drops  # the partition (empty for a node fault)
    hold_s: float
    quiet_s: float  # before the fault starts
    role: str | None = None  # leader-targeted: the role whose holder is hit
    partition: int | None = None  # the partition whose leader is hit (role "partition-leader")
    seed: int = 0  # for what the fault itself draws (where lose-tail cuts)

    @property
    def action(self) -> str:
        return action_of(self.nemesis)

    def describe(self) -> dict[str, object]:
        found = {"nemesis": self.nemesis, "node": self.node, "drops": sorted(map(list, self.drops))}
        if self.role is not None:
            found["role"] = self.role
            if self.partition is not None:
                found["partition"] = self.partition
        return found


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
    if nemesis == "client-partition":
        return partitions.cut_clients(nodes, rng.sample(list(nodes), rng.randint(1, max(1, (len(nodes) - 1) // 2))))
    raise ValueError(f"unknown nemesis {nemesis!r}; known: {', '.join(NEMESES)}")


def aim(fault: Fault, node: int, nodes: Sequence[int]) -> Fault:
    """The fault on `node` (a leader-targeted fault once its role's holder is known)."""
    if fault.action != "partition":
        drops: Drops = frozenset()
    elif fault.nemesis.startswith("client-"):
        drops = partitions.cut_clients(nodes, [node])
    else:
        drops = partitions.isolate(nodes, node)
    return replace(fault, node=node, drops=drops)


def next_fault(
    nemesis: str,
    nodes: Sequence[int],
    rng: random.Random,
    *,
    disk_node: int | None = None,
    partition_count: int = 1,
    role: str | None = None,
) -> Fault:
    """One fault of `nemesis`; a leader-targeted one hits `role` (drawn when None)."""
    quiet_s, hold_s, seed = rng.uniform(*QUIET_S), rng.uniform(*HOLD_S), rng.randrange(2**32)
    if nemesis == "client-partition-leader":  # the clients' writes go to partition leaders
        role = "partition-leader"
    if nemesis in LEADER_NEMESES or nemesis == "client-partition-leader":
        role = role or rng.choice(LEADER_ROLES)
        partition = rng.randrange(partition_count) if role == "partition-leader" else None
        fault = Fault(nemesis, None, frozenset(), hold_s, quiet_s, role, partition, seed)
        return aim(fault, rng.choice(list(nodes)), nodes)
    if nemesis == "disk-full":
        if disk_node is None:
            raise ValueError("disk-full needs a node with a small disk of its own (disk_node)")
        return Fault(nemesis, disk_node, frozenset(), hold_s, quiet_s, seed=seed)
    if nemesis in ("kill", "pause", "lose-tail"):
        return Fault(nemesis, rng.choice(list(nodes)), frozenset(), hold_s, quiet_s, seed=seed)
    return Fault(nemesis, None, plan_drops(nemesis, nodes, rng), hold_s, quiet_s, seed=seed)


class Schedule:
    """Every nemesis once per round in a random order; the same seed gives the same faults."""

    def __init__(
        self,
        nemeses: Sequence[str],
        nodes: Sequence[int],
        rng: random.Random,
        *,
        disk_node: int | None = None,
        partition_count: int = 1,
    ) -> None:
        if not nemeses:
            raise ValueError("a schedule needs at least one nemesis")
        self.nemeses = tuple(nemeses)
        self.nodes = tuple(nodes)
        self.rng = rng
        self.disk_node = disk_node
        self.partition_count = partition_count
        self._round: list[str] = []
        self._roles: list[str] = []

    def next(self) -> Fault:
        if not self._round:
            self._round = self.rng.sample(self.nemeses, len(self.nemeses))
        nemesis = self._round.pop()
        role = None
        if nemesis in LEADER_NEMESES:  # the roles in turn too, so a short run hits each of them
            if not self._roles:
                self._roles = self.rng.sample(LEADER_ROLES, len(LEADER_ROLES))
            role = self._roles.pop()
        return next_fault(
            nemesis, self.nodes, self.rng, disk_node=self.disk_node, partition_count=self.partition_count, role=role
        )


# --- overlapping faults (`--schedule overlapping`) -------------------------------------------------
SCHEDULES = ("one-at-a-time", "overlapping")
NODE_ACTIONS = frozenset({"kill", "pause", "lose-tail", "disk-full"})
START_GAP_S = (0.5, 2.0)  # between two fault starts: shorter than HOLD_S, so faults overlap


@dataclass(frozen=True)
class TimedFault:
    """A fault of an overlapping schedule: `fault` from `start_s` to `end_s` (seconds from the workload's start)."""

    fault_id: int
    fault: Fault
    start_s: float
    end_s: float

    def describe(self) -> dict[str, object]:
        return {"fault": self.fault_id, **self.fault.describe()}


def conflicts(a: Fault, b: Fault) -> bool:
    """Whether two faults cannot be on at the same time: two partitions (the run has one partition at a
    time: a new one replaces the rules of the last), or two node faults on one node."""
    if a.action == "partition" and b.action == "partition":
        return True
    return a.action in NODE_ACTIONS and b.action in NODE_ACTIONS and a.node == b.node


def max_node_faults(nodes: Sequence[int]) -> int:
    """Node faults on at once: a minority, so a majority of the quorum is always up (and the run stays live)."""
    return max(1, (len(nodes) - 1) // 2)


def plan_overlapping(
    nemeses: Sequence[str],
    nodes: Sequence[int],
    rng: random.Random,
    time_limit_s: float,
    *,
    disk_node: int | None = None,
    partition_count: int = 1,
) -> list[TimedFault]:
    """Faults whose spans overlap (a pause during a partition, a kill during a partition, ...), in start order.

    Faults come from `Schedule` (every nemesis once per round). One starts every START_GAP_S and holds
    for HOLD_S, so several are on at once; a fault that would conflict with one that is on (see
    `conflicts`, and at most `max_node_faults` node faults at once) starts when that one has ended. A
    leader-targeted fault conflicts as its fallback node; the shell hits the fallback when the role's
    holder is busy (`aim_free`). Faults start until `time_limit_s` and until each nemesis has started
    once; every fault ends by the last `end_s`, so the run heals everything it did."""
    schedule = Schedule(nemeses, nodes, rng, disk_node=disk_node, partition_count=partition_count)
    planned: list[TimedFault] = []
    seen: set[str] = set()
    at_s = 0.0
    while at_s < time_limit_s or seen != set(schedule.nemeses):
        fault = schedule.next()
        at_s += rng.uniform(*START_GAP_S)
        at_s = _first_free(fault, at_s, planned, nodes)  # starts never go back: no fault is planned ahead of one
        planned.append(TimedFault(len(planned) + 1, fault, at_s, at_s + fault.hold_s))
        seen.add(fault.nemesis)
    return planned


def _first_free(fault: Fault, at_s: float, planned: Sequence[TimedFault], nodes: Sequence[int]) -> float:
    """The first time from `at_s` at which `fault` conflicts with none of the planned faults on then."""
    while True:
        on = [t for t in planned if t.start_s <= at_s < t.end_s]
        blocking = [t for t in on if conflicts(fault, t.fault)]
        node_faults = [t for t in on if t.fault.action in NODE_ACTIONS]
        if fault.action in NODE_ACTIONS and len(node_faults) >= max_node_faults(nodes):
            blocking += node_faults
        if not blocking:
            return at_s
        at_s = min(t.end_s for t in blocking)


def aim_free(fault: Fault, holder: int | None, busy: Iterable[int], nodes: Sequence[int]) -> Fault:
    """A leader-targeted fault aimed at the role's holder, or at its planned node when the holder is unknown
    or under another node fault now (the plan kept the planned node free, so faults never stack on a node)."""
    node = holder if holder is not None and holder not in set(busy) else fault.node
    assert node is not None
    return aim(fault, node, nodes)
