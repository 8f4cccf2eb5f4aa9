"""Per-partition batching (sans-I/O), as Kafka's RecordAccumulator.

`append` adds a record to the last open batch of its partition or starts a
new one, which needs a buffer_memory reservation (AppendResult.needs_memory
tells the shell to wait for it, up to max_block_ms). `ready` says which
leaders have a sendable batch: full, lingered linger_ms, a flush or close
in progress, or memory exhausted with callers waiting; a retried batch waits
out its backoff. `drain` takes at most one batch per partition, round-robin
over the leader's partitions, until max_request_size, stamping idempotence
state on batches drained for the first time. `expired_batches` gives up on
batches whose delivery_timeout_ms passed.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from kraftpy.client.metadata import Cluster
from kraftpy.client.producer.batch_builder import ProducerBatchBuilder
from kraftpy.client.producer.buffer_pool import BufferPool
from kraftpy.client.producer.idempotence import IdempotenceManager
from kraftpy.client.producer.producer_batch import ProducerBatch
from kraftpy.client.types import DeliveryCallback
from kraftpy.protocol.backoff import Backoff
from kraftpy.protocol.records.compression import CompressionType
from kraftpy.protocol.records.header import HEADER_SIZE
from kraftpy.protocol.records.record import normalize_headers, record_size
from kraftpy.protocol.types import TopicPartition

# Varint slack a record's deltas may take beyond the first record's (Kafka's
# estimateSizeInBytesUpperBound also assumes the widest deltas).
_DELTA_SLACK = 5 + 10
# The widest a record without headers can be around its key and value: length (5), attributes (1),
# timestamp delta (10), offset delta (5), key and value lengths (5 each), header count (1).
_PLAIN_RECORD_OVERHEAD = 5 + 1 + 10 + 5 + 5 + 5 + 1


def estimate_size_upper_bound(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] = ()
) -> int:
    """Bytes a batch holding just this record can take, before compression."""
    if not headers:
        # Without headers the bound is plain arithmetic (this runs for every record sent): record length
        # varint, attributes, timestamp and offset deltas, two length-prefixed fields, the header count.
        return HEADER_SIZE + _PLAIN_RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    return HEADER_SIZE + record_size(0, 0, key, value, normalize_headers(headers)) + _DELTA_SLACK


@dataclass(slots=True)
class AppendResult:
    appended: bool = False
    batch_is_full: bool = False
    new_batch_created: bool = False
    aborted_for_new_batch: bool = False
    needs_memory: int = 0  # > 0: reserve this many bytes and call append again with memory=...


# The two outcomes of nearly every append, shared (callers only read them).
_APPENDED = AppendResult(appended=True)
_APPENDED_FULL = AppendResult(appended=True, batch_is_full=True)


@dataclass(slots=True)
class ReadyCheckResult:
    ready_nodes: set[int] = field(default_factory=set)
    next_ready_check_delay_ms: float = float("inf")
    unknown_leader_topics: set[str] = field(default_factory=set)


class RecordAccumulator:
    def __init__(
        self,
        *,
        batch_size: int = 16_384,
        linger_ms: int = 5,
        compression: CompressionType = CompressionType.NONE,
        delivery_timeout_ms: int = 120_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        max_in_flight: int = 5,
        pool: BufferPool | None = None,
        idempotence: IdempotenceManager | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.compression = compression
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.max_in_flight = max_in_flight
        self.pool = pool if pool is not None else BufferPool(33_554_432)
        self.idempotence = idempotence
        self._rng = rng or random.Random()
        self._batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._muted: set[TopicPartition] = set()
        self._drain_index: dict[int, int] = {}
        self._flushes_in_progress = 0
        self.closed = False
        # A transactional producer's gate: a partition's batches wait until AddPartitionsToTxn added it.
        self.send_allowed: Callable[[TopicPartition], bool] | None = None

    # Appending -------------------------------------------------------------

    def append(
        self,
        tp: TopicPartition,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        callback: DeliveryCallback | None,
        now_ms: int,
        abort_on_new_batch: bool = False,
        memory: int = 0,
    ) -> AppendResult:
        """Append a record. `memory` is a reservation the caller already holds (from a previous needs_memory)."""
        if self.closed:
            self.pool.release(memory)
            raise RuntimeError("the accumulator is closed")
        dq = self._batches.get(tp)
        if dq is None:
            dq = self._batches[tp] = deque()
        last = dq[-1] if dq else None
        if last is not None and last.try_append(timestamp_ms, key, value, headers, callback, now_ms):
            if memory:
                self.pool.release(memory)  # someone else's batch had room after all
            return _APPENDED_FULL if len(dq) > 1 or last.is_full else _APPENDED
        if abort_on_new_batch:
            # The sticky partitioner moves on before a new batch is started (KIP-480).
            self.pool.release(memory)
            return AppendResult(aborted_for_new_batch=True)
        size = max(self.batch_size, estimate_size_upper_bound(key, value, headers))
        if memory < size:
            if memory == 0 and self.pool.try_allocate(size):
                memory = size
            else:
                self.pool.release(memory)
                return AppendResult(needs_memory=size)
        elif memory > size:
            self.pool.release(memory - size)
            memory = size
        builder = ProducerBatchBuilder(size, compression=self.compression)
        batch = ProducerBatch(tp, builder, now_ms, memory)
        if not batch.try_append(timestamp_ms, key, value, headers, callback, now_ms):
            raise AssertionError("the first record of a batch always fits")
        dq.append(batch)
        self._incomplete.add(batch)
        return AppendResult(appended=True, new_batch_created=True, batch_is_full=len(dq) > 1 or batch.is_full)

    # Readiness -------------------------------------------------------------

    def _backing_off(self, batch: ProducerBatch, now_ms: int, leader_epoch: int | None = None) -> bool:
        """A retry waits out its backoff, unless the partition got a new leader since (Kafka's KIP-951)."""
        if batch.attempts == 0 or batch.leader_changed(leader_epoch):
            return False
        return batch.waited_time_ms(now_ms) < batch.retry_backoff_ms

    def ready(self, cluster: Cluster, now_ms: int) -> ReadyCheckResult:
        result = ReadyCheckResult()
        exhausted = self.pool.queued > 0
        for tp, dq in self._batches.items():
            if not dq:
                continue
            leader = cluster.leader_for(tp)
            if leader is None:
                result.unknown_leader_topics.add(tp.topic)
                continue
            if leader.node_id in result.ready_nodes or tp in self._muted:
                continue
            batch = dq[0]
            waited = batch.waited_time_ms(now_ms)
            backing_off = self._backing_off(batch, now_ms, cluster.leader_and_epoch(tp).epoch)
            time_to_wait = batch.retry_backoff_ms if backing_off else self.linger_ms
            full = len(dq) > 1 or batch.is_full
            expired = waited >= time_to_wait
            sendable = full or expired or exhausted or self.closed or self._flushes_in_progress > 0
            if sendable and not backing_off:
                result.ready_nodes.add(leader.node_id)
            else:
                result.next_ready_check_delay_ms = min(result.next_ready_check_delay_ms, max(time_to_wait - waited, 0))
        return result

    def has_undrained(self) -> bool:
        return any(self._batches.values())

    # Draining --------------------------------------------------------------

    def drain(
        self, cluster: Cluster, nodes: Iterable[int], max_size: int, now_ms: int
    ) -> dict[int, list[ProducerBatch]]:
        """Up to `max_size` bytes of batches per node, at most one batch per partition."""
        return {node: batches for node in nodes if (batches := self._drain_node(cluster, node, max_size, now_ms))}

    def _drain_node(self, cluster: Cluster, node_id: int, max_size: int, now_ms: int) -> list[ProducerBatch]:
        parts = sorted(
            (tp for tp, dq in self._batches.items() if dq and (n := cluster.leader_for(tp)) and n.node_id == node_id)
        )
        if not parts:
            return []
        start = self._drain_index.get(node_id, 0) % len(parts)
        # Next time, start one further along, or where this round ran out of room (fairness).
        self._drain_index[node_id] = start + 1
        ready: list[ProducerBatch] = []
        size = 0
        for i in range(len(parts)):
            tp = parts[(start + i) % len(parts)]
            if tp in self._muted:
                continue
            dq = self._batches[tp]
            first = dq[0]
            epoch = cluster.leader_and_epoch(tp).epoch
            if self._backing_off(first, now_ms, epoch):
                continue
            if size + first.estimated_size > max_size and ready:
                # One batch above max_size (possible with compression) still goes, alone.
                self._drain_index[node_id] = start + i
                break
            if self.send_allowed is not None and not self.send_allowed(tp):
                continue
            if self.idempotence is not None and not self.idempotence.may_drain(first, self.max_in_flight):
                continue
            batch = dq.popleft()
            if self.idempotence is not None:
                if not batch.has_sequence:
                    self.idempotence.stamp(batch)
                self.idempotence.on_drained(batch)
            batch.close()
            batch.leader_epoch = epoch
            size += batch.estimated_size
            ready.append(batch)
            batch.drained(now_ms)
        return ready

    def mute(self, tp: TopicPartition) -> None:
        self._muted.add(tp)

    def unmute(self, tp: TopicPartition) -> None:
        self._muted.discard(tp)

    # Retries ---------------------------------------------------------------

    def retry_backoff(self, attempts: int) -> float:
        """Kafka 3.7's exponential retry backoff (KIP-580), with 20% jitter."""
        return Backoff(self.retry_backoff_ms, self.retry_backoff_max_ms, rng=self._rng, attempts=attempts).next_ms()

    def reenqueue(self, batch: ProducerBatch, now_ms: int) -> None:
        """Put a batch back for a retry, ahead of newer batches and in sequence order."""
        batch.reenqueued(now_ms, self.retry_backoff(batch.attempts))
        dq = self._batches.setdefault(batch.tp, deque())
        if self.idempotence is not None and batch.has_sequence:
            # Several batches of one partition can come back (e.g. from a request to a
            # former leader); keep the queue ordered by sequence so they resend in order.
            ahead = []
            while dq and dq[0].has_sequence and dq[0].base_sequence < batch.base_sequence:
                ahead.append(dq.popleft())
            dq.appendleft(batch)
            for earlier in reversed(ahead):
                dq.appendleft(earlier)
        else:
            dq.appendleft(batch)

    # Expiry ----------------------------------------------------------------

    def expired_batches(self, now_ms: int) -> list[ProducerBatch]:
        """Queued batches past delivery_timeout_ms, removed from their queues (the caller fails them)."""
        expired = []
        for dq in self._batches.values():
            while dq and dq[0].has_reached_delivery_timeout(self.delivery_timeout_ms, now_ms):
                batch = dq.popleft()
                batch.closed_for_appends = True
                expired.append(batch)
        return expired

    def next_expiry_ms(self) -> float:
        """When the oldest queued batch will reach its delivery timeout."""
        firsts = [dq[0].created_ms for dq in self._batches.values() if dq]
        return min(firsts) + self.delivery_timeout_ms if firsts else float("inf")

    # Completion ------------------------------------------------------------

    def deallocate(self, batch: ProducerBatch) -> None:
        """A batch ended: forget it and return its memory."""
        self._incomplete.discard(batch)
        if batch.memory:
            memory, batch.memory = batch.memory, 0
            self.pool.release(memory)

    def incomplete(self) -> list[ProducerBatch]:
        return list(self._incomplete)

    def begin_flush(self) -> None:
        self._flushes_in_progress += 1

    def end_flush(self) -> None:
        self._flushes_in_progress = max(0, self._flushes_in_progress - 1)

    @property
    def flush_in_progress(self) -> bool:
        return self._flushes_in_progress > 0

    def close(self) -> None:
        """No more appends; everything queued becomes sendable now."""
        self.closed = True

    def abort_undrained(
        self, error_for: Callable[[ProducerBatch], BaseException], *, only_unsent: bool = False
    ) -> list[ProducerBatch]:
        """Fail every batch still queued (a forced close or a fatal producer error).

        `only_unsent`: keep the retries of batches already sent (an aborting transaction still needs
        their answers; Kafka's abortUndrainedBatches keeps batches that have a sequence)."""
        aborted = []
        for dq in self._batches.values():
            keep = [b for b in dq if only_unsent and b.has_sequence]
            for batch in dq:
                if batch in keep:
                    continue
                batch.abort(error_for(batch))
                self.deallocate(batch)
                aborted.append(batch)
            dq.clear()
            dq.extend(keep)
        return aborted

    def queued(self, tp: TopicPartition) -> list[ProducerBatch]:
        return list(self._batches.get(tp, ()))
