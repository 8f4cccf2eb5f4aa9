"""The asyncio shell around the sans-I/O group coordinator: its handlers, KIP-890 verification, status.

Loading, appends, answers and timers are internal_topic_coordinator.py's, shared with the transaction coordinator.

Design notes: docs/groups.md, section "broker/groups/shell/coordinator_shell.py".
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kraftpy.broker.api.find_coordinator import FindCoordinatorHandler
from kraftpy.broker.groups import GROUP_APIS, GroupCoordinator, PartitionStatus
from kraftpy.broker.groups.requests import TxnOffsetCommitRequest
from kraftpy.broker.groups.responses import commit_storage_error, offset_commit_response
from kraftpy.broker.groups.shell.appender import OffsetsAppender
from kraftpy.broker.groups.shell.internal_topic_coordinator import InternalTopicCoordinatorShell, Stoppable
from kraftpy.broker.groups.shell.partition_loader import OffsetsLoader
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

# A request still unanswered this long after the longest wait the coordinator may impose on it is
# answered REQUEST_TIMED_OUT (a backstop: the coordinator answers every request it accepted).
BACKSTOP_MARGIN_MS = 60_000


class GroupCoordinatorShell(InternalTopicCoordinatorShell):
    core_name = "group coordinator"

    def __init__(
        self,
        rm: ReplicaManager,
        produce: ProduceHandler,
        settings: GroupShellSettings,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.coordinator: GroupCoordinator
        super().__init__(GroupCoordinator(settings.coordinator, rng=rng or random.Random()))
        self.rm = rm
        self.produce = produce
        self.settings = settings
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

    def _parts_in_stop_order(self) -> Sequence[Stoppable]:
        return (self.creator, self.loader, self.appender)

    # -- the component interface -------------------------------------------------------------------------------

    def handlers(self) -> Mapping[str, Handler]:
        """The group APIs' handlers by name (`join_group`, ...), for the Kafka dispatcher."""
        handlers: dict[str, Handler] = {"find_coordinator": self.find_coordinator}
        for api in GROUP_APIS:
            handlers[api] = self._handler(api)
        return handlers

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
        return await self._ask_core(api, body)

    async def _ask_core(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._ask(
            lambda request_id, now_ms: self.coordinator.handle(request_id, api, body, now_ms),
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
            return await self._ask_core("txn_offset_commit", body)
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
            return await self._ask_core("txn_offset_commit", body)

    def _backstop_ms(self, body: Mapping[str, Any]) -> int:
        config = self.settings.coordinator
        rebalance = body.get("rebalance_timeout_ms")
        longest = max(
            config.group_max_session_timeout_ms,
            config.new_member_join_timeout_ms,
            rebalance if isinstance(rebalance, int) and not isinstance(rebalance, bool) else 0,
        )
        return longest + self.settings.offsets_commit_timeout_ms + BACKSTOP_MARGIN_MS


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
