"""Writes a transaction's COMMIT/ABORT markers on its partitions' leaders (Kafka's TransactionMarkerChannelManager).

One task per SendMarkers action: the partitions are grouped by their leader (from the metadata
image) and sent to `/broker/write_txn_markers` on that broker over the internal RPC (the contract
with the partition side, docs/transactions.md). Each partition is retried, after a backoff, until
it is acknowledged; a partition whose topic is gone from the metadata counts as done (as Kafka);
TRANSACTION_COORDINATOR_FENCED or INVALID_PRODUCER_EPOCH stops the task, and so does losing the
coordinator epoch (`still_coordinator` false): the next coordinator sends them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kraftpy.broker.txn.coordinator import SendMarkers
from kraftpy.metadata.image.metadata_image import NO_LEADER, MetadataImage
from kraftpy.protocol.access import WRITE_TXN_MARKERS_PATH
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import Address

log = logging.getLogger(__name__)

# The partition refuses the marker for good: a newer coordinator or producer epoch owns it.
_GIVE_UP = frozenset({ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})

Call = Callable[[Address, str, Mapping[str, Any]], Awaitable[dict[str, Any]]]
TopicPartitionKey = tuple[str, int]


def markers_body(action: SendMarkers, partitions: list[TopicPartitionKey]) -> dict[str, Any]:
    """The /broker/write_txn_markers body (Kafka's WriteTxnMarkersRequest field names) for `partitions`."""
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    return {
        "markers": [
            {
                "producer_id": action.producer_id,
                "producer_epoch": action.producer_epoch,
                "transaction_result": action.commit,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in sorted(topics.items())],
                "coordinator_epoch": action.coordinator_epoch,
            }
        ]
    }


def answer_codes(answer: Mapping[str, Any], producer_id: int) -> dict[TopicPartitionKey, ErrorCode]:
    """Per partition, the error code of a write_txn_markers answer (a malformed answer gives nothing)."""
    codes: dict[TopicPartitionKey, ErrorCode] = {}
    for marker in answer.get("markers") or []:
        if not isinstance(marker, dict) or marker.get("producer_id") != producer_id:
            continue
        for topic in marker.get("topics") or []:
            parts = (topic.get("partitions") or []) if isinstance(topic, dict) else []
            for p in parts:
                try:
                    codes[(str(topic["name"]), int(p["partition_index"]))] = ErrorCode(int(p.get("error_code", 0)))
                except (KeyError, TypeError, ValueError):
                    continue
    return codes


class MarkerWriter:
    def __init__(
        self,
        call: Call,
        image: Callable[[], MetadataImage],
        broker_address: Callable[[int], Address | None],
        on_written: Callable[[SendMarkers], None],
        still_coordinator: Callable[[SendMarkers], bool],
        *,
        retry_backoff_ms: int,
    ) -> None:
        self._call = call
        self._image = image
        self._address = broker_address
        self._on_written = on_written
        self._still_coordinator = still_coordinator
        self.retry_backoff_ms = retry_backoff_ms
        self._tasks: set[asyncio.Task[None]] = set()
        self.markers_written = 0
        self.retries = 0

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def submit(self, action: SendMarkers) -> None:
        task = asyncio.get_running_loop().create_task(self._run(action), name="kraftpy-txn-markers")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _leaders(self, partitions: set[TopicPartitionKey]) -> tuple[dict[int, list[TopicPartitionKey]], set]:
        """(leader -> its partitions, partitions whose topic is gone)."""
        image = self._image()
        by_leader: dict[int, list[TopicPartitionKey]] = {}
        gone = set()
        for topic, partition in sorted(partitions):
            t = image.topic(topic) if image is not None else None
            if t is None or partition >= len(t.partitions):
                gone.add((topic, partition))
                continue
            leader = t.partitions[partition].leader
            if leader != NO_LEADER:
                by_leader.setdefault(leader, []).append((topic, partition))
        return by_leader, gone

    async def _send(self, leader: int, action: SendMarkers, partitions: list[TopicPartitionKey]) -> set:
        address = self._address(leader)
        if address is None:
            return set()
        try:
            answer = await self._call(address, WRITE_TXN_MARKERS_PATH, markers_body(action, partitions))
        except KafkaError as exc:
            log.debug("markers for %s to broker %d failed: %s", action.transactional_id, leader, exc)
            return set()
        codes = answer_codes(answer, action.producer_id)
        refused = {tp: c for tp, c in codes.items() if c in _GIVE_UP}
        if refused:
            raise _Fenced(refused)
        return {tp for tp, code in codes.items() if code == ErrorCode.NONE}

    async def _run(self, action: SendMarkers) -> None:
        remaining = set(action.partitions)
        while remaining:
            if not self._still_coordinator(action):
                log.info("%s: no longer its coordinator; its markers are the next one's", action.transactional_id)
                return
            by_leader, gone = self._leaders(remaining)
            remaining -= gone
            try:
                results = await asyncio.gather(*(self._send(b, action, ps) for b, ps in by_leader.items()))
            except _Fenced as exc:
                log.warning("%s: markers refused for good: %s", action.transactional_id, exc.refused)
                return
            for done in results:
                remaining -= done
            if remaining:
                self.retries += 1
                await asyncio.sleep(self.retry_backoff_ms / 1000)
        self.markers_written += 1
        self._on_written(action)

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


class _Fenced(Exception):
    def __init__(self, refused: dict) -> None:
        super().__init__(str(refused))
        self.refused = refused
