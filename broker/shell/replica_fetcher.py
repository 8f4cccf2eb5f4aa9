"""ReplicaFetcher: a follower's fetching from one source broker (Kafka's ReplicaFetcherThread, as a task).

Design notes: docs/replication.md, section "broker/shell/replica_fetcher.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kraftpy.broker.replica_settings import ReplicaManagerSettings
from kraftpy.broker.replication import EpochEndOffset, FetchPartition, FetchPartitionResponse
from kraftpy.broker.shell.partition_host import HostedPartition, PartitionOfflineError, TopicPartitionKey
from kraftpy.protocol.access import REPLICA_FETCH_PATH
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.clock import monotonic_ms
from kraftpy.protocol.shell.rpc import RpcClient
from kraftpy.protocol.types import Address

log = logging.getLogger(__name__)

# Sleep at most this long when nothing can be fetched (a partition's backoff ends sooner when it is known).
IDLE_WAIT_MS = 1_000


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def decode_partition_answer(part: Mapping[str, Any]) -> FetchPartitionResponse:
    """One partition of a fetch answer from a leader; ValueError when it is malformed."""
    diverging = part.get("diverging_epoch")
    epoch_end = None
    if diverging is not None:
        if not isinstance(diverging, Mapping):
            raise ValueError(f"diverging_epoch is {diverging!r}")
        epoch_end = EpochEndOffset(_int(diverging.get("epoch")), _int(diverging.get("end_offset")))
    records = part.get("records", b"")
    if not isinstance(records, bytes):
        raise ValueError("records is not a byte string")
    try:
        error = ErrorCode(_int(part.get("error_code", 0)))
    except ValueError:
        error = ErrorCode.UNKNOWN_SERVER_ERROR
    return FetchPartitionResponse(
        error=error,
        high_watermark=_int(part.get("high_watermark", -1)),
        log_start_offset=_int(part.get("log_start_offset", -1)),
        log_end_offset=_int(part.get("log_end_offset", -1)),
        diverging_epoch=epoch_end,
        records=records,
    )


class ReplicaFetcher:
    def __init__(
        self,
        source_id: int,
        broker_id: int,
        rpc: RpcClient,
        settings: ReplicaManagerSettings,
        address_of: Callable[[int], Address | None],
        broker_epoch_provider: Callable[[], int],
    ) -> None:
        self.source_id = source_id
        self.broker_id = broker_id
        self.rpc = rpc
        self.settings = settings
        self.address_of = address_of
        self.broker_epoch_provider = broker_epoch_provider
        self.partitions: dict[TopicPartitionKey, HostedPartition] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Requests in flight, with the partition fetches each carries (released if the task is cancelled).
        self._requests: dict[asyncio.Task[None], list[tuple[HostedPartition, FetchPartition]]] = {}
        self.requests_sent = 0
        self.failures = 0
        self.corrupt_answers = 0  # partition answers refused for a corrupt batch (the core appended nothing)

    def add(self, hosted: HostedPartition) -> None:
        self.partitions[hosted.key] = hosted
        self._wake.set()

    def remove(self, hosted: HostedPartition) -> None:
        if self.partitions.get(hosted.key) is hosted:
            del self.partitions[hosted.key]

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"kraftpy-fetcher-{self.source_id}")

    async def stop(self) -> None:
        requests = dict(self._requests)
        tasks = [t for t in (self._task, *requests) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None
        self._requests.clear()
        # A request cancelled (even before it ran) leaves its partitions' fetches in flight in the cores;
        # release them so a later fetcher can fetch (on_fetch_error ignores fetches already answered).
        now = monotonic_ms()
        for batch in requests.values():
            for hosted, request in batch:
                hosted.core.on_fetch_error(request, now)

    # -- the loop ----------------------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            if len(self._requests) < self.settings.replica_fetcher_max_inflight_requests:
                batch = self._build()
                if batch:
                    task = asyncio.create_task(self._fetch(batch))
                    self._requests[task] = batch
                    task.add_done_callback(self._request_done)
                    continue
            timeout = self._idle_wait_ms()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout / 1000):
                    await self._wake.wait()

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._requests.pop(task, None)
        self._wake.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("fetch from broker %d crashed", self.source_id, exc_info=task.exception())

    def _idle_wait_ms(self) -> int:
        now = monotonic_ms()
        wait = IDLE_WAIT_MS
        for hosted in self.partitions.values():
            follower = hosted.core.follower
            if follower is not None and follower.inflight is None and follower.retry_at_ms > now:
                wait = min(wait, follower.retry_at_ms - now)
        return max(1, wait)

    def _build(self) -> list[tuple[HostedPartition, FetchPartition]]:
        now = monotonic_ms()
        batch = []
        for hosted in self.partitions.values():
            if hosted.offline is not None or hosted.stopped:
                continue
            follower = hosted.core.follower
            if follower is None or follower.leader_id != self.source_id:
                continue
            request = hosted.core.build_fetch(hosted.log_state(), now)
            if request is not None:
                batch.append((hosted, request))
        return batch

    def _body(self, batch: list[tuple[HostedPartition, FetchPartition]]) -> dict[str, Any]:
        topics: dict[str, list[dict[str, Any]]] = {}
        max_bytes = self.settings.replica_fetch_max_bytes
        for hosted, request in batch:
            topics.setdefault(hosted.topic, []).append(
                {
                    "partition": hosted.partition,
                    "fetch_offset": request.fetch_offset,
                    "current_leader_epoch": request.current_leader_epoch,
                    "last_fetched_epoch": request.last_fetched_epoch,
                    "log_start_offset": request.log_start_offset,
                    "partition_max_bytes": max_bytes,
                }
            )
        return {
            "replica_id": self.broker_id,
            "replica_epoch": self.broker_epoch_provider(),
            "max_wait_ms": self.settings.replica_fetch_wait_max_ms,
            "min_bytes": self.settings.replica_fetch_min_bytes,
            "max_bytes": self.settings.replica_fetch_response_max_bytes,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
        }

    async def _fetch(self, batch: list[tuple[HostedPartition, FetchPartition]]) -> None:
        # Like Kafka's fetcher thread, the next fetch leaves as soon as the answer is processed, from this
        # task: going back through _run costs three loop iterations (done callback, wake, new task), and
        # on an acks=all produce that gap sits between the follower's append and the fetch that moves the HW.
        task = asyncio.current_task()
        while batch:
            if not await self._fetch_once(batch):
                return
            batch = self._build()
            if batch and task is not None:
                self._requests[task] = batch

    async def _fetch_once(self, batch: list[tuple[HostedPartition, FetchPartition]]) -> bool:
        """One request and its answer; False when it failed (its partitions back off)."""
        address = self.address_of(self.source_id)
        answer: dict[str, Any] | None = None
        if address is not None:
            timeout_ms = self.settings.replica_fetch_wait_max_ms + self.settings.replica_socket_timeout_ms
            self.requests_sent += 1
            try:
                answer = await self.rpc.call(address, REPLICA_FETCH_PATH, self._body(batch), timeout_ms=timeout_ms)
            except KafkaError as exc:
                log.debug("fetch from broker %d failed: %s", self.source_id, exc)
        if answer is None:
            self.failures += 1
            now = monotonic_ms()
            for hosted, request in batch:
                hosted.core.on_fetch_error(request, now)
            return False
        parts: dict[TopicPartitionKey, Mapping[str, Any]] = {}
        for topic in answer.get("topics") or []:
            if not isinstance(topic, Mapping):
                continue
            for part in topic.get("partitions") or []:
                if isinstance(part, Mapping):
                    parts[(topic.get("name"), part.get("partition"))] = part  # type: ignore[index]
        for hosted, request in batch:
            self._process(hosted, request, parts.get(hosted.key))
        return True

    def _process(self, hosted: HostedPartition, request: FetchPartition, part: Mapping[str, Any] | None) -> None:
        now = monotonic_ms()
        if hosted.stopped or hosted.offline is not None:
            return
        try:
            if part is None:
                raise ValueError("no answer for the partition")
            response = decode_partition_answer(part)
        except ValueError as exc:
            log.warning("malformed fetch answer for %s from broker %d: %s", hosted.name, self.source_id, exc)
            hosted.core.on_fetch_error(request, now)
            return
        own_end = hosted.epoch_end(response.diverging_epoch.epoch) if response.diverging_epoch else None
        follower = hosted.core.follower
        refused = follower.corrupt_answers if follower is not None else 0
        try:
            hosted.perform(hosted.core.on_fetch_response(request, response, now, own_end))
            self._follow_log_start(hosted, response)
        except PartitionOfflineError:
            return
        if follower is not None and follower.corrupt_answers > refused:
            # The core refused the answer (a bad CRC, or offsets that do not continue the log) and backs off;
            # the next fetch asks for the same offset again. Damaged on the wire or on the leader's disk.
            self.corrupt_answers += 1
            log.warning(
                "%s: refused a corrupt fetch answer from broker %d at offset %d; fetching it again",
                hosted.name,
                self.source_id,
                request.fetch_offset,
            )

    @staticmethod
    def _follow_log_start(hosted: HostedPartition, response: FetchPartitionResponse) -> None:
        """Kafka's follower moves its log start to the leader's (retention ran there), within its own HW."""
        plog = hosted.log
        start = response.log_start_offset
        if hosted.core.follower is None or response.error != ErrorCode.NONE:
            return
        if plog.log_start_offset < start <= plog.high_watermark:
            plog.increment_log_start_offset(start)
            hosted.after_retention()
