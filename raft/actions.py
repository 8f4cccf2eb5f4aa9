"""What the core asks its shell to do, in the order it must be done.

Design notes: docs/raft.md, section "raft/actions.py".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kraftpy.protocol.errors import ErrorCode
from kraftpy.raft.log import Entry, OffsetAndEpoch
from kraftpy.raft.messages import Message
from kraftpy.raft.quorum_state import QuorumState, Role


@dataclass(frozen=True, slots=True)
class Send:
    message: Message


@dataclass(frozen=True, slots=True)
class PersistQuorumState:
    state: QuorumState


@dataclass(frozen=True, slots=True)
class AppendEntries:
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class TruncateTo:
    offset: int


@dataclass(frozen=True, slots=True)
class Flush:
    up_to_offset: int


@dataclass(frozen=True, slots=True)
class TrimLog:
    """Drop the log below `before_offset`; the latest snapshot ends there."""

    before_offset: int


@dataclass(frozen=True, slots=True)
class WriteSnapshotChunk:
    """Write `data` at `position` of the snapshot being fetched; position 0 starts it afresh
    (a fetch interrupted by a role change starts over)."""

    snapshot_id: OffsetAndEpoch
    position: int
    data: bytes


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    """The fetched snapshot is complete: make it durable, restart the log at its end
    offset (truncate fully) and load it into the state machine."""

    snapshot_id: OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class CommitAdvanced:
    high_watermark: int


@dataclass(frozen=True, slots=True)
class AppendResolved:
    """The proposal appended at [base_offset, last_offset] in `epoch` is resolved.

    error NONE: committed. NOT_LEADER_OR_FOLLOWER or REQUEST_TIMED_OUT: not known to be
    committed; when `appended` is true the entries may still commit later (the caller
    learns it from the committed log: the entry at last_offset with this epoch).
    """

    epoch: int
    base_offset: int
    last_offset: int
    error: ErrorCode = ErrorCode.NONE
    leader_id: int | None = None
    appended: bool = True


@dataclass(frozen=True, slots=True)
class ReadResolved:
    """A linearizable read may be served once the state machine has applied every entry
    below `read_index` (error NONE); otherwise it failed with `error`."""

    read_id: int
    read_index: int
    error: ErrorCode = ErrorCode.NONE
    leader_id: int | None = None


@dataclass(frozen=True, slots=True)
class RoleChanged:
    role: Role
    epoch: int
    leader_id: int | None


Action = (
    Send
    | PersistQuorumState
    | AppendEntries
    | TruncateTo
    | Flush
    | TrimLog
    | WriteSnapshotChunk
    | InstallSnapshot
    | CommitAdvanced
    | AppendResolved
    | ReadResolved
    | RoleChanged
)


class WritableLog(Protocol):
    """The writes a Raft log performs for the core's log actions (MemoryLog, DurableLog)."""

    def append(self, entries: Sequence[Entry]) -> None: ...

    def truncate_to(self, offset: int) -> None: ...

    def trim(self, before_offset: int) -> None: ...

    def write_snapshot_chunk(self, snapshot_id: OffsetAndEpoch, position: int, data: bytes) -> None: ...

    def install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None: ...


def apply_log_action(log: WritableLog, action: Action) -> bool:
    """Perform a log action of the core on `log`; False if `action` is not a log action."""
    if isinstance(action, AppendEntries):
        log.append(action.entries)
    elif isinstance(action, TruncateTo):
        log.truncate_to(action.offset)
    elif isinstance(action, TrimLog):
        log.trim(action.before_offset)
    elif isinstance(action, WriteSnapshotChunk):
        log.write_snapshot_chunk(action.snapshot_id, action.position, action.data)
    elif isinstance(action, InstallSnapshot):
        log.install_snapshot(action.snapshot_id)
    else:
        return False
    return True
