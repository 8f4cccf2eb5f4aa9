"""What the replication core asks its shell to do.

The core never touches storage or the network; each decision comes back as
a list of these actions, which the shell must perform in order:

  AssignEpochStartOffset  write (leader_epoch, start_offset) to the leader-epoch cache
  AppendAsLeader          append the produce request's batch with log.append_as_leader;
                          storage must assign exactly `base_offset` (assert it)
  AppendAsFollower        append the fetched bytes with log.append_as_follower
  TruncateTo              log.truncate_to(offset); storage may stop at the batch boundary below.
                          At or past the LEO the log stays, but epoch-cache entries starting at or
                          after `offset` must still go (Kafka's truncateTo; an epoch this replica
                          began as leader and never wrote to would otherwise be named again)
  TruncateFullyAndStartAt log.truncate_fully_and_start_at(offset)
  RebuildProducerState    after a truncation: load the newest producer snapshot at or below
                          `end_offset`, replay the log's batch headers up to it, and hand the
                          result to Partition.load_producer_state (Kafka's truncateAndReload)
  UpdateHighWatermark     set (and later checkpoint) the high watermark, clamped to the log by storage
  SendAlterPartition      send the ISR proposal to the active controller; the answer goes to
                          Partition.on_alter_partition_response
  CompleteProduce         answer one partition of a produce request (acks=0: send nothing)
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


Action = (
    AssignEpochStartOffset
    | AppendAsLeader
    | AppendAsFollower
    | TruncateTo
    | TruncateFullyAndStartAt
    | RebuildProducerState
    | UpdateHighWatermark
    | SendAlterPartition
    | CompleteProduce
)
