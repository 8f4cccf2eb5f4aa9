"""One batch of records for one partition on its way to the leader, as Kafka's ProducerBatch.

A batch collects records until it is full or lingered long enough, is drained
into a produce request, may be re-enqueued for retries (keeping its producer
id, epoch and sequence: resending the same bytes is what lets the broker
recognise a duplicate), and ends exactly once: succeeded, failed or aborted.
At its end every record's callback runs with the record's RecordMetadata and
the error, if any.
"""

from __future__ import annotations

import enum
import logging
import struct
from collections.abc import Sequence

from kraftpy.client.types import DeliveryCallback, RecordMetadata
from kraftpy.protocol.records.batch import RecordBatchBuilder
from kraftpy.protocol.records.header import NO_SEQUENCE, write_crc
from kraftpy.protocol.types import TopicPartition
from kraftpy.protocol.validate import INT32_MAX

log = logging.getLogger(__name__)

# Producer fields inside the v2 header (header.py documents the layout); they lie
# inside the CRC'd region, so rewriting them means recomputing the CRC.
_PRODUCER_FIELDS_AT = 43
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence


class FinalState(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: sequences wrap from INT32_MAX to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


# RecordMetadata's fields without its Python __new__: one is built per record acknowledged.
_new_metadata = tuple.__new__

# One record's completion data: (callback, relative_offset, timestamp, key_size, value_size). A plain
# tuple: one is built per record sent, and a NamedTuple's __new__ is a Python call.
_Thunk = tuple[DeliveryCallback | None, int, int, int, int]


class ProducerBatch:
    def __init__(self, tp: TopicPartition, builder: RecordBatchBuilder, now_ms: int, memory: int = 0) -> None:
        self.tp = tp
        self.builder = builder
        self.created_ms = now_ms
        self.last_attempt_ms = now_ms
        self.last_append_ms = now_ms
        self.drained_ms = now_ms
        self.attempts = 0
        self.retry = False
        self.retry_backoff_ms = 0.0
        self.memory = memory  # bytes reserved in the BufferPool until the batch ends
        self.final_state: FinalState | None = None
        self.sequence_has_been_reset = False
        # Whether a batch with a lower sequence was still unsettled when this one was last sent.
        self.sent_behind_unsettled = False
        # The broker's last retriable answer, named when the batch expires (better than a bare timeout).
        self.last_error = ""
        # Whether some attempt ended without a clear answer (timeout, lost connection): the broker may have it.
        self.maybe_written = False
        self.closed_for_appends = False
        self._thunks: list[_Thunk] = []
        self._built: bytes | None = None
        # The leader epoch of the partition when the batch was last drained (KIP-951: a retry to a new
        # leader does not wait out the backoff meant for the old one).
        self.leader_epoch: int | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = NO_SEQUENCE

    def __repr__(self) -> str:
        return (
            f"ProducerBatch({self.tp}, records={self.record_count}, seq={self.base_sequence}, "
            f"attempts={self.attempts}, state={self.final_state})"
        )

    # Filling ---------------------------------------------------------------

    @property
    def record_count(self) -> int:
        return len(self._thunks)

    def try_append(
        self,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        callback: DeliveryCallback | None,
        now_ms: int,
    ) -> bool:
        """Add a record unless the batch is full or closed; False means "start a new batch"."""
        if self.closed_for_appends or self._built is not None:
            return False
        if not self.builder.append(key, value, headers, timestamp_ms):
            self.closed_for_appends = True  # once a record did not fit, later ones go to a new batch
            return False
        thunks = self._thunks
        thunks.append(
            (
                callback,
                len(thunks),
                timestamp_ms,
                -1 if key is None else len(key),
                -1 if value is None else len(value),
            )
        )
        self.last_append_ms = now_ms
        return True

    @property
    def last_callback(self) -> DeliveryCallback | None:
        """The callback of the batch's newest record: the last one called when the batch ends."""
        return self._thunks[-1][0] if self._thunks else None

    @property
    def is_full(self) -> bool:
        return self.closed_for_appends or self.builder.estimated_size >= self.builder.batch_size

    @property
    def estimated_size(self) -> int:
        return len(self._built) if self._built is not None else self.builder.estimated_size

    def close(self) -> bytes:
        """Seal the batch: no more records; returns its v2 bytes (the same bytes on every retry)."""
        self.closed_for_appends = True
        if self._built is None:
            self._built = self.builder.build()
        return self._built

    @property
    def records(self) -> bytes:
        if self._built is None:
            raise RuntimeError(f"{self!r} is not closed yet")
        return self._built

    # Idempotence -----------------------------------------------------------

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence != NO_SEQUENCE

    @property
    def last_sequence(self) -> int:
        return increment_sequence(self.base_sequence, self.record_count - 1)

    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, is_transactional: bool = False
    ) -> None:
        """Stamp id, epoch and sequence when the batch is first drained (and the transactional bit, for good)."""
        self.producer_id, self.producer_epoch, self.base_sequence = producer_id, producer_epoch, base_sequence
        if self._built is None:
            self.builder.set_producer_state(producer_id, producer_epoch, base_sequence, is_transactional)
        else:
            self._rewrite_producer_fields()

    def reset_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """After an epoch bump the partition's unacknowledged batches are renumbered from 0 (KIP-360)."""
        self.sequence_has_been_reset = True
        self.set_producer_state(producer_id, producer_epoch, base_sequence)

    def _rewrite_producer_fields(self) -> None:
        assert self._built is not None
        buf = bytearray(self._built)
        _PRODUCER_FIELDS.pack_into(buf, _PRODUCER_FIELDS_AT, self.producer_id, self.producer_epoch, self.base_sequence)
        write_crc(buf)
        self._built = bytes(buf)

    # Timing ----------------------------------------------------------------

    def leader_changed(self, epoch: int | None) -> bool:
        """Whether the partition has a newer leader epoch than when this batch was last drained."""
        return epoch is not None and self.leader_epoch is not None and epoch > self.leader_epoch

    @property
    def in_retry(self) -> bool:
        return self.retry

    def waited_time_ms(self, now_ms: int) -> int:
        return max(0, now_ms - self.last_attempt_ms)

    def has_reached_delivery_timeout(self, delivery_timeout_ms: int, now_ms: int) -> bool:
        return delivery_timeout_ms <= now_ms - self.created_ms

    def drained(self, now_ms: int) -> None:
        self.drained_ms = max(self.drained_ms, now_ms)

    def reenqueued(self, now_ms: int, backoff_ms: float) -> None:
        self.attempts += 1
        self.last_attempt_ms = max(self.last_append_ms, now_ms)
        self.last_append_ms = max(self.last_append_ms, now_ms)
        self.retry = True
        self.retry_backoff_ms = backoff_ms

    # Outcome ---------------------------------------------------------------

    @property
    def is_done(self) -> bool:
        return self.final_state is not None

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> bool:
        """Acknowledged at `base_offset` (-1 when unknown); False if the batch had already ended."""
        return self._done(FinalState.SUCCEEDED, base_offset, log_append_time_ms, None)

    def fail(self, error: BaseException) -> bool:
        return self._done(FinalState.FAILED, -1, -1, error)

    def abort(self, error: BaseException) -> bool:
        return self._done(FinalState.ABORTED, -1, -1, error)

    def _done(self, state: FinalState, base_offset: int, log_append_time_ms: int, error: BaseException | None) -> bool:
        if self.final_state is not None:
            if self.final_state is FinalState.SUCCEEDED and state is not FinalState.SUCCEEDED:
                log.debug("%r ignores a late %s after it succeeded", self, state.value)
            elif state is FinalState.SUCCEEDED:
                # A batch failed here (e.g. it expired) but the broker wrote it after all.
                log.debug("%r was written after it had %s", self, self.final_state.value)
            return False
        self.final_state = state
        topic, partition = self.tp
        append_time = log_append_time_ms if log_append_time_ms >= 0 else None
        for callback, relative_offset, timestamp, key_size, value_size in self._thunks:
            if callback is None:
                continue
            if error is None:
                offset = -1 if base_offset < 0 else base_offset + relative_offset
                when = timestamp if append_time is None else append_time
            else:
                offset, when = -1, -1
            try:
                callback(_new_metadata(RecordMetadata, (topic, partition, offset, when, key_size, value_size)), error)
            except Exception:
                log.exception("delivery callback for a record of %s raised", self.tp)
        return True
