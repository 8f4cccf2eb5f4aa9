"""Writes the group coordinator's `Append` actions to `__consumer_offsets`, in order per partition.

Design notes: docs/groups.md, section "broker/groups/shell/appender.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kraftpy.broker.api.common import leading_partition
from kraftpy.broker.api.produce import check_producer_batch
from kraftpy.broker.groups import Append
from kraftpy.broker.replication import CompleteProduce
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records import build_batch
from kraftpy.protocol.shell.clock import monotonic_ms
from kraftpy.protocol.topics import OFFSETS_TOPIC
from kraftpy.protocol.validate import INT32_MAX

if TYPE_CHECKING:
    from kraftpy.broker.api.produce import ProduceHandler
    from kraftpy.broker.shell.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

ACKS_ALL = -1
NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER
_EPOCH_ERRORS = (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH)


def transactional_fields(hosted: Any, action: Append) -> dict[str, Any]:
    """The producer fields of a TxnOffsetCommit batch: transactional, at the producer's next sequence here.

    Only the coordinator writes to this partition, so the partition's producer state is the
    sequence's one source; appends start synchronously, in order, so no two get the same sequence.
    """
    if action.producer_id < 0:
        return {}
    entry = hosted.core.producers.entry(action.producer_id)
    same_epoch = entry is not None and entry.producer_epoch == action.producer_epoch
    sequence = entry.last_seq + 1 if same_epoch and entry.last_seq >= 0 else 0
    return {
        "producer_id": action.producer_id,
        "producer_epoch": action.producer_epoch,
        "base_sequence": sequence % (INT32_MAX + 1),
        "is_transactional": True,
    }


class OffsetsAppender:
    def __init__(
        self,
        rm: ReplicaManager,
        produce: ProduceHandler,
        *,
        timeout_ms: int,
        on_complete: Callable[[int, ErrorCode], None],
        on_unknown_fate: Callable[[int], None],
        topic: str = OFFSETS_TOPIC,
    ) -> None:
        self.rm = rm
        self.topic = topic  # __consumer_offsets, or __transaction_state for the transaction coordinator
        self.produce = produce
        self.timeout_ms = timeout_ms
        self.on_complete = on_complete
        self.on_unknown_fate = on_unknown_fate
        self._tails: dict[int, asyncio.Task[None]] = {}  # per partition: the last append's reporting task
        self._tasks: set[asyncio.Task[None]] = set()
        self.appended = 0
        self.failed = 0

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def submit(self, action: Append, leader_epoch: int) -> None:
        """Append now (synchronously) and report the outcome later, after the partition's earlier appends."""
        now = monotonic_ms()
        future: asyncio.Future[CompleteProduce] | None = None
        waits = {}
        detail = ""
        try:
            if action.records:
                hosted = leading_partition(self.rm, self.topic, action.partition, leader_epoch)
                batch = build_batch(action.records, **transactional_fields(hosted, action))
                config = hosted.log.config
                header = check_producer_batch(batch, config.max_message_bytes, config.segment_bytes)
                # A TxnOffsetCommit's batch must have been verified (KIP-890; coordinator_shell.py).
                verify = header.is_transactional and self.rm.settings.transaction_partition_verification_enable
                rid, future = self.produce.begin_append(
                    hosted, header, batch, ACKS_ALL, self.timeout_ms, now, verify_txn=verify
                )
                waits[rid] = ((self.topic, action.partition), hosted, future)
            error = ErrorCode.NONE
        except KafkaError as exc:
            error = NOT_LEADER if exc.code in _EPOCH_ERRORS else exc.code
            detail = exc.message
            log.debug("append %d to %s-%d refused: %s", action.append_id, self.topic, action.partition, exc)
        except Exception:  # a bug here must still complete the append, or its group would wait forever
            log.exception("append %d to %s-%d failed", action.append_id, self.topic, action.partition)
            error = ErrorCode.UNKNOWN_SERVER_ERROR
        previous = self._tails.get(action.partition)
        task = asyncio.get_running_loop().create_task(
            self._finish(action, previous, waits, error, now + self.timeout_ms, detail),
            name=f"kraftpy-append-{self.topic}",
        )
        self._tails[action.partition] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(
        self,
        action: Append,
        previous: asyncio.Task[None] | None,
        waits: dict,
        error: ErrorCode,
        deadline_ms: int,
        detail: str = "",
    ) -> None:
        if waits:
            try:
                await self.produce.await_appends(waits, deadline_ms)
            finally:
                for rid in waits:
                    self.rm.produce_waiters.pop(rid, None)
            (_, _, future) = next(iter(waits.values()))
            done = future.result()
            error = NOT_LEADER if done.error in _EPOCH_ERRORS else ErrorCode(done.error)
            detail = done.message
        if previous is not None and not previous.done():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(previous)
        if error == ErrorCode.NONE:
            self.appended += 1
        else:
            self.failed += 1
            log.warning(
                "write of %s to %s-%d failed: %s%s",
                action.kind, self.topic, action.partition, error.name, f" ({detail})" if detail else "",
            )  # fmt: skip
        self.on_complete(action.append_id, error)
        if error == ErrorCode.REQUEST_TIMED_OUT:
            self.on_unknown_fate(action.partition)

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tails.clear()
