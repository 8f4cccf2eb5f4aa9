"""The asyncio shell around the sans-I/O transaction coordinator: routes, __transaction_state, markers, timers.

It reuses the group coordinator's shell parts: the lifecycle, actions and timers of a core over an
internal topic (internal_topic_coordinator.py), the loader that follows this broker's leaderships of that
topic (partition_loader.py), the ordered appender (appender.py) and the internal topic creator
(broker/shell/offsets_topic.py). Docs: docs/transactions.md, "The coordinator".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kraftpy.broker.groups.runtime import PartitionStatus
from kraftpy.broker.groups.shell.appender import OffsetsAppender
from kraftpy.broker.groups.shell.internal_topic_coordinator import InternalTopicCoordinatorShell, Stoppable
from kraftpy.broker.groups.shell.partition_loader import OffsetsLoader
from kraftpy.broker.shell.offsets_topic import InternalTopicCreator, internal_topic_request
from kraftpy.broker.txn.coordinator import SendMarkers, TransactionCoordinator, TxnAction
from kraftpy.broker.txn.shell.markers import MarkerWriter
from kraftpy.broker.txn.shell.settings import TxnShellSettings
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.protocol.shell.clock import wall_ms
from kraftpy.protocol.shell.rpc_calls import Handler
from kraftpy.protocol.topics import TRANSACTION_STATE_TOPIC
from kraftpy.protocol.validate import INT16_MAX, INT32_MAX, INT64_MAX, field, invalid

if TYPE_CHECKING:
    from kraftpy.broker.api.produce import ProduceHandler
    from kraftpy.broker.shell.replica_manager import ReplicaManager

# Longest wait for the coordinator's answer: an append's timeout plus a margin (the core answers
# every request it accepted; this is a backstop against a bug).
BACKSTOP_MARGIN_MS = 30_000


# The coordinator's handlers by name -> the method serving each (InitProducerId comes through init_producer_id).
HANDLERS = (
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "verify_txn_partitions",  # a partition leader's (KIP-890), through AddPartitionsToTxn v4's verify_only
    "describe_transactions",
    "list_transactions",
)


def creation_request(image: MetadataImage, settings: TxnShellSettings) -> dict[str, Any]:
    """The CreateTopics body for __transaction_state (Kafka's defaults; min ISR capped by the replicas)."""
    body = internal_topic_request(
        image,
        TRANSACTION_STATE_TOPIC,
        settings.coordinator.transaction_state_log_num_partitions,
        settings.transaction_state_log_replication_factor,
        {"segment_bytes": str(settings.transaction_state_log_segment_bytes)},
    )
    topic = body["topics"][0]
    topic["configs"]["min_insync_replicas"] = str(
        min(settings.transaction_state_log_min_isr, topic["replication_factor"])
    )
    return body


def _partitions(body: Mapping[str, Any], max_items: int) -> list[tuple[str, int]]:
    """[{"name", "partitions": [int]}] -> [(topic, partition)], bounded."""
    topics = field(body, "topics", list, max_len=max_items)
    out: list[tuple[str, int]] = []
    for t in topics:
        name = field(t, "name", str, max_len=249)
        for p in field(t, "partitions", list, max_len=max_items):
            if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p <= INT32_MAX:
                raise invalid(f"partition {p!r} of {name!r} is not a partition index")
            out.append((name, p))
    if len(out) > max_items:
        raise invalid(f"a transaction may span at most {max_items} partitions, the request names {len(out)}")
    return out


class TransactionCoordinatorShell(InternalTopicCoordinatorShell):
    core_name = "transaction coordinator"

    def __init__(self, rm: ReplicaManager, produce: ProduceHandler, settings: TxnShellSettings) -> None:
        config = settings.coordinator
        self.coordinator: TransactionCoordinator
        super().__init__(TransactionCoordinator(config))
        self.rm = rm
        self.settings = settings
        self.creator = InternalTopicCreator(
            rm.controller_channel.call,
            rm.image,
            TRANSACTION_STATE_TOPIC,
            lambda image: creation_request(image, settings),
        )
        self.appender = OffsetsAppender(
            rm,
            produce,
            timeout_ms=settings.transaction_state_log_append_timeout_ms,
            on_complete=self._append_completed,
            on_unknown_fate=self._reload,
            topic=TRANSACTION_STATE_TOPIC,
        )
        self.loader = OffsetsLoader(
            rm,
            self.coordinator,  # type: ignore[arg-type]  # the loader's three calls, same shapes
            self.perform,
            wall_ms,
            buffer_bytes=settings.transaction_state_log_load_buffer_size,
            topic=TRANSACTION_STATE_TOPIC,
            num_partitions=config.transaction_state_log_num_partitions,
        )
        self.markers = MarkerWriter(
            self._call_broker,
            rm.image,
            rm.broker_address,
            self._markers_written,
            self._still_coordinator,
            retry_backoff_ms=settings.transaction_marker_retry_backoff_ms,
        )

    def _parts_in_stop_order(self) -> Sequence[Stoppable]:
        return (self.creator, self.loader, self.markers, self.appender)

    def _perform_other(self, action: TxnAction) -> None:
        if isinstance(action, SendMarkers):
            self.markers.submit(action)
        else:
            super()._perform_other(action)

    # -- the component interface -------------------------------------------------------------------------------

    def handlers(self) -> Mapping[str, Handler]:
        """The transaction APIs' handlers by name, for the Kafka dispatcher."""
        return {name: getattr(self, name) for name in HANDLERS}

    def status(self) -> dict[str, Any]:
        statuses = [self.coordinator.partitions.get(p) for p in self.loader.owned]
        return {
            "partitions_loaded": sum(1 for s in statuses if s is PartitionStatus.ACTIVE),
            "partitions_loading": sum(1 for s in statuses if s is PartitionStatus.LOADING),
            "transactional_ids": len(self.coordinator.txns),
            "markers_in_flight": self.markers.in_flight,
            "markers_written": self.markers.markers_written,
            "appends_failed": self.appender.failed,
        }

    # -- requests ----------------------------------------------------------------------------------------------

    async def _ask_core(self, start: Callable[[int, int], list[TxnAction]]) -> dict[str, Any]:
        return await self._ask(
            start,
            self.settings.transaction_state_log_append_timeout_ms + BACKSTOP_MARGIN_MS,
            "no answer from the transaction coordinator in time",
        )

    def _txn_id(self, body: Mapping[str, Any]) -> str:
        return field(body, "transactional_id", str, max_len=self.settings.coordinator.max_id_length)

    @staticmethod
    def _producer(body: Mapping[str, Any]) -> tuple[int, int]:
        return (
            field(body, "producer_id", int, min_value=0, max_value=INT64_MAX),
            field(body, "producer_epoch", int, min_value=0, max_value=INT16_MAX),
        )

    async def init_producer_id(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """InitProducerId with a transactional_id (the init_producer_id handler hands it over)."""
        txn_id = self._txn_id(body)
        timeout_ms = field(body, "transaction_timeout_ms", int, min_value=-(2**31), max_value=INT32_MAX)
        pid = field(body, "producer_id", int, default=-1, min_value=-1, max_value=INT64_MAX)
        epoch = field(body, "producer_epoch", int, default=-1, min_value=-1, max_value=INT16_MAX)
        new_pid = None
        if self.coordinator.coordinator_error(txn_id) is None and self.coordinator.needs_producer_id(txn_id):
            new_pid = await self.rm.producer_ids.generate(self.rm.settings.controller_request_timeout_ms)
        return await self._ask_core(
            lambda rid, now: self.coordinator.init_producer_id(rid, txn_id, timeout_ms, pid, epoch, new_pid, now)
        )

    async def add_partitions_to_txn(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """{transactional_id, producer_id, producer_epoch, topics: [{name, partitions}]} -> {error_code}."""
        txn_id = self._txn_id(body)
        pid, epoch = self._producer(body)
        partitions = _partitions(body, self.settings.coordinator.transaction_max_partitions)
        return await self._ask_core(
            lambda rid, now: self.coordinator.add_partitions(rid, txn_id, pid, epoch, partitions, now)
        )

    async def add_offsets_to_txn(self, body: Mapping[str, Any]) -> dict[str, Any]:
        txn_id = self._txn_id(body)
        pid, epoch = self._producer(body)
        group_id = field(body, "group_id", str, max_len=self.settings.coordinator.max_id_length)
        return await self._ask_core(
            lambda rid, now: self.coordinator.add_offsets(rid, txn_id, pid, epoch, group_id, now)
        )

    async def end_txn(self, body: Mapping[str, Any]) -> dict[str, Any]:
        txn_id = self._txn_id(body)
        pid, epoch = self._producer(body)
        commit = field(body, "committed", bool)
        return await self._ask_core(lambda rid, now: self.coordinator.end_txn(rid, txn_id, pid, epoch, commit, now))

    async def verify_txn_partitions(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """KIP-890 part 1: the partition leader's check (AddPartitionsToTxn v4+ verify_only)."""
        txn_id = self._txn_id(body)
        pid, epoch = self._producer(body)
        partitions = _partitions(body, self.settings.coordinator.transaction_max_partitions)
        codes = self.coordinator.verify_partitions(txn_id, pid, epoch, partitions)
        return {"results": [{"name": t, "partition_index": p, "error_code": int(c)} for (t, p), c in codes.items()]}

    async def describe_transactions(self, body: Mapping[str, Any]) -> dict[str, Any]:
        ids = field(body, "transactional_ids", list, max_len=10_000)
        for txn_id in ids:
            if not isinstance(txn_id, str):
                raise invalid("transactional_ids must be strings")
        return {"transaction_states": self.coordinator.describe(ids, wall_ms())}

    async def list_transactions(self, body: Mapping[str, Any]) -> dict[str, Any]:
        states = field(body, "state_filters", list, default=[], max_len=64)
        pids = field(body, "producer_id_filters", list, default=[], max_len=10_000)
        duration = field(body, "duration_filter_ms", int, default=-1, min_value=-1, max_value=INT64_MAX)
        if not all(isinstance(s, str) for s in states) or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in pids
        ):
            raise invalid("state_filters must be strings and producer_id_filters integers")
        return self.coordinator.list_transactions(states, pids, duration, wall_ms())

    # -- actions -----------------------------------------------------------------------------------------------

    async def _call_broker(self, address: Any, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        timeout = self.settings.transaction_marker_request_timeout_ms
        return await self.rm.node.rpc.call(address, path, body, timeout_ms=timeout, raise_errors=False)

    def _still_coordinator(self, action: SendMarkers) -> bool:
        partition = self.coordinator.partition_for(action.transactional_id)
        return (
            not self._stopped
            and self.coordinator.is_active(partition, action.load_epoch)
            and self.coordinator.coordinator_epochs.get(partition) == action.coordinator_epoch
        )

    def _markers_written(self, action: SendMarkers) -> None:
        if not self._stopped:
            self.perform(
                self.coordinator.markers_written(
                    action.transactional_id,
                    action.producer_id,
                    action.producer_epoch,
                    action.coordinator_epoch,
                    wall_ms(),
                    action.load_epoch,
                )
            )
