"""The broker component over a FakeRaft and a scripted controller: images, heartbeats, controlled shutdown."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from kraftpy.broker.lifecycle import BrokerState
from kraftpy.broker.shell.server import BrokerComponent
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import NoOpRecord, RegisterBrokerRecord, UnfenceBrokerRecord, encode_record
from kraftpy.metadata.shell.publisher import MetadataComponent
from kraftpy.protocol.errors import ErrorCode, KafkaError
from tests.unit.metadata.test_controller_shell_fakes import FakeNode, FakeRaft, FakeRpc


class FakeReplicaManager:
    def __init__(self, node: Any, *, image_provider, broker_epoch_provider, controller_address_provider) -> None:
        self.image_provider = image_provider
        self.broker_epoch_provider = broker_epoch_provider
        self.controller_address_provider = controller_address_provider
        self.applied: list[tuple[MetadataImage, MetadataImage]] = []
        self.events: list[str] = []

    def routes(self) -> dict:
        async def metadata(body: dict) -> dict:
            return {}

        return {"/broker/fetch": metadata}

    async def start(self) -> None:
        self.events.append("start")

    async def stop(self, graceful: bool) -> None:
        self.events.append(f"stop graceful={graceful}")

    def status(self) -> dict:
        return {"partitions": len(self.applied)}

    def apply_metadata(self, old: MetadataImage, new: MetadataImage) -> None:
        self.applied.append((old, new))


class ScriptedController:
    """Node 2 is the active controller; node 1 answers NOT_CONTROLLER pointing at it."""

    def __init__(self) -> None:
        self.shutdown_requests = 0

    def __call__(self, address: tuple[str, int], path: str, body: dict) -> dict:
        if address[1] != 9002:
            raise KafkaError("not me", ErrorCode.NOT_CONTROLLER, leader_id=2, leader_address="127.0.0.1:9002")
        if path.endswith("broker_registration"):
            return {"broker_epoch": 11}
        if body["want_shut_down"]:
            self.shutdown_requests += 1
            return {
                "is_caught_up": True,
                "is_fenced": self.shutdown_requests > 1,
                "should_shut_down": self.shutdown_requests > 1,
            }
        return {"is_caught_up": True, "is_fenced": False, "should_shut_down": False}


async def until(predicate, what: str, tries: int = 200) -> None:
    for _ in range(tries):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


def broker(tmp_path: Path, respond) -> tuple[BrokerComponent, FakeRaft, MetadataComponent, FakeNode]:
    node = FakeNode(4, tmp_path, roles="broker", broker_heartbeat_interval_ms=50, broker_session_timeout_ms=1000)
    node.rpc = FakeRpc(respond)
    raft = FakeRaft(4)
    metadata = MetadataComponent(node, raft)
    component = BrokerComponent(node, raft, metadata, replica_manager_class=FakeReplicaManager)
    return component, raft, metadata, node


async def test_registers_follows_the_hint_heartbeats_and_publishes_images(tmp_path: Path) -> None:
    controller = ScriptedController()
    component, raft, metadata, node = broker(tmp_path, controller)
    rm: FakeReplicaManager = component.replica_manager
    raft.elect(1)  # Raft thinks node 1 leads; the controller there redirects to node 2
    # Raft replays the log before the broker starts; nothing of it reaches the replica manager yet.
    raft.write_committed([encode_record(NoOpRecord())])
    await component.start()
    assert rm.events == ["start"] and rm.applied == []
    await until(lambda: component.lifecycle.registered, "registered")
    # Registered, but the image does not hold the registration yet: still no partition role.
    raft.write_committed([encode_record(NoOpRecord())])
    assert rm.applied == []
    raft.write_committed([register_record(component, 11)])
    assert rm.applied == [(MetadataImage.EMPTY, metadata.image)]
    assert component.status()["partition_roles_from_offset"] == metadata.image.offset
    await until(lambda: component.lifecycle.state is BrokerState.RUNNING, "unfenced")
    # The fault runs' lose-tail counts a member only while its heartbeats are answered (tail_safety.py).
    assert 0 <= component.status()["heartbeat_answered_ms_ago"] < 1_000
    paths = [(addr[1], path.rsplit("/", 1)[1]) for addr, path, _ in node.rpc.calls[:3]]
    assert paths == [(9001, "broker_registration"), (9002, "broker_registration"), (9002, "broker_heartbeat")]
    assert rm.broker_epoch_provider() == 11 and rm.controller_address_provider() == ("127.0.0.1", 9002)
    status = component.status()
    assert status["registered"] and status["fenced"] is False and status["broker_epoch"] == 11
    assert status["metadata_offset"] == metadata.committed_offset and status["replicas"] == {"partitions": 1}
    assert "/broker/fetch" in component.routes()
    # A committed image after start goes to the replica manager as (previous, new).
    before = metadata.image
    raft.write_committed([encode_record(NoOpRecord())])
    assert rm.applied[-1] == (before, metadata.image) and rm.image_provider() is metadata.image
    await component.stop(graceful=True)
    assert controller.shutdown_requests == 2  # asked until the controller released it
    assert component.lifecycle.shutdown_released and rm.events == ["start", "stop graceful=True"]


def register_record(component: BrokerComponent, broker_epoch: int) -> bytes:
    lc = component.lifecycle
    return encode_record(RegisterBrokerRecord(lc.broker_id, lc.incarnation_id, broker_epoch, lc.listeners, lc.rack))


async def test_a_restarted_broker_takes_no_role_from_its_stale_image(tmp_path: Path) -> None:
    """The replayed log shows the previous incarnation leading; only this incarnation's registration counts.

    Here the controller commits the registration before its answer arrives (the image holds it when the
    answer is handled): the broker takes its roles on the answer.
    """
    holder: dict[str, Any] = {}

    def controller(address, path, body):
        if path.endswith("broker_registration"):
            assert holder["rm"].applied == []  # nothing acted on while unregistered
            holder["raft"].write_committed([register_record(holder["component"], 11)])
            assert holder["rm"].applied == []  # in the image, but the answer is not handled yet
            return {"broker_epoch": 11}
        return {"is_caught_up": True, "is_fenced": False, "should_shut_down": False}

    component, raft, metadata, _node = broker(tmp_path, controller)
    holder.update(component=component, raft=raft, rm=component.replica_manager)
    lc = component.lifecycle
    # What the previous incarnation (broker epoch 5) left in the log this node replays at start.
    previous = RegisterBrokerRecord(lc.broker_id, "previous-incarnation", 5, lc.listeners, lc.rack)
    raft.write_committed([encode_record(previous), encode_record(UnfenceBrokerRecord(lc.broker_id, 5))])
    raft.elect(2)
    await component.start()
    await until(lambda: lc.partition_roles_allowed, "partition roles")
    assert holder["rm"].applied == [(MetadataImage.EMPTY, metadata.image)]
    await component.stop(graceful=False)


async def test_controlled_shutdown_gives_up_bounded_when_no_controller_answers(tmp_path: Path) -> None:
    def unreachable(address, path, body):
        if path.endswith("broker_registration"):
            return {"broker_epoch": 3}
        if body["want_shut_down"]:
            raise KafkaError("down", ErrorCode.NETWORK_EXCEPTION)
        return {"is_caught_up": True, "is_fenced": False, "should_shut_down": False}

    component, raft, _metadata, _node = broker(tmp_path, unreachable)
    component.controlled_shutdown_ms = 100
    raft.elect(2)
    await component.start()
    await until(lambda: component.lifecycle.state is BrokerState.RUNNING, "unfenced")
    await component.stop(graceful=True)
    assert component.lifecycle.state is BrokerState.SHUTTING_DOWN and not component.lifecycle.shutdown_released


async def test_without_a_replica_manager_the_broker_still_registers(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("kraftpy.broker.shell.server.load_replica_manager_class", lambda: None)
    node = FakeNode(4, tmp_path, roles="broker", broker_heartbeat_interval_ms=50, broker_session_timeout_ms=1000)
    node.rpc = FakeRpc(ScriptedController())
    raft = FakeRaft(4)
    component = BrokerComponent(node, raft, MetadataComponent(node, raft))
    assert component.replica_manager is None and component.routes() == {}
    raft.elect(2)
    await component.start()
    await until(lambda: component.lifecycle.state is BrokerState.RUNNING, "unfenced")
    await component.stop(graceful=False)
    assert component.lifecycle.state is BrokerState.RUNNING  # not graceful: no controlled shutdown


class FlushingReplicaManager(FakeReplicaManager):
    """A replica manager whose stop says whether every log it opened was flushed and closed."""

    logs_flushed = True


async def test_registers_with_the_recorded_epoch_and_records_each_registration(tmp_path: Path) -> None:
    boot_id_path = tmp_path / "boot_id"
    boot_id_path.write_text("0b7e6b3c-5d1f-4a34-9a2e-1f0c2d3e4f50\n")
    record = tmp_path / "broker_epoch.json"

    def start(flushed: bool) -> tuple[BrokerComponent, FakeNode]:
        node = FakeNode(4, tmp_path, roles="broker", broker_heartbeat_interval_ms=50, boot_id_path=str(boot_id_path))
        node.rpc = FakeRpc(ScriptedController())
        raft = FakeRaft(2)
        raft.elect(2)
        manager = FlushingReplicaManager if flushed else FakeReplicaManager
        return BrokerComponent(node, raft, MetadataComponent(node, raft), replica_manager_class=manager), node

    def registration_bodies(node: FakeNode) -> list[dict]:
        return [body for _, path, body in node.rpc.calls if path.endswith("broker_registration")]

    # A killed broker (same boot) registers with its last epoch; the answer's epoch is recorded at once.
    record.write_text('{"broker_epoch": 8, "boot_id": "0b7e6b3c-5d1f-4a34-9a2e-1f0c2d3e4f50", "clean_shutdown": false}')
    component, node = start(flushed=True)
    assert component.status()["restart"] == {"previous_broker_epoch": 8, "clean": True, "reason": "same boot id"}
    await component.start()
    await until(lambda: component.lifecycle.registered, "registered")
    assert [b["previous_broker_epoch"] for b in registration_bodies(node)] == [8]
    assert json.loads(record.read_text())["broker_epoch"] == 11
    await component.stop(graceful=True)
    # Its start was after a kill: logs it never reopened may hold dirty pages, so no clean-shutdown mark.
    assert json.loads(record.read_text())["clean_shutdown"] is False

    boot_id_path.write_text("9c1d2e3f-0a1b-4c2d-8e3f-4a5b6c7d8e9f\n")  # a power loss
    component, node = start(flushed=False)
    assert component.status()["restart"] == {"previous_broker_epoch": -1, "clean": False, "reason": "boot id changed"}
    await component.start()
    await until(lambda: component.lifecycle.registered, "registered")
    assert [b["previous_broker_epoch"] for b in registration_bodies(node)] == [-1]
    await component.stop(graceful=True)
    assert json.loads(record.read_text())["clean_shutdown"] is False  # a log was not flushed

    # Rebooted again, and stopped with every log flushed: a clean shutdown, whatever the boot id next time.
    boot_id_path.write_text("0b7e6b3c-5d1f-4a34-9a2e-1f0c2d3e4f50\n")
    component, node = start(flushed=True)
    assert component.status()["restart"]["reason"] == "boot id changed"
    await component.start()
    await until(lambda: component.lifecycle.registered, "registered")
    await component.stop(graceful=True)
    assert json.loads(record.read_text())["clean_shutdown"] is True
    boot_id_path.write_text("9c1d2e3f-0a1b-4c2d-8e3f-4a5b6c7d8e9f\n")
    component, node = start(flushed=True)
    assert component.status()["restart"] == {"previous_broker_epoch": 11, "clean": True, "reason": "clean shutdown"}
