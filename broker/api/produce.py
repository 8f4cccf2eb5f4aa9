"""Produce: append one batch per partition as leader; answer per acks (Kafka's appendRecords).

Design notes: docs/broker.md, section "broker/api/produce.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from kraftpy.broker.api.common import error_fields, group_by_topic, read_partitions
from kraftpy.broker.replication import CompleteProduce, ProduceRequest
from kraftpy.broker.shell.partition_host import HostedPartition, PartitionOfflineError
from kraftpy.broker.shell.txn_verifier import Batch, TxnVerifier
from kraftpy.broker.txn.config import TransactionCoordinatorConfig
from kraftpy.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from kraftpy.protocol.records.batch import DEFAULT_MAX_UNCOMPRESSED_BYTES
from kraftpy.protocol.records.compression import DecompressedTooLargeError
from kraftpy.protocol.records.control import TxnMarker
from kraftpy.protocol.records.header import DEFAULT_MAX_BATCH_BYTES, BatchHeader, parse_header
from kraftpy.protocol.records.validation import validate_records
from kraftpy.protocol.settings import default_of
from kraftpy.protocol.shell.clock import monotonic_ms, wall_ms
from kraftpy.protocol.topics import refuses_client_writes
from kraftpy.protocol.validate import INT32_MAX, field

if TYPE_CHECKING:
    from kraftpy.broker.shell.replica_manager import ReplicaManager

VALID_ACKS = (0, 1, -1)
MAX_TRANSACTIONAL_ID_LENGTH: int = default_of(TransactionCoordinatorConfig, "max_id_length")
_request_ids = itertools.count()

# Records checked on the event loop per request (at about 1.5 us each, under 10 ms: two partitions' 256 KiB
# batches of 100 B records stay on the loop), and the most a batch may inflate to there; more goes to a
# worker thread (docs/perf-produce-consume.md has what checking costs).
INLINE_MAX_RECORDS = 5000
INLINE_MAX_UNCOMPRESSED_BYTES = 1 << 20
# A batch's records section may inflate to what every kraftpy consumer decodes (64 MiB), never more:
# the broker stores nothing its consumers would refuse.
MAX_UNCOMPRESSED_BYTES = DEFAULT_MAX_UNCOMPRESSED_BYTES


class _Checked(NamedTuple):
    """A batch whose header passed; `deferred` when its records are left for the worker thread.

    `unchecked`: the partition was not led here, so its records were not checked (the core refuses
    the batch); it must not be appended should this broker lead it by the time the request appends.
    """

    key: tuple[str, int]
    hosted: HostedPartition
    header: BatchHeader
    records: bytes
    deferred: bool = False
    unchecked: bool = False


def check_producer_batch(records: bytes, max_message_bytes: int, segment_bytes: int) -> BatchHeader:
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
    if header.size > segment_bytes:
        # The log cannot store it (a segment holds whole batches); refused here, before the core
        # accepts it, an append the storage then rejects would take the partition offline.
        raise KafkaError(
            f"batch of {header.size} bytes is larger than a whole segment (segment_bytes {segment_bytes})",
            ErrorCode.RECORD_LIST_TOO_LARGE,
        )
    if header.records_count < 1 or header.last_offset_delta != header.records_count - 1:
        raise KafkaError(
            f"batch has {header.records_count} records but lastOffsetDelta {header.last_offset_delta}; "
            "a producer batch holds offsets 0..count-1",
            ErrorCode.INVALID_RECORD,
        )
    if header.is_control:
        raise KafkaError("producers may not write control batches", ErrorCode.INVALID_RECORD)
    if header.is_transactional and (header.producer_id < 0 or header.base_sequence < 0):
        raise KafkaError("a transactional batch needs a producer id and a sequence", ErrorCode.INVALID_RECORD)
    if header.compression > 4:
        raise KafkaError(f"unknown compression type {header.compression}", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
    return header


def check_producer_records(records: bytes, header: BatchHeader, hosted: HostedPartition, max_bytes: int) -> None:
    """The records of a checked batch, as Kafka's LogValidator checks them; a KafkaError otherwise."""
    validate_records(
        records,
        header,
        max_uncompressed_bytes=max_bytes,
        require_keys="compact" in hosted.log.config.cleanup_policy,
    )


def _check_deferred(batches: list[_Checked]) -> list[KafkaError | None]:
    """Check in a worker thread the records the event loop left: each batch's error, or None."""
    out: list[KafkaError | None] = []
    for c in batches:
        try:
            check_producer_records(c.records, c.header, c.hosted, MAX_UNCOMPRESSED_BYTES)
            out.append(None)
        except KafkaError as exc:
            out.append(exc)
    return out


def _read_partition(part: Mapping[str, Any]) -> bytes:
    return field(part, "records", bytes)


class ProduceHandler:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.rm = replica_manager
        self._slots = asyncio.Semaphore(replica_manager.settings.queued_max_requests)
        # Set while a request's records are checked in the worker: later requests append after it.
        self._tail: asyncio.Future[None] | None = None
        self.verifier = TxnVerifier(replica_manager)

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        acks = field(body, "acks", int)
        timeout_ms = field(body, "timeout_ms", int, min_value=0, max_value=INT32_MAX)
        entries = read_partitions(body, _read_partition)
        # Kafka's ProduceRequest field (v3+): the coordinator that verifies transactional batches (KIP-890).
        transactional_id = field(
            body, "transactional_id", str, nullable=True, default=None, max_len=MAX_TRANSACTIONAL_ID_LENGTH
        )
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
            return await self._produce(acks, timeout_ms, entries, transactional_id)
        finally:
            self._slots.release()

    async def _produce(
        self, acks: int, timeout_ms: int, entries: list[tuple[str, int, bytes]], transactional_id: str | None
    ) -> dict[str, Any]:
        rm = self.rm
        now = monotonic_ms()
        answers: dict[tuple[str, int], dict[str, Any]] = {}
        waits: dict[Any, tuple[tuple[str, int], HostedPartition, asyncio.Future[CompleteProduce]]] = {}
        checked: list[_Checked] = []
        for topic, partition, records in entries:
            key = (topic, partition)
            try:
                if refuses_client_writes(topic):
                    raise KafkaError(f"Cannot append to internal topic {topic}", ErrorCode.INVALID_TOPIC_EXCEPTION)
                hosted = rm.lookup(topic, partition)
                config = hosted.log.config
                header = check_producer_batch(records, config.max_message_bytes, config.segment_bytes)
            except KafkaError as exc:
                answers[key] = self._error(topic, partition, exc)
                continue
            # Only a leader spends time on the records (a follower's core answers NOT_LEADER_OR_FOLLOWER).
            checked.append(_Checked(key, hosted, header, records, unchecked=not hosted.is_leader))
        inline = sum(c.header.records_count for c in checked if not c.unchecked) <= INLINE_MAX_RECORDS
        for i, c in enumerate(checked):
            if c.unchecked:
                continue
            if not inline:
                checked[i] = c._replace(deferred=True)
                continue
            try:
                check_producer_records(c.records, c.header, c.hosted, INLINE_MAX_UNCOMPRESSED_BYTES)
            except DecompressedTooLargeError:
                checked[i] = c._replace(deferred=True)  # maybe legal up to MAX_UNCOMPRESSED_BYTES: the worker decides
            except CorruptRecordError as exc:
                answers[c.key] = self._error(*c.key, exc)
        verify = self.rm.settings.transaction_partition_verification_enable
        transactional = [
            Batch(c.key, c.hosted, c.header)
            for c in checked
            if verify and c.header.is_transactional and not c.unchecked and c.key not in answers
        ]
        if transactional:
            async with self.verifier.verifying(transactional_id, transactional, timeout_ms) as refused:
                answers.update((key, self._error(*key, exc)) for key, exc in refused.items())
                await self._append(checked, answers, waits, acks, timeout_ms, now, verify)
        else:
            await self._append(checked, answers, waits, acks, timeout_ms, now, verify)
        if waits:
            await self.await_appends(waits, now + timeout_ms)
        for rid, (key, hosted, future) in waits.items():
            rm.produce_waiters.pop(rid, None)
            answers[key] = self._answer(key, hosted, future.result())
        return {"topics": group_by_topic((t, p, answers[(t, p)]) for t, p, _ in entries)}

    async def _append(
        self,
        checked: list[_Checked],
        answers: dict[tuple[str, int], dict[str, Any]],
        waits: dict[Any, Any],
        acks: int,
        timeout_ms: int,
        now: int,
        verify_txn: bool,
    ) -> None:
        """Begin the appends of the batches not answered yet, after every earlier request's (see below)."""
        if any(c.deferred for c in checked) or self._tail is not None:
            await self._after_earlier_requests(checked, answers)
        for c in checked:
            if c.key in answers:
                continue
            rid, future = self.begin_append(c.hosted, c.header, c.records, acks, timeout_ms, now, verify_txn=verify_txn)
            waits[rid] = (c.key, c.hosted, future)

    async def _after_earlier_requests(self, checked: list[_Checked], answers: dict[tuple[str, int], Any]) -> None:
        """Check the deferred records in the worker, and return once every earlier request has appended.

        The caller appends right after, synchronously: appends keep the order requests arrived in.
        A batch that fails gets its answer in `answers`; a partition gone meanwhile too.
        """
        previous, mine = self._tail, asyncio.get_running_loop().create_future()
        self._tail = mine
        try:
            if previous is not None:
                # Shielded: a cancelled waiter must not cancel the earlier request's future.
                # Waiting also keeps one request at a time in the worker, which bounds the bytes it inflates.
                await asyncio.shield(previous)
            deferred = [c for c in checked if c.deferred and c.key not in answers]
            errors = await asyncio.to_thread(_check_deferred, deferred) if deferred else []
            for c, error in zip(deferred, errors, strict=True):
                if error is not None:
                    answers[c.key] = self._error(*c.key, error)
            for i, c in enumerate(checked):
                if c.key in answers:
                    continue
                try:  # the partition may have gone offline, been replaced or come to be led here while we waited
                    hosted = self.rm.lookup(*c.key)
                    if c.unchecked and hosted.is_leader:
                        raise KafkaError(
                            f"broker {self.rm.broker_id} became the leader of {c.key[0]}-{c.key[1]} while the "
                            "request waited; send it again",
                            ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        )
                    checked[i] = c._replace(hosted=hosted)
                except KafkaError as exc:
                    answers[c.key] = self._error(*c.key, exc)
        finally:
            if previous is not None and not previous.done():
                # Cancelled while an earlier request still waits: later ones must still append after it.
                previous.add_done_callback(lambda _: self._release(mine))
            else:
                self._release(mine)

    def _release(self, mine: asyncio.Future[None]) -> None:
        if not mine.done():
            mine.set_result(None)
        if self._tail is mine:
            self._tail = None

    def begin_append(
        self,
        hosted: HostedPartition,
        header: BatchHeader,
        records: bytes,
        acks: int,
        timeout_ms: int,
        now: int,
        *,
        marker: TxnMarker | None = None,
        verify_txn: bool = False,
    ) -> tuple[int, asyncio.Future[CompleteProduce]]:
        """Hand one checked batch to the partition's core and append it now; the future completes per acks.

        Synchronous up to the append, so batches given in order are appended in order (the group
        coordinator's writes to __consumer_offsets rely on it). `marker`: the batch is a transaction
        marker the broker built (WriteTxnMarkers). `verify_txn`: a client's batch, under KIP-890 part 1.
        """
        rid = next(_request_ids)
        future: asyncio.Future[CompleteProduce] = asyncio.get_running_loop().create_future()
        self.rm.produce_waiters[rid] = future
        try:
            request = ProduceRequest(
                rid, header, acks, timeout_ms, wall_clock_ms=wall_ms(), marker=marker, verify_txn=verify_txn
            )
            actions = hosted.core.handle_produce(request, now)
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
            log_append_time_ms=done.log_append_time_ms if done.error == ErrorCode.NONE else -1,
            log_start_offset=hosted.log.log_start_offset if not hosted.log.closed else -1,
        )
        return answer
