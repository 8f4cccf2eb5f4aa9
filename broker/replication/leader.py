"""A partition leader's decisions: Kafka's Partition.scala leader half, without I/O.

Design notes: docs/replication.md, section "broker/replication/leader.py".
"""

from __future__ import annotations

import dataclasses

from kraftpy.broker.replication.actions import (
    Action,
    AppendAsLeader,
    AssignEpochStartOffset,
    CompleteProduce,
    IndexAbortedTxn,
    SendAlterPartition,
    TruncateTo,
    UpdateHighWatermark,
)
from kraftpy.broker.replication.config import ReplicationConfig
from kraftpy.broker.replication.delayed_produce import DelayedProduces
from kraftpy.broker.replication.isr import (
    CommittedIsr,
    IsrState,
    can_add_to_isr,
    is_follower_in_sync,
    out_of_sync_replicas,
    propose_expand,
    propose_shrink,
)
from kraftpy.broker.replication.model import (
    UNDEFINED_EPOCH,
    UNKNOWN_BROKER_EPOCH,
    AlterPartitionRequest,
    AlterPartitionResponse,
    EpochEndOffset,
    FetchDecision,
    FetchPartition,
    LogState,
    PartitionRegistration,
    ProduceRequest,
)
from kraftpy.broker.replication.producer_state import ProducerStateManager
from kraftpy.broker.replication.replica import RemoteReplicaState
from kraftpy.broker.replication.watermark import compute_high_watermark, effective_min_isr
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.header import TIMESTAMP_TYPE_BIT, BatchHeader

# AlterPartition answers after which the proposal is dropped and may be made again (Kafka: revert to committed).
_REVERT_ERRORS = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA, ErrorCode.INVALID_REQUEST})
# Answers that mean our view is stale: wait for the metadata log instead of retrying (Kafka does the same).
_AWAIT_METADATA_ERRORS = frozenset(
    {ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
)


def check_leader_epoch(request_epoch: int, local_epoch: int) -> ErrorCode:
    """Kafka's checkCurrentLeaderEpoch: an older epoch is fenced, a newer one is not known here yet."""
    if request_epoch == UNDEFINED_EPOCH:
        return ErrorCode.NONE
    if request_epoch < local_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if request_epoch > local_epoch:
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    return ErrorCode.NONE


def log_append_time_header(header: BatchHeader, wall_clock_ms: int, log_append_time: bool) -> tuple[BatchHeader, int]:
    """The header a batch is appended with, and its append time (-1 under CreateTime).

    Under LogAppendTime (Kafka's LogValidator) the batch is marked LogAppendTime and its
    maxTimestamp becomes the leader's clock; the records keep the producer's timestamps.
    """
    if not log_append_time:
        return header, -1
    if wall_clock_ms < 0:
        raise ValueError("a LogAppendTime append needs the broker's wall clock")
    stamped = header._replace(attributes=header.attributes | TIMESTAMP_TYPE_BIT, max_timestamp=wall_clock_ms)
    return stamped, wall_clock_ms


class PartitionLeader:
    def __init__(
        self,
        replica_id: int,
        registration: PartitionRegistration,
        log: LogState,
        config: ReplicationConfig,
        producers: ProducerStateManager,
        now_ms: int,
    ) -> None:
        if registration.leader != replica_id:
            raise ValueError(f"registration names leader {registration.leader}, not {replica_id}")
        self.replica_id = replica_id
        self.config = config
        self.producers = producers
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch
        self.replicas = registration.replicas
        self.isr_state: IsrState = CommittedIsr(frozenset(registration.isr))
        self.log_start_offset = log.log_start_offset
        self.log_end_offset = log.log_end_offset
        # A restarted replica's checkpointed HW may exceed what survived on disk; clamp to the log.
        self.high_watermark = min(max(log.high_watermark, log.log_start_offset), log.log_end_offset)
        # A replay completes transactions whose markers may already be below the HW: they no longer count.
        producers.on_high_watermark(self.high_watermark)
        self.epoch_start_offset = log.log_end_offset
        self._test_break_cut = config.test_break_truncate_to_hw and self.high_watermark < self.log_end_offset
        if self._test_break_cut:  # the broken build: what a follower fetched above the HW it knew is dropped
            self.log_end_offset = self.epoch_start_offset = self.high_watermark
        self.remote: dict[int, RemoteReplicaState] = {}
        self.produces = DelayedProduces()
        # Brokers the metadata image says are fenced or shutting down: never added to the ISR.
        self.ineligible_replicas: frozenset[int] = frozenset()
        self._reset_remote_replicas(now_ms)
        self._await_metadata = False

    # -- role changes ------------------------------------------------------------------------------------------

    def start(self, now_ms: int) -> list[Action]:
        """The actions of becoming leader: the epoch's start offset, then whatever the HW rule allows now."""
        actions: list[Action] = [TruncateTo(self.log_end_offset)] if self._test_break_cut else []
        actions.append(AssignEpochStartOffset(self.leader_epoch, self.epoch_start_offset))
        actions += self._maybe_increment_high_watermark()
        return actions

    def _reset_remote_replicas(self, now_ms: int) -> None:
        isr = self.isr_state.isr
        self.remote = {
            b: RemoteReplicaState.for_new_leader(b, b in isr, now_ms) for b in self.replicas if b != self.replica_id
        }

    def new_leader_epoch(self, registration: PartitionRegistration, now_ms: int) -> list[Action]:
        """Still the leader, at a higher leader epoch: a new epoch start, and followers must prove their LEO again.

        Kafka keeps the followers' LEOs when the same broker stays leader; we
        forget them (as for a new leader), which only delays the HW by one
        fetch round and keeps one rule for every new epoch. The log is
        unchanged, so produces waiting for the HW keep waiting.
        """
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch
        self.replicas = registration.replicas
        self.isr_state = CommittedIsr(frozenset(registration.isr))
        self._await_metadata = False
        self.epoch_start_offset = self.log_end_offset
        self._reset_remote_replicas(now_ms)
        return self.start(now_ms)

    def update_registration(self, registration: PartitionRegistration, now_ms: int) -> list[Action]:
        """A newer partition epoch at the same leader epoch (an ISR or assignment change was committed).

        Whatever proposal was in flight is superseded: the committed state is
        the truth, and if our proposal lost the race it can be made again.
        """
        self.partition_epoch = registration.partition_epoch
        self.isr_state = CommittedIsr(frozenset(registration.isr))
        self._await_metadata = False
        if registration.replicas != self.replicas:
            self.replicas = registration.replicas
            kept = {b: s for b, s in self.remote.items() if b in registration.replicas}
            for b in registration.replicas:
                if b != self.replica_id and b not in kept:
                    kept[b] = RemoteReplicaState.for_new_leader(b, b in registration.isr, now_ms)
            self.remote = kept
        return self._maybe_increment_high_watermark()

    def resign(self, message: str = "this replica is no longer the leader") -> list[Action]:
        """Leadership ends: every waiting produce fails now (the log may be truncated as a follower)."""
        return list(self.produces.fail_all(ErrorCode.NOT_LEADER_OR_FOLLOWER, message))

    # -- views -------------------------------------------------------------------------------------------------

    @property
    def isr(self) -> frozenset[int]:
        return self.isr_state.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr_state.maximal_isr

    @property
    def high_watermark_known(self) -> bool:
        """Whether the HW has reached the start of this leader epoch (Kafka's leaderEpochStartOffsetOpt check).

        Below it, the HW may lag what earlier leaders already exposed; readers
        that need "the latest committed offset" must wait.
        """
        return self.high_watermark >= self.epoch_start_offset

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: min(first offset of any undecided transaction, HW)."""
        return self.producers.last_stable_offset(self.high_watermark)

    def list_offsets_latest(
        self, current_leader_epoch: int = UNDEFINED_EPOCH, read_committed: bool = False
    ) -> tuple[ErrorCode, int]:
        """ListOffsets(latest) for a consumer: the HW (the LSO for read_committed), once it can be trusted."""
        error = check_leader_epoch(current_leader_epoch, self.leader_epoch)
        if error != ErrorCode.NONE:
            return error, -1
        if not self.high_watermark_known:
            return ErrorCode.OFFSET_NOT_AVAILABLE, -1
        return ErrorCode.NONE, self.last_stable_offset if read_committed else self.high_watermark

    # -- produce -----------------------------------------------------------------------------------------------

    def handle_produce(self, request: ProduceRequest, now_ms: int) -> list[Action]:
        """Validate, deduplicate, assign offsets and register the wait; acks was validated by the caller."""
        rid, acks = request.request_id, request.acks
        if acks == -1 and len(self.isr_state.isr) < self.min_isr:
            return [
                CompleteProduce(
                    rid,
                    ErrorCode.NOT_ENOUGH_REPLICAS,
                    acks=acks,
                    message=f"the ISR has {len(self.isr_state.isr)} members, fewer than the "
                    f"effective min ISR {self.min_isr} (min_insync_replicas={self.config.min_insync_replicas}, "
                    f"{len(self.replicas)} replicas)",
                )
            ]
        marker = request.marker
        if marker is not None:
            h = request.header
            check = self.producers.check_marker(h.producer_id, h.producer_epoch, marker.coordinator_epoch)
        else:
            check = self.producers.check_append(request.header, request.verify_txn)
        if check.error != ErrorCode.NONE:
            return [CompleteProduce(rid, check.error, acks=acks, message=check.message)]
        actions: list[Action] = []
        log_append_time = self.config.log_append_time
        if check.duplicate is not None and not self.config.test_break_append_duplicates:
            # Already in the log: answer with the original offsets, once they are as safe as acks asks
            # (and, as Kafka, with the original's timestamp as its append time).
            base, last = check.duplicate.first_offset, check.duplicate.last_offset
            append_time_ms = check.duplicate.timestamp if log_append_time else -1
        else:
            base = self.log_end_offset
            last = base + request.header.last_offset_delta
            header, append_time_ms = log_append_time_header(request.header, request.wall_clock_ms, log_append_time)
            actions.append(AppendAsLeader(rid, base, last, self.leader_epoch, append_time_ms))
            self.log_end_offset = last + 1
            done = self.producers.update(header, base, last, marker)
            if done is not None and done.aborted:
                lso = self.producers.stable_offset_after(done)
                actions.append(IndexAbortedTxn(done.producer_id, done.first_offset, done.last_offset, lso))
            actions += self._maybe_increment_high_watermark()
        if acks != -1 or self.config.test_break_ack_before_hw:
            actions.append(
                CompleteProduce(rid, ErrorCode.NONE, base, last, acks=acks, log_append_time_ms=append_time_ms)
            )
            return actions
        self.produces.add(rid, base, last, request.timeout_ms, now_ms, append_time_ms)
        actions += self._complete_produces()
        return actions

    # -- fetch -------------------------------------------------------------------------------------------------

    def handle_fetch(
        self, request: FetchPartition, leader_epoch_end: EpochEndOffset | None, now_ms: int
    ) -> FetchDecision:
        """Answer one fetch partition; a follower's fetch also moves its LEO, the ISR and the HW.

        `leader_epoch_end` is this log's end_offset_for(request.last_fetched_epoch),
        required when last_fetched_epoch is set.
        """
        return self._fetch(request, leader_epoch_end, now_ms, update_state=True)

    def check_fetch(self, request: FetchPartition, leader_epoch_end: EpochEndOffset | None) -> FetchDecision:
        """The same validation without touching any state (for re-checking a parked fetch)."""
        return self._fetch(request, leader_epoch_end, 0, update_state=False)

    def _decision(self, request: FetchPartition, **kwargs) -> FetchDecision:
        return FetchDecision(
            fetch_offset=request.fetch_offset,
            high_watermark=self.high_watermark,
            log_start_offset=self.log_start_offset,
            log_end_offset=self.log_end_offset,
            last_stable_offset=self.last_stable_offset,
            **kwargs,
        )

    def _fetch(
        self, request: FetchPartition, leader_epoch_end: EpochEndOffset | None, now_ms: int, update_state: bool
    ) -> FetchDecision:
        error = check_leader_epoch(request.current_leader_epoch, self.leader_epoch)
        if error != ErrorCode.NONE:
            return self._decision(
                request,
                error=error,
                message=f"request epoch {request.current_leader_epoch}, leader epoch {self.leader_epoch}",
            )
        remote = None
        if request.is_from_follower:
            remote = self.remote.get(request.replica_id)
            if remote is None:
                return self._decision(
                    request,
                    error=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    message=f"replica {request.replica_id} is not assigned to this partition {self.replicas}",
                )
            if (
                request.broker_epoch != UNKNOWN_BROKER_EPOCH
                and remote.broker_epoch != UNKNOWN_BROKER_EPOCH
                and request.broker_epoch < remote.broker_epoch
            ):
                # A fetch sent by an earlier incarnation of the follower arrived late: what it claims is gone.
                return self._decision(
                    request,
                    error=ErrorCode.STALE_BROKER_EPOCH,
                    message=f"broker epoch {request.broker_epoch} is older than {remote.broker_epoch}",
                )
        if request.last_fetched_epoch != UNDEFINED_EPOCH:
            if leader_epoch_end is None:
                raise ValueError("last_fetched_epoch is set: pass the leader log's end_offset_for(last_fetched_epoch)")
            if (
                leader_epoch_end.epoch < request.last_fetched_epoch
                or leader_epoch_end.end_offset < request.fetch_offset
            ):
                # The sender's log diverges from ours at or before fetch_offset: tell it where our history of
                # its last epoch ends instead of sending data (KIP-320 / KIP-595's DivergingEpoch).
                return self._decision(request, diverging_epoch=leader_epoch_end)
        if not self.log_start_offset <= request.fetch_offset <= self.log_end_offset:
            return self._decision(
                request,
                error=ErrorCode.OFFSET_OUT_OF_RANGE,
                message=f"fetch offset {request.fetch_offset} is outside "
                f"[{self.log_start_offset}, {self.log_end_offset}]",
            )
        if remote is None:
            # Consumers read committed data only; read_committed ones only decided transactions too.
            bound = self.last_stable_offset if request.read_committed else self.high_watermark
            return self._decision(request, max_offset=bound)
        actions: list[Action] = []
        if update_state:
            remote.update_fetch_state(
                request.fetch_offset, request.log_start_offset, now_ms, self.log_end_offset, request.broker_epoch
            )
            actions += self._maybe_expand_isr(remote, now_ms)
            actions += self._maybe_increment_high_watermark()
        return self._decision(request, max_offset=self.log_end_offset, actions=tuple(actions))

    # -- ISR ---------------------------------------------------------------------------------------------------

    def _maybe_expand_isr(self, remote: RemoteReplicaState, now_ms: int) -> list[Action]:
        if not can_add_to_isr(self.isr_state, remote.broker_id, self.ineligible_replicas):
            return []
        if not is_follower_in_sync(remote, self.high_watermark, self.epoch_start_offset):
            return []
        self.isr_state = propose_expand(
            self.isr_state,
            remote.broker_id,
            self.replica_id,
            self.leader_epoch,
            self.partition_epoch,
            self.remote,
            now_ms,
        )
        self._await_metadata = False
        return [SendAlterPartition(self.isr_state.proposal)]

    def maybe_shrink_isr(self, now_ms: int) -> list[Action]:
        out = out_of_sync_replicas(
            self.isr_state,
            self.replica_id,
            self.remote,
            self.log_end_offset,
            now_ms,
            self.config.replica_lag_time_max_ms,
        )
        if not out:
            return []
        self.isr_state = propose_shrink(
            self.isr_state, out, self.replica_id, self.leader_epoch, self.partition_epoch, self.remote, now_ms
        )
        self._await_metadata = False
        return [SendAlterPartition(self.isr_state.proposal)]

    def on_alter_partition_response(
        self, request: AlterPartitionRequest, response: AlterPartitionResponse, now_ms: int
    ) -> list[Action]:
        state = self.isr_state
        if isinstance(state, CommittedIsr) or state.proposal != request:
            return []  # an answer to a proposal that was superseded
        if response.error == ErrorCode.NONE:
            if response.leader_epoch != self.leader_epoch or response.partition_epoch < self.partition_epoch:
                return []  # stale; the metadata log will bring the truth
            self.isr_state = CommittedIsr(frozenset(response.isr))
            self.partition_epoch = response.partition_epoch
            for b in response.isr:
                if b != self.replica_id and b not in self.remote:
                    self.remote[b] = RemoteReplicaState.for_new_leader(b, True, now_ms)
            return self._maybe_increment_high_watermark()
        if response.error in _REVERT_ERRORS:
            self.isr_state = CommittedIsr(state.isr)
        elif response.error in _AWAIT_METADATA_ERRORS:
            self._await_metadata = True
        # Anything else (NOT_CONTROLLER, a timeout) is retried by tick().
        return []

    def set_ineligible_replicas(self, brokers: frozenset[int]) -> None:
        self.ineligible_replicas = frozenset(brokers)

    def set_log_start_offset(self, offset: int) -> None:
        self.log_start_offset = max(self.log_start_offset, offset)

    # -- HW ----------------------------------------------------------------------------------------------------

    def update_config(self, config: ReplicationConfig) -> list[Action]:
        """A topic config changed (min_insync_replicas): a lower min ISR may let the HW move now."""
        self.config = config
        return self._maybe_increment_high_watermark()

    @property
    def min_isr(self) -> int:
        """The effective min ISR: min_insync_replicas, at most the replica count."""
        return effective_min_isr(self.config.min_insync_replicas, len(self.replicas))

    @property
    def under_min_isr(self) -> bool:
        """Kafka's UnderMinIsr: the committed ISR is below min ISR, so the HW stands still (acks=all is
        refused, acks=0/1 records wait to become readable) until it is back."""
        return len(self.isr_state.isr) < self.min_isr

    def _maybe_increment_high_watermark(self) -> list[Action]:
        new_hw = compute_high_watermark(
            self.high_watermark,
            self.replica_id,
            self.log_end_offset,
            self.isr_state.isr,
            self.isr_state.maximal_isr,
            self.remote,
            self.min_isr,
        )
        if new_hw <= self.high_watermark:
            return []
        self.high_watermark = new_hw
        self.producers.on_high_watermark(new_hw)
        return [UpdateHighWatermark(new_hw), *self._complete_produces()]

    def _complete_produces(self) -> list[Action]:
        return list(self.produces.try_complete(self.high_watermark, len(self.isr_state.maximal_isr), self.min_isr))

    # -- time --------------------------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[Action]:
        """ISR expiration, AlterPartition retry, produce timeouts."""
        actions = self.maybe_shrink_isr(now_ms)
        state = self.isr_state
        if (
            not actions
            and not isinstance(state, CommittedIsr)
            and not self._await_metadata
            and now_ms - state.sent_ms >= self.config.alter_partition_retry_ms
        ):
            self.isr_state = dataclasses.replace(state, sent_ms=now_ms)
            actions.append(SendAlterPartition(state.proposal))
        actions += self.produces.expire(now_ms)
        return actions
