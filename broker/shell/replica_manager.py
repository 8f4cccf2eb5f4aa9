"""ReplicaManager: the broker's data plane, driven by the metadata image (Kafka's ReplicaManager).

Design notes: docs/replication.md, section "broker/shell/replica_manager.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.broker.api.fetch import FetchHandler
from kraftpy.broker.api.init_producer_id import InitProducerIdHandler
from kraftpy.broker.api.list_offsets import ListOffsetsHandler
from kraftpy.broker.api.metadata import MetadataHandler
from kraftpy.broker.api.offsets_for_leader_epoch import OffsetsForLeaderEpochHandler
from kraftpy.broker.api.produce import ProduceHandler
from kraftpy.broker.api.write_txn_markers import WriteTxnMarkersHandler
from kraftpy.broker.groups.shell.coordinator_shell import GroupCoordinatorShell
from kraftpy.broker.groups.shell.settings import GroupShellSettings
from kraftpy.broker.replica_settings import ReplicaManagerSettings
from kraftpy.broker.replication import (
    AlterPartitionRequest,
    CompleteProduce,
    PartitionRegistration,
    ProducerStateManager,
    ReplicationConfig,
    Role,
    predates_log,
)
from kraftpy.broker.replication.model import may_cut_corrupt_replica
from kraftpy.broker.shell import fault_injection
from kraftpy.broker.shell.alter_partition_manager import AlterPartitionManager
from kraftpy.broker.shell.controller_channel import ControllerChannel
from kraftpy.broker.shell.fetcher_manager import ReplicaFetcherManager
from kraftpy.broker.shell.log_manager import LogManager, OpenedLog, OpenRequest
from kraftpy.broker.shell.partition_host import (
    HostedPartition,
    PartitionOfflineError,
    TopicPartitionKey,
    producer_state,
)
from kraftpy.broker.shell.producer_id_manager import ProducerIdManager
from kraftpy.broker.txn.shell.coordinator_shell import TransactionCoordinatorShell
from kraftpy.broker.txn.shell.settings import TxnShellSettings
from kraftpy.metadata.image.local_changes import LocalPartition, local_replica_changes
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.protocol.access import REPLICA_FETCH_PATH, VERIFY_TXN_PARTITIONS_PATH, WRITE_TXN_MARKERS_PATH
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.settings import settings_from
from kraftpy.protocol.shell.clock import monotonic_ms, wall_ms
from kraftpy.protocol.shell.rpc_calls import Handler
from kraftpy.protocol.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from kraftpy.protocol.types import Address
from kraftpy.storage import LogConfig, PartitionLog
from kraftpy.storage.integrity import find_corruption
from kraftpy.storage.layout import partition_dir_name

log = logging.getLogger(__name__)

DELETE = None  # a queued change: the partition leaves this broker


@dataclass
class _Opening:
    """A partition becoming hosted: its log opens in a worker thread; `changes` wait for it, in order.

    Each change is a LocalPartition (become leader/follower at that registration) or DELETE; the
    first is the one that started the open.
    """

    topic_id: uuid.UUID
    changes: list[LocalPartition | None]
    future: asyncio.Future[OpenedLog[ProducerStateManager]]


class ReplicaManager:
    name = "replica_manager"

    def __init__(
        self,
        node: Any,
        *,
        image_provider: Callable[[], MetadataImage],
        broker_epoch_provider: Callable[[], int],
        controller_address_provider: Callable[[], Address | None],
        settings: ReplicaManagerSettings | None = None,
        group_settings: GroupShellSettings | None = None,
    ) -> None:
        self.node = node
        self.config = node.config
        self.broker_id: int = node.config.node_id
        self.image = image_provider
        self.broker_epoch_provider = broker_epoch_provider
        self.controller_address_provider = controller_address_provider
        self.settings = settings or ReplicaManagerSettings.from_node_config(node.config)
        self.partitions: dict[TopicPartitionKey, HostedPartition] = {}
        self._opening: dict[TopicPartitionKey, _Opening] = {}
        self.produce_waiters: dict[Any, asyncio.Future[CompleteProduce]] = {}
        channel = ControllerChannel(
            node.rpc, controller_address_provider, request_timeout_ms=self.settings.controller_request_timeout_ms
        )
        self.controller_channel = channel
        self.alter_partitions = AlterPartitionManager(channel, self.broker_id, broker_epoch_provider)
        self.producer_ids = ProducerIdManager(channel, self.broker_id, broker_epoch_provider)
        self.fetchers = ReplicaFetcherManager(
            self.broker_id, self.settings, self.broker_address, broker_epoch_provider, node.rpc.credential
        )
        self.logs = LogManager(node.config.data_dir, self.settings, lambda: list(self.partitions.values()))
        self.fetch_handler = FetchHandler(self)
        produce = ProduceHandler(self)
        group_settings = group_settings or GroupShellSettings.from_node_config(node.config)
        self.groups = GroupCoordinatorShell(self, produce, group_settings)
        self.txn = TransactionCoordinatorShell(self, produce, TxnShellSettings.from_node_config(node.config))
        self.groups.find_coordinator.transactions = (
            self.txn.creator,
            self.txn.settings.coordinator.transaction_state_log_num_partitions,
        )
        write_txn_markers = WriteTxnMarkersHandler(self, produce)
        # What the Kafka dispatcher calls in-process, by name (broker/kafka/shell/dispatcher.py).
        self._handlers: dict[str, Handler] = {
            "metadata": MetadataHandler(self),
            "produce": produce,
            "fetch": self.fetch_handler,
            "list_offsets": ListOffsetsHandler(self),
            "offsets_for_leader_epoch": OffsetsForLeaderEpochHandler(self),
            "init_producer_id": InitProducerIdHandler(self),
            "write_txn_markers": write_txn_markers,
            **self.groups.handlers(),
            **self.txn.handlers(),
        }
        # What other nodes call over the cluster's internal RPC (docs/protocol.md); clients use the Kafka listener.
        self._routes: dict[str, Handler] = {
            REPLICA_FETCH_PATH: self.fetch_handler.follower_fetch,
            WRITE_TXN_MARKERS_PATH: write_txn_markers,
            VERIFY_TXN_PARTITIONS_PATH: self.txn.verify_txn_partitions,
        }
        self._applied: MetadataImage | None = None
        self._tick_task: asyncio.Task[None] | None = None
        self._started = False
        self._stopped = False
        self.logs_flushed = False  # set by stop(): every log this process opened was flushed and closed
        self._broker_epoch = -1
        # Woken when a replica goes offline, so the next heartbeat reports it at once (set by the broker).
        self.offline_listener: Callable[[], None] = lambda: None
        self._corrupt: set[TopicPartitionKey] = set()  # offline for a corrupt batch, waiting to be repaired
        self._repairing: set[TopicPartitionKey] = set()
        self._repairs: set[asyncio.Task[None]] = set()
        self.repairs_done = 0
        self.logs.on_corrupt = self.replica_corrupt

    # -- the component interface -------------------------------------------------------------------------------

    def routes(self) -> Mapping[str, Handler]:
        """The cluster-internal RPC routes this broker serves (follower fetch, transaction markers)."""
        return dict(self._routes)

    def handlers(self) -> Mapping[str, Handler]:
        """The request handlers behind the Kafka APIs, by name (`produce`, `join_group`, ...): in-process only."""
        return self._handlers

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self.logs.start()
        self.alter_partitions.start()
        self._tick_task = asyncio.create_task(self._tick_loop(), name="kraftpy-replica-tick")
        # No partition role from the image at start: it may be this node's stale replay of the metadata
        # log. The owner hands over the first image it may act on (docs/replication.md, restarts).
        await self.groups.start()
        await self.txn.start()

    async def stop(self, graceful: bool = True) -> None:
        """Stop fetching, fail what waits, snapshot producer state, close every log (flushed, checkpointed)."""
        if self._stopped:
            return
        self._stopped = True
        await self.groups.stop()  # before the partitions stop: waiting members hear NOT_COORDINATOR
        await self.txn.stop()
        if self._tick_task is not None:
            self._tick_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick_task
        for task in list(self._repairs):
            task.cancel()
        await asyncio.gather(*self._repairs, return_exceptions=True)
        await self.fetchers.stop()
        await self.alter_partitions.stop()
        await self.producer_ids.stop()
        hosted = list(self.partitions.values())
        for p in hosted:
            p.stop()
            if p.offline is None and not p.log.closed:
                try:
                    p.take_producer_snapshot()
                except OSError as exc:
                    log.warning("producer snapshot of %s at close failed: %s", p.name, exc)
        await self.logs.stop()  # waits (bounded) for logs being opened
        unclaimed = [o.future.result().log for o in self._opening.values() if _opened(o.future)]
        self._opening.clear()
        closed = await self.logs.close_logs([p for p in hosted if p.offline is None], unclaimed)
        offline = [p for p in hosted if p.offline is not None]
        for p in offline:
            if not p.log.closed:
                p.log.discard()
        # What a clean-shutdown record may claim (broker/shell/restart_record.py): an offline log is
        # discarded unflushed, and a log still opening when the wait gave up is never closed.
        self.logs_flushed = closed and not offline and not self.logs.opens_abandoned
        self.partitions.clear()
        log.info("replica manager of broker %d stopped (%s)", self.broker_id, "graceful" if graceful else "abrupt")

    def status(self) -> dict[str, Any]:
        roles = [p.role for p in self.partitions.values()]
        under_replicated = sum(
            1
            for p in self.partitions.values()
            if p.core.leader is not None and len(p.core.leader.isr) < len(p.core.leader.replicas)
        )
        return {
            "partitions": len(self.partitions),
            "opening": len(self._opening),
            "leaders": sum(1 for r in roles if r is Role.LEADER),
            "followers": sum(1 for r in roles if r is Role.FOLLOWER),
            "offline": sum(1 for p in self.partitions.values() if p.offline is not None),
            "corrupt": sorted(p.name for p in self.partitions.values() if p.corrupt),
            "repairs_done": self.repairs_done,
            "scrub": self.logs.scrub_status(),
            "under_replicated": under_replicated,
            # Led partitions whose HW stands still (Kafka's UnderMinIsrPartitionCount).
            "under_min_isr": sum(
                1 for p in self.partitions.values() if p.core.leader is not None and p.core.leader.under_min_isr
            ),
            "metadata_offset": self._applied.offset if self._applied is not None else -1,
            "fetchers": self.fetchers.status(),
            "alter_partition_pending": self.alter_partitions.pending,
            "waiting_fetches": self.fetch_handler.waiting,
            "waiting_produces": len(self.produce_waiters),
            "groups": self.groups.status(),
            "transactions": self.txn.status(),
        }

    # -- metadata ----------------------------------------------------------------------------------------------

    def apply_metadata(self, old_image: MetadataImage, new_image: MetadataImage) -> None:
        """Act on a newly committed image: become leader/follower, stop deleted replicas, follow config changes."""
        if self._stopped:
            return
        first = self._applied is None
        old = MetadataImage.EMPTY if first else old_image
        epoch = self.broker_epoch_provider()
        if epoch != self._broker_epoch:
            self._broker_epoch = epoch
            for p in self.partitions.values():
                p.core.broker_epoch = epoch
        changes = local_replica_changes(old, new_image, self.broker_id)
        now = monotonic_ms()
        for (_topic_id, partition), topic in changes.deleted.items():
            self._delete_partition((topic, partition))
        for local in (*changes.leaders.values(), *changes.followers.values()):
            self._apply_partition(local, new_image, now)
        if first or new_image.configs is not old.configs:
            self._apply_configs(new_image)
        if first or new_image.cluster is not old.cluster:
            ineligible = frozenset(b for b, reg in new_image.brokers.items() if not reg.usable)
            for p in self.partitions.values():
                p.core.set_ineligible_replicas(ineligible)
            self.fetchers.wake_all()
        self._applied = new_image
        registration = new_image.broker(self.broker_id)
        if registration is not None and registration.broker_epoch == epoch >= 0:
            # The image holds this incarnation's own registration, so it is newer than anything this
            # broker could have hosted before it started: what it does not assign here is a stray.
            self.logs.mark_strays({partition_dir_name(*key) for key in (*self.partitions, *self._opening)})
        self.groups.on_metadata()
        self.txn.on_metadata()
        for key in list(self._corrupt):
            self._maybe_repair(key)

    def _apply_partition(self, local: LocalPartition, image: MetadataImage, now: int) -> None:
        key = (local.topic_name, local.partition)
        opening = self._opening.get(key)
        if opening is not None:
            opening.changes.append(local)  # applied after the open, in order
            return
        hosted = self.partitions.get(key)
        if hosted is not None and hosted.topic_id != local.topic_id:
            self._delete_partition(key)  # the topic was deleted and created again under the same name
            hosted = None
        if hosted is None:
            self._begin_open(local, image)
            return
        if hosted.offline is not None:
            return
        reg = local.registration
        registration = _registration(reg)
        before = (hosted.role, hosted.core.leader_epoch)
        try:
            hosted.perform(hosted.core.apply_registration(registration, hosted.log_state(), now))
        except PartitionOfflineError:
            return
        self._log_role_change(hosted, before)
        follower = hosted.core.follower
        if follower is not None:
            self.fetchers.follow(hosted, follower.leader_id)
        else:
            self.fetchers.unfollow(hosted)
        hosted.notify()
        if key[0] == OFFSETS_TOPIC:
            self.groups.on_metadata()  # its leadership may have changed here (also after a log opened late)
        elif key[0] == TRANSACTION_STATE_TOPIC:
            self.txn.on_metadata()

    def _log_role_change(self, hosted: HostedPartition, before: tuple[Role, int]) -> None:
        """One line per change of role or leader epoch (Kafka's "Leader ... starts at leader epoch"): what a
        fault run's analysis needs first, which replica led with which log when."""
        core = hosted.core
        if (hosted.role, core.leader_epoch) == before:
            return
        reg = core.registration
        leader, isr = (reg.leader, list(reg.isr)) if reg is not None else (None, [])
        end, was = hosted.log.log_end_offset, f"{before[0].value} at {before[1]}"
        if hosted.role is Role.LEADER:
            log.info(
                "broker %d leads %s at leader epoch %d from log end offset %d (ISR %s; was %s)",
                self.broker_id, hosted.name, core.leader_epoch, end, isr, was,
            )  # fmt: skip
        elif hosted.role is Role.FOLLOWER:
            log.info(
                "broker %d follows broker %s for %s at leader epoch %d, log end offset %d (ISR %s; was %s)",
                self.broker_id, leader, hosted.name, core.leader_epoch, end, isr, was,
            )  # fmt: skip
        else:
            log.info(
                "broker %d has no role in %s at leader epoch %d (leader %s, ISR %s)",
                self.broker_id, hosted.name, core.leader_epoch, leader, isr,
            )  # fmt: skip

    def _begin_open(self, local: LocalPartition, image: MetadataImage) -> None:
        """Open the partition's log (and rebuild its producer state) in the log manager's thread."""
        name, key = local.topic_name, (local.topic_name, local.partition)
        replication = self._replication_config(image, name)
        registration = local.registration

        def prepare(plog: PartitionLog) -> ProducerStateManager:
            if registration.leader == self.broker_id and not predates_log(registration, plog.latest_epoch):
                # The core's first action as leader is AssignEpochStartOffset(epoch, log end); doing it here
                # keeps its checkpoint write (two fsyncs) off the loop, and the action finds nothing to do.
                # Should a queued change take the leadership away first, the entry is that of a leader
                # that wrote nothing, as after any short-lived leadership.
                plog.leader_epoch_cache.assign(registration.leader_epoch, plog.log_end_offset)
            return producer_state(plog, replication)

        request = OpenRequest(name, local.topic_id, local.partition, self._log_config(image, name), then=prepare)
        opening = _Opening(local.topic_id, [local], self.logs.open_later(request))
        self._opening[key] = opening
        opening.future.add_done_callback(lambda _: self._finish_open(key, opening))

    def _finish_open(self, key: TopicPartitionKey, opening: _Opening) -> None:
        """The log is open (or failed to open): host the partition, then apply what queued meanwhile, in order."""
        if self._stopped or self._opening.get(key) is not opening:
            return  # stop() closes what was opened
        del self._opening[key]
        image = self._applied if self._applied is not None else self.image()
        changes = opening.changes
        if _opened(opening.future):
            self._host(key, opening.topic_id, opening.future.result(), image)
        else:
            exc = opening.future.exception() if not opening.future.cancelled() else None
            # Kafka would take the log directory offline; here the partition is not hosted and requests
            # for it get NOT_LEADER_OR_FOLLOWER; a later change for it tries again, as a restart does.
            log.error("cannot open the log of %s-%d: %r", key[0], key[1], exc)
            changes = changes[1:]
        now = monotonic_ms()
        for change in changes:
            if change is DELETE:
                self._delete_partition(key)
            else:
                self._apply_partition(change, image, now)

    def _host(
        self, key: TopicPartitionKey, topic_id: uuid.UUID, opened: OpenedLog[ProducerStateManager], image: MetadataImage
    ) -> HostedPartition:
        # Configs and usable brokers as of now, not as of when the open began.
        name, plog = key[0], opened.log
        try:
            self.logs.update_config(plog, self._log_config(image, name))
        except (KafkaError, ValueError) as exc:
            log.error("config of %s-%d not applied: %s", name, key[1], exc)
        hosted = HostedPartition(
            name,
            topic_id,
            key[1],
            plog,
            self._replication_config(image, name),
            self,
            replica_id=self.broker_id,
            broker_epoch=self._broker_epoch,
            producers=opened.prepared,
        )
        ineligible = frozenset(b for b, reg in image.brokers.items() if not reg.usable)
        hosted.core.set_ineligible_replicas(ineligible)
        self.partitions[key] = hosted
        log.info("broker %d hosts %s (log end offset %d)", self.broker_id, hosted.name, plog.log_end_offset)
        return hosted

    def _delete_partition(self, key: TopicPartitionKey) -> None:
        opening = self._opening.get(key)
        if opening is not None:
            opening.changes.append(DELETE)  # applied after the open, in order
            return
        hosted = self.partitions.pop(key, None)
        if hosted is None:
            return
        self.fetchers.unfollow(hosted)
        hosted.stop()
        log.info("broker %d deletes its replica of %s", self.broker_id, hosted.name)
        try:
            self.logs.delete_log(hosted.log, hosted.topic_id)
        except OSError as exc:
            log.error("deleting %s failed: %s", hosted.name, exc)

    def _apply_configs(self, image: MetadataImage) -> None:
        for p in self.partitions.values():
            if p.offline is not None:
                continue
            try:
                self.logs.update_config(p.log, self._log_config(image, p.topic))
                p.update_replication_config(self._replication_config(image, p.topic))
            except (KafkaError, ValueError) as exc:
                log.error("config of %s not applied: %s", p.name, exc)

    def _log_config(self, image: MetadataImage, topic: str) -> LogConfig:
        return LogConfig.from_topic_configs(image.topic_config(topic))

    def _replication_config(self, image: MetadataImage, topic: str) -> ReplicationConfig:
        s = self.settings
        min_isr = image.min_insync_replicas(topic, s.min_insync_replicas)
        timestamp_type = image.topic_config_value(topic, "message_timestamp_type")
        # Every replication setting the broker's settings name; min.insync.replicas and
        # message.timestamp.type may be a topic's own.
        return ReplicationConfig(
            **{
                **settings_from(s, ReplicationConfig),
                "min_insync_replicas": min_isr,
                "message_timestamp_type": timestamp_type,
                "test_break_ack_before_hw": fault_injection.TEST_BREAK == fault_injection.ACK_BEFORE_HW,
                "test_break_truncate_to_hw": fault_injection.TEST_BREAK == fault_injection.TRUNCATE_TO_HW,
                "test_break_append_duplicates": fault_injection.TEST_BREAK == fault_injection.APPEND_DUPLICATES,
            }
        )

    # -- corrupt replicas --------------------------------------------------------------------------------------
    #
    # A corrupt batch found by a fetch (broker/api/fetch.py) or by the scrubber (log_manager.py) takes the replica
    # offline at once: nothing more is served or appended, waiting produces fail with KAFKA_STORAGE_ERROR,
    # and every heartbeat names it until it is repaired. The controller moves its leadership to another
    # ISR member and takes it out of the ISR; once this broker's image shows that (another broker leads,
    # this one is out of the ISR), the log is cut at the first bad batch (a full scan finds it; damage the
    # scan cannot place costs the whole log) and the replica comes back as a follower that fetches the rest
    # from the leader and rejoins the ISR when caught up. While no other ISR member exists the partition
    # stays leaderless and the replica untouched: its data past the damage may be the only copy.

    def offline_replicas(self) -> tuple[tuple[uuid.UUID, int], ...]:
        """What the heartbeat reports: every hosted replica that is offline (corrupt or failed storage)."""
        return tuple((p.topic_id, p.partition) for p in self.partitions.values() if p.offline is not None)

    def replica_corrupt(self, hosted: HostedPartition, reason: str) -> None:
        """A corrupt batch in this replica's log: stop serving it, report it, repair it when the controller acted."""
        if hosted.stopped or hosted.offline is not None or self.partitions.get(hosted.key) is not hosted:
            return
        log.error("replica of %s on broker %d is corrupt: %s", hosted.name, self.broker_id, reason)
        hosted.corrupt = True
        self._corrupt.add(hosted.key)
        hosted.go_offline(f"corrupt batch: {reason}")
        self.fetchers.unfollow(hosted)
        self.offline_listener()
        self._maybe_repair(hosted.key)

    def _maybe_repair(self, key: TopicPartitionKey) -> None:
        hosted = self.partitions.get(key)
        if hosted is None or not hosted.corrupt:
            self._corrupt.discard(key)  # deleted, or replaced (a new topic under the same name)
            return
        if key in self._repairing or self._stopped:
            return
        image = self._applied if self._applied is not None else self.image()
        reg = image.partition(hosted.topic_id, hosted.partition) if image is not None else None
        if reg is None or not may_cut_corrupt_replica(_registration(reg), self.broker_id):
            return
        self._repairing.add(key)
        task = asyncio.create_task(self._repair(hosted), name=f"kraftpy-repair-{hosted.name}")
        self._repairs.add(task)
        task.add_done_callback(self._repairs.discard)

    async def _repair(self, hosted: HostedPartition) -> None:
        key, plog, config = hosted.key, hosted.log, hosted.core.config

        def cut() -> ProducerStateManager:
            found = find_corruption(plog)
            if found is None:
                # The damage is not in the batches (an index?) or is gone: refetch the whole log.
                log.warning("%s: no corrupt batch found by a full scan; refetching the whole log", hosted.name)
                plog.truncate_fully_and_start_at(plog.log_start_offset)
            else:
                log.warning("%s: cutting the log at the corrupt batch: %s", hosted.name, found)
                if not plog.truncate_at_position(found.segment_base_offset, found.position):
                    plog.truncate_fully_and_start_at(plog.log_start_offset)
            return producer_state(plog, config)

        try:
            producers = await self.logs.run(cut)
        except Exception:
            log.exception("repair of %s failed; it stays offline", hosted.name)
            return
        finally:
            self._repairing.discard(key)
        if self._stopped or self.partitions.get(key) is not hosted:
            return
        repaired = HostedPartition(
            hosted.topic,
            hosted.topic_id,
            hosted.partition,
            plog,
            config,
            self,
            replica_id=self.broker_id,
            broker_epoch=self._broker_epoch,
            producers=producers,
        )
        image = self._applied if self._applied is not None else self.image()
        repaired.core.set_ineligible_replicas(frozenset(b for b, r in image.brokers.items() if not r.usable))
        self.partitions[key] = repaired
        self._corrupt.discard(key)
        hosted.notify()  # parked fetches look again (and find the repaired replica)
        self.repairs_done += 1
        log.warning(
            "%s repaired on broker %d: log end offset %d; fetching the rest from the leader",
            hosted.name,
            self.broker_id,
            plog.log_end_offset,
        )
        reg = image.partition(hosted.topic_id, hosted.partition)
        if reg is not None:
            self._apply_partition(
                LocalPartition(hosted.topic, hosted.topic_id, hosted.partition, reg), image, monotonic_ms()
            )
        self.offline_listener()

    # -- lookups for the handlers ------------------------------------------------------------------------------

    def lookup(self, topic: str, partition: int) -> HostedPartition:
        """The hosted partition, or the error a request for it gets (unknown, not hosted here, offline)."""
        hosted = self.partitions.get((topic, partition))
        if hosted is not None:
            hosted.check_online()
            return hosted
        if (topic, partition) in self._opening:
            raise KafkaError(
                f"broker {self.broker_id} is still opening the log of {topic}-{partition}",
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                **self.leader_hint(topic, partition),
            )
        image = self.image()
        t = image.topic(topic) if image is not None else None
        if t is None or partition >= len(t.partitions):
            raise KafkaError(f"unknown topic or partition {topic}-{partition}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        raise KafkaError(
            f"broker {self.broker_id} does not host {topic}-{partition}",
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            **self.leader_hint(topic, partition),
        )

    def leader_hint(self, topic: str, partition: int) -> dict[str, Any]:
        """{leader_id, leader_address} of a partition from the image (docs/protocol.md, NOT_LEADER_OR_FOLLOWER)."""
        image = self.image()
        t = image.topic(topic) if image is not None else None
        if t is None or partition >= len(t.partitions):
            return {}
        leader = t.partitions[partition].leader
        address = self.broker_address(leader)
        return {
            "leader_id": leader,
            "leader_epoch": t.partitions[partition].leader_epoch,
            "leader_address": f"{address[0]}:{address[1]}" if address is not None else None,
        }

    def broker_address(self, broker_id: int) -> Address | None:
        image = self.image()
        broker = image.broker(broker_id) if image is not None else None
        if broker is None or not broker.listeners:
            return None
        return broker.listeners[0].host, broker.listeners[0].port

    def controller_id(self) -> int:
        address = self.controller_address_provider()
        if address is None:
            return -1
        for voter in getattr(self.config, "controller_quorum_voters", ()):
            if (voter.host, voter.port) == tuple(address):
                return voter.node_id
        return -1

    @property
    def cluster_id(self) -> str | None:
        return getattr(self.node, "cluster_id", None)

    # -- the ActionSink --------------------------------------------------------------------------------------

    def complete_produce(self, action: CompleteProduce) -> None:
        future = self.produce_waiters.get(action.request_id)
        if future is not None and not future.done():
            future.set_result(action)

    def send_alter_partition(self, hosted: HostedPartition, request: AlterPartitionRequest) -> None:
        self.alter_partitions.submit(hosted, request)

    # -- time --------------------------------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        interval = self.settings.replica_tick_interval_ms / 1000
        next_expiry_check = monotonic_ms() + self.settings.producer_id_expiration_check_interval_ms
        while True:
            await asyncio.sleep(interval)
            now = monotonic_ms()
            for hosted in list(self.partitions.values()):
                try:
                    hosted.tick(now)
                except PartitionOfflineError:
                    continue
                except Exception:
                    log.exception("tick of %s failed", hosted.name)
            if now >= next_expiry_check:
                next_expiry_check = now + self.settings.producer_id_expiration_check_interval_ms
                wall = wall_ms()
                for hosted in self.partitions.values():
                    hosted.core.producers.remove_expired(wall)


def _registration(reg: Any) -> PartitionRegistration:
    """The metadata image's partition as the replication core takes it."""
    return PartitionRegistration(tuple(reg.replicas), tuple(reg.isr), reg.leader, reg.leader_epoch, reg.partition_epoch)


def _opened(future: asyncio.Future[OpenedLog[ProducerStateManager]]) -> bool:
    """Whether the open finished with a log (retrieving its exception, if any, so none goes unreported)."""
    return future.done() and not future.cancelled() and future.exception() is None
