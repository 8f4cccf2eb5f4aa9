"""The Raft log as the core sees it: entries, (offset, epoch) ids, and the read protocol.

Design notes: docs/raft.md, section "raft/log.py".
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

ENTRY_OVERHEAD_BYTES = 16


class OffsetAndEpoch(NamedTuple):
    """An (offset, epoch) pair: a snapshot id, a DivergingEpoch answer, a log position."""

    offset: int
    epoch: int


class EntryKind(enum.IntEnum):
    DATA = 0
    # The first entry of every leader's epoch (KRaft's LeaderChangeMessage control record).
    LEADER_CHANGE = 1


@dataclass(frozen=True, slots=True)
class Entry:
    offset: int
    epoch: int
    data: bytes
    kind: EntryKind = EntryKind.DATA

    @property
    def size_bytes(self) -> int:
        return len(self.data) + ENTRY_OVERHEAD_BYTES


@runtime_checkable
class RaftLog(Protocol):
    """What the core reads. All methods are cheap and never block on a disk sync."""

    @property
    def log_start_offset(self) -> int:
        """The first offset still in the log; equals the latest snapshot's end offset once trimmed."""

    @property
    def end_offset(self) -> int:
        """One past the last entry (the log end offset); written, not necessarily flushed."""

    @property
    def last_epoch(self) -> int:
        """The epoch of the last entry, else the snapshot's epoch, else 0."""

    def end_offset_for(self, epoch: int) -> OffsetAndEpoch:
        """Kafka's OffsetsForLeaderEpoch answer.

        The largest epoch E <= `epoch` the log knows (entries or the snapshot at the
        log start), and the end offset of E: the start offset of the next larger epoch,
        or `end_offset` when E is the last epoch. (-1, -1) when no such epoch exists.
        """

    def read(self, offset: int, max_bytes: int) -> list[Entry]:
        """Entries from `offset` (log_start_offset <= offset <= end_offset), at least one if any."""

    def entry_epoch(self, offset: int) -> int | None:
        """The epoch of the entry at `offset`, or of the snapshot if `offset` is its last offset."""

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        """The id of the newest complete snapshot, if any."""

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        """The size in bytes of a complete snapshot, or None if it is not there."""

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        """Up to `max_bytes` of a complete snapshot from byte `position`."""


class FetchVerdict(enum.Enum):
    VALID = "valid"
    DIVERGING = "diverging"
    SNAPSHOT = "snapshot"


def validate_fetch(log: RaftLog, fetch_offset: int, last_fetched_epoch: int) -> tuple[FetchVerdict, OffsetAndEpoch]:
    """The leader's check of a Fetch position (KRaft's ReplicatedLog.validateOffsetAndEpoch).

    VALID: the follower's log below `fetch_offset` matches ours (same epoch at its last
    entry, hence the same prefix). DIVERGING: the follower must truncate; the pair is
    (epoch, end offset) of the largest epoch we share. SNAPSHOT: the position is behind
    our log start (or only a snapshot can answer it); the pair is our latest snapshot id.
    """
    start = log.log_start_offset
    if start == 0 and fetch_offset == 0:
        return FetchVerdict.VALID, OffsetAndEpoch(0, 0)
    snapshot = log.latest_snapshot()
    if (
        snapshot is not None
        and start > 0
        and (
            fetch_offset < start
            or (fetch_offset == start and last_fetched_epoch != snapshot.epoch)
            or last_fetched_epoch < snapshot.epoch
        )
    ):
        return FetchVerdict.SNAPSHOT, snapshot
    end = log.end_offset_for(last_fetched_epoch)
    if end.epoch != last_fetched_epoch or end.offset < fetch_offset:
        if snapshot is not None and start > 0 and end.offset < start:
            return FetchVerdict.SNAPSHOT, snapshot
        diverging = OffsetAndEpoch(max(end.offset, 0), max(end.epoch, 0))
        return FetchVerdict.DIVERGING, diverging
    return FetchVerdict.VALID, OffsetAndEpoch(fetch_offset, last_fetched_epoch)


def truncation_offset(log: RaftLog, diverging: OffsetAndEpoch) -> int:
    """Where a follower truncates on DivergingEpoch(epoch, end_offset) (KRaft's truncateToEndOffset).

    The follower looks up its own end offset for the leader's epoch; if it has that
    epoch it keeps the shorter of the two ranges, otherwise it keeps its entries up to
    the end of its largest smaller epoch and asks again with that one.
    """
    if diverging.epoch == 0:
        return min(diverging.offset, log.end_offset)
    local = log.end_offset_for(diverging.epoch)
    if local.epoch == diverging.epoch:
        return min(local.offset, diverging.offset)
    return max(local.offset, log.log_start_offset)
