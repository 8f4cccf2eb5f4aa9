"""The values a shell hands to the replication core, and the answers it gets back.

Everything here is a frozen dataclass of plain numbers: the core never looks
at the storage engine, so the shell reads what is needed (log end offset,
an epoch-cache answer) and passes it in. Names follow Kafka's Fetch,
AlterPartition and PartitionRegistration schemas.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.control import TxnMarker
from kraftpy.protocol.records.header import BatchHeader

if TYPE_CHECKING:  # actions.py imports this module
    from kraftpy.broker.replication.actions import Action

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
UNKNOWN_OFFSET = -1
NO_LEADER = -1
UNKNOWN_BROKER_EPOCH = -1
# Kafka's replica id for a consumer fetch (FetchRequest.CONSUMER_REPLICA_ID).
CONSUMER_REPLICA_ID = -1
# Kafka's IsolationLevel: read_committed consumers read only below the last stable offset.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
VALID_ACKS = (0, 1, -1)


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """An answer of the leader-epoch cache: the largest epoch <= the one asked for, and where it ends.

    `end_offset` is exclusive: the start offset of the next epoch, or the LEO
    for the latest epoch. (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) means the
    cache knows no such epoch.
    """

    epoch: int
    end_offset: int

    @property
    def undefined(self) -> bool:
        return self.epoch == UNDEFINED_EPOCH and self.end_offset == UNDEFINED_EPOCH_OFFSET


UNDEFINED_EPOCH_END = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """A partition as the committed metadata log describes it (Partition / PartitionChange records)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    def __post_init__(self) -> None:
        if not set(self.isr) <= set(self.replicas):
            raise ValueError(f"ISR {self.isr} is not a subset of the replicas {self.replicas}")
        if self.leader != NO_LEADER and self.leader not in self.isr:
            raise ValueError(f"leader {self.leader} is not in the ISR {self.isr}")


def may_cut_corrupt_replica(registration: PartitionRegistration, replica_id: int) -> bool:
    """Whether a replica with a corrupt batch may cut its log and refetch: only once another replica leads
    and it is out of the ISR (the controller acted on its report). Before that, or with no leader, its data
    past the damage may be the only copy of committed records."""
    return registration.leader not in (replica_id, NO_LEADER) and replica_id not in registration.isr


@dataclass(frozen=True, slots=True)
class LogState:
    """The numbers of the local log the core needs when a role starts (read by the shell from storage)."""

    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    # The latest epoch in the leader-epoch cache, UNDEFINED_EPOCH when the cache is empty.
    latest_epoch: int = UNDEFINED_EPOCH

    def __post_init__(self) -> None:
        if not 0 <= self.log_start_offset <= self.log_end_offset:
            raise ValueError(f"need 0 <= log start {self.log_start_offset} <= LEO {self.log_end_offset}")


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """One partition of a Fetch request, from a follower (replica_id >= 0) or a consumer (-1)."""

    replica_id: int
    fetch_offset: int
    # The epoch the sender believes the leader has; UNDEFINED_EPOCH skips the check (old clients).
    current_leader_epoch: int = UNDEFINED_EPOCH
    # The epoch of the last batch the sender holds below fetch_offset (KIP-320/KIP-595 truncation detection).
    last_fetched_epoch: int = UNDEFINED_EPOCH
    log_start_offset: int = UNKNOWN_OFFSET
    # The follower's broker registration epoch (KIP-903): a fetch from an older incarnation is stale.
    broker_epoch: int = UNKNOWN_BROKER_EPOCH
    # A consumer's isolation level; followers always read to the log end.
    isolation_level: int = READ_UNCOMMITTED

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED and not self.is_from_follower


@dataclass(frozen=True, slots=True)
class FetchDecision:
    """The leader's answer to one fetch partition, before any bytes are read.

    When `readable`, the shell reads batches in [fetch_offset, max_offset):
    up to the LEO for a follower, up to the high watermark for a consumer,
    up to the last stable offset for a read_committed consumer.
    `actions` are what the fetch caused (a higher HW, completed produces, an
    ISR expansion) and must be performed like any other actions.
    """

    error: ErrorCode = ErrorCode.NONE
    fetch_offset: int = UNKNOWN_OFFSET
    max_offset: int = UNKNOWN_OFFSET
    high_watermark: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    diverging_epoch: EpochEndOffset | None = None
    actions: tuple[Action, ...] = ()
    message: str = ""
    last_stable_offset: int = UNKNOWN_OFFSET

    @property
    def readable(self) -> bool:
        return self.error == ErrorCode.NONE and self.diverging_epoch is None and self.fetch_offset < self.max_offset


@dataclass(frozen=True, slots=True)
class FetchPartitionResponse:
    """What a follower gets back for one partition (Kafka's FetchResponse.PartitionData).

    `log_end_offset` is not in Kafka's schema: it lets a follower resolve
    OFFSET_OUT_OF_RANGE without a ListOffsets round trip.
    """

    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    diverging_epoch: EpochEndOffset | None = None
    records: bytes = b""

    @classmethod
    def from_decision(cls, decision: FetchDecision, records: bytes = b"") -> FetchPartitionResponse:
        return cls(
            error=decision.error,
            high_watermark=decision.high_watermark,
            log_start_offset=decision.log_start_offset,
            log_end_offset=decision.log_end_offset,
            diverging_epoch=decision.diverging_epoch,
            records=records,
        )


@dataclass(frozen=True, slots=True)
class BrokerState:
    """An ISR member with the broker epoch the leader saw it fetch with (AlterPartition v3, KIP-903)."""

    broker_id: int
    broker_epoch: int = UNKNOWN_BROKER_EPOCH


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """A leader's proposal of a new ISR, valid only at the partition epoch it names."""

    leader_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[BrokerState, ...]

    @property
    def isr(self) -> tuple[int, ...]:
        return tuple(b.broker_id for b in self.new_isr)


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    """The controller's answer; on success it carries the committed state."""

    error: ErrorCode = ErrorCode.NONE
    leader_epoch: int = UNDEFINED_EPOCH
    isr: tuple[int, ...] = ()
    partition_epoch: int = UNDEFINED_EPOCH


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """One partition of a Produce request: exactly one batch (as Kafka's Produce v3+ demands).

    The core sees only the batch header (DESIGN.md principle 2); the shell keeps
    the bytes and appends them when told to. `request_id` is the shell's handle
    for the answer, echoed in CompleteProduce. `wall_clock_ms` is the broker's
    wall clock as the request is handled: a LogAppendTime topic's batch timestamp.
    """

    request_id: Hashable
    header: BatchHeader
    acks: int = -1
    timeout_ms: int = 30_000
    wall_clock_ms: int = -1
    # Set for a transaction marker (a control batch the broker built for WriteTxnMarkers).
    marker: TxnMarker | None = None
    # KIP-890 part 1 applies (a client's batch; transaction_partition_verification_enable): a transactional
    # batch that opens its producer's transaction here needs the coordinator's verification first.
    verify_txn: bool = False
