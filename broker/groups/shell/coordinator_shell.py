"""The asyncio shell around the sans-I/O group coordinator: routes, answers, appends, loading, timers.

Design notes: docs/groups.md, section "broker/groups/shell/coordinator_shell.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kraftpy.broker.api.find_coordinator import FindCoordinatorHandler
from kraftpy.broker.groups import GROUP_APIS, Append, GroupCoordinator, PartitionStatus, Respond
from kraftpy.broker.groups.actions import Action
from kraftpy.broker.groups.requests import TxnOffsetCommitRequest
from kraftpy.broker.groups.responses import commit_storage_error, offset_commit_response
from kraftpy.broker.groups.shell.appender import OffsetsAppender
from kraftpy.broker.groups.shell.partition_loader import OffsetsLoader
from kraftpy.broker.groups.shell.pending import PendingAnswers
from kraftpy.broker.groups.shell.settings import GroupShellSettings
from kraftpy.broker.shell.offsets_topic import OffsetsTopicCreator
from kraftpy.broker.shell.txn_verifier import Batch
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.header import (
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_SEQUENCE,
    TRANSACTIONAL_BIT,
    BatchHeader,
)
from kraftpy.protocol.shell.clock import wall_ms
from kraftpy.protocol.shell.rpc_calls import Handler

if TYPE_CHECKING:
    from kraftpy.broker.api.produce import ProduceHandler
    from kraftpy.broker.shell.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# Longest sleep of the timer task, so a missed re-arm costs at most this long; also how often the
# loader re-checks this broker's leaderships of __consumer_offsets.
MAX_TIMER_SLEEP_MS = 1_000
# A request still unanswered this long after the longest wait the coordinator may impose on it is
# answered REQUEST_TIMED_OUT (a backstop: the coordinator answers every request it accepted).
BACKSTOP_MARGIN_MS = 60_000


class GroupCoordinatorShell:
    def __init__(
        self,
        rm: ReplicaManager,
        produce: ProduceHandler,
        settings: GroupShellSettings,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.rm = rm
        self.produce = produce
        self.settings = settings
        self.coordinator = GroupCoordinator(settings.coordinator, rng=rng or random.Random())
        self.creator = OffsetsTopicCreator(rm.controller_channel.call, rm.image, settings)
        self.appender = OffsetsAppender(
            rm,
            produce,
            timeout_ms=settings.offsets_commit_timeout_ms,
            on_complete=self._append_completed,
            on_unknown_fate=self._reload,
        )
        self.loader = OffsetsLoader(
            rm, self.coordinator, self.perform, wall_ms, buffer_bytes=settings.offsets_load_buffer_size
        )
        self.find_coordinator = FindCoordinatorHandler(
            rm.image,
            self.creator,
            settings.coordinator.offsets_topic_num_partitions,
            settings.coordinator.max_id_length,
        )
        self._pending = PendingAnswers()
        self._rearm = asyncio.Event()
        self._timer_task: asyncio.Task[None] | None = None
        self._started = False
        self._stopped = False

    # -- the component interface -------------------------------------------------------------------------------

    def handlers(self) -> Mapping[str, Handler]:
        """The group APIs' handlers by name (`join_group`, ...), for the Kafka dispatcher."""
        handlers: dict[str, Handler] = {"find_coordinator": self.find_coordinator}
        for api in GROUP_APIS:
            handlers[api] = self._handler(api)
        return handlers

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._timer_task = asyncio.get_running_loop().create_task(self._timer_loop(), name="kraftpy-group-timers")
        self.on_metadata()

    async def stop(self) -> None:
        """Unload every partition (waiting members are told NOT_COORDINATOR) and stop the tasks."""
        if self._stopped:
            return
        self._stopped = True
        await self.creator.stop()
        await self.loader.stop()
        await self.appender.stop()
        if self._timer_task is not None:
            self._timer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer_task
        self._pending.fail_all(KafkaError("the broker is shutting down", ErrorCode.COORDINATOR_NOT_AVAILABLE))

    def on_metadata(self) -> None:
        """The replica manager applied an image: follow this broker's leaderships of __consumer_offsets."""
        if self._started and not self._stopped:
            self.loader.reconcile()

    def status(self) -> dict[str, Any]:
        statuses = [self.coordinator.partition_status(p) for p in self.loader.owned]
        return {
            "partitions_loaded": sum(1 for s in statuses if s is PartitionStatus.ACTIVE),
            "partitions_loading": sum(1 for s in statuses if s is PartitionStatus.LOADING),
            "groups": len(self.coordinator.groups),
            "waiting_requests": len(self._pending),
            "appends_in_flight": self.appender.in_flight,
            "appends_failed": self.appender.failed,
        }

    # -- requests ----------------------------------------------------------------------------------------------

    def _handler(self, api: str) -> Handler:
        async def handle(body: dict[str, Any]) -> dict[str, Any]:
            return await self.handle(api, body)

        handle.__name__ = api
        return handle

    async def handle(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        """One group request: answered once the coordinator says so (KafkaError INVALID_REQUEST if malformed)."""
        if self._stopped:
            raise KafkaError("the broker is shutting down", ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if api == "txn_offset_commit" and self.rm.settings.transaction_partition_verification_enable:
            return await self._verified_txn_offset_commit(body)
        return await self._ask(api, body)

    async def _ask(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._pending.ask(
            lambda request_id: self.perform(self.coordinator.handle(request_id, api, body, wall_ms())),
            self._backstop_ms(body),
            f"{api} got no answer from the coordinator in time",
        )

    async def _verified_txn_offset_commit(self, body: dict[str, Any]) -> dict[str, Any]:
        """KIP-890 part 1 for TxnOffsetCommit, as Kafka does since 3.6: the transaction coordinator must
        confirm that the group's offsets partition is in the producer's transaction (AddOffsetsToTxn)
        before the commit is written. Else a late or raw commit would open a transaction on
        __consumer_offsets that no marker ever ends, and every require_stable OffsetFetch of the
        partition's groups would answer UNSTABLE_OFFSET_COMMIT for ever. The append itself is refused
        by the partition's core unless verified (the appender passes verify_txn)."""
        try:
            request = self.coordinator.parse("txn_offset_commit", body)
            assert isinstance(request, TxnOffsetCommitRequest)
            partition = self.coordinator.partition_for(request.commit.group_id)
            hosted = self.rm.lookup(self.appender.topic, partition)
        except KafkaError:  # malformed, or not the coordinator here: the core answers it
            return await self._ask("txn_offset_commit", body)
        header = _txn_header(request.producer_id, request.producer_epoch)
        batch = Batch((self.appender.topic, partition), hosted, header)
        async with self.produce.verifier.verifying(
            request.transactional_id, [batch], self.settings.offsets_commit_timeout_ms
        ) as refused:
            if batch.key in refused:
                # The produce path's answer (NOT_ENOUGH_REPLICAS for a coordinator it could not reach) is
                # abortable on a TxnOffsetCommit; mapped as a failed offsets write, clients retry it.
                error = refused[batch.key]
                code = commit_storage_error(error.code)
                keys = [(p.topic, p.partition) for p in request.commit.partitions]
                return offset_commit_response(dict.fromkeys(keys, code), dict.fromkeys(keys, error.message))
            return await self._ask("txn_offset_commit", body)

    def _backstop_ms(self, body: Mapping[str, Any]) -> int:
        config = self.settings.coordinator
        rebalance = body.get("rebalance_timeout_ms")
        longest = max(
            config.group_max_session_timeout_ms,
            config.new_member_join_timeout_ms,
            rebalance if isinstance(rebalance, int) and not isinstance(rebalance, bool) else 0,
        )
        return longest + self.settings.offsets_commit_timeout_ms + BACKSTOP_MARGIN_MS

    # -- actions -----------------------------------------------------------------------------------------------

    def perform(self, actions: list[Action]) -> None:
        """Carry out the coordinator's actions in order, then re-arm the timer."""
        for action in actions:
            if isinstance(action, Respond):
                self._pending.respond(action.request_id, action.body)
            elif isinstance(action, Append):
                epoch = self.loader.epoch(action.partition)
                self.appender.submit(action, -1 if epoch is None else epoch)
        self._rearm.set()

    def _append_completed(self, append_id: int, error: ErrorCode) -> None:
        if not self._stopped:
            self.perform(self.coordinator.append_completed(append_id, error, wall_ms()))

    def _reload(self, partition: int) -> None:
        if not self._stopped:
            self.loader.reload(partition)

    # -- timers ------------------------------------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        next_reconcile = wall_ms() + MAX_TIMER_SLEEP_MS
        while True:
            deadline = self.coordinator.next_deadline_ms()
            now = wall_ms()
            if now >= next_reconcile:  # a safety net: leadership changes also call on_metadata directly
                next_reconcile = now + MAX_TIMER_SLEEP_MS
                try:
                    self.loader.reconcile()
                except Exception:
                    log.exception("following __consumer_offsets leadership failed")
            if deadline is not None and deadline <= now:
                try:
                    self.perform(self.coordinator.tick(now))
                except Exception:  # a coordinator bug must not stop the timers of every group
                    log.exception("group coordinator tick failed")
                    await asyncio.sleep(MAX_TIMER_SLEEP_MS / 1000)
                await asyncio.sleep(0)  # let requests in between two due timers
                continue
            sleep_ms = MAX_TIMER_SLEEP_MS if deadline is None else min(MAX_TIMER_SLEEP_MS, deadline - now)
            self._rearm.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(sleep_ms / 1000):
                    await self._rearm.wait()


def _txn_header(producer_id: int, producer_epoch: int) -> BatchHeader:
    """The header fields verification looks at (a transactional batch of this producer), for a commit
    whose batch is built only when the coordinator appends it."""
    return BatchHeader(
        base_offset=0,
        batch_length=0,
        partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
        magic=MAGIC,
        crc=0,
        attributes=TRANSACTIONAL_BIT,
        last_offset_delta=0,
        base_timestamp=-1,
        max_timestamp=-1,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        records_count=0,
    )
