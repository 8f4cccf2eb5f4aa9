"""The leader's high-watermark rule, in one function.

HW = max(current HW, min(leader LEO, LEO of every follower in the maximal ISR))

Why this is safe (what "committed" means here):
- A follower's LEO is only what it proved by fetching at the current leader
  epoch after the divergence check (replica.py), so "LEO >= x" means "holds
  the leader's exact prefix up to x".
- A follower whose LEO is unknown (it has not fetched since this replica
  became leader) counts as -1: the HW cannot move until every member of the
  maximal ISR has fetched from the new leader. This is the "leader must have
  an up-to-date view" rule; it is why a new leader can start with a stale HW
  (its follower-time HW) but can never advance it on stale information.
- The maximal ISR covers every replica the controller may elect (isr.py),
  and clean election only picks ISR members, who all hold the prefix.

Kafka does not need Raft's "commit only entries of the current term" rule:
that rule exists because a Raft majority may lack an entry a later leader
has; here the HW requires *every* electable replica to hold the offset, so
no later clean leader can lack it, whatever epoch wrote it.

The HW never goes backwards while one replica stays leader (the max).
A *new* leader's HW may be below the old leader's until its followers
fetch; PartitionLeader.high_watermark_known says when it has caught up to
the start of the leader epoch, which is at least every HW the previous
leaders exposed. Until then ListOffsets(latest) answers OFFSET_NOT_AVAILABLE.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kraftpy.broker.replication.model import UNKNOWN_OFFSET
from kraftpy.broker.replication.replica import RemoteReplicaState


def compute_high_watermark(
    current_high_watermark: int,
    leader_id: int,
    leader_end_offset: int,
    maximal_isr: Iterable[int],
    replicas: Mapping[int, RemoteReplicaState],
) -> int:
    candidate = leader_end_offset
    for broker_id in maximal_isr:
        if broker_id == leader_id:
            continue
        replica = replicas.get(broker_id)
        leo = replica.log_end_offset if replica is not None else UNKNOWN_OFFSET
        if leo < candidate:
            candidate = leo
    return max(current_high_watermark, candidate)
