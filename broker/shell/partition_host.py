"""One hosted partition: the replication core, its log, and the shell that performs the core's actions.

Design notes: docs/replication.md, section "broker/shell/partition_host.py".
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from kraftpy.broker.replication import (
    Action,
    AlterPartitionRequest,
    AppendAsFollower,
    AppendAsLeader,
    AssignEpochStartOffset,
    CompleteProduce,
    EpochEndOffset,
    IndexAbortedTxn,
    LogState,
    Partition,
    ProducerStateManager,
    RebuildProducerState,
    ReplicationConfig,
    Role,
    SendAlterPartition,
    TruncateFullyAndStartAt,
    TruncateTo,
    UpdateHighWatermark,
)
from kraftpy.broker.shell import fault_injection, producer_snapshots
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.header import stamp_log_append_time
from kraftpy.protocol.shell.clock import monotonic_ms, wall_ms
from kraftpy.storage import PartitionLog
from kraftpy.storage.txn_index import AbortedTxn


class Watcher(Protocol):
    """What a parked read registers with a partition (an asyncio.Event, a fetch's waker): set() on a change."""

    def set(self) -> None: ...


log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]


class ActionSink(Protocol):
    """Where actions that leave the partition go (implemented by the replica manager)."""

    def complete_produce(self, action: CompleteProduce) -> None: ...

    def send_alter_partition(self, hosted: HostedPartition, request: AlterPartitionRequest) -> None: ...


class PartitionOfflineError(KafkaError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


def producer_state(
    plog: PartitionLog, config: ReplicationConfig, end_offset: int | None = None
) -> ProducerStateManager:
    """The producer state below `end_offset` (default: the log end): newest snapshot + replay of batch headers.

    Reads files: for a log just opened the replica manager runs it in the log manager's thread.
    """
    producers = producer_snapshots.rebuild_producer_state(
        plog,
        plog.log_end_offset if end_offset is None else end_offset,
        batches_to_retain=config.producer_batches_to_retain,
        producer_id_expiration_ms=config.producer_id_expiration_ms,
    )
    producers.evict_unretained(plog.log_start_offset)
    return producers


class HostedPartition:
    """A partition this broker replicates; `producers` is its producer state when already rebuilt (in a thread)."""

    def __init__(
        self,
        topic: str,
        topic_id: uuid.UUID,
        partition: int,
        plog: PartitionLog,
        config: ReplicationConfig,
        sink: ActionSink,
        *,
        replica_id: int,
        broker_epoch: int,
        producers: ProducerStateManager | None = None,
    ) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.log = plog
        self.sink = sink
        self.offline: str | None = None
        # Set with `offline` when the log holds a corrupt batch: repaired from an in-sync replica once
        # the controller moved the leadership away (replica_manager.py, "Corrupt replicas").
        self.corrupt = False
        self.stopped = False
        # Told (set()) on every change a parked read waits for: appends, the HW, truncation, leadership,
        # going offline or away. An asyncio.Event, or a parked fetch's per-partition waker.
        self.watchers: set[Watcher] = set()
        self._active_base = plog.active_segment_base_offset
        if producers is None:
            producers = producer_state(plog, config)
        self.core = Partition(replica_id, config, producers, broker_epoch=broker_epoch)
        self._publish_first_unstable_offset()
        self._dispatch: Mapping[type, Callable[[object, Mapping[object, bytes] | None], None]] = {
            AppendAsLeader: self._append_as_leader,  # type: ignore[dict-item]
            AppendAsFollower: self._append_as_follower,  # type: ignore[dict-item]
            UpdateHighWatermark: self._update_high_watermark,  # type: ignore[dict-item]
            CompleteProduce: self._complete_produce,  # type: ignore[dict-item]
            SendAlterPartition: self._send_alter_partition,  # type: ignore[dict-item]
            AssignEpochStartOffset: self._assign_epoch_start_offset,  # type: ignore[dict-item]
            TruncateTo: self._truncate_to,  # type: ignore[dict-item]
            TruncateFullyAndStartAt: self._truncate_fully,  # type: ignore[dict-item]
            RebuildProducerState: self._rebuild_producer_state,  # type: ignore[dict-item]
            IndexAbortedTxn: self._index_aborted_txn,  # type: ignore[dict-item]
        }

    # -- views -------------------------------------------------------------------------------------------------

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def role(self) -> Role:
        return self.core.role

    @property
    def is_leader(self) -> bool:
        return self.core.leader is not None

    def log_state(self) -> LogState:
        plog = self.log
        hw = plog.high_watermark
        if fault_injection.TEST_BREAK == fault_injection.TRUNCATE_TO_HW:  # the broken build trusts only its checkpoint
            hw = min(hw, plog.checkpointed_high_watermark())
        return LogState(plog.log_start_offset, plog.log_end_offset, hw, plog.latest_epoch)

    def epoch_end(self, epoch: int) -> EpochEndOffset:
        """This log's end_offset_for(epoch), as the core wants it."""
        found, end = self.log.end_offset_for_epoch(epoch)
        return EpochEndOffset(found, end)

    def check_online(self) -> None:
        if self.offline is not None:
            raise PartitionOfflineError(f"{self.name} is offline after a storage error: {self.offline}")
        if self.stopped:
            raise KafkaError(f"{self.name} is no longer hosted here", ErrorCode.NOT_LEADER_OR_FOLLOWER)

    # -- fetch purgatory -----------------------------------------------------------------------------------------

    def notify(self) -> None:
        for event in self.watchers:
            event.set()

    # -- configs -----------------------------------------------------------------------------------------------

    def update_replication_config(self, config: ReplicationConfig) -> None:
        """A topic config (min_insync_replicas) changed; the core's roles read it from their config."""
        if config == self.core.config:
            return
        self.perform(self.core.update_config(config))

    # -- actions -----------------------------------------------------------------------------------------------

    def perform(self, actions: Iterable[Action], records: Mapping[object, bytes] | None = None) -> None:
        """Carry out the core's actions in order; `records` maps produce request ids to their bytes.

        Raises PartitionOfflineError when storage fails (the partition is then offline).
        """
        dispatch = self._dispatch
        for action in actions:
            try:
                dispatch[type(action)](action, records)
            except PartitionOfflineError:
                raise
            except Exception as exc:
                self.go_offline(f"{type(action).__name__} failed: {exc!r}")
                raise PartitionOfflineError(f"{self.name} went offline: {exc}") from exc

    def go_offline(self, reason: str) -> None:
        if self.offline is not None:
            return
        log.error("partition %s goes offline: %s", self.name, reason)
        self.offline = reason
        for action in self.core.stop():
            if isinstance(action, CompleteProduce):
                self.sink.complete_produce(
                    CompleteProduce(
                        action.request_id,
                        ErrorCode.KAFKA_STORAGE_ERROR,
                        action.base_offset,
                        action.last_offset,
                        message=f"{self.name} is offline: {reason}",
                    )
                )
        self.notify()

    def stop(self) -> None:
        """The partition leaves this broker (deleted, or the broker stops): fail waiting produces."""
        if self.stopped:
            return
        self.stopped = True
        for action in self.core.stop():
            if isinstance(action, CompleteProduce):
                self.sink.complete_produce(action)
        self.notify()

    def _append_as_leader(self, action: AppendAsLeader, records: Mapping[object, bytes] | None) -> None:
        data = records[action.request_id] if records is not None else None
        if data is None:
            raise RuntimeError(f"no bytes for produce {action.request_id!r}")
        if action.log_append_time_ms >= 0:
            data = stamp_log_append_time(data, action.log_append_time_ms)
        info = self.log.append_as_leader(data, action.leader_epoch, now_ms=wall_ms())
        if info.first_offset != action.base_offset or info.last_offset != action.last_offset:
            # The core and storage disagree about the log end: never serve from such a state.
            raise RuntimeError(
                f"storage appended at {info.first_offset}..{info.last_offset}, "
                f"the core assigned {action.base_offset}..{action.last_offset}"
            )
        self._after_append()

    def _append_as_follower(self, action: AppendAsFollower, _records: object) -> None:
        info = self.log.append_as_follower(action.records, now_ms=wall_ms())
        if info.last_offset != action.last_offset:
            raise RuntimeError(f"follower append ended at {info.last_offset}, expected {action.last_offset}")
        self._after_append()

    def _publish_first_unstable_offset(self) -> None:
        """The cleaner compacts nothing at or past an undecided transaction (Kafka's firstUncleanableOffset)."""
        self.log.first_unstable_offset = self.core.producers.first_unstable_offset()

    def _after_append(self) -> None:
        self._publish_first_unstable_offset()
        base = self.log.active_segment_base_offset
        if base != self._active_base:
            self._active_base = base
            self.take_producer_snapshot()
        self.notify()

    def take_producer_snapshot(self) -> None:
        """Kafka snapshots producer state when a segment rolls (and on close): restarts replay less."""
        producers = self.core.producers
        offset = producers.map_end_offset
        if offset != self.log.log_end_offset or offset in producer_snapshots.list_snapshots(self.log.directory):
            return
        producer_snapshots.write_snapshot(self.log.directory, offset, producers.snapshot())

    def _index_aborted_txn(self, action: IndexAbortedTxn, _records: object) -> None:
        self.log.append_aborted_txn(
            AbortedTxn(action.producer_id, action.first_offset, action.last_offset, action.last_stable_offset)
        )

    def _update_high_watermark(self, action: UpdateHighWatermark, _records: object) -> None:
        self.log.high_watermark = action.offset
        self._publish_first_unstable_offset()
        self.notify()

    def _complete_produce(self, action: CompleteProduce, _records: object) -> None:
        self.sink.complete_produce(action)

    def _send_alter_partition(self, action: SendAlterPartition, _records: object) -> None:
        self.sink.send_alter_partition(self, action.request)

    def _assign_epoch_start_offset(self, action: AssignEpochStartOffset, _records: object) -> None:
        self.log.leader_epoch_cache.assign(action.leader_epoch, action.start_offset)

    def _truncate_to(self, action: TruncateTo, _records: object) -> None:
        self.log.truncate_to(action.offset)
        self.notify()

    def _truncate_fully(self, action: TruncateFullyAndStartAt, _records: object) -> None:
        self.log.truncate_fully_and_start_at(action.offset)
        self._active_base = self.log.active_segment_base_offset
        self.notify()

    def _rebuild_producer_state(self, action: RebuildProducerState, _records: object) -> None:
        self.core.load_producer_state(producer_state(self.log, self.core.config, action.end_offset))
        self._publish_first_unstable_offset()
        self._active_base = self.log.active_segment_base_offset

    # -- retention hooks -----------------------------------------------------------------------------------------

    def after_retention(self) -> None:
        """Retention moved the log start: tell the core, drop producer snapshots below it."""
        start = self.log.log_start_offset
        self.core.set_log_start_offset(start)
        producer_snapshots.delete_snapshots_below(self.log.directory, start)

    def tick(self, now_ms: int | None = None) -> None:
        if self.offline is not None or self.stopped:
            return
        actions = self.core.tick(monotonic_ms() if now_ms is None else now_ms)
        if actions:
            self.perform(actions)

    def __repr__(self) -> str:
        return f"HostedPartition({self.name}, role={self.role.value}, log={self.log!r})"
