"""Helpers for the broker integration tests (no tests here): real ReplicaManagers behind real listeners.

`BrokerCluster` runs N ReplicaManagers in this process, each with its logs in
a temporary directory behind two listeners on 127.0.0.1, as a node has: a
Kafka listener (the broker's real dispatcher, broker/kafka/shell/dispatcher.py)
that clients and `call` use, and the cluster's internal RPC (aiohttp) that
serves the routes other brokers call (follower fetch, transaction markers;
`call_internal`). It plays the rest of a node around them: a ControllerHarness (the real
controller decisions, in memory) is the active controller, reachable at its
own port for `/controller/alter_partition` and
`/controller/allocate_producer_ids` in the wire format of docs/protocol.md;
every committed image is handed to every running broker in order, as the
broker component does with the images it replays from the metadata log.

Tests drive it like an operator and a fault injector: create topics, fence a
broker (its session expires) or bring it back, stop a broker's fetchers,
stop and restart a broker on the same data directory.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aiohttp import web

from kraftpy.broker.kafka.shell.dispatcher import BrokerApis
from kraftpy.broker.replica_settings import ReplicaManagerSettings
from kraftpy.broker.shell.replica_manager import ReplicaManager
from kraftpy.client.shell.kafka_transport import KafkaTransport
from kraftpy.metadata.controller import wire
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.requests import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    ElectionType,
    ElectLeadersRequest,
)
from kraftpy.metadata.harness import ControllerHarness
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import Listener
from kraftpy.node.config import NodeConfig, Voter
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.kafka.shell.listener import KafkaListener
from kraftpy.protocol.shell.rpc import RpcClient, make_app
from tests.ports import PortReservation

CLUSTER_ID = "broker-test-cluster"
CONTROLLER_ID = 100

# Fast settings for tests: short long polls and backoffs, frequent ticks; retention by hand.
TEST_SETTINGS: dict[str, Any] = {
    "replica_lag_time_max_ms": 10_000,
    "replica_fetch_wait_max_ms": 200,
    "replica_fetch_backoff_ms": 50,
    "replica_tick_interval_ms": 20,
    "alter_partition_retry_ms": 300,
    "log_retention_check_interval_ms": 3_600_000,
    "log_cleaner_backoff_ms": 50,
    "replica_high_watermark_checkpoint_interval_ms": 200,
    "controller_request_timeout_ms": 2_000,
}


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


async def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 10.0, what: str = "condition") -> None:
    """Poll `predicate` every 10 ms; fail after `timeout_s` (a bound, never a measured assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def wait_for(make: Callable[[], Awaitable[Any]], check: Callable[[Any], bool], *, timeout_s: float = 10.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await make()
        if check(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out; last value {value!r}")
        await asyncio.sleep(0.02)


@dataclass
class BrokerHandle:
    broker_id: int
    port: int  # the internal RPC
    kafka_port: int  # the Kafka listener
    data_dir: Path
    epoch: int = -1
    rm: ReplicaManager | None = None
    runner: web.AppRunner | None = None
    listener: KafkaListener | None = None
    rpc: RpcClient | None = None
    extra_settings: dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> tuple[str, int]:
        """The internal RPC's address."""
        return ("127.0.0.1", self.port)

    @property
    def kafka_address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.kafka_port)

    @property
    def running(self) -> bool:
        return self.rm is not None


class _BrokerView:
    """What the Kafka dispatcher reads of its broker (broker/shell/server.py's BrokerComponent)."""

    def __init__(self, node: Any, rm: ReplicaManager, image: Callable[[], MetadataImage]) -> None:
        self.node = node
        self.replica_manager = rm
        self.metadata = self
        self._image = image

    @property
    def image(self) -> MetadataImage:
        return self._image()


class BrokerCluster:
    def __init__(self, root: Path, broker_ids: tuple[int, ...] = (1, 2, 3), **settings: Any) -> None:
        self.root = root
        self.settings = {**TEST_SETTINGS, **settings}
        config = ControllerConfig(
            cluster_id=CLUSTER_ID, auto_leader_rebalance_enable=False, metadata_max_idle_interval_ms=0
        )
        self.harness = ControllerHarness(config)
        self.image: MetadataImage = self.harness.committed
        self.brokers: dict[int, BrokerHandle] = {}
        # Held until close: a broker restarted mid-test binds the same ports again.
        self._ports = PortReservation(2 * len(broker_ids))
        ports = iter(self._ports.ports)
        for b in broker_ids:
            self.brokers[b] = BrokerHandle(b, next(ports), next(ports), root / f"broker-{b}")
        self.controller_port = 0
        self._controller_runner: web.AppRunner | None = None
        self.controller_up = True
        # Where brokers believe the controller is (None: the real one); tests point it at a stale node.
        self.controller_address_override: tuple[str, int] | None = None
        self.alter_partition_requests = 0
        self.rpc = RpcClient(request_timeout_ms=10_000)  # the internal RPC, as another node
        self.kafka = KafkaTransport(request_timeout_ms=10_000, client_id="broker-tests")  # as a client

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def start(self) -> BrokerCluster:
        app = make_app(
            {
                "/controller/alter_partition": self._alter_partition,
                "/controller/allocate_producer_ids": self._allocate_producer_ids,
            }
        )
        self._controller_runner = web.AppRunner(app, access_log=None)
        await self._controller_runner.setup()
        sock = free_socket()
        self.controller_port = sock.getsockname()[1]
        await web.SockSite(self._controller_runner, sock).start()
        for b in self.brokers:
            self._register(b)
        self.harness.commit()
        for b in self.brokers:
            self._heartbeat(b)
        self.harness.commit()
        self.image = self.harness.committed
        for b in self.brokers:
            await self.start_broker(b)
        return self

    async def close(self) -> None:
        for b in list(self.brokers):
            await self.stop_broker(b)
        if self._controller_runner is not None:
            await self._controller_runner.cleanup()
        await self.rpc.close()
        await self.kafka.close()
        self._ports.release()

    async def __aenter__(self) -> BrokerCluster:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start_broker(self, broker_id: int, **settings: Any) -> ReplicaManager:
        handle = self.brokers[broker_id]
        handle.data_dir.mkdir(parents=True, exist_ok=True)
        config = NodeConfig(
            node_id=broker_id,
            controller_quorum_voters=(Voter(CONTROLLER_ID, "127.0.0.1", self.controller_port),),
            data_dir=handle.data_dir,
            process_roles=("broker",),
            host="127.0.0.1",
            port=handle.port,
            replica_lag_time_max_ms=self.settings["replica_lag_time_max_ms"],
            replica_fetch_wait_max_ms=self.settings["replica_fetch_wait_max_ms"],
            min_insync_replicas=1,
        )
        handle.rpc = RpcClient(request_timeout_ms=5_000)
        node = SimpleNamespace(config=config, rpc=handle.rpc, cluster_id=CLUSTER_ID)
        values = {**self.settings, **handle.extra_settings, **settings}
        rm = ReplicaManager(
            node,
            image_provider=lambda: self.image,
            broker_epoch_provider=lambda: self.brokers[broker_id].epoch,
            controller_address_provider=self._controller_address,
            settings=ReplicaManagerSettings.from_node_config(config, **values),
        )
        app = make_app(rm.routes())
        handle.runner = web.AppRunner(app, access_log=None)
        await handle.runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", handle.port))
        await web.SockSite(handle.runner, sock).start()
        apis = BrokerApis(_BrokerView(node, rm, lambda: self.image))
        handle.listener = KafkaListener(
            "PLAINTEXT", "127.0.0.1", handle.kafka_port, apis, config.kafka_listener_limits()
        )
        await handle.listener.start()
        await rm.start()
        if self.image.offset >= 0:  # as the broker component does once the broker is registered
            rm.apply_metadata(MetadataImage.EMPTY, self.image)
        handle.rm = rm
        await self.settled()
        return rm

    async def stop_broker(self, broker_id: int) -> None:
        handle = self.brokers[broker_id]
        if handle.rm is not None:
            await handle.rm.stop(graceful=False)
            handle.rm = None
        if handle.listener is not None:
            await handle.listener.stop()
            handle.listener = None
        if handle.runner is not None:
            await handle.runner.cleanup()
            handle.runner = None
        if handle.rpc is not None:
            await handle.rpc.close()
            handle.rpc = None

    def _controller_address(self) -> tuple[str, int] | None:
        if not self.controller_up:
            return None
        return self.controller_address_override or ("127.0.0.1", self.controller_port)

    # -- the controller side ------------------------------------------------------------------------------------

    def _register(self, broker_id: int) -> None:
        handle = self.brokers[broker_id]
        request = BrokerRegistrationRequest(
            broker_id,
            CLUSTER_ID,
            f"incarnation-{broker_id}-{uuid.uuid4().hex[:8]}",
            (Listener("RPC", "127.0.0.1", handle.port), Listener("PLAINTEXT", "127.0.0.1", handle.kafka_port)),
        )
        response = self.harness.send(request).response
        assert isinstance(response, BrokerRegistrationResponse), response
        handle.epoch = response.broker_epoch

    def _heartbeat(self, broker_id: int, *, want_shutdown: bool = False) -> Any:
        request = BrokerHeartbeatRequest(
            broker_id, self.brokers[broker_id].epoch, self.harness.committed.offset, want_shutdown
        )
        return self.harness.send(request).response

    def publish(self) -> MetadataImage:
        """Hand the committed image to every running broker (in order, as the broker component does)."""
        old, new = self.image, self.harness.committed
        if new is old:
            return new
        self.image = new
        for handle in self.brokers.values():
            if handle.rm is not None:
                handle.rm.apply_metadata(old, new)
        return new

    async def _alter_partition(self, body: dict[str, Any]) -> dict[str, Any]:
        # The controller component's own codec (metadata/controller/wire.py): the broker must speak exactly that.
        self.alter_partition_requests += 1
        result = self.harness.send(wire.decode_request("alter_partition", body))
        # The broker may see the answer or the PartitionChange first; here the image goes out first.
        self.publish()
        return wire.encode_response("alter_partition", result.response)

    async def _allocate_producer_ids(self, body: dict[str, Any]) -> dict[str, Any]:
        result = self.harness.send(wire.decode_request("allocate_producer_ids", body))
        self.publish()
        return wire.encode_response("allocate_producer_ids", result.response)

    # -- operator actions ---------------------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 3,
        *,
        assignments: list[tuple[int, ...]] | None = None,
        configs: dict[str, Any] | None = None,
    ) -> uuid.UUID:
        topic = CreatableTopic(
            name,
            -1 if assignments else partitions,
            -1 if assignments else replication_factor,
            tuple(assignments) if assignments else None,
            configs or {},
        )
        response = self.harness.send(CreateTopicsRequest((topic,))).response
        assert isinstance(response, CreateTopicsResponse), response
        result = response.results[0]
        assert result.error is None, result.error
        self.publish()
        assert result.topic_id is not None
        return result.topic_id

    def delete_topic(self, name: str) -> None:
        self.harness.send(DeleteTopicsRequest((name,)))
        self.publish()

    def fence(self, broker_id: int) -> None:
        """The broker's session expires: the controller fences it and moves its leaderships (epoch + 1)."""
        self.harness.now_ms += 10 * self.harness.config.broker_session_timeout_ms
        for b in self.brokers:
            if b != broker_id and not self.harness.latest.brokers[b].fenced:
                self._heartbeat(b)
        self.harness.tick()
        assert self.harness.committed.brokers[broker_id].fenced
        self.publish()

    def unfence(self, broker_id: int) -> None:
        """A fenced broker heartbeats again, caught up: the controller unfences it (it rejoins as a follower)."""
        self._heartbeat(broker_id)
        self.harness.commit()
        assert not self.harness.committed.brokers[broker_id].fenced
        self.publish()

    def elect_preferred(self, topic: str, partition: int) -> None:
        self.harness.send(ElectLeadersRequest(ElectionType.PREFERRED, ((topic, partition),)))
        self.publish()

    def leader(self, topic: str, partition: int = 0) -> int:
        t = self.image.topic(topic)
        assert t is not None
        return t.partitions[partition].leader

    def partition(self, topic: str, partition: int = 0):
        t = self.image.topic(topic)
        assert t is not None
        return t.partitions[partition]

    def rm(self, broker_id: int) -> ReplicaManager:
        rm = self.brokers[broker_id].rm
        assert rm is not None, f"broker {broker_id} is not running"
        return rm

    def hosted(self, broker_id: int, topic: str, partition: int = 0):
        return self.rm(broker_id).partitions[(topic, partition)]

    @property
    def bootstrap(self) -> str:
        """The running brokers' Kafka listeners."""
        return ",".join(f"127.0.0.1:{h.kafka_port}" for h in self.brokers.values() if h.running)

    async def call(self, broker_id: int, path: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """A client's request on the broker's Kafka listener: `path` names the Kafka API and `body` its
        fields as the client cores build them (client/wire/routes.py translates both ways)."""
        await self.settled()
        return await self.kafka.call(self.brokers[broker_id].kafka_address, path, body, **kwargs)

    async def call_internal(self, broker_id: int, path: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Another node's request on the broker's internal RPC (`/broker/fetch`, `/broker/write_txn_markers`)."""
        await self.settled()
        return await self.rpc.call(self.brokers[broker_id].address, path, body, **kwargs)

    async def settled(self, timeout_s: float = 10.0) -> None:
        """Every running broker has opened the logs the published images gave it (they open in a thread)."""
        await wait_until(
            lambda: not any(h.rm.status()["opening"] for h in self.brokers.values() if h.rm is not None),
            timeout_s=timeout_s,
            what="partition logs opened",
        )

    async def wait_for_isr(self, topic: str, partition: int, isr: set[int], timeout_s: float = 10.0) -> None:
        await wait_until(
            lambda: set(self.partition(topic, partition).isr) == isr, timeout_s=timeout_s, what=f"ISR {sorted(isr)}"
        )

    async def wait_for_replicas_caught_up(self, topic: str, partition: int = 0, timeout_s: float = 10.0) -> None:
        """Every running replica's log end and HW equal the leader's."""

        def caught_up() -> bool:
            leader = self.leader(topic, partition)
            lh = self.hosted(leader, topic, partition)
            for b in self.partition(topic, partition).replicas:
                if not self.brokers[b].running:
                    continue
                h = self.hosted(b, topic, partition)
                if h.log.log_end_offset != lh.log.log_end_offset or h.log.high_watermark != lh.log.high_watermark:
                    return False
            return lh.log.high_watermark == lh.log.log_end_offset

        await wait_until(caught_up, timeout_s=timeout_s, what=f"replicas of {topic}-{partition} caught up")


def log_bytes(hosted: Any, end: int | None = None) -> bytes:
    """A replica's log bytes from its start to `end` (default: its HW), as a comparison key."""
    plog = hosted.log
    end = plog.high_watermark if end is None else end
    out = []
    offset = plog.log_start_offset
    while offset < end:
        data = plog.read(offset, 1 << 20, max_offset=end)
        if not data:
            break
        out.append(data)
        from kraftpy.protocol.records.header import iter_batches

        last = None
        for _, h in iter_batches(data):
            last = h
        assert last is not None
        offset = last.next_offset
    return b"".join(out)


def error_of(answer: dict[str, Any], topic: str | None = None, partition: int = 0) -> ErrorCode:
    """The error code of one partition in a many-partition answer (the first topic when not named)."""
    for t in answer["topics"]:
        if topic is None or t["name"] == topic:
            for p in t["partitions"]:
                if p["partition"] == partition:
                    return ErrorCode(p["error_code"])
    raise AssertionError(f"no answer for {topic}-{partition} in {answer}")


def part_of(answer: dict[str, Any], topic: str | None = None, partition: int = 0) -> dict[str, Any]:
    for t in answer["topics"]:
        if topic is None or t["name"] == topic:
            for p in t["partitions"]:
                if p["partition"] == partition:
                    return p
    raise AssertionError(f"no answer for {topic}-{partition} in {answer}")
