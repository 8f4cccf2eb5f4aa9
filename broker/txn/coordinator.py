"""TransactionCoordinator: the sans-I/O transaction coordinator a broker's shell drives (Kafka's).

Input: API calls, append completions, "markers written" reports and ticks, each with `now_ms`.
Output: actions for the shell (the groups' Respond and Append, and SendMarkers). Every state
change is prepared, appended to `__transaction_state` and applied when durable (metadata.py);
after PrepareCommit/PrepareAbort is durable the coordinator asks for markers on every partition
of the transaction, and once the shell reports them written it appends CompleteCommit /
CompleteAbort. A coordinator that loads a partition resumes the Prepare* transactions it finds
(it sends their markers again). Docs: docs/transactions.md, "The coordinator".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.broker.groups.actions import Append, Respond
from kraftpy.broker.groups.records import partition_for
from kraftpy.broker.groups.responses import storage_error
from kraftpy.broker.groups.runtime import PartitionStatus
from kraftpy.broker.groups.timers import TimerQueue
from kraftpy.broker.txn.config import TransactionCoordinatorConfig
from kraftpy.broker.txn.metadata import TERMINAL_OR_IDLE, TopicPartitionKey, TxnMetadata
from kraftpy.broker.txn.records import Record, TxnLogValue, TxnRecordError, TxnState, decode_record, txn_record
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

E = ErrorCode
S = TxnState
ABORT_EXPIRED_TIMER = ("abort_expired",)
REMOVE_EXPIRED_TIMER = ("remove_expired",)


@dataclass(frozen=True, slots=True)
class SendMarkers:
    """Write COMMIT/ABORT markers for one transaction on `partitions`; report with `markers_written`."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartitionKey, ...]
    # The coordinator's load of the id's partition that asked: a reload (after a write of unknown
    # fate) keeps the coordinator epoch, so this tells a marker task of the earlier load from the new one.
    load_epoch: int = 0


TxnAction = Respond | Append | SendMarkers
AppendDone = Callable[[ErrorCode, int], None]


class TransactionCoordinator:
    def __init__(self, config: TransactionCoordinatorConfig | None = None) -> None:
        self.config = config or TransactionCoordinatorConfig()
        self.txns: dict[str, TxnMetadata] = {}
        self.partitions: dict[int, PartitionStatus] = {}
        # The leader epoch of each owned __transaction_state partition: the coordinator epoch markers carry.
        self.coordinator_epochs: dict[int, int] = {}
        # Bumped on every load/unload, so a continuation of an earlier term never touches a later one.
        self.load_epochs: dict[int, int] = {}
        self.timers = TimerQueue()
        self._outbox: list[TxnAction] = []
        self._appends: dict[int, AppendDone] = {}
        self._next_append_id = 1

    # --- where transactional ids live ---------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.transaction_state_log_num_partitions)

    def coordinator_error(self, transactional_id: str) -> tuple[ErrorCode, str] | None:
        partition = self.partition_for(transactional_id)
        status = self.partitions.get(partition)
        if status is None:
            return E.NOT_COORDINATOR, f"this broker does not coordinate __transaction_state-{partition}"
        if status is PartitionStatus.LOADING:
            return E.COORDINATOR_LOAD_IN_PROGRESS, f"__transaction_state-{partition} is still loading"
        return None

    def is_active(self, partition: int, load_epoch: int | None = None) -> bool:
        if self.partitions.get(partition) is not PartitionStatus.ACTIVE:
            return False
        return load_epoch is None or self.load_epochs.get(partition) == load_epoch

    # --- owning __transaction_state partitions -------------------------------------------------

    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        self._check_partition(partition)
        self.partitions[partition] = PartitionStatus.LOADING
        self.coordinator_epochs[partition] = coordinator_epoch
        self.load_epochs[partition] = self.load_epochs.get(partition, 0) + 1

    def complete_loading(self, partition: int, records: Iterable[Record], now_ms: int) -> list[TxnAction]:
        """Rebuild the partition's transactions (log order), serve them, resume the Prepare* ones."""
        if self.partitions.get(partition) is not PartitionStatus.LOADING:
            raise ValueError(f"__transaction_state-{partition} is not loading")
        loaded: dict[str, TxnLogValue] = {}
        for key, value in records:
            try:
                txn_id, decoded = decode_record(key, value)
            except TxnRecordError as exc:
                log.error("skipping a record of __transaction_state-%d that does not parse: %s", partition, exc)
                continue
            if decoded is None:
                loaded.pop(txn_id, None)
            else:
                loaded[txn_id] = decoded
        for txn_id, value in loaded.items():
            if self.partition_for(txn_id) != partition:
                log.error("%r is on __transaction_state-%d, not its partition; skipped", txn_id, partition)
                continue
            self.txns[txn_id] = TxnMetadata.from_value(txn_id, partition, value)
        self.partitions[partition] = PartitionStatus.ACTIVE
        for meta in [m for m in self.txns.values() if m.partition == partition]:
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self._send_markers(meta, now_ms)
        self._ensure_timers(now_ms)
        return self._drain()

    def unload(self, partition: int, now_ms: int = 0) -> list[TxnAction]:
        """This broker no longer leads `partition`: forget its transactions (the new leader resumes them)."""
        self._check_partition(partition)
        self.partitions.pop(partition, None)
        self.coordinator_epochs.pop(partition, None)
        self.load_epochs[partition] = self.load_epochs.get(partition, 0) + 1
        for txn_id in [t for t, m in self.txns.items() if m.partition == partition]:
            del self.txns[txn_id]
            self.timers.cancel(("complete", txn_id))
        return self._drain()

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.config.transaction_state_log_num_partitions:
            raise ValueError(f"partition {partition} is not one of __transaction_state's")

    # --- InitProducerId -------------------------------------------------------------------------

    def needs_producer_id(self, transactional_id: str) -> bool:
        """Whether InitProducerId for this id would take a fresh producer id (the shell fetches one first)."""
        meta = self.txns.get(transactional_id)
        return meta is None or meta.epoch_exhausted

    def init_producer_id(
        self,
        rid: Hashable,
        transactional_id: str,
        txn_timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        new_producer_id: int | None,
        now_ms: int,
    ) -> list[TxnAction]:
        def answer(code: ErrorCode, message: str = "", pid: int = -1, epoch: int = -1) -> list[TxnAction]:
            body = {"error_code": int(code), "producer_id": pid, "producer_epoch": epoch}
            if message:
                body["message"] = message
            if code is not E.NONE and producer_id >= 0:
                # A refused epoch bump is the other half of the trail the success line leaves: a client
                # that then goes on at its old epoch is what a duplicate-sequence loss needs (docs/jepsen.md,
                # seed 2301). Only requests that name a producer: a first InitProducerId is retried at will.
                log.info(
                    "refused InitProducerId of transactional id %r asked with %d/%d: %s (%s)",
                    transactional_id, producer_id, producer_epoch, code.name, message,
                )  # fmt: skip
            self._outbox.append(Respond(rid, body))
            return self._drain()

        if not transactional_id:
            return answer(E.INVALID_REQUEST, "transactional_id must not be empty")
        if (err := self.coordinator_error(transactional_id)) is not None:
            return answer(*err)
        if not 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms:
            return answer(
                E.INVALID_TRANSACTION_TIMEOUT,
                f"transaction_timeout_ms {txn_timeout_ms} is not in (0, {self.config.transaction_max_timeout_ms}]",
            )
        self._run_due(now_ms)
        meta = self.txns.get(transactional_id)
        created = meta is None
        if meta is None:
            if new_producer_id is None:
                return answer(E.COORDINATOR_LOAD_IN_PROGRESS, "no producer id at hand; retry")
            meta = TxnMetadata(
                transactional_id, self.partition_for(transactional_id), new_producer_id, -1, txn_timeout_ms
            )
            self.txns[transactional_id] = meta
        if meta.pending is not None:
            return answer(E.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} has a state change in flight")
        if producer_id != -1 and (producer_id, producer_epoch) != (meta.producer_id, meta.producer_epoch):
            if meta.is_retried_bump(producer_id, producer_epoch) and meta.state in TERMINAL_OR_IDLE:
                # KIP-360: a retry of the bump that made the current epoch (its answer was lost):
                # Kafka answers the current id and epoch again (lastProducerEpoch), nothing is written.
                return answer(E.NONE, pid=meta.producer_id, epoch=meta.producer_epoch)
            # KIP-360: otherwise a producer that names its id and epoch must be the current one.
            return answer(E.PRODUCER_FENCED, f"producer {producer_id} epoch {producer_epoch} is not the current one")
        if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE, S.DEAD):
            return answer(E.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is completing a transaction")
        if meta.state is S.ONGOING:
            # A new incarnation of the producer: fence the old one and abort its transaction; the
            # client retries on CONCURRENT_TRANSACTIONS and gets a new epoch once the abort is done.
            self._fence_and_abort(meta, now_ms)
            return answer(E.CONCURRENT_TRANSACTIONS, f"aborting the open transaction of {transactional_id!r}")
        if meta.epoch_exhausted:
            if new_producer_id is None:
                return answer(E.COORDINATOR_LOAD_IN_PROGRESS, "no producer id at hand; retry")
            pid, epoch = new_producer_id, 0
        else:
            pid, epoch = meta.producer_id, meta.producer_epoch + 1
        value = meta.value(
            S.EMPTY,
            now_ms,
            producer_id=pid,
            producer_epoch=epoch,
            txn_timeout_ms=txn_timeout_ms,
            partitions=set(),
            start_timestamp_ms=-1,
        )

        def done(error: ErrorCode) -> None:
            if error is E.NONE:
                meta.last_bump = (producer_id, producer_epoch, pid, epoch) if producer_id != -1 else None
                # Kafka logs this too: the epochs a producer was handed are the trail of any later fencing.
                log.info(
                    "initialized transactional id %r with producer id %d epoch %d (asked with %d/%d) on %s-%d",
                    transactional_id, pid, epoch, producer_id, producer_epoch, TRANSACTION_STATE_TOPIC, meta.partition,
                )  # fmt: skip
                self._outbox.append(Respond(rid, {"error_code": 0, "producer_id": pid, "producer_epoch": epoch}))
            else:
                if created and self.txns.get(transactional_id) is meta:
                    del self.txns[transactional_id]  # nothing of it was written
                self._outbox.append(Respond(rid, {"error_code": int(storage_error(error))}))

        self._write(meta, S.EMPTY, value, done)
        return self._drain()

    # --- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------

    def _producer_error(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, str] | TxnMetadata:
        """The id's metadata if this producer may act on it now, else the error (Kafka's checks, in order)."""
        if (err := self.coordinator_error(transactional_id)) is not None:
            return err
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING, f"{transactional_id!r} does not belong to producer {producer_id}"
        if producer_epoch != meta.producer_epoch or (
            meta.pending is S.PREPARE_EPOCH_FENCE and producer_epoch <= meta.producer_epoch
        ):
            return E.PRODUCER_FENCED, f"epoch {producer_epoch} is not the current epoch of {transactional_id!r}"
        if meta.pending is not None or meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE):
            return E.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is completing a transaction"
        if meta.state is S.DEAD:
            return E.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is being removed"
        return meta

    def add_partitions(
        self,
        rid: Hashable,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartitionKey],
        now_ms: int,
    ) -> list[TxnAction]:
        """Answer {"error_code", "message"?} (one code for every partition: the shell spreads it)."""
        wanted = set(partitions)
        self._run_due(now_ms)
        found = self._producer_error(transactional_id, producer_id, producer_epoch)
        if isinstance(found, tuple):
            self._outbox.append(Respond(rid, {"error_code": int(found[0]), "message": found[1]}))
            return self._drain()
        meta = found
        if meta.state is S.ONGOING and wanted <= meta.partitions:
            self._outbox.append(Respond(rid, {"error_code": 0}))
            return self._drain()
        union = meta.partitions | wanted if meta.state is S.ONGOING else wanted
        if len(union) > self.config.transaction_max_partitions:
            message = f"a transaction may span at most {self.config.transaction_max_partitions} partitions"
            self._outbox.append(Respond(rid, {"error_code": int(E.INVALID_REQUEST), "message": message}))
            return self._drain()
        start = meta.start_timestamp_ms if meta.state is S.ONGOING else now_ms
        value = meta.value(S.ONGOING, now_ms, partitions=union, start_timestamp_ms=start)

        def done(error: ErrorCode) -> None:
            self._outbox.append(Respond(rid, {"error_code": int(storage_error(error))}))

        self._write(meta, S.ONGOING, value, done)
        return self._drain()

    def add_offsets(
        self, rid: Hashable, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str, now_ms: int
    ) -> list[TxnAction]:
        """The group's __consumer_offsets partition joins the transaction (Kafka's AddOffsetsToTxn)."""
        partition = partition_for(group_id, self.config.offsets_topic_num_partitions)
        return self.add_partitions(
            rid, transactional_id, producer_id, producer_epoch, [(OFFSETS_TOPIC, partition)], now_ms
        )

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, ErrorCode]:
        """KIP-890 part 1 (AddPartitionsToTxn v4+ verify_only): is each partition in the open transaction?

        Pure: a partition leader about to accept a transactional write asks this; nothing changes.
        """
        wanted = list(partitions)
        err = self.coordinator_error(transactional_id)
        if err is not None:
            return dict.fromkeys(wanted, err[0])
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return dict.fromkeys(wanted, E.INVALID_PRODUCER_ID_MAPPING)
        if meta.producer_epoch != producer_epoch:
            return dict.fromkeys(wanted, E.PRODUCER_FENCED)
        if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return dict.fromkeys(wanted, E.CONCURRENT_TRANSACTIONS)
        # A write in flight (another AddPartitionsToTxn, an EndTxn) does not matter, as in Kafka: the
        # partitions are those already durable, and the partition's guard voids the answer if a
        # marker lands before the append.
        ongoing = meta.state is S.ONGOING
        return {tp: E.NONE if ongoing and tp in meta.partitions else E.INVALID_TXN_STATE for tp in wanted}

    # --- EndTxn ---------------------------------------------------------------------------------

    def end_txn(
        self, rid: Hashable, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, now_ms: int
    ) -> list[TxnAction]:
        def answer(code: ErrorCode, message: str = "") -> list[TxnAction]:
            self._outbox.append(Respond(rid, {"error_code": int(code), **({"message": message} if message else {})}))
            return self._drain()

        self._run_due(now_ms)
        if (err := self.coordinator_error(transactional_id)) is not None:
            return answer(*err)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return answer(
                E.INVALID_PRODUCER_ID_MAPPING, f"{transactional_id!r} does not belong to producer {producer_id}"
            )
        if producer_epoch != meta.producer_epoch or meta.pending is S.PREPARE_EPOCH_FENCE:
            return answer(E.PRODUCER_FENCED, f"epoch {producer_epoch} is not the current epoch of {transactional_id!r}")
        if meta.pending is not None:
            return answer(E.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} has a state change in flight")
        word = "commit" if commit else "abort"
        match meta.state:
            case S.ONGOING:
                target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
                value = meta.value(target, now_ms)

                def done(error: ErrorCode) -> None:
                    self._outbox.append(Respond(rid, {"error_code": int(storage_error(error))}))
                    if error is E.NONE:
                        self._send_markers(meta, now_ms)

                self._write(meta, target, value, done)
                return self._drain()
            case S.COMPLETE_COMMIT if commit:
                return answer(E.NONE)  # a retry of a commit that is done
            case S.COMPLETE_ABORT if not commit:
                return answer(E.NONE)
            case S.PREPARE_COMMIT if commit:
                return answer(E.CONCURRENT_TRANSACTIONS, "the commit's markers are being written")
            case S.PREPARE_ABORT if not commit:
                return answer(E.CONCURRENT_TRANSACTIONS, "the abort's markers are being written")
            case S.PREPARE_EPOCH_FENCE | S.DEAD:
                return answer(E.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is changing state")
            case _:
                # Fatal for the client (librdkafka's "Failed to end transaction"): log it, so a fault run's
                # history can be read beside what the coordinator had (its state and epoch).
                log.info(
                    "refused EndTxn(%s) of transactional id %r at %d/%d: INVALID_TXN_STATE (the transaction is %s)",
                    word, transactional_id, producer_id, producer_epoch, meta.state.kafka_name,
                )  # fmt: skip
                return answer(E.INVALID_TXN_STATE, f"cannot {word}: the transaction is {meta.state.kafka_name}")

    # --- markers ----------------------------------------------------------------------------------

    def _send_markers(self, meta: TxnMetadata, now_ms: int) -> None:
        if not meta.partitions:
            self._write_complete(meta, now_ms)
            return
        self._outbox.append(
            SendMarkers(
                meta.transactional_id,
                meta.producer_id,
                meta.producer_epoch,
                meta.state is S.PREPARE_COMMIT,
                self.coordinator_epochs[meta.partition],
                tuple(sorted(meta.partitions)),
                self.load_epochs.get(meta.partition, 0),
            )
        )

    def markers_written(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        now_ms: int,
        load_epoch: int | None = None,
    ) -> list[TxnAction]:
        """Every marker of the transaction is acknowledged: write CompleteCommit / CompleteAbort.

        `load_epoch`: the SendMarkers' own. A report from an earlier load of the partition is ignored:
        its task wrote the markers of a transaction that the reload resent and may have completed
        since, and the same (producer id, epoch) may already be in its next transaction, whose
        markers are not all written yet.
        """
        self._run_due(now_ms)
        meta = self.txns.get(transactional_id)
        if (
            meta is not None
            and self.is_active(meta.partition, load_epoch)
            and self.coordinator_epochs.get(meta.partition) == coordinator_epoch
            and (meta.producer_id, meta.producer_epoch) == (producer_id, producer_epoch)
            and meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
            and meta.pending is None
        ):
            self._write_complete(meta, now_ms)
        return self._drain()

    def _write_complete(self, meta: TxnMetadata, now_ms: int) -> None:
        target = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        value = meta.value(target, now_ms, partitions=set())
        txn_id = meta.transactional_id

        def done(error: ErrorCode) -> None:
            if error is not E.NONE and self.txns.get(txn_id) is meta:
                log.warning("%s: writing %s failed (%s); retrying", txn_id, target.kafka_name, error.name)
                self.timers.schedule(("complete", txn_id), now_ms + self.config.complete_retry_backoff_ms)

        self._write(meta, target, value, done)

    def _fence_and_abort(self, meta: TxnMetadata, now_ms: int) -> None:
        """Kafka's prepareFenceProducerEpoch + abort: PrepareAbort at epoch + 1, so the old producer is fenced."""
        epoch = meta.producer_epoch if meta.epoch_exhausted else meta.producer_epoch + 1
        value = meta.value(S.PREPARE_ABORT, now_ms, producer_epoch=epoch)
        old_epoch = meta.producer_epoch

        def done(error: ErrorCode) -> None:
            if error is E.NONE:
                log.info(
                    "%s: producer id %d epoch %d fenced; its open transaction is aborted at epoch %d",
                    meta.transactional_id, meta.producer_id, old_epoch, epoch,
                )  # fmt: skip
                self._send_markers(meta, now_ms)

        self._write(meta, S.PREPARE_EPOCH_FENCE, value, done)

    # --- queries ----------------------------------------------------------------------------------

    def describe(self, transactional_ids: Iterable[str], now_ms: int) -> list[dict[str, Any]]:
        out = []
        for txn_id in transactional_ids:
            err = self.coordinator_error(txn_id)
            meta = self.txns.get(txn_id)
            if err is None and meta is None:
                err = (E.TRANSACTIONAL_ID_NOT_FOUND, f"no transactional id {txn_id!r}")
            if err is not None:
                out.append({"transactional_id": txn_id, "error_code": int(err[0]), "message": err[1]})
                continue
            assert meta is not None
            out.append(
                {
                    "transactional_id": txn_id,
                    "error_code": 0,
                    "transaction_state": meta.state.kafka_name,
                    "transaction_timeout_ms": meta.txn_timeout_ms,
                    "transaction_start_time_ms": meta.start_timestamp_ms,
                    "producer_id": meta.producer_id,
                    "producer_epoch": meta.producer_epoch,
                    "topics": [{"topic": t, "partitions": list(ps)} for t, ps in _by_topic(meta.partitions).items()],
                }
            )
        return out

    def list_transactions(
        self, state_filters: Iterable[str], producer_id_filters: Iterable[int], duration_filter_ms: int, now_ms: int
    ) -> dict[str, Any]:
        states = set(state_filters)
        unknown = sorted(s for s in states if S.from_kafka_name(s) is None)
        pids = set(producer_id_filters)
        if any(status is PartitionStatus.LOADING for status in self.partitions.values()):
            return {"error_code": int(E.COORDINATOR_LOAD_IN_PROGRESS), "unknown_state_filters": unknown, "states": []}
        rows = []
        for txn_id, meta in sorted(self.txns.items()):
            if states and meta.state.kafka_name not in states:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if duration_filter_ms >= 0 and (
                meta.start_timestamp_ms < 0 or now_ms - meta.start_timestamp_ms < duration_filter_ms
            ):
                continue
            rows.append(
                {
                    "transactional_id": txn_id,
                    "producer_id": meta.producer_id,
                    "transaction_state": meta.state.kafka_name,
                }
            )
        return {"error_code": 0, "unknown_state_filters": unknown, "states": rows}

    # --- appends, timers --------------------------------------------------------------------------

    def _write(
        self, meta: TxnMetadata, pending: TxnState, value: TxnLogValue, done: Callable[[ErrorCode], None]
    ) -> None:
        """Append `value` for `meta`; apply it when durable and still ours, then run `done`."""
        meta.pending = pending
        partition, load_epoch = meta.partition, self.load_epochs.get(meta.partition, 0)
        txn_id = meta.transactional_id

        def completed(error: ErrorCode, now_ms: int) -> None:
            ours = self.is_active(partition, load_epoch) and self.txns.get(txn_id) is meta
            if error is E.NONE and not ours:
                error = E.NOT_COORDINATOR  # written, but this broker no longer coordinates the id
            if error is E.NONE:
                if value.state is S.DEAD:
                    del self.txns[txn_id]
                else:
                    meta.apply(value)
            elif ours:
                meta.pending = None
            done(error)

        append_id = self._next_append_id
        self._next_append_id += 1
        self._appends[append_id] = completed
        record_value = None if value.state is S.DEAD else value
        self._outbox.append(Append(append_id, partition, (txn_record(txn_id, record_value),), pending.kafka_name))

    def append_completed(self, append_id: int, error: ErrorCode | int, now_ms: int) -> list[TxnAction]:
        try:
            code = ErrorCode(int(error))
        except ValueError:
            code = E.UNKNOWN_SERVER_ERROR
        callback = self._appends.pop(append_id, None)
        if callback is None:
            log.warning("completion of unknown append %d ignored", append_id)
        else:
            callback(code, now_ms)
        self._run_due(now_ms)
        return self._drain()

    def pending_appends(self) -> int:
        return len(self._appends)

    def tick(self, now_ms: int) -> list[TxnAction]:
        self._run_due(now_ms)
        return self._drain()

    def next_deadline_ms(self) -> int | None:
        return self.timers.next_deadline()

    def _ensure_timers(self, now_ms: int) -> None:
        c = self.config
        if ABORT_EXPIRED_TIMER not in self.timers:
            self.timers.schedule(
                ABORT_EXPIRED_TIMER, now_ms + c.transaction_abort_timed_out_transaction_cleanup_interval_ms
            )
        if REMOVE_EXPIRED_TIMER not in self.timers:
            self.timers.schedule(
                REMOVE_EXPIRED_TIMER, now_ms + c.transaction_remove_expired_transaction_cleanup_interval_ms
            )

    def _run_due(self, now_ms: int) -> None:
        while (key := self.timers.pop_due(now_ms)) is not None:
            assert isinstance(key, tuple)
            if key == ABORT_EXPIRED_TIMER:
                self.abort_timed_out(now_ms)
                if self.partitions:
                    self._ensure_timers(now_ms)
            elif key == REMOVE_EXPIRED_TIMER:
                self.remove_expired(now_ms)
                if self.partitions:
                    self._ensure_timers(now_ms)
            elif key[0] == "complete":
                meta = self.txns.get(key[1])
                if meta is not None and meta.pending is None and meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    self._write_complete(meta, now_ms)

    def abort_timed_out(self, now_ms: int) -> None:
        """Abort (fencing the producer's epoch) every open transaction older than its timeout."""
        for meta in list(self.txns.values()):
            if (
                meta.state is S.ONGOING
                and meta.pending is None
                and self.is_active(meta.partition)
                and meta.start_timestamp_ms + meta.txn_timeout_ms <= now_ms
            ):
                log.info(
                    "%s: transaction timed out after %d ms; aborting it", meta.transactional_id, meta.txn_timeout_ms
                )
                self._fence_and_abort(meta, now_ms)

    def remove_expired(self, now_ms: int) -> None:
        """Forget ids without a transaction for transactional_id_expiration_ms (a tombstone each)."""
        for meta in list(self.txns.values()):
            if (
                meta.state in TERMINAL_OR_IDLE
                and meta.pending is None
                and self.is_active(meta.partition)
                and meta.last_update_timestamp_ms + self.config.transactional_id_expiration_ms <= now_ms
            ):
                value = meta.value(S.DEAD, now_ms)
                self._write(meta, S.DEAD, value, lambda error: None)

    def _drain(self) -> list[TxnAction]:
        out, self._outbox = self._outbox, []
        return out


def _by_topic(partitions: Iterable[TopicPartitionKey]) -> Mapping[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        out.setdefault(topic, []).append(partition)
    return out
