"""`/kafka/produce`: append one batch per partition as leader; answer per acks (Kafka's appendRecords).

Per partition, in this order:
1. acks must be 0, 1 or -1 (INVALID_REQUIRED_ACKS for every partition, nothing appended);
2. the partition must be hosted and led here (UNKNOWN_TOPIC_OR_PARTITION,
   NOT_LEADER_OR_FOLLOWER with a leader hint, KAFKA_STORAGE_ERROR when offline);
3. the bytes must be exactly one producer batch, checked at header level
   only (DESIGN.md principle 2): length, magic, CRC32C, dense offsets, no
   control or transactional batch (CORRUPT_MESSAGE / INVALID_RECORD),
   max_message_bytes (MESSAGE_TOO_LARGE). Checked *before* the core assigns
   offsets, so a rejected batch never advances the core's log end;
4. the core decides (min ISR, idempotence, offsets) and the shell appends.

acks=0 and 1 are answered right after the append. acks=-1 waits until the
high watermark passes the batch, bounded by timeout_ms: at the deadline the
partition's core expires the wait (REQUEST_TIMED_OUT with the offsets it was
appended at). At most queued_max_requests produces are handled at once; a
request waits for a slot no longer than its timeout_ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kraftpy.broker.api_common import INT32_MAX, at, error_fields, group_by_topic, read_partitions
from kraftpy.broker.clock import monotonic_ms
from kraftpy.broker.compacted_keys import check_keys_for_compaction
from kraftpy.broker.partition_host import HostedPartition, PartitionOfflineError
from kraftpy.broker.replication import CompleteProduce, ProduceRequest
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.header import DEFAULT_MAX_BATCH_BYTES, BatchHeader, parse_header
from kraftpy.protocol.validate import field

if TYPE_CHECKING:
    from kraftpy.broker.replica_manager import ReplicaManager

VALID_ACKS = (0, 1, -1)
_request_ids = itertools.count()


def check_producer_batch(records: bytes, max_message_bytes: int) -> BatchHeader:
    """The header of the one batch in `records`, or the KafkaError Kafka's LogValidator would give."""
    header = parse_header(records, 0, max_batch_bytes=max(DEFAULT_MAX_BATCH_BYTES, max_message_bytes), check_crc=True)
    if header.size != len(records):
        raise KafkaError(
            f"records hold {len(records)} bytes but the first batch is {header.size}: "
            "a produce carries exactly one batch per partition",
            ErrorCode.INVALID_RECORD,
        )
    if header.size > max_message_bytes:
        raise KafkaError(
            f"batch of {header.size} bytes is above max_message_bytes {max_message_bytes}", ErrorCode.MESSAGE_TOO_LARGE
        )
    if header.records_count < 1 or header.last_offset_delta != header.records_count - 1:
        raise KafkaError(
            f"batch has {header.records_count} records but lastOffsetDelta {header.last_offset_delta}; "
            "a producer batch holds offsets 0..count-1",
            ErrorCode.INVALID_RECORD,
        )
    if header.is_control:
        raise KafkaError("producers may not write control batches", ErrorCode.INVALID_RECORD)
    if header.is_transactional:
        raise KafkaError("transactional batches are not supported", ErrorCode.INVALID_RECORD)
    if header.compression > 4:
        raise KafkaError(f"unknown compression type {header.compression}", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
    return header


def _read_partition(part: Mapping[str, Any], where: str) -> bytes:
    return at(where, field, part, "records", bytes)


class ProduceHandler:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.rm = replica_manager
        self._slots = asyncio.Semaphore(replica_manager.settings.queued_max_requests)

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        acks = field(body, "acks", int)
        timeout_ms = field(body, "timeout_ms", int, min_value=0, max_value=INT32_MAX)
        entries = read_partitions(body, _read_partition)
        if acks not in VALID_ACKS:
            error = error_fields(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1 (all), got {acks}")
            return {"topics": group_by_topic((t, p, dict(error)) for t, p, _ in entries)}
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await self._slots.acquire()
        except TimeoutError:
            error = error_fields(ErrorCode.REQUEST_TIMED_OUT, "the broker is busy: no produce slot within timeout_ms")
            return {"topics": group_by_topic((t, p, dict(error)) for t, p, _ in entries)}
        try:
            return await self._produce(acks, timeout_ms, entries)
        finally:
            self._slots.release()

    async def _produce(self, acks: int, timeout_ms: int, entries: list[tuple[str, int, bytes]]) -> dict[str, Any]:
        rm = self.rm
        now = monotonic_ms()
        answers: dict[tuple[str, int], dict[str, Any]] = {}
        waits: dict[Any, tuple[tuple[str, int], HostedPartition, asyncio.Future[CompleteProduce]]] = {}
        for topic, partition, records in entries:
            key = (topic, partition)
            try:
                hosted = rm.lookup(topic, partition)
                header = check_producer_batch(records, hosted.log.config.max_message_bytes)
                if hosted.log.config.compact:
                    check_keys_for_compaction(records, hosted.log.config.max_message_bytes, topic, partition)
            except KafkaError as exc:
                answers[key] = self._error(topic, partition, exc)
                continue
            rid, future = self.begin_append(hosted, header, records, acks, timeout_ms, now)
            waits[rid] = (key, hosted, future)
        if waits:
            await self.await_appends(waits, now + timeout_ms)
        for rid, (key, hosted, future) in waits.items():
            rm.produce_waiters.pop(rid, None)
            answers[key] = self._answer(key, hosted, future.result())
        return {"topics": group_by_topic((t, p, answers[(t, p)]) for t, p, _ in entries)}

    def begin_append(
        self, hosted: HostedPartition, header: BatchHeader, records: bytes, acks: int, timeout_ms: int, now: int
    ) -> tuple[int, asyncio.Future[CompleteProduce]]:
        """Hand one checked batch to the partition's core and append it now; the future completes per acks.

        Synchronous up to the append, so batches given in order are appended in order (the group
        coordinator's writes to __consumer_offsets rely on it).
        """
        rid = next(_request_ids)
        future: asyncio.Future[CompleteProduce] = asyncio.get_running_loop().create_future()
        self.rm.produce_waiters[rid] = future
        try:
            actions = hosted.core.handle_produce(ProduceRequest(rid, header, acks, timeout_ms), now)
            hosted.perform(actions, {rid: records})
        except PartitionOfflineError as exc:
            self.rm.complete_produce(CompleteProduce(rid, ErrorCode.KAFKA_STORAGE_ERROR, message=exc.message))
        return rid, future

    async def await_appends(self, waits: dict[Any, Any], deadline_ms: int) -> None:
        """Wait for begun appends ({rid: (key, hosted, future)}) until they complete or their deadline passes."""
        pending = [f for _, _, f in waits.values() if not f.done()]
        # The partition cores expire waits at the deadline; we wake then and tick them, a few times at most
        # (the cores' clock and the loop's may round differently by a millisecond).
        for _ in range(5):
            if not pending:
                return
            delay = max(0, deadline_ms - monotonic_ms()) / 1000 + 0.001
            await asyncio.wait(pending, timeout=delay)
            pending = [f for f in pending if not f.done()]
            if pending:
                now = monotonic_ms()
                for _, hosted, future in waits.values():
                    if not future.done():
                        with contextlib.suppress(PartitionOfflineError):
                            hosted.tick(now)
                pending = [f for f in pending if not f.done()]
        for rid, (_, _, future) in waits.items():
            if not future.done():
                future.set_result(CompleteProduce(rid, ErrorCode.REQUEST_TIMED_OUT, message="no answer in time"))

    def _error(self, topic: str, partition: int, exc: KafkaError) -> dict[str, Any]:
        answer = error_fields(exc)
        answer.update(base_offset=-1, log_append_time_ms=-1, log_start_offset=-1)
        if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and "details" not in answer:
            answer["details"] = self.rm.leader_hint(topic, partition)
        return answer

    def _answer(self, key: tuple[str, int], hosted: HostedPartition, done: CompleteProduce) -> dict[str, Any]:
        answer = error_fields(done.error, done.message)
        if done.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            answer["details"] = self.rm.leader_hint(*key)
        answer.update(
            base_offset=done.base_offset if done.error in (ErrorCode.NONE, ErrorCode.REQUEST_TIMED_OUT) else -1,
            log_append_time_ms=-1,
            log_start_offset=hosted.log.log_start_offset if not hosted.log.closed else -1,
        )
        return answer
