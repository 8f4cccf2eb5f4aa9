"""Fetch: many partitions, long poll, for consumers (replica_id -1, through the Kafka listener) and followers
(replica_id >= 0, the internal `/broker/fetch`); Kafka's fetchMessages.

Design notes: docs/broker.md, section "broker/api/fetch.py".
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kraftpy.broker.api.common import error_fields, group_by_topic, read_partitions
from kraftpy.broker.replication import DelayedFetch, FetchDecision, FetchPartition, FetchPartitionStatus
from kraftpy.broker.replication.model import READ_COMMITTED, READ_UNCOMMITTED, UNDEFINED_EPOCH
from kraftpy.broker.shell import fault_injection
from kraftpy.broker.shell.partition_host import HostedPartition, PartitionOfflineError
from kraftpy.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from kraftpy.protocol.records.header import iter_batches
from kraftpy.protocol.shell.answer_budget import AnswerAllowance
from kraftpy.protocol.shell.clock import monotonic_ms
from kraftpy.protocol.validate import INT32_MAX, INT64_MAX, field
from kraftpy.storage import OffsetOutOfRangeError
from kraftpy.storage.integrity import check_read
from kraftpy.storage.validation import hard_max_batch_bytes

if TYPE_CHECKING:
    from kraftpy.broker.shell.replica_manager import ReplicaManager

# An answer is never built larger than this, whatever max_bytes asks (the RPC layer's body limit is 64 MiB).
MAX_RESPONSE_BYTES = 32 * 1024 * 1024


def _read_partition(
    part: Mapping[str, Any], replica_id: int, broker_epoch: int, isolation_level: int
) -> tuple[FetchPartition, int]:
    """One partition's fetch as the core takes it, and its partition_max_bytes."""
    request = FetchPartition(
        replica_id=replica_id,
        fetch_offset=field(part, "fetch_offset", int, min_value=0, max_value=INT64_MAX),
        current_leader_epoch=field(part, "current_leader_epoch", int, default=-1, min_value=-1, max_value=INT32_MAX),
        last_fetched_epoch=field(part, "last_fetched_epoch", int, default=-1, min_value=-1, max_value=INT32_MAX),
        log_start_offset=field(part, "log_start_offset", int, default=-1, min_value=-1, max_value=INT64_MAX),
        broker_epoch=broker_epoch,
        isolation_level=isolation_level,
    )
    return request, field(part, "partition_max_bytes", int, min_value=0, max_value=INT32_MAX)


class FetchHandler:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.rm = replica_manager
        self.waiting = 0

    async def follower_fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        """The internal RPC's fetch (`/broker/fetch`): followers only; a consumer fetches on the Kafka listener."""
        replica_id = field(body, "replica_id", int, min_value=-1, max_value=INT32_MAX)
        if replica_id < 0:
            raise KafkaError(
                f"replica_id {replica_id}: the internal fetch is a follower's; consumers fetch on a Kafka listener",
                ErrorCode.INVALID_REQUEST,
            )
        return await self(body)

    async def __call__(self, body: dict[str, Any], allowance: AnswerAllowance | None = None) -> dict[str, Any]:
        """The fetch's answer. `allowance`: the consumer's share of its Kafka listener's memory for
        answers; the records read are no more than it grants (KIP-74's one batch over, when granted any)."""
        replica_id = field(body, "replica_id", int, min_value=-1, max_value=INT32_MAX)
        replica_epoch = field(body, "replica_epoch", int, default=-1, min_value=-1, max_value=INT64_MAX)
        max_wait_ms = field(body, "max_wait_ms", int, min_value=0, max_value=INT32_MAX)
        min_bytes = field(body, "min_bytes", int, min_value=0, max_value=INT32_MAX)
        max_bytes = min(field(body, "max_bytes", int, min_value=0, max_value=INT32_MAX), MAX_RESPONSE_BYTES)
        isolation_level = field(
            body, "isolation_level", int, default=READ_UNCOMMITTED, min_value=READ_UNCOMMITTED, max_value=READ_COMMITTED
        )
        entries = read_partitions(body, lambda part: _read_partition(part, replica_id, replica_epoch, isolation_level))
        requests = [
            (topic, partition, request, partition_max) for topic, partition, (request, partition_max) in entries
        ]
        start = monotonic_ms()
        limit = _granted(allowance, max_bytes)
        if limit is None and requests and allowance is not None and await allowance.wait_for_room(max_wait_ms):
            limit = _granted(allowance, max_bytes)  # answers were written meanwhile
        if limit is None:
            # The listener's answers hold all its budget (clients not reading them): offsets and no
            # records, after up to max_wait_ms, as Kafka's quotas throttle a client.
            return self._answer(self._read_all(requests, 0, monotonic_ms(), any_records=False)[0])
        answers, sizes, complete_now = self._read_all(requests, limit, start)
        total = sum(sizes)
        if complete_now or total >= min_bytes or max_wait_ms <= 0 or not requests:
            return self._hold(allowance, total, answers)
        if self.waiting >= self.rm.settings.fetch_purgatory_max_waiting:
            return self._hold(allowance, total, answers)
        if allowance is not None:
            allowance.hold(0)  # parked: what was read is read again on waking
        await self._park(requests, sizes, DelayedFetch(min_bytes, max_wait_ms, start))
        limit = _granted(allowance, max_bytes)
        answers, sizes, _ = self._read_all(requests, limit or 0, monotonic_ms(), any_records=limit is not None)
        return self._hold(allowance, sum(sizes), answers)

    def _hold(
        self, allowance: AnswerAllowance | None, total: int, answers: list[tuple[str, int, dict[str, Any]]]
    ) -> dict[str, Any]:
        if allowance is not None:
            allowance.hold(total)  # until the listener has the answer's encoded frame
        return self._answer(answers)

    # -- reading -----------------------------------------------------------------------------------------------

    def _read_all(
        self, requests: list[tuple[str, int, FetchPartition, int]], max_bytes: int, now: int, any_records: bool = True
    ) -> tuple[list[tuple[str, int, dict[str, Any]]], list[int], bool]:
        """Answers for every partition, the bytes each carries, and whether an error or divergence ends the wait.

        The first batch read is whole even over max_bytes (KIP-74), unless `any_records` is False."""
        answers = []
        sizes = []
        total = 0
        complete_now = False
        for topic, partition, request, partition_max in requests:
            answer, size, final = self._read_one(
                topic, partition, request, min(partition_max, max_bytes - total), total == 0 and any_records, now
            )
            answers.append((topic, partition, answer))
            sizes.append(size)
            total += size
            complete_now = complete_now or final
        return answers, sizes, complete_now

    def _read_one(
        self, topic: str, partition: int, request: FetchPartition, limit: int, first: bool, now: int
    ) -> tuple[dict[str, Any], int, bool]:
        try:
            hosted = self.rm.lookup(topic, partition)
            epoch_end = (
                hosted.epoch_end(request.last_fetched_epoch) if request.last_fetched_epoch != UNDEFINED_EPOCH else None
            )
            decision = hosted.core.handle_fetch(request, epoch_end, now)
            if decision.actions:
                hosted.perform(decision.actions)
        except KafkaError as exc:
            answer = _empty_answer(exc)
            if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and "details" not in answer:
                answer["details"] = self.rm.leader_hint(topic, partition)
            return answer, 0, True
        records = b""
        if decision.readable and (limit > 0 or first):
            plog = hosted.log
            try:
                records = plog.read(
                    request.fetch_offset, max(limit, 0), max_offset=decision.max_offset, min_one_batch=first
                )
                # Below the recovery point nothing was checked since it was written: check what leaves.
                check_read(
                    records, request.fetch_offset, max_batch_bytes=hard_max_batch_bytes(plog.config.max_message_bytes)
                )
            except OffsetOutOfRangeError as exc:
                # Retention or a truncation moved the range between the core's check and the read.
                return _empty_answer(KafkaError(exc.message, ErrorCode.OFFSET_OUT_OF_RANGE)), 0, True
            except CorruptRecordError as exc:
                self.rm.replica_corrupt(hosted, f"a fetch at offset {request.fetch_offset} read {exc.message}")
                error = KafkaError(
                    f"{hosted.name} has a corrupt batch at offset {request.fetch_offset} or after it on broker "
                    f"{self.rm.broker_id}; this replica is offline until repaired, its leadership moves",
                    ErrorCode.KAFKA_STORAGE_ERROR,
                )
                return _empty_answer(error), 0, True
        answer = self._decision_answer(decision, request, hosted)
        answer["records"] = records
        if not request.is_from_follower:
            answer["last_stable_offset"] = decision.last_stable_offset  # in every consumer answer, as Kafka's
        if request.read_committed and fault_injection.TEST_BREAK != fault_injection.IGNORE_ABORTS:
            answer["aborted_transactions"] = _aborted_in(hosted, request.fetch_offset, records)
        final = decision.error != ErrorCode.NONE or decision.diverging_epoch is not None
        return answer, len(records), final

    def _decision_answer(
        self, decision: FetchDecision, request: FetchPartition, hosted: HostedPartition
    ) -> dict[str, Any]:
        answer = error_fields(decision.error, decision.message)
        if decision.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            answer["details"] = self.rm.leader_hint(hosted.topic, hosted.partition)
        answer["high_watermark"] = decision.high_watermark
        answer["log_start_offset"] = decision.log_start_offset
        if request.is_from_follower:
            # Not in Kafka's schema: lets a follower resolve OFFSET_OUT_OF_RANGE without a ListOffsets.
            answer["log_end_offset"] = decision.log_end_offset
        d = decision.diverging_epoch
        answer["diverging_epoch"] = {"epoch": d.epoch, "end_offset": d.end_offset} if d is not None else None
        return answer

    # -- the purgatory -----------------------------------------------------------------------------------------

    async def _park(
        self, requests: list[tuple[str, int, FetchPartition, int]], sizes: list[int], delayed: DelayedFetch
    ) -> None:
        """Wait until an append to a watched partition makes the fetch answerable, or its deadline passes.

        Called right after _read_all found too little (`sizes`: what each partition had), with no await
        since: for idle partitions that was the check. A wake re-checks only the partitions that told
        it of a change (every change a fetch waits for notifies: HostedPartition.watchers); the others
        stand as last checked, so a wake costs one partition's check, not one per partition fetched (a
        follower fetches every partition it follows from this leader). One timer per park.
        """
        # A partition with bytes is checked once here (only a fetch with min_bytes above 1 parks with
        # any): its status also says whether the fetch offset is on an older segment, which answers
        # the fetch at once (Kafka's DelayedFetch case F). Idle ones stand as the read left them.
        statuses = [
            self._status(entry, delayed.min_bytes) if size else FetchPartitionStatus()
            for entry, size in zip(requests, sizes, strict=True)
        ]
        if any(sizes) and delayed.should_complete(statuses, monotonic_ms()) is not None:
            return
        event = asyncio.Event()
        woken: set[int] = set()
        watched: list[tuple[HostedPartition, _Waker]] = []
        for index, (topic, partition, _, _) in enumerate(requests):
            hosted = self.rm.partitions.get((topic, partition))
            if hosted is not None:
                waker = _Waker(index, woken, event)
                hosted.watchers.add(waker)
                watched.append((hosted, waker))
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            event.set()

        timer = asyncio.get_running_loop().call_later(max(0, delayed.deadline_ms - monotonic_ms()) / 1000, expire)
        self.waiting += 1
        try:
            while True:
                await event.wait()
                event.clear()
                changed = tuple(woken)  # a check changes no state, but the set must not move under the loop
                woken.clear()
                for index in changed:
                    statuses[index] = self._status(requests[index], delayed.min_bytes)
                # The timer's firing is the clock's word that the deadline passed, whatever ms it reads.
                now = max(monotonic_ms(), delayed.deadline_ms) if expired else monotonic_ms()
                if delayed.should_complete(statuses, now) is not None:
                    return
        finally:
            timer.cancel()
            self.waiting -= 1
            for hosted, waker in watched:
                hosted.watchers.discard(waker)

    def _status(self, entry: tuple[str, int, FetchPartition, int], min_bytes: int) -> FetchPartitionStatus:
        topic, partition, request, partition_max = entry
        hosted = self.rm.partitions.get((topic, partition))
        if hosted is None or hosted.stopped:
            return FetchPartitionStatus(error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if hosted.offline is not None:
            return FetchPartitionStatus(error=ErrorCode.KAFKA_STORAGE_ERROR)
        epoch_end = (
            hosted.epoch_end(request.last_fetched_epoch) if request.last_fetched_epoch != UNDEFINED_EPOCH else None
        )
        decision = hosted.core.check_fetch(request, epoch_end)
        if decision.error != ErrorCode.NONE:
            return FetchPartitionStatus(error=decision.error)
        if decision.diverging_epoch is not None:
            return FetchPartitionStatus(diverging=True)
        offset, bound = request.fetch_offset, decision.max_offset
        if offset > decision.log_end_offset:
            return FetchPartitionStatus(fetch_offset_beyond_end=True)
        if bound <= offset:
            return FetchPartitionStatus()
        plog = hosted.log
        on_older_segment = offset < plog.active_segment_base_offset
        if min_bytes <= 1:
            # A readable offset means at least one whole batch: enough, without reading it.
            return FetchPartitionStatus(bytes_readable=1, on_older_segment=on_older_segment)
        try:
            # Count real bytes (whole batches, never decoded), but no more than min_bytes needs.
            readable = len(plog.read(offset, max(min(partition_max, min_bytes), 1), max_offset=bound))
        except OffsetOutOfRangeError:
            return FetchPartitionStatus(fetch_offset_beyond_end=True)
        except CorruptRecordError:
            return FetchPartitionStatus(error=ErrorCode.KAFKA_STORAGE_ERROR)  # the read that answers says where
        return FetchPartitionStatus(bytes_readable=readable, on_older_segment=readable > 0 and on_older_segment)

    @staticmethod
    def _answer(answers: list[tuple[str, int, dict[str, Any]]]) -> dict[str, Any]:
        return {"topics": group_by_topic(answers)}


class _Waker:
    """One partition's watcher for one parked fetch: which partition told of a change, then the wake."""

    __slots__ = ("event", "index", "woken")

    def __init__(self, index: int, woken: set[int], event: asyncio.Event) -> None:
        self.index = index
        self.woken = woken
        self.event = event

    def set(self) -> None:
        self.woken.add(self.index)
        self.event.set()


def _aborted_in(hosted: HostedPartition, fetch_offset: int, records: bytes) -> list[dict[str, int]]:
    """The aborted transactions a read_committed reader needs for the batches returned (Kafka's Fetch v4+)."""
    if not records:
        return []
    upper = fetch_offset
    for _pos, header in iter_batches(records, check_crc=False):
        upper = header.next_offset
    return [
        {"producer_id": a.producer_id, "first_offset": a.first_offset}
        for a in hosted.log.collect_aborted_txns(fetch_offset, upper)
    ]


def _granted(allowance: AnswerAllowance | None, max_bytes: int) -> int | None:
    """The max_bytes a read may use: all of it without an allowance, else what the allowance grants
    of it; None when it grants nothing, not even KIP-74's one batch (a max_bytes of 0 asks for that)."""
    if allowance is None:
        return max_bytes
    granted = allowance.grant(max(max_bytes, 1))
    return min(max_bytes, granted) if granted else None


def _empty_answer(exc: KafkaError) -> dict[str, Any]:
    answer = error_fields(exc)
    answer.update(high_watermark=-1, log_start_offset=-1, diverging_epoch=None, records=b"")
    return answer


__all__ = ["FetchHandler", "PartitionOfflineError"]
