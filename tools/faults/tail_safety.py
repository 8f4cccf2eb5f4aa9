"""When a lost-unsynced-tail fault may run (a pure core): never on the last in-sync copy of a partition.

acks=all without fsync keeps an acknowledged record while one in-sync replica holding it keeps it
(docs/replication.md); every in-sync copy losing power within seconds is outside that guarantee, in
Kafka too. So a `lose-tail` on a node waits until every partition it replicates has another in-sync
replica that has not lost its own tail since it last caught up (`blockers` empty); the shell
(nemesis.py) skips the fault, and says so, when that takes too long. A node counts as caught up again
only by its own answers: its status holds its new registration (so its old incarnation is fenced from
every ISR) and its own metadata lists it in the ISR; another node's view may still list the old one.
And another member counts only while the controller answers its heartbeats: one whose session is
running out is fenced out of the ISR a moment later, whatever every image says now (seed 2304).
Docs: docs/jepsen.md (lose-tail, "The fault model never takes the last in-sync copy").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

NO_ANSWER = -1  # the blocker when no node answered: nothing is known, so nothing may be lost


@dataclass(frozen=True)
class NodeView:
    """What one node answered, its status first and then its metadata of the run's topic."""

    node: int
    holds_own_registration: bool  # its image holds this incarnation's registration (partition roles taken)
    replicas: Mapping[int, tuple[int, ...]]  # partition -> replicas
    isr: Mapping[int, tuple[int, ...]]  # partition -> ISR, as this node's image has it
    heartbeat_age_ms: int | None  # since the controller last answered its heartbeat (None: never)


@dataclass
class TailSafety:
    """The nodes that lost a tail and have not been seen caught up since, per partition."""

    tainted: dict[int, set[int]] = field(default_factory=dict)
    # A member whose last heartbeat answer is older than this may be fenced before the lost tail is
    # back in sync (the nemesis passes half the broker session: the rest is the margin).
    heartbeat_fresh_ms: int = 900

    def lost_tail(self, node: int, partitions: Iterable[int]) -> None:
        """`node` lost its unsynced tails (all of them, as on a power loss) on `partitions`."""
        self.tainted[node] = set(partitions)

    def observe(self, views: Mapping[int, NodeView]) -> None:
        """Clear what the nodes' own answers show caught up again (or no longer a replica there)."""
        for node, partitions in list(self.tainted.items()):
            own = views.get(node)
            if own is None or not own.holds_own_registration:
                continue
            for p in list(partitions):
                if node in own.isr.get(p, ()) or node not in own.replicas.get(p, (node,)):
                    partitions.discard(p)
            if not partitions:
                del self.tainted[node]

    def clean(self, node: int, partition: int) -> bool:
        return partition not in self.tainted.get(node, ())

    def agreed_isrs(self, node: int, views: Mapping[int, NodeView]) -> dict[int, list[int]]:
        """Each partition `node` replicates, with the ISR every answering node agrees on (a member only
        some views list is not counted)."""
        partitions = sorted({p for v in views.values() for p, r in v.replicas.items() if node in r})
        agreed: dict[int, list[int]] = {}
        for p in partitions:
            isrs = [set(v.isr[p]) for v in views.values() if p in v.isr]
            agreed[p] = sorted(set.intersection(*isrs)) if isrs else []
        return agreed

    def blockers(self, node: int, views: Mapping[int, NodeView]) -> dict[int, list[int]]:
        """The partitions `node` replicates that have no other clean in-sync replica, each with its agreed
        ISR. Empty: the node's tails may be lost now. With no answer at all nothing is known:
        {NO_ANSWER: []}.

        A member counts only if it answered itself and its own metadata lists it too: a node that does
        not answer (paused, cut off) may already be fenced out of the ISR by the controller while the
        answering nodes' images still list it (seed 2101, docs/jepsen.md). Its own stale image after a
        pause is the shell's to wait out (nemesis.SETTLE_S). Nor does a member whose heartbeats the
        controller has not answered lately: seed 2304's was fenced 0.5 s before the cut, after a
        controller failover, though every image had listed it for the whole settling time."""
        if not views:
            return {NO_ANSWER: []}
        return {
            p: isr
            for p, isr in self.agreed_isrs(node, views).items()
            if not any(m != node and self.clean(m, p) and self._confirms(views, m, p) for m in isr)
        }

    def _confirms(self, views: Mapping[int, NodeView], member: int, partition: int) -> bool:
        own = views.get(member)
        return (
            own is not None
            and member in own.isr.get(partition, ())
            and own.heartbeat_age_ms is not None
            and own.heartbeat_age_ms <= self.heartbeat_fresh_ms
        )
