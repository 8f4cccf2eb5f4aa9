"""The "broker" component: metadata publishing, the broker lifecycle and the data plane of one broker.

Design notes: docs/broker.md, section "broker/shell/server.py".
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from kraftpy.broker.kafka.shell.dispatcher import BrokerApis
from kraftpy.broker.lifecycle import REGISTRATION, BrokerLifecycle, BrokerState, Outgoing
from kraftpy.broker.shell.restart_record import RestartRecordFile
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import Listener
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.shell.listener import KafkaListener
from kraftpy.protocol.shell.clock import monotonic_ms

log = logging.getLogger(__name__)

# The node's RPC endpoint, registered first: kraftpy's own client and the replica fetchers use it.
LISTENER_NAME = "RPC"
# Upper bound of one lifecycle sleep, so a missed wake-up costs at most this long.
MAX_SLEEP_MS = 1000
# Controlled shutdown waits at most this long (and at most the session timeout): the node gives
# each component 10 s to stop, and Raft still has to resign after us.
MAX_CONTROLLED_SHUTDOWN_MS = 5000


def load_replica_manager_class() -> Any:
    """The ReplicaManager class, or None while the data plane is not part of this install."""
    try:
        module = importlib.import_module("kraftpy.broker.shell.replica_manager")
    except ModuleNotFoundError as e:
        if e.name != "kraftpy.broker.shell.replica_manager":
            raise  # the module exists but one of its imports is broken: say so loudly
        return None
    return getattr(module, "ReplicaManager", None)


class BrokerComponent:
    name = "broker"

    def __init__(self, node: Any, raft: Any, metadata: Any, *, replica_manager_class: Any = None) -> None:
        config = node.config
        self.node = node
        self.raft = raft
        self.metadata = metadata
        # Here, not in start(): the node binds its port between building and starting its components, and
        # the record must say "not clean" before this process serves or writes anything.
        self.restart_record = RestartRecordFile(config.data_dir, config.boot_id_path)
        restart = self.restart_record.at_start()
        log.info(
            "broker %d restart: %s, registering with previous broker epoch %d (%s)",
            config.node_id,
            "clean" if restart.clean else "unclean",
            restart.previous_broker_epoch,
            restart.reason,
        )
        self.lifecycle = BrokerLifecycle(
            broker_id=config.node_id,
            cluster_id=node.cluster_id,
            incarnation_id=uuid.uuid4().hex,
            listeners=(Listener(LISTENER_NAME, config.host, config.port),),
            rack=config.rack,
            voters=config.voter_addresses(),
            heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
            previous_broker_epoch=restart.previous_broker_epoch,
        )
        self.controlled_shutdown_ms = min(config.broker_session_timeout_ms, MAX_CONTROLLED_SHUTDOWN_MS)
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()  # set after every answer (controlled shutdown waits on it)
        self._task: asyncio.Task[None] | None = None
        self._published: MetadataImage = MetadataImage.EMPTY  # what the replica manager has seen
        self._replica_manager_started = False
        cls = replica_manager_class if replica_manager_class is not None else load_replica_manager_class()
        self.replica_manager = (
            None
            if cls is None
            else cls(
                node,
                image_provider=lambda: self.metadata.image,
                broker_epoch_provider=lambda: self.lifecycle.broker_epoch,
                controller_address_provider=self.controller_address,
            )
        )
        if hasattr(self.replica_manager, "offline_listener"):
            self.replica_manager.offline_listener = self._wake.set  # a replica went offline: heartbeat now
        if self.replica_manager is None:
            log.warning("kraftpy.broker.shell.replica_manager is not installed: this broker serves no data routes")
        self.kafka_listeners: list[KafkaListener] = []
        self.kafka_apis: BrokerApis | None = None
        metadata.subscribe(self._on_image, self._on_leader_change)

    # --- providers -----------------------------------------------------------------------------------
    def controller_address(self) -> tuple[str, int] | None:
        return self.lifecycle.controller_address(self.raft.leader_id)

    @property
    def image(self) -> MetadataImage:
        return self.metadata.image

    # --- metadata publishing -------------------------------------------------------------------------
    def _on_image(self, old: MetadataImage, new: MetadataImage) -> None:
        self._maybe_publish(new)

    def _maybe_publish(self, new: MetadataImage) -> None:
        if self.replica_manager is None or not self._replica_manager_started:
            return
        first = not self.lifecycle.partition_roles_allowed
        if not self.lifecycle.may_take_partition_roles(new):
            return
        if first:
            log.info(
                "broker %d takes its partition roles at metadata offset %d (registered with broker epoch %d)",
                self.lifecycle.broker_id,
                new.offset,
                self.lifecycle.broker_epoch,
            )
        self._publish(new)

    def _publish(self, new: MetadataImage) -> None:
        old, self._published = self._published, new
        try:
            self.replica_manager.apply_metadata(old, new)  # type: ignore[union-attr]
        except Exception:  # a data-plane bug must not stop metadata from flowing
            log.exception("replica manager failed to apply metadata at offset %d", new.offset)

    def _on_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self._wake.set()  # a controller may be known now

    # --- lifecycle loop ------------------------------------------------------------------------------
    async def _lifecycle_loop(self) -> None:
        while self.lifecycle.state is not BrokerState.SHUTTING_DOWN:
            now = monotonic_ms()
            offline = getattr(self.replica_manager, "offline_replicas", None)
            if offline is not None and self._replica_manager_started:
                self.lifecycle.set_offline_replicas(offline(), now)
            outgoing = self.lifecycle.next_request(now, self.metadata.committed_offset, self.raft.leader_id)
            if outgoing is not None:
                await self._send(outgoing)
                continue
            deadline = self.lifecycle.next_deadline_ms()
            sleep_ms = MAX_SLEEP_MS if deadline is None else min(MAX_SLEEP_MS, max(1, deadline - now))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(sleep_ms / 1000):
                    await self._wake.wait()

    async def _send(self, outgoing: Outgoing) -> None:
        # A heartbeat is answered once its records commit; bound the wait by the session timeout so a
        # lost answer never leaves the broker silent for longer than its lease.
        timeout_ms = self.node.config.broker_session_timeout_ms
        try:
            answer = await self.node.rpc.call(outgoing.address, outgoing.path, outgoing.body, timeout_ms=timeout_ms)
            self.lifecycle.on_answer(outgoing, answer, monotonic_ms())
            if outgoing.path == REGISTRATION:
                # On the loop, not in a thread: a rare small write, and the clean-shutdown write in stop()
                # must come after it.
                self.restart_record.registered(self.lifecycle.broker_epoch)
            if not self.lifecycle.partition_roles_allowed:
                self._maybe_publish(self.metadata.image)  # the registration may have been replayed already
        except KafkaError as e:
            self._log_error(outgoing, e)
            self.lifecycle.on_error(outgoing, e, monotonic_ms())
        except (TypeError, ValueError) as e:  # a malformed answer is a failed request
            error = KafkaError(f"malformed answer from {outgoing.address}: {e}", ErrorCode.CORRUPT_MESSAGE)
            self.lifecycle.on_error(outgoing, error, monotonic_ms())
        self._changed.set()
        self._changed = asyncio.Event()

    def _log_error(self, outgoing: Outgoing, error: KafkaError) -> None:
        quiet = (ErrorCode.NOT_CONTROLLER, ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT)
        level = logging.DEBUG if error.code in quiet else logging.WARNING
        log.log(level, "%s to %s:%d failed: %s", outgoing.path, *outgoing.address, error)

    # --- component -----------------------------------------------------------------------------------
    def routes(self) -> Mapping[str, Any]:
        return dict(self.replica_manager.routes()) if self.replica_manager is not None else {}

    async def start(self) -> None:
        if self.replica_manager is not None:
            await self.replica_manager.start()
            self._replica_manager_started = True
            self._maybe_publish(self.metadata.image)
            await self._start_kafka_listeners()
        self._task = asyncio.get_running_loop().create_task(self._lifecycle_loop(), name="broker-lifecycle")

    async def stop(self, graceful: bool) -> None:
        if graceful and self._task is not None and not self._task.done():
            await self._controlled_shutdown()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for listener in self.kafka_listeners:
            await listener.stop()
        if self.replica_manager is not None and self._replica_manager_started:
            self._replica_manager_started = False
            await self.replica_manager.stop(graceful)
            self.restart_record.stopped(getattr(self.replica_manager, "logs_flushed", False))

    async def _start_kafka_listeners(self) -> None:
        """Bind the Kafka listeners before registering, so the registration carries their real ports."""
        config = self.node.config
        wanted = config.kafka_listeners()
        if not wanted:
            log.info("no Kafka listener configured (listeners is empty): kraftpy's RPC only")
            return
        self.kafka_apis = BrokerApis(self)
        limits = config.kafka_listener_limits()
        for x in wanted:
            listener = KafkaListener(x.name, x.host, x.port, self.kafka_apis, limits)
            try:
                await listener.start()
            except OSError as exc:  # one line at start (node/start_errors.py), not a traceback
                raise KafkaError(
                    f"cannot listen on {x.host}:{x.port}: {exc.strerror or exc}; stop whatever holds that "
                    f"address or give Kafka listener {x.name} another address in `listeners`",
                    ErrorCode.INVALID_CONFIG,
                ) from exc
            self.kafka_listeners.append(listener)
        bound = {x.name: x.port for x in self.kafka_listeners}
        rpc = self.lifecycle.listeners[0]
        self.lifecycle.listeners = (rpc, *config.advertised_kafka_listeners(bound))

    async def _controlled_shutdown(self) -> None:
        self.lifecycle.begin_controlled_shutdown(monotonic_ms())
        self._wake.set()
        deadline = monotonic_ms() + self.controlled_shutdown_ms
        while self.lifecycle.state is not BrokerState.SHUTTING_DOWN:
            remaining = deadline - monotonic_ms()
            if remaining <= 0:
                log.warning("controlled shutdown not confirmed within %d ms; stopping", self.controlled_shutdown_ms)
                self.lifecycle.give_up_controlled_shutdown()
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining / 1000):
                    await self._changed.wait()
        if self.lifecycle.shutdown_released:
            log.info("controlled shutdown done: the controller moved this broker's leaderships")

    def status(self) -> dict[str, Any]:
        out = self.lifecycle.status(self.metadata.committed_offset, monotonic_ms())
        if self.restart_record.decision is not None:
            out["restart"] = self.restart_record.decision.status()
        if self.replica_manager is not None:
            with contextlib.suppress(Exception):
                out["replicas"] = self.replica_manager.status()
        if self.kafka_apis is not None:
            out["kafka"] = {
                "listeners": [f"{x.name}://{x.host}:{x.port}" for x in self.kafka_listeners],
                "connections": sum(x.connection_count for x in self.kafka_listeners),
                "frames_refused": sum(x.frames_refused for x in self.kafka_listeners),
                "connections_refused": sum(x.connections_refused for x in self.kafka_listeners),
                "connections_idle_closed": sum(x.connections_idle_closed for x in self.kafka_listeners),
                "frames_decoded_off_loop": sum(x.frames_decoded_off_loop for x in self.kafka_listeners),
                "connections_unread_closed": sum(x.connections_unread_closed for x in self.kafka_listeners),
                "answer_bytes_held": sum(x.answer_budget.held_bytes for x in self.kafka_listeners),
                "answer_bytes_held_peak": max((x.answer_budget.peak_bytes for x in self.kafka_listeners), default=0),
                **self.kafka_apis.status(),
            }
        return out


def create(node: Any) -> BrokerComponent | None:
    """Factory for node/process.py: broker-role nodes only."""
    if not node.config.is_broker:
        return None
    try:
        raft, metadata = node.component("raft"), node.component("metadata")
    except LookupError:  # no Raft on this node: no metadata to follow
        log.error("the broker role needs the raft and metadata components; not starting the broker")
        return None
    return BrokerComponent(node, raft, metadata)
