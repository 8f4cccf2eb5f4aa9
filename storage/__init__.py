"""The partition storage engine: segmented logs, indexes, checkpoints, recovery, retention, compaction.

The public surface, for the replica manager and the Raft log:
PartitionLog (log.py) with LogConfig, AppendInfo, TimestampOffset; the
LeaderEpochCache it keeps; LogCleaner for compacted topics; the error types.
docs/on-disk-format.md describes the files.
"""

from kraftpy.storage.config import LogConfig
from kraftpy.storage.errors import (
    CorruptCheckpointError,
    LogStorageError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from kraftpy.storage.leader_epoch_cache import EpochEntry, LeaderEpochCache
from kraftpy.storage.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    PartitionLog,
    SegmentInfo,
    TimestampOffset,
)

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendInfo",
    "CorruptCheckpointError",
    "EpochEntry",
    "LeaderEpochCache",
    "LogConfig",
    "LogStorageError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "SegmentInfo",
    "TimestampOffset",
    "UnexpectedAppendOffsetError",
]
