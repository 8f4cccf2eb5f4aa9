"""AlterPartitionManager: ISR proposals from this broker's partition leaders to the active controller.

Design notes: docs/replication.md, section "broker/shell/alter_partition_manager.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.broker.replication import AlterPartitionRequest, AlterPartitionResponse
from kraftpy.broker.shell.controller_channel import ControllerChannel
from kraftpy.broker.shell.partition_host import HostedPartition, PartitionOfflineError
from kraftpy.protocol.backoff import Backoff
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.clock import monotonic_ms

log = logging.getLogger(__name__)

ALTER_PARTITION_PATH = "/controller/alter_partition"
# At most this many partitions per request (Kafka sends all; a bound keeps one answer small).
MAX_ITEMS_PER_REQUEST = 1000


@dataclass(frozen=True, slots=True)
class _Item:
    hosted: HostedPartition
    request: AlterPartitionRequest

    @property
    def key(self) -> tuple[uuid.UUID, int]:
        return (self.hosted.topic_id, self.hosted.partition)


def encode_alter_partition(broker_id: int, broker_epoch: int, items: list[_Item]) -> dict[str, Any]:
    topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for item in items:
        r = item.request
        topics.setdefault(item.hosted.topic_id, []).append(
            {
                "partition": item.hosted.partition,
                "leader_epoch": r.leader_epoch,
                "new_isr": list(r.isr),
                "new_isr_with_epochs": [{"broker_id": b.broker_id, "broker_epoch": b.broker_epoch} for b in r.new_isr],
                "partition_epoch": r.partition_epoch,
            }
        )
    return {
        "broker_id": broker_id,
        "broker_epoch": broker_epoch,
        "topics": [{"topic_id": str(tid), "partitions": parts} for tid, parts in topics.items()],
    }


def _int(value: Any, default: int = -1) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def decode_alter_partition_answer(body: Mapping[str, Any]) -> dict[tuple[uuid.UUID, int], AlterPartitionResponse]:
    """Per (topic id, partition) answers; malformed entries are left out (they count as unanswered)."""
    out: dict[tuple[uuid.UUID, int], AlterPartitionResponse] = {}
    topics = body.get("topics")
    if not isinstance(topics, list):
        return out
    for topic in topics:
        if not isinstance(topic, Mapping):
            continue
        try:
            topic_id = uuid.UUID(str(topic.get("topic_id")))
        except ValueError:
            continue
        for part in topic.get("partitions") or []:
            if not isinstance(part, Mapping) or not isinstance(part.get("partition"), int):
                continue
            try:
                error = ErrorCode(_int(part.get("error_code"), 0))
            except ValueError:
                error = ErrorCode.UNKNOWN_SERVER_ERROR
            isr = part.get("isr")
            out[(topic_id, part["partition"])] = AlterPartitionResponse(
                error=error,
                leader_epoch=_int(part.get("leader_epoch")),
                isr=tuple(b for b in isr if isinstance(b, int)) if isinstance(isr, list) else (),
                partition_epoch=_int(part.get("partition_epoch")),
            )
    return out


class AlterPartitionManager:
    def __init__(
        self,
        channel: ControllerChannel,
        broker_id: int,
        broker_epoch_provider: Callable[[], int],
        *,
        backoff: Backoff | None = None,
    ) -> None:
        self.channel = channel
        self.broker_id = broker_id
        self.broker_epoch_provider = broker_epoch_provider
        self._unsent: dict[tuple[uuid.UUID, int], _Item] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._backoff = backoff or Backoff(100, 1_000)
        self.requests_sent = 0
        self.last_error: KafkaError | None = None

    @property
    def pending(self) -> int:
        return len(self._unsent)

    def submit(self, hosted: HostedPartition, request: AlterPartitionRequest) -> None:
        item = _Item(hosted, request)
        self._unsent[item.key] = item  # a newer proposal replaces an unsent older one
        self._wake.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="kraftpy-alter-partition")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            if not self._unsent:
                self._wake.clear()
                await self._wake.wait()
                continue
            keys = list(self._unsent)[:MAX_ITEMS_PER_REQUEST]
            items = [self._unsent.pop(k) for k in keys]
            items = [i for i in items if not i.hosted.stopped and i.hosted.offline is None]
            if not items:
                continue
            if await self._send(items):
                self._backoff.reset()
            else:
                for item in items:
                    self._unsent.setdefault(item.key, item)  # unless a newer proposal arrived meanwhile
                await asyncio.sleep(self._backoff.next_ms() / 1000)

    async def _send(self, items: list[_Item]) -> bool:
        body = encode_alter_partition(self.broker_id, self.broker_epoch_provider(), items)
        self.requests_sent += 1
        try:
            answer = await self.channel.call(ALTER_PARTITION_PATH, body)
        except KafkaError as exc:
            self.last_error = exc
            log.info("AlterPartition for %d partition(s) failed: %s; retrying", len(items), exc)
            return False
        answers = decode_alter_partition_answer(answer)
        now = monotonic_ms()
        retry = []
        for item in items:
            response = answers.get(item.key)
            if response is None:
                retry.append(item)
                continue
            hosted = item.hosted
            if hosted.stopped or hosted.offline is not None:
                continue
            with contextlib.suppress(PartitionOfflineError):
                hosted.perform(hosted.core.on_alter_partition_response(item.request, response, now))
        for item in retry:
            self._unsent.setdefault(item.key, item)
        return not retry
