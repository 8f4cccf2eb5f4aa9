"""ProducerIdManager: producer ids for InitProducerId, in blocks from the controller (Kafka's RPCProducerIdManager).

The active controller hands out blocks of ids (`/controller/allocate_producer_ids`
-> producer_id_start, producer_id_len; the next free id is in the metadata log,
so blocks are unique across brokers and controller failovers). The broker
serves ids from its current block and fetches the next block in the background
once 90% of the current one is used, so InitProducerId rarely waits. A request
that finds no id waits for the block in flight at most `timeout_ms`, then gets
COORDINATOR_LOAD_IN_PROGRESS (retriable; Kafka answers the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from kraftpy.broker.shell.controller_channel import ControllerChannel
from kraftpy.protocol.backoff import Backoff
from kraftpy.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

ALLOCATE_PRODUCER_IDS_PATH = "/controller/allocate_producer_ids"
PREFETCH_THRESHOLD = 0.9


class ProducerIdManager:
    def __init__(
        self,
        channel: ControllerChannel,
        broker_id: int,
        broker_epoch_provider: Callable[[], int],
    ) -> None:
        self.channel = channel
        self.broker_id = broker_id
        self.broker_epoch_provider = broker_epoch_provider
        self._next = 0
        self._end = 0  # exclusive end of the current block; next == end: no ids
        self._block_len = 0
        self._queued: tuple[int, int] | None = None  # a prefetched block (start, len)
        self._fetch: asyncio.Task[None] | None = None
        self._backoff = Backoff(100, 1_000)
        self._retry_at = 0.0
        self.blocks_fetched = 0
        self.last_error: KafkaError | None = None

    async def generate(self, timeout_ms: int) -> int:
        """The next producer id; waits (bounded) for a block when none is left."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            self._maybe_use_queued()
            if self._next < self._end:
                pid = self._next
                self._next += 1
                if self._block_len and (self._end - self._next) < self._block_len * (1 - PREFETCH_THRESHOLD):
                    self._maybe_fetch()
                return pid
            self._maybe_fetch()
            remaining = deadline - loop.time()
            if remaining <= 0 or self._fetch is None:
                raise KafkaError(
                    f"no producer id block from the controller yet ({self.last_error or 'waiting'})",
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                )
            done, _ = await asyncio.wait({self._fetch}, timeout=remaining)
            if not done:
                continue

    def _maybe_use_queued(self) -> None:
        if self._next >= self._end and self._queued is not None:
            start, length = self._queued
            self._queued = None
            self._next, self._end, self._block_len = start, start + length, length

    def _maybe_fetch(self) -> None:
        if self._fetch is not None or self._queued is not None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._retry_at:
            return
        self._fetch = loop.create_task(self._fetch_block(), name="kraftpy-producer-ids")

    async def _fetch_block(self) -> None:
        try:
            answer = await self.channel.call(
                ALLOCATE_PRODUCER_IDS_PATH, {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch_provider()}
            )
            start, length = answer.get("producer_id_start"), answer.get("producer_id_len")
            if not isinstance(start, int) or not isinstance(length, int) or start < 0 or length <= 0:
                raise KafkaError(f"malformed allocate_producer_ids answer {answer!r}", ErrorCode.UNKNOWN_SERVER_ERROR)
            self._queued = (start, length)
            self.blocks_fetched += 1
            self.last_error = None
            self._backoff.reset()
        except KafkaError as exc:
            self.last_error = exc
            self._retry_at = asyncio.get_running_loop().time() + self._backoff.next_ms() / 1000
            log.info("allocating producer ids failed: %s", exc)
        finally:
            self._fetch = None

    async def stop(self) -> None:
        if self._fetch is not None:
            self._fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._fetch
            self._fetch = None
