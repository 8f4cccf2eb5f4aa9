"""What the Raft component hands its listeners, and when: a pure core the shell drives.

Design notes: docs/raft.md, section "raft/commit_delivery.py".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kraftpy.raft.log import Entry, EntryKind
from kraftpy.raft.quorum_state import Role


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    base_offset: int
    last_offset: int
    epoch: int
    records: list[bytes]


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """Tell the listeners: `leader_id` (None: none known) leads `epoch`."""

    leader_id: int | None
    epoch: int


class CommitDelivery:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.applied = 0  # the next offset the listeners apply (everything below is applied)
        self.commit_target = 0  # the highest high watermark the Raft core exposed
        self._leader_pending: tuple[int, int] | None = None  # (epoch, its first offset)
        self._announced: tuple[int | None, int] | None = None

    # ---- commit and apply ----------------------------------------------------------------

    def start(self, applied: int, high_watermark: int) -> None:
        """On start: the log (or the loaded snapshot) begins at `applied`; entries below the
        checkpointed `high_watermark` were committed."""
        self.applied = applied
        self.commit_target = max(applied, high_watermark)

    def committed(self, high_watermark: int) -> None:
        self.commit_target = max(self.commit_target, high_watermark)

    def snapshot_loaded(self, offset: int) -> None:
        """The listeners loaded a snapshot ending at `offset`."""
        self.applied = max(self.applied, offset)
        self.commit_target = max(self.commit_target, offset)

    @property
    def behind(self) -> bool:
        """Whether committed entries wait to be handed out."""
        return self.applied < self.commit_target

    def runs(self, entries: Iterable[Entry], below_offset: int) -> tuple[list[CommittedBatch], int, int | None]:
        """Split entries read from the log at `applied` into the batches to hand out, in order.
        Only entries below `below_offset` count. Returns (batches, bytes read, the offset after
        the last entry counted, None if none counted)."""
        batches: list[CommittedBatch] = []
        run: list[Entry] = []
        size_bytes = 0
        end: int | None = None
        for entry in entries:
            if entry.offset >= below_offset:
                break
            if entry.kind is not EntryKind.DATA or (run and run[0].epoch != entry.epoch):
                _close(run, batches)
                run = []
            if entry.kind is EntryKind.DATA:
                run.append(entry)
            size_bytes += entry.size_bytes
            end = entry.offset + 1
        _close(run, batches)
        return batches, size_bytes, end

    def delivered(self, batch: CommittedBatch) -> None:
        """`batch` is about to reach the listeners: it counts as applied from now on."""
        self.applied = max(self.applied, batch.last_offset + 1)

    def read_through(self, end_offset: int) -> None:
        """Every entry below `end_offset` was handed out (or was not data)."""
        self.applied = end_offset

    # ---- leadership announcements ----------------------------------------------------------

    def role_changed(self, role: Role, epoch: int, leader_id: int | None, log_end_offset: int) -> LeaderChange | None:
        """The Raft core changed role. This node's own leadership waits for `leader_ready`;
        any other change is announced now (a resigned leader announces no leader)."""
        if role is Role.LEADER:
            self._leader_pending = (epoch, log_end_offset)
            return None
        self._leader_pending = None
        if role is Role.RESIGNED or leader_id == self.node_id:
            leader_id = None
        return self._announce(leader_id, epoch)

    def leader_ready(self, role: Role, epoch: int) -> LeaderChange | None:
        """Called once entries were applied (and after becoming leader), with the core's role
        now: this node's leadership is announced once everything before its first entry of
        the epoch is applied, if it still leads that epoch."""
        pending = self._leader_pending
        if pending is None or self.applied <= pending[1]:
            return None
        if role is not Role.LEADER or epoch != pending[0]:
            return None
        self._leader_pending = None
        return self._announce(self.node_id, epoch)

    def _announce(self, leader_id: int | None, epoch: int) -> LeaderChange | None:
        if self._announced == (leader_id, epoch):
            return None
        self._announced = (leader_id, epoch)
        return LeaderChange(leader_id, epoch)


def _close(run: list[Entry], batches: list[CommittedBatch]) -> None:
    if run:
        batches.append(CommittedBatch(run[0].offset, run[-1].offset, run[0].epoch, [e.data for e in run]))
