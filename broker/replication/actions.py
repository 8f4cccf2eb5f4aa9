"""What the replication core asks its shell to do.

Design notes: docs/replication.md, section "broker/replication/actions.py".
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from kraftpy.broker.replication.model import AlterPartitionRequest
from kraftpy.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class AssignEpochStartOffset:
    leader_epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class AppendAsLeader:
    request_id: Hashable
    base_offset: int
    last_offset: int
    leader_epoch: int
    # >= 0: stamp the batch LogAppendTime with this maxTimestamp (and a new CRC) before appending it.
    log_append_time_ms: int = -1


@dataclass(frozen=True, slots=True)
class AppendAsFollower:
    records: bytes
    base_offset: int
    last_offset: int
    # The partition leader epoch of the last batch: the follower's next last_fetched_epoch.
    last_epoch: int


@dataclass(frozen=True, slots=True)
class TruncateTo:
    offset: int


@dataclass(frozen=True, slots=True)
class TruncateFullyAndStartAt:
    offset: int


@dataclass(frozen=True, slots=True)
class RebuildProducerState:
    end_offset: int


@dataclass(frozen=True, slots=True)
class IndexAbortedTxn:
    """An ABORT marker was just appended (leader or follower): add its entry to the segment's .txnindex."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class UpdateHighWatermark:
    offset: int


@dataclass(frozen=True, slots=True)
class SendAlterPartition:
    request: AlterPartitionRequest


@dataclass(frozen=True, slots=True)
class CompleteProduce:
    request_id: Hashable
    error: ErrorCode
    # The batch's offsets; on a duplicate the original batch's, on REQUEST_TIMED_OUT those it was
    # appended at (it may still become committed there), -1 when it was never appended.
    base_offset: int = -1
    last_offset: int = -1
    acks: int = -1
    message: str = ""
    # The append time of a LogAppendTime topic's batch (Produce's logAppendTimeMs); -1 for CreateTime.
    log_append_time_ms: int = -1


Action = (
    AssignEpochStartOffset
    | AppendAsLeader
    | AppendAsFollower
    | TruncateTo
    | TruncateFullyAndStartAt
    | RebuildProducerState
    | IndexAbortedTxn
    | UpdateHighWatermark
    | SendAlterPartition
    | CompleteProduce
)
