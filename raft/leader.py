"""A leader's bookkeeping for one epoch: replica progress, the commit rule, parked fetches,
pending proposals and reads, and the proposal accumulator.

The commit rule (Raft section 5.4.2, "Figure 8"): the high watermark is the
largest offset below which a majority of voters have the entries durably (the
leader counts its own *flushed* end, a follower the fetch offset it sends,
which it only sends once flushed), and it moves only once that offset is past
the leader's epoch start: the leader-change entry of this epoch has reached a
majority. An entry of an older epoch is never committed by counting replicas
alone; it commits with the first entry of the current epoch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kraftpy.raft.election import majority
from kraftpy.raft.messages import FetchRequest


def quorum_high_watermark(acked_end_offsets: list[int], voter_count: int) -> int:
    """The largest offset that at least a majority of voters have reached."""
    ranked = sorted(acked_end_offsets, reverse=True)
    need = majority(voter_count)
    return ranked[need - 1] if len(ranked) >= need else -1


@dataclass(slots=True)
class ReplicaProgress:
    end_offset: int = 0  # acknowledged (durable) end offset from its last valid fetch
    last_fetch_ms: int = 0
    round: int = 0  # the last read round it echoed
    hw_sent: int = -2  # the high watermark we last told it
    knows_epoch: bool = False  # fetched or answered BeginQuorumEpoch in this epoch


@dataclass(slots=True)
class PendingAppend:
    base_offset: int
    last_offset: int
    deadline_ms: int


@dataclass(slots=True)
class PendingRead:
    read_id: int
    round: int
    deadline_ms: int


@dataclass(slots=True)
class ParkedFetch:
    request: FetchRequest
    deadline_ms: int


@dataclass(slots=True)
class LeaderState:
    epoch: int
    node_id: int
    voters: frozenset[int]
    epoch_start_offset: int  # offset of this epoch's leader-change entry
    now_ms: int
    local_end_offset: int = 0  # our own flushed end offset
    high_watermark: int | None = None  # unknown until the first entry of this epoch commits
    round: int = 0
    progress: dict[int, ReplicaProgress] = field(default_factory=dict)
    observers: dict[int, ReplicaProgress] = field(default_factory=dict)
    parked: dict[int, ParkedFetch] = field(default_factory=dict)
    appends: deque[PendingAppend] = field(default_factory=deque)
    reads: deque[PendingRead] = field(default_factory=deque)
    accumulated: list[bytes] = field(default_factory=list)
    appended_count: int = 0  # proposal records appended in this epoch (after the leader-change entry)
    backlog: deque[tuple[int, int]] = field(default_factory=deque)  # (last offset, bytes) not committed
    backlog_bytes: int = 0
    accumulated_bytes: int = 0
    linger_deadline_ms: int | None = None
    begin_resend_ms: int = 0

    def __post_init__(self) -> None:
        for voter in self.voters:
            if voter != self.node_id:
                # a fresh leader gives every voter a full check-quorum period
                self.progress[voter] = ReplicaProgress(last_fetch_ms=self.now_ms)

    def replica(self, replica_id: int) -> ReplicaProgress:
        if replica_id in self.progress:
            return self.progress[replica_id]
        return self.observers.setdefault(replica_id, ReplicaProgress())

    def on_fetch(self, replica_id: int, now_ms: int, leader_round: int) -> None:
        """Any fetch in our epoch: the replica is alive and follows us."""
        p = self.replica(replica_id)
        p.last_fetch_ms = max(p.last_fetch_ms, now_ms)
        p.round = max(p.round, leader_round)
        p.knows_epoch = True

    def acknowledge(self, replica_id: int, end_offset: int) -> None:
        """A valid fetch at `end_offset`: the replica durably holds our log below it."""
        p = self.replica(replica_id)
        p.end_offset = max(p.end_offset, end_offset)

    def maybe_advance_high_watermark(self) -> bool:
        acked = [self.local_end_offset] + [p.end_offset for p in self.progress.values()]
        candidate = quorum_high_watermark(acked, len(self.voters))
        if candidate <= self.epoch_start_offset:
            return False  # the leader-change entry of this epoch is not on a majority yet
        if self.high_watermark is not None and candidate <= self.high_watermark:
            return False
        self.high_watermark = candidate
        return True

    def quorum_alive(self, now_ms: int, timeout_ms: int) -> bool:
        alive = 1 + sum(1 for p in self.progress.values() if now_ms - p.last_fetch_ms < timeout_ms)
        return alive >= majority(len(self.voters))

    def check_quorum_deadline_ms(self, timeout_ms: int) -> int:
        """The earliest time at which `quorum_alive` can turn false."""
        need_others = majority(len(self.voters)) - 1
        if need_others <= 0:
            return 1 << 62
        recent = sorted((p.last_fetch_ms for p in self.progress.values()), reverse=True)
        return recent[need_others - 1] + timeout_ms

    def read_confirmed(self, read: PendingRead) -> bool:
        if self.high_watermark is None:
            return False
        confirmed = 1 + sum(1 for p in self.progress.values() if p.round >= read.round)
        return confirmed >= majority(len(self.voters))

    def preferred_successors(self) -> tuple[int, ...]:
        """Other voters, most caught up first (then by id, for determinism)."""
        ranked = sorted(self.progress.items(), key=lambda kv: (-kv[1].end_offset, kv[0]))
        return tuple(voter for voter, _ in ranked)
