"""One partition on one broker: the role it plays (leader, follower, none) and its producer state.

This is the object a shell keeps per partition. It turns committed metadata
(PartitionRegistration) into role changes and routes produce, fetch,
AlterPartition answers and ticks to the current role. Requests for a role
this replica does not have are answered with Kafka's codes: a leader epoch
older than ours is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH,
otherwise NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import enum

from kraftpy.broker.replication.actions import Action, CompleteProduce
from kraftpy.broker.replication.config import ReplicationConfig
from kraftpy.broker.replication.follower import PartitionFollower
from kraftpy.broker.replication.leader import PartitionLeader, check_leader_epoch
from kraftpy.broker.replication.model import (
    NO_LEADER,
    UNDEFINED_EPOCH,
    UNKNOWN_BROKER_EPOCH,
    VALID_ACKS,
    AlterPartitionRequest,
    AlterPartitionResponse,
    EpochEndOffset,
    FetchDecision,
    FetchPartition,
    FetchPartitionResponse,
    LogState,
    PartitionRegistration,
    ProduceRequest,
)
from kraftpy.broker.replication.producer_state import ProducerStateManager
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.header import BatchHeader


class Role(enum.Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


def predates_log(registration: PartitionRegistration, latest_epoch: int) -> bool:
    """The registration's leader epoch is below one this replica's log already holds.

    Leader epochs only grow, and a log holds an epoch only after its broker applied a registration with
    it, so such a registration comes from an older metadata image: a restarted broker replaying metadata
    it had acted on before it died. Acting on it would assign an old epoch at the log end, which removes
    the newer leader-epoch entries (the cache keeps epochs monotonic) and so breaks the divergence
    answers a follower truncates by. It is ignored; the newer registration follows as metadata catches up.
    """
    return latest_epoch != UNDEFINED_EPOCH and registration.leader_epoch < latest_epoch


class Partition:
    def __init__(
        self,
        replica_id: int,
        config: ReplicationConfig | None = None,
        producers: ProducerStateManager | None = None,
        broker_epoch: int = UNKNOWN_BROKER_EPOCH,
    ) -> None:
        self.replica_id = replica_id
        self.config = config or ReplicationConfig()
        self.producers = producers or ProducerStateManager(
            self.config.producer_batches_to_retain, self.config.producer_id_expiration_ms
        )
        self.broker_epoch = broker_epoch
        self.registration: PartitionRegistration | None = None
        self.leader: PartitionLeader | None = None
        self.follower: PartitionFollower | None = None

    @property
    def role(self) -> Role:
        if self.leader is not None:
            return Role.LEADER
        if self.follower is not None:
            return Role.FOLLOWER
        return Role.NONE

    @property
    def leader_epoch(self) -> int:
        return self.registration.leader_epoch if self.registration is not None else UNDEFINED_EPOCH

    @property
    def high_watermark(self) -> int | None:
        if self.leader is not None:
            return self.leader.high_watermark
        if self.follower is not None:
            return self.follower.high_watermark
        return None

    # -- metadata ----------------------------------------------------------------------------------------------

    def apply_registration(self, registration: PartitionRegistration, log: LogState, now_ms: int) -> list[Action]:
        """Apply committed partition metadata; `log` is the local log as it is now.

        Older or repeated registrations (by partition epoch) are ignored: the
        metadata log only moves forward.
        """
        current = self.registration
        if current is not None and (
            registration.partition_epoch <= current.partition_epoch or registration.leader_epoch < current.leader_epoch
        ):
            return []
        if predates_log(registration, log.latest_epoch):
            return []
        self.registration = registration
        me = self.replica_id
        if me not in registration.replicas or registration.leader == NO_LEADER:
            return self._end_role("this replica no longer hosts a led copy of the partition")
        if registration.leader == me:
            if self.leader is not None:
                if registration.leader_epoch == self.leader.leader_epoch:
                    return self.leader.update_registration(registration, now_ms)
                return self.leader.new_leader_epoch(registration, now_ms)
            actions = self._end_role("becoming leader")
            self.leader = PartitionLeader(me, registration, log, self.config, self.producers, now_ms)
            return actions + self.leader.start(now_ms)
        follower = self.follower
        if follower is not None and (follower.leader_id, follower.leader_epoch) == (
            registration.leader,
            registration.leader_epoch,
        ):
            follower.partition_epoch = registration.partition_epoch
            return []
        actions = self._end_role(f"replica {registration.leader} leads at epoch {registration.leader_epoch}")
        self.follower = PartitionFollower(me, registration, log, self.config, self.producers, self.broker_epoch)
        return actions

    def _end_role(self, message: str) -> list[Action]:
        actions: list[Action] = []
        if self.leader is not None:
            actions = self.leader.resign(message)
        self.leader = None
        self.follower = None
        return actions

    def stop(self) -> list[Action]:
        """The partition is deleted or moved away: fail what waits and forget the role."""
        return self._end_role("the partition is stopped on this broker")

    def update_config(self, config: ReplicationConfig) -> list[Action]:
        """A topic config changed (min_insync_replicas); the leader may advance its HW at once."""
        self.config = config
        if self.follower is not None:
            self.follower.config = config
        return self.leader.update_config(config) if self.leader is not None else []

    def set_ineligible_replicas(self, brokers: frozenset[int]) -> None:
        """Fenced or shutting-down brokers from the metadata image: the leader will not add them to the ISR."""
        if self.leader is not None:
            self.leader.set_ineligible_replicas(brokers)

    def set_log_start_offset(self, offset: int) -> None:
        """Retention or DeleteRecords moved the log start: the leader answers below it with OFFSET_OUT_OF_RANGE."""
        if self.leader is not None:
            self.leader.set_log_start_offset(offset)
        self.producers.evict_unretained(offset)

    def load_producer_state(self, producers: ProducerStateManager) -> None:
        """Install rebuilt producer state (after RebuildProducerState or a restart)."""
        self.producers = producers
        if self.high_watermark is not None:
            producers.on_high_watermark(self.high_watermark)
        if self.leader is not None:
            self.leader.producers = producers
        if self.follower is not None:
            self.follower.producers = producers

    # -- leader side -------------------------------------------------------------------------------------------

    def _not_leader(self, request_epoch: int) -> tuple[ErrorCode, str]:
        error = (
            check_leader_epoch(request_epoch, self.leader_epoch) if self.registration is not None else ErrorCode.NONE
        )
        if error != ErrorCode.NONE:
            return error, f"request epoch {request_epoch}, known leader epoch {self.leader_epoch}"
        leader = self.registration.leader if self.registration is not None else NO_LEADER
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, f"replica {self.replica_id} is not the leader (leader: {leader})"

    def handle_produce(self, request: ProduceRequest, now_ms: int) -> list[Action]:
        if request.acks not in VALID_ACKS:
            return [
                CompleteProduce(
                    request.request_id,
                    ErrorCode.INVALID_REQUIRED_ACKS,
                    acks=request.acks,
                    message=f"acks must be 0, 1 or -1 (all), got {request.acks}",
                )
            ]
        if self.leader is None:
            error, message = self._not_leader(UNDEFINED_EPOCH)
            return [CompleteProduce(request.request_id, error, acks=request.acks, message=message)]
        return self.leader.handle_produce(request, now_ms)

    def begin_txn_verification(self, header: BatchHeader, now_ms: int) -> int | None:
        """KIP-890 part 1: the guard of the verification this batch needs first, or None if it needs none.

        None also when this replica is not the leader (the produce is refused anyway). The shell asks
        the transaction coordinator and reports the answer with txn_verified.
        """
        if self.leader is None or not self.producers.needs_verification(header):
            return None
        return self.producers.verifications.start(header.producer_id, header.producer_epoch, now_ms)

    def txn_verified(self, producer_id: int, producer_epoch: int, guard: int) -> bool:
        """The coordinator confirmed the partition is in the transaction; False if a marker came in between."""
        return self.producers.verifications.complete(producer_id, producer_epoch, guard)

    def handle_fetch(
        self, request: FetchPartition, leader_epoch_end: EpochEndOffset | None, now_ms: int
    ) -> FetchDecision:
        if self.leader is None:
            error, message = self._not_leader(request.current_leader_epoch)
            return FetchDecision(error=error, fetch_offset=request.fetch_offset, message=message)
        return self.leader.handle_fetch(request, leader_epoch_end, now_ms)

    def check_fetch(self, request: FetchPartition, leader_epoch_end: EpochEndOffset | None) -> FetchDecision:
        if self.leader is None:
            error, message = self._not_leader(request.current_leader_epoch)
            return FetchDecision(error=error, fetch_offset=request.fetch_offset, message=message)
        return self.leader.check_fetch(request, leader_epoch_end)

    def list_offsets_latest(
        self, current_leader_epoch: int = UNDEFINED_EPOCH, read_committed: bool = False
    ) -> tuple[ErrorCode, int]:
        if self.leader is None:
            return self._not_leader(current_leader_epoch)[0], -1
        return self.leader.list_offsets_latest(current_leader_epoch, read_committed)

    def on_alter_partition_response(
        self, request: AlterPartitionRequest, response: AlterPartitionResponse, now_ms: int
    ) -> list[Action]:
        if self.leader is None:
            return []
        return self.leader.on_alter_partition_response(request, response, now_ms)

    # -- follower side -----------------------------------------------------------------------------------------

    def build_fetch(self, log: LogState, now_ms: int) -> FetchPartition | None:
        return self.follower.build_fetch(log, now_ms) if self.follower is not None else None

    def on_fetch_response(
        self,
        request: FetchPartition,
        response: FetchPartitionResponse,
        now_ms: int,
        own_epoch_end: EpochEndOffset | None = None,
    ) -> list[Action]:
        if self.follower is None:
            return []
        return self.follower.on_fetch_response(request, response, now_ms, own_epoch_end)

    def on_fetch_error(self, request: FetchPartition, now_ms: int) -> None:
        if self.follower is not None:
            self.follower.on_fetch_error(request, now_ms)

    # -- time --------------------------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[Action]:
        return self.leader.tick(now_ms) if self.leader is not None else []
