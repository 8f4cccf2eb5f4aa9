"""The idempotent producer's bookkeeping (sans-I/O), as the idempotence part of Kafka's TransactionManager.

Design notes: docs/client.md, section "client/producer/idempotence.py".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kraftpy.client.errors import ProducerFencedError, is_fatal_for_producer
from kraftpy.client.producer.producer_batch import ProducerBatch, increment_sequence
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.header import NO_SEQUENCE
from kraftpy.protocol.types import TopicPartition
from kraftpy.protocol.validate import INT16_MAX

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_LAST_ACKED_SEQUENCE = -1


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int = NO_PRODUCER_ID
    epoch: int = -1

    @property
    def is_valid(self) -> bool:
        return self.producer_id >= 0


NONE_PID = ProducerIdAndEpoch()


@dataclass
class _PartitionEntry:
    producer_id_and_epoch: ProducerIdAndEpoch
    next_sequence: int = 0
    last_acked_sequence: int = NO_LAST_ACKED_SEQUENCE
    last_acked_offset: int = -1
    in_flight: list[ProducerBatch] = field(default_factory=list)  # sorted by base_sequence

    def add(self, batch: ProducerBatch) -> None:
        if batch in self.in_flight:
            return
        self.in_flight.append(batch)
        self.in_flight.sort(key=lambda b: b.base_sequence)

    def remove(self, batch: ProducerBatch) -> None:
        if batch in self.in_flight:
            self.in_flight.remove(batch)

    def start_sequences_at_beginning(self, pid: ProducerIdAndEpoch) -> None:
        # Batches that already ended (expired on the wire) will never be resent: drop, don't renumber.
        self.in_flight = [b for b in self.in_flight if not b.is_done]
        sequence = 0
        for batch in self.in_flight:
            batch.reset_producer_state(pid.producer_id, pid.epoch, sequence)
            sequence = increment_sequence(sequence, batch.record_count)
        self.producer_id_and_epoch = pid
        self.next_sequence = sequence
        self.last_acked_sequence = NO_LAST_ACKED_SEQUENCE


class IdempotenceManager:
    def __init__(self, *, transactional: bool = False) -> None:
        # A transactional producer's id and epoch come from its TransactionManager (InitProducerId with the
        # transactional id), and a broken sequence is repaired by aborting, not by a local epoch bump.
        self.transactional = transactional
        self.producer_id_and_epoch = NONE_PID
        self._partitions: dict[TopicPartition, _PartitionEntry] = {}
        self._unresolved: dict[TopicPartition, int] = {}  # tp -> last sequence of the unresolved batch
        self._to_rewrite: set[TopicPartition] = set()
        self._epoch_bump_required = False
        self._need_producer_id = True
        self.fatal_error: KafkaError | None = None

    # Producer id -----------------------------------------------------------

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id_and_epoch.is_valid

    @property
    def needs_producer_id(self) -> bool:
        return self._need_producer_id and self.fatal_error is None and not self.transactional

    def init_producer_id_request(self) -> dict[str, object]:
        """Body of `/kafka/init_producer_id`; the idempotent producer always asks for a fresh id."""
        return {"transactional_id": None, "producer_id": -1, "producer_epoch": -1}

    def set_producer_id_and_epoch(self, producer_id: int, epoch: int) -> None:
        self.producer_id_and_epoch = ProducerIdAndEpoch(producer_id, epoch)
        self._need_producer_id = False
        log.info("producer id %d, epoch %d", producer_id, epoch)

    def producer_id_failed(self, error: KafkaError) -> None:
        """InitProducerId failed; a non-retriable answer makes the producer unusable."""
        if not error.retriable and error.code not in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT):
            self.fatal_error = error

    def bump_epoch_if_needed(self) -> None:
        """Run before each send round (Kafka's bumpIdempotentEpochAndResetIdIfNeeded)."""
        if not self._epoch_bump_required or self.transactional:
            return
        current = self.producer_id_and_epoch
        if current.epoch >= INT16_MAX or not current.is_valid:
            # The epoch is spent: start over with a new producer id; partitions restart at 0.
            self.producer_id_and_epoch = NONE_PID
            self._need_producer_id = True
            for tp in self._to_rewrite:
                self._unresolved.pop(tp, None)
            log.info("producer epoch exhausted; requesting a new producer id")
        else:
            self.producer_id_and_epoch = ProducerIdAndEpoch(current.producer_id, current.epoch + 1)
            log.info("bumped producer epoch to %d", current.epoch + 1)
            for tp in self._to_rewrite:
                self._entry(tp).start_sequences_at_beginning(self.producer_id_and_epoch)
                self._unresolved.pop(tp, None)
        self._to_rewrite.clear()
        self._epoch_bump_required = False

    @property
    def epoch_bump_required(self) -> bool:
        return self._epoch_bump_required

    def reset_after_new_epoch(self) -> None:
        """The coordinator gave a new epoch (a transactional producer): every partition restarts at sequence 0.

        Nothing is in flight then (the transaction ended first), so each partition's entry, still on the old
        epoch, starts over when its next batch is stamped (maybe_update_producer_id_and_epoch).
        """
        self._epoch_bump_required = False
        self._to_rewrite.clear()
        self._unresolved.clear()

    def request_epoch_bump_for_partition(self, tp: TopicPartition) -> None:
        self._epoch_bump_required = True
        self._to_rewrite.add(tp)

    # Per-partition sequences -----------------------------------------------

    def _entry(self, tp: TopicPartition) -> _PartitionEntry:
        entry = self._partitions.get(tp)
        if entry is None:
            entry = self._partitions[tp] = _PartitionEntry(self.producer_id_and_epoch)
        return entry

    def next_sequence(self, tp: TopicPartition) -> int:
        return self._entry(tp).next_sequence

    def increment_sequence(self, tp: TopicPartition, increment: int) -> None:
        entry = self._entry(tp)
        entry.next_sequence = increment_sequence(entry.next_sequence, increment)

    def last_acked_sequence(self, tp: TopicPartition) -> int:
        return self._entry(tp).last_acked_sequence

    def last_acked_offset(self, tp: TopicPartition) -> int:
        return self._entry(tp).last_acked_offset

    def in_flight(self, tp: TopicPartition) -> list[ProducerBatch]:
        return list(self._entry(tp).in_flight)

    def has_in_flight(self, tp: TopicPartition) -> bool:
        return bool(self._entry(tp).in_flight)

    def first_in_flight_sequence(self, tp: TopicPartition) -> int:
        entry = self._entry(tp)
        return entry.in_flight[0].base_sequence if entry.in_flight else NO_SEQUENCE

    def has_stale_producer_id_and_epoch(self, tp: TopicPartition) -> bool:
        return self._entry(tp).producer_id_and_epoch != self.producer_id_and_epoch

    def has_unresolved_sequence(self, tp: TopicPartition) -> bool:
        return tp in self._unresolved

    def is_next_sequence(self, tp: TopicPartition, sequence: int) -> bool:
        return sequence - self.last_acked_sequence(tp) == 1

    def is_next_sequence_for_unresolved(self, tp: TopicPartition, sequence: int) -> bool:
        return tp in self._unresolved and sequence == self._unresolved[tp] + 1

    def maybe_update_producer_id_and_epoch(self, tp: TopicPartition) -> None:
        """Before a new batch is stamped: a partition still on an old id/epoch restarts at 0 once idle."""
        entry = self._entry(tp)
        if entry.producer_id_and_epoch != self.producer_id_and_epoch and not entry.in_flight:
            entry.start_sequences_at_beginning(self.producer_id_and_epoch)

    def may_drain(self, first: ProducerBatch, max_in_flight: int) -> bool:
        """Kafka's shouldStopDrainBatchesForPartition, negated: may `first` of its queue go out now?"""
        tp = first.tp
        if self.fatal_error is not None or not self.has_producer_id:
            return False
        entry = self._entry(tp)
        if not first.has_sequence:
            if entry.in_flight and self.has_stale_producer_id_and_epoch(tp):
                # A batch with the new epoch and sequence 0 must not overtake batches of the old epoch.
                return False
            if self.has_unresolved_sequence(tp):
                # An earlier batch's fate is unknown; wait until those in flight settle.
                return False
            if len(entry.in_flight) >= max_in_flight:
                # The broker remembers the last 5 batches per producer; more would defeat deduplication.
                return False
        first_seq = self.first_in_flight_sequence(tp)
        # A retried batch goes only when it is the first unresolved one: retries go out one by one, in order.
        return not (first_seq != NO_SEQUENCE and first.has_sequence and first.base_sequence != first_seq)

    def stamp(self, batch: ProducerBatch) -> None:
        """Give a batch drained for the first time its producer state and the partition's next sequence."""
        self.maybe_update_producer_id_and_epoch(batch.tp)
        pid = self.producer_id_and_epoch
        batch.set_producer_state(pid.producer_id, pid.epoch, self.next_sequence(batch.tp), self.transactional)
        self.increment_sequence(batch.tp, batch.record_count)
        self._entry(batch.tp).add(batch)

    def on_drained(self, batch: ProducerBatch) -> None:
        """Note whether an earlier batch of the partition could still reach the broker after this one.

        Kafka sends a partition's requests over one connection that the broker
        serves in order, so an OUT_OF_ORDER_SEQUENCE_NUMBER on the next expected
        batch proves a gap. Requests over HTTP may overtake each other on
        separate connections; a batch sent while an earlier one was unsettled
        may be refused only because it arrived first, so that answer is retried
        and does not count as a gap.
        """
        batch.sent_behind_unsettled = any(
            b is not batch and b.base_sequence < batch.base_sequence for b in self._entry(batch.tp).in_flight
        )

    def mark_sequence_unresolved(self, batch: ProducerBatch) -> None:
        log.debug("sequence %d of %s is unresolved", batch.last_sequence, batch.tp)
        self._unresolved[batch.tp] = batch.last_sequence

    def maybe_resolve_sequences(self) -> None:
        """Once a partition with an unresolved batch has nothing in flight, decide: resolved, or bump."""
        for tp in list(self._unresolved):
            if self.has_in_flight(tp):
                continue
            if not self.is_next_sequence(tp, self.next_sequence(tp)):
                # Acks do not reach up to the next sequence: a batch in between is lost or unknown.
                log.info(
                    "no batches in flight for %s, last acked sequence %d, next %d: bumping the epoch",
                    tp,
                    self.last_acked_sequence(tp),
                    self.next_sequence(tp),
                )
                self.request_epoch_bump_for_partition(tp)
            del self._unresolved[tp]

    # Outcomes --------------------------------------------------------------

    def handle_completed_batch(self, batch: ProducerBatch, base_offset: int) -> None:
        entry = self._entry(batch.tp)
        current = entry.producer_id_and_epoch
        # An answer for numbering the partition has since left behind says nothing about the current one.
        if (batch.producer_id, batch.producer_epoch) == (current.producer_id, current.epoch):
            if batch.last_sequence > entry.last_acked_sequence:
                entry.last_acked_sequence = batch.last_sequence
            if base_offset >= 0:
                entry.last_acked_offset = max(entry.last_acked_offset, base_offset + batch.record_count - 1)
        entry.remove(batch)

    def remove_in_flight(self, batch: ProducerBatch) -> None:
        """A batch that already ended (it expired) got its answer: it no longer holds up the partition."""
        self._entry(batch.tp).remove(batch)

    def handle_failed_batch(self, batch: ProducerBatch, error: KafkaError, adjust_sequences: bool) -> None:
        entry = self._entry(batch.tp)
        entry.remove(batch)
        if is_fatal_for_producer(error.code):
            fenced = error.code == ErrorCode.PRODUCER_FENCED and not isinstance(error, ProducerFencedError)
            self.fatal_error = ProducerFencedError(error.message) if fenced else error
            return
        if error.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            log.error(
                "OUT_OF_ORDER_SEQUENCE_NUMBER for %s, producer id %d epoch %d sequence %d: bumping the epoch",
                batch.tp,
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
            )
            self.request_epoch_bump_for_partition(batch.tp)
        elif error.code == ErrorCode.UNKNOWN_PRODUCER_ID or adjust_sequences:
            # The broker has no state for us, or a sent batch failed and left a gap: renumber after a bump.
            self.request_epoch_bump_for_partition(batch.tp)

    def known_written(self, batch: ProducerBatch) -> bool:
        """True when a later sequence of the same producer epoch was acknowledged for the partition.

        The broker accepts a partition's sequences only consecutively within an
        epoch, so such an ack proves this batch is in the log. Its retry can then
        be refused as out of order (the broker remembers only the last 5 batches),
        which would otherwise be retried until the delivery timeout.
        """
        entry = self._entry(batch.tp)
        same_epoch = (batch.producer_id, batch.producer_epoch) == (
            entry.producer_id_and_epoch.producer_id,
            entry.producer_id_and_epoch.epoch,
        )
        return same_epoch and batch.has_sequence and batch.last_sequence <= entry.last_acked_sequence

    def can_retry(self, batch: ProducerBatch, code: ErrorCode, log_start_offset: int, retriable: bool) -> bool:
        """Kafka's TransactionManager.canRetry for the idempotent producer."""
        tp = batch.tp
        if code == ErrorCode.UNKNOWN_PRODUCER_ID:
            if log_start_offset < 0:
                return True  # we cannot judge without the log start offset; retry until we get it
            if batch.sequence_has_been_reset:
                return True  # renumbered already because of an earlier batch of this partition
            if batch.sent_behind_unsettled:
                # An earlier batch that starts the producer's state may simply not have landed yet (it was
                # refused, or this one overtook it). Bumping now would renumber that earlier batch while it
                # is on the wire, and its acknowledgement would then count for the new epoch: every later
                # batch is refused as out of order, forever (issue 11, the producer stall). Retry in order.
                return True
            # Our state fell off the log head (retention), or the broker lost it: bump and renumber.
            self.request_epoch_bump_for_partition(tp)
            return True
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            if batch.sent_behind_unsettled:
                return True  # an earlier batch may simply have arrived after this one (see on_drained)
            if not self.has_unresolved_sequence(tp) and (
                batch.sequence_has_been_reset or not self.is_next_sequence(tp, batch.base_sequence)
            ):
                return True  # an earlier batch has not landed yet; this one will fit once it does
            if not self.has_unresolved_sequence(tp) or self.is_next_sequence_for_unresolved(tp, batch.base_sequence):
                self.request_epoch_bump_for_partition(tp)  # a real gap right before this batch
            return True
        return retriable
