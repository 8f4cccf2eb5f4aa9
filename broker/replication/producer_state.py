"""Idempotent producer state of one partition: Kafka's ProducerStateManager.

Design notes: docs/replication.md, section "broker/replication/producer_state.py".
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import cbor2

from kraftpy.broker.replication.config import ReplicationConfig
from kraftpy.broker.replication.txn_verification import TxnVerifications
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.control import TxnMarker
from kraftpy.protocol.records.header import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader, crc32c
from kraftpy.protocol.settings import default_of
from kraftpy.protocol.validate import INT32_MAX

_SEQUENCE_SPACE = INT32_MAX + 1  # sequences wrap from INT32_MAX to 0
# Version 2 adds each producer's open transaction (first offset) and last coordinator epoch; 1 still loads.
SNAPSHOT_VERSION = 2
_READABLE_SNAPSHOT_VERSIONS = (1, 2)
NO_TXN = -1  # a producer with no open transaction on this partition
_DEFAULT_BATCHES_TO_RETAIN: int = default_of(ReplicationConfig, "producer_batches_to_retain")
_DEFAULT_EXPIRATION_MS: int = default_of(ReplicationConfig, "producer_id_expiration_ms")


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Kafka's inSequence: next follows last, wrapping from Int32 max to 0."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def _sequence_distance(from_seq: int, to_seq: int) -> int:
    """How far to_seq is ahead of from_seq on the wrapping sequence circle."""
    return (to_seq - from_seq) % _SEQUENCE_SPACE


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int
    batches: deque[BatchMetadata] = field(default_factory=deque)
    last_timestamp: int = -1
    # First offset of the producer's open transaction on this partition (Kafka's currentTxnFirstOffset).
    current_txn_first_offset: int = NO_TXN
    # Coordinator epoch of the last marker written for this producer: older coordinators are fenced.
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def in_open_txn(self, batch: BatchMetadata) -> bool:
        """Is `batch` part of the producer's transaction still open here (not of one a marker ended)?"""
        return self.current_txn_first_offset != NO_TXN and batch.first_offset >= self.current_txn_first_offset

    def find_duplicate(self, producer_epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended: its data spans first_offset..last_offset (the marker's offset)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(frozen=True, slots=True)
class AppendCheck:
    """The verdict on one batch: append it, answer with a duplicate's offsets, or reject it."""

    error: ErrorCode = ErrorCode.NONE
    duplicate: BatchMetadata | None = None
    message: str = ""

    @property
    def should_append(self) -> bool:
        return self.error == ErrorCode.NONE and self.duplicate is None


APPEND = AppendCheck()


def _repeats_ended_txn(header: BatchHeader, entry: ProducerStateEntry) -> AppendCheck:
    """A transactional batch reuses sequences of a transaction a marker has ended.

    Kafka answers it as a duplicate (the offsets of the ended transaction's batch), and the
    producer then counts a record as written that never was: librdkafka does this after
    abort_transaction() purges a message it had sent once (possibly written) and gives the
    next message its sequence (fault run seed 2301). A real retry never crosses a marker: a
    producer ends its transaction only once every send is answered. So the batch is refused
    with OUT_OF_ORDER_SEQUENCE_NUMBER; docs/transactions.md, "Sequences across a marker".
    """
    first, last = header.base_sequence, header.last_sequence
    return AppendCheck(
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        message=f"producer {header.producer_id} epoch {header.producer_epoch}: transactional batch {first}..{last} "
        f"repeats sequences of a transaction that has ended (its marker is written); expected sequence "
        f"{(entry.last_seq + 1) % _SEQUENCE_SPACE}: a retry never crosses a transaction's end, so the producer "
        "reused sequence numbers",
    )


class ProducerStateManager:
    def __init__(
        self,
        batches_to_retain: int = _DEFAULT_BATCHES_TO_RETAIN,
        producer_id_expiration_ms: int = _DEFAULT_EXPIRATION_MS,
    ) -> None:
        if batches_to_retain < 1:
            raise ValueError("batches_to_retain must be at least 1")
        self.batches_to_retain = batches_to_retain
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # The offset after the last batch applied: a snapshot taken now describes the log below it.
        self.map_end_offset = 0
        # Transactions ended by a marker the high watermark has not passed yet (Kafka's unreplicatedTxns):
        # until it does, the marker may still be truncated away, so they still hold the LSO back.
        self.unreplicated: list[CompletedTxn] = []
        # {producer id: first offset} of the open transactions (mirrors the entries' current_txn_first_offset):
        # the LSO is asked on every fetch, so it must not walk every producer.
        self._ongoing: dict[int, int] = {}
        # KIP-890 part 1: producers the transaction coordinator vouched for on this partition.
        self.verifications = TxnVerifications()

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def has_ongoing_txn(self, producer_id: int, producer_epoch: int) -> bool:
        """Kafka's hasOngoingTransaction: the producer, at this epoch, has a transaction open here."""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.producer_epoch == producer_epoch and entry.current_txn_first_offset != NO_TXN

    def needs_verification(self, header: BatchHeader) -> bool:
        """KIP-890 part 1: must the coordinator confirm this transactional batch's transaction first?

        Not when its producer's transaction is already open here at that epoch (the coordinator
        knew of it when it began) or was verified since the last marker; not for a batch the
        append refuses anyway (an older epoch).
        """
        pid, epoch = header.producer_id, header.producer_epoch
        if not header.is_transactional or header.is_control or pid < 0 or epoch < 0:
            return False
        entry = self.producers.get(pid)
        if entry is not None and epoch < entry.producer_epoch:
            return False
        return not self.has_ongoing_txn(pid, epoch) and not self.verifications.is_verified(pid, epoch)

    def check_append(self, header: BatchHeader, verify_txn: bool = False) -> AppendCheck:
        """Validate a batch a client sent to the leader (Kafka's analyzeAndValidateProducerState).

        `verify_txn`: KIP-890 part 1 applies, so a transactional batch that opens a transaction here
        is refused unless the coordinator verified its producer (see needs_verification).
        """
        producer_id = header.producer_id
        if producer_id < 0:
            if header.is_transactional:
                return AppendCheck(ErrorCode.INVALID_RECORD, message="a transactional batch needs a producer id")
            return APPEND  # not an idempotent batch
        first, last, epoch = header.base_sequence, header.last_sequence, header.producer_epoch
        if first < 0 or epoch < 0:
            return AppendCheck(
                ErrorCode.INVALID_RECORD,
                message=f"idempotent batch of producer {producer_id} has sequence {first} and epoch {epoch}",
            )
        entry = self.producers.get(producer_id)
        duplicate = entry.find_duplicate(epoch, first, last) if entry is not None else None
        if duplicate is not None:
            if header.is_transactional and not entry.in_open_txn(duplicate):
                return _repeats_ended_txn(header, entry)
            return AppendCheck(duplicate=duplicate)
        if verify_txn and self.needs_verification(header):
            return AppendCheck(
                ErrorCode.INVALID_TXN_STATE,
                message=f"producer {producer_id} epoch {epoch} has no ongoing transaction on this partition that "
                "its transaction coordinator verified: the partition was not added to the transaction "
                "(AddPartitionsToTxn), or the transaction ended",
            )
        if entry is None:
            if first != 0:
                return AppendCheck(
                    ErrorCode.UNKNOWN_PRODUCER_ID,
                    message=f"no state for producer {producer_id} (removed by retention or expired?), "
                    f"and its batch starts at sequence {first}, not 0",
                )
            return APPEND
        if epoch < entry.producer_epoch:
            return AppendCheck(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                message=f"producer {producer_id} epoch {epoch} is older than the current {entry.producer_epoch}",
            )
        if not header.is_transactional and entry.current_txn_first_offset != NO_TXN:
            # Kafka's ProducerAppendInfo: a plain write in the middle of the producer's transaction.
            return AppendCheck(
                ErrorCode.INVALID_TXN_STATE,
                message=f"producer {producer_id} has a transaction open at offset "
                f"{entry.current_txn_first_offset}; a non-transactional batch cannot join it",
            )
        if epoch > entry.producer_epoch:
            if first != 0:
                return AppendCheck(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    message=f"producer {producer_id} new epoch {epoch} must start at sequence 0, not {first}",
                )
            return APPEND
        last_seq = entry.last_seq
        if last_seq == NO_SEQUENCE:
            if first == 0:
                return APPEND
        elif in_sequence(last_seq, first):
            return APPEND
        elif _sequence_distance(last, last_seq) < _SEQUENCE_SPACE // 2:
            # The whole batch lies at or before the last sequence (within half the wrapping circle):
            # an old retry whose offsets are no longer remembered.
            if header.is_transactional and entry.current_txn_first_offset == NO_TXN:
                return _repeats_ended_txn(header, entry)
            return AppendCheck(
                ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
                message=f"producer {producer_id} batch {first}..{last} was already written (last sequence {last_seq})",
            )
        return AppendCheck(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            message=f"producer {producer_id} epoch {epoch}: expected sequence {(last_seq + 1) % _SEQUENCE_SPACE}, "
            f"got {first}",
        )

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> AppendCheck:
        """Validate a transaction marker the coordinator asks the leader to write (Kafka's appendEndTxnMarker)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return APPEND  # no data here (or expired): the marker is written all the same, as Kafka does
        if producer_epoch < entry.producer_epoch:
            return AppendCheck(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                message=f"marker for producer {producer_id} at epoch {producer_epoch}, "
                f"older than the current {entry.producer_epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            return AppendCheck(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                message=f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than the {entry.coordinator_epoch} this partition saw",
            )
        return APPEND

    def update(
        self,
        header: BatchHeader,
        first_offset: int | None = None,
        last_offset: int | None = None,
        marker: TxnMarker | None = None,
    ) -> CompletedTxn | None:
        """Apply a batch that is now in the log (leader append, follower append or replay); no validation.

        A leader passes the offsets it assigned; a follower or a replay uses the header's. A control
        batch passes its `marker`; the transaction it ends is returned (None when none was open).
        """
        first_offset = header.base_offset if first_offset is None else first_offset
        last_offset = first_offset + header.last_offset_delta if last_offset is None else last_offset
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)
        if header.producer_id < 0 or header.producer_epoch == NO_PRODUCER_EPOCH:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = self.producers[header.producer_id] = ProducerStateEntry(header.producer_id, header.producer_epoch)
        elif header.producer_epoch != entry.producer_epoch:
            # A new epoch starts a new sequence space: older batches can no longer be duplicates.
            entry.producer_epoch = header.producer_epoch
            entry.batches.clear()
        if header.is_control:
            entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
            if marker is None:
                return None  # a control batch that ends no transaction
            entry.coordinator_epoch = marker.coordinator_epoch
            self.verifications.clear(header.producer_id)
            first, entry.current_txn_first_offset = entry.current_txn_first_offset, NO_TXN
            self._ongoing.pop(header.producer_id, None)
            if first == NO_TXN:
                return None
            done = CompletedTxn(header.producer_id, first, first_offset, aborted=not marker.committed)
            self.unreplicated.append(done)
            return done
        if header.is_transactional and entry.current_txn_first_offset == NO_TXN:
            entry.current_txn_first_offset = self._ongoing[header.producer_id] = first_offset
        if header.base_sequence != NO_SEQUENCE:
            entry.batches.append(
                BatchMetadata(
                    header.base_sequence, header.last_sequence, first_offset, last_offset, header.max_timestamp
                )
            )
            while len(entry.batches) > self.batches_to_retain:
                entry.batches.popleft()
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        return None

    # -- transactions ------------------------------------------------------------------------------------------

    def ongoing_txns(self) -> dict[int, int]:
        """{producer id: first offset} of every open transaction."""
        return dict(self._ongoing)

    def first_unstable_offset(self) -> int | None:
        """The earliest offset of a transaction not yet decided for readers (open, or ended above the HW)."""
        if not self._ongoing and not self.unreplicated:
            return None  # no transaction at all: the common case, asked on every fetch decision
        return min([*self._ongoing.values(), *(t.first_offset for t in self.unreplicated)])

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's LSO: below it every transaction is decided and replicated; never above the HW."""
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def on_high_watermark(self, high_watermark: int) -> None:
        """The HW passed some markers: their transactions no longer hold the LSO back."""
        if self.unreplicated:
            self.unreplicated = [t for t in self.unreplicated if t.last_offset >= high_watermark]

    def stable_offset_after(self, done: CompletedTxn) -> int:
        """The LSO an aborted-transaction index entry records (Kafka's lastStableOffset(completedTxn))."""
        others = [f for pid, f in self._ongoing.items() if pid != done.producer_id]
        return min(others) if others else done.last_offset + 1

    def remove_expired(self, now_ms: int) -> list[int]:
        """Forget producers idle for producer_id_expiration_ms (by their batches' timestamps).

        Never one with an open transaction (Kafka's isProducerExpired): its first offset holds the LSO.
        """
        expired = [
            pid
            for pid, e in self.producers.items()
            if now_ms - e.last_timestamp >= self.producer_id_expiration_ms and pid not in self._ongoing
        ]
        for pid in expired:
            del self.producers[pid]
        self.verifications.remove_expired(now_ms, self.producer_id_expiration_ms)
        return expired

    def evict_unretained(self, log_start_offset: int) -> list[int]:
        """Retention moved the log start: forget producers whose last batch is gone (Kafka's truncateHead)."""
        gone = [pid for pid, e in self.producers.items() if e.last_data_offset < log_start_offset]
        for pid in gone:
            del self.producers[pid]
            self._ongoing.pop(pid, None)
        self.unreplicated = [t for t in self.unreplicated if t.last_offset >= log_start_offset]
        return gone

    # -- snapshots ---------------------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The state as bytes, describing the log below map_end_offset (the shell names the file by it)."""
        producers = [
            [
                e.producer_id,
                e.producer_epoch,
                e.last_timestamp,
                [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp] for b in e.batches],
                e.current_txn_first_offset,
                e.coordinator_epoch,
            ]
            for e in sorted(self.producers.values(), key=lambda e: e.producer_id)
        ]
        payload = cbor2.dumps({"version": SNAPSHOT_VERSION, "offset": self.map_end_offset, "producers": producers})
        return cbor2.dumps({"crc": crc32c(payload), "payload": payload})

    @classmethod
    def from_snapshot(
        cls,
        data: bytes,
        batches_to_retain: int = _DEFAULT_BATCHES_TO_RETAIN,
        producer_id_expiration_ms: int = _DEFAULT_EXPIRATION_MS,
    ) -> ProducerStateManager:
        try:
            outer = cbor2.loads(data)
            payload = outer["payload"]
            if crc32c(payload) != outer["crc"]:
                raise KafkaError("producer state snapshot CRC mismatch", ErrorCode.CORRUPT_MESSAGE)
            body = cbor2.loads(payload)
            if body["version"] not in _READABLE_SNAPSHOT_VERSIONS:
                raise KafkaError(f"producer snapshot version {body['version']} is unknown", ErrorCode.CORRUPT_MESSAGE)
            manager = cls(batches_to_retain, producer_id_expiration_ms)
            manager.map_end_offset = int(body["offset"])
            for pid, epoch, last_ts, batches, *txn in body["producers"]:
                entry = ProducerStateEntry(int(pid), int(epoch), last_timestamp=int(last_ts))
                if txn:  # version 2
                    entry.current_txn_first_offset, entry.coordinator_epoch = int(txn[0]), int(txn[1])
                    if entry.current_txn_first_offset != NO_TXN:
                        manager._ongoing[entry.producer_id] = entry.current_txn_first_offset
                for first_seq, last_seq, first_off, last_off, ts in batches[-batches_to_retain:]:
                    entry.batches.append(BatchMetadata(first_seq, last_seq, first_off, last_off, ts))
                manager.producers[entry.producer_id] = entry
        except KafkaError:
            raise
        except (ValueError, KeyError, TypeError, IndexError, EOFError, cbor2.CBORDecodeError) as exc:
            raise KafkaError(f"producer state snapshot is malformed: {exc}", ErrorCode.CORRUPT_MESSAGE) from exc
        return manager

    @classmethod
    def rebuild(
        cls,
        snapshot: bytes | None,
        headers: Iterable[BatchHeader | tuple[BatchHeader, TxnMarker | None]],
        end_offset: int,
        batches_to_retain: int = _DEFAULT_BATCHES_TO_RETAIN,
        producer_id_expiration_ms: int = _DEFAULT_EXPIRATION_MS,
        on_aborted: Callable[[CompletedTxn, int], None] | None = None,
    ) -> ProducerStateManager:
        """Kafka's truncateAndReload: start from a snapshot (or empty), replay headers in [snapshot offset, end).

        `headers` may start earlier than the snapshot; those batches are skipped. A control batch comes
        as (header, marker). Each replayed abort is handed to `on_aborted` with its index entry's LSO,
        so the caller can rebuild the aborted-transactions index of the replayed range.
        """
        if snapshot is None:
            manager = cls(batches_to_retain, producer_id_expiration_ms)
        else:
            manager = cls.from_snapshot(snapshot, batches_to_retain, producer_id_expiration_ms)
        if manager.map_end_offset > end_offset:
            raise ValueError(f"snapshot at offset {manager.map_end_offset} is beyond the rebuild end {end_offset}")
        start = manager.map_end_offset
        for item in headers:
            header, marker = (item, None) if isinstance(item, BatchHeader) else item
            if header.base_offset < start:
                continue
            if header.base_offset >= end_offset:
                break
            done = manager.update(header, marker=marker)
            if done is not None and done.aborted and on_aborted is not None:
                on_aborted(done, manager.stable_offset_after(done))
        manager.map_end_offset = end_offset  # the state now describes the whole log below end_offset
        return manager
