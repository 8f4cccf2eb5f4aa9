"""Raft consensus for the metadata quorum (KRaft-style): sans-I/O core, durable log, transport.

The core is `RaftNode` (node.py): feed it messages, ticks and flush completions with
the current time, then perform `take_actions()` in order. docs/raft.md has the
contract; the durable log, the quorum-state file and the transport are shells
around it.
"""

from kraftpy.raft.actions import (
    Action,
    AppendEntries,
    AppendResolved,
    CommitAdvanced,
    Flush,
    InstallSnapshot,
    PersistQuorumState,
    ReadResolved,
    RoleChanged,
    Send,
    TrimLog,
    TruncateTo,
    WriteSnapshotChunk,
)
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.log import Entry, EntryKind, OffsetAndEpoch, RaftLog
from kraftpy.raft.log_view import ShellContractError
from kraftpy.raft.memory_log import MemoryLog
from kraftpy.raft.node import NotLeaderError, RaftInvariantError, RaftNode
from kraftpy.raft.quorum_state import QuorumState, Role

__all__ = [
    "Action",
    "AppendEntries",
    "AppendResolved",
    "CommitAdvanced",
    "Entry",
    "EntryKind",
    "Flush",
    "InstallSnapshot",
    "MemoryLog",
    "NotLeaderError",
    "OffsetAndEpoch",
    "PersistQuorumState",
    "QuorumState",
    "RaftConfig",
    "RaftInvariantError",
    "RaftLog",
    "RaftNode",
    "ReadResolved",
    "Role",
    "RoleChanged",
    "Send",
    "ShellContractError",
    "TrimLog",
    "TruncateTo",
    "WriteSnapshotChunk",
]
