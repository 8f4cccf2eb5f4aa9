"""The controller and metadata components over a FakeRaft: claiming, deferred answers, renouncing, snapshots."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from pathlib import Path

import pytest

from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.quorum_view import describe_quorum
from kraftpy.metadata.controller.snapshot_policy import SnapshotPolicy
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import FenceBrokerRecord, NoOpRecord, decode_entry, encode_entries, encode_record
from kraftpy.metadata.shell.controller_component import ControllerComponent, split_payloads
from kraftpy.metadata.shell.publisher import MetadataComponent
from kraftpy.protocol.errors import ErrorCode, KafkaError
from tests.unit.metadata.test_controller_shell_fakes import FakeNode, FakeRaft

CONFIG = ControllerConfig(
    cluster_id="test-cluster",
    broker_session_timeout_ms=9000,
    auto_leader_rebalance_enable=False,
    metadata_max_idle_interval_ms=0,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


class Shell:
    """One controller node: FakeRaft -> metadata component -> controller component."""

    def __init__(self, tmp_path: Path, policy: SnapshotPolicy | None = None, request_wait_ms: int = 2000) -> None:
        self.node = FakeNode(1, tmp_path)
        self.raft = FakeRaft(1)
        self.clock = Clock()
        self.metadata = MetadataComponent(self.node, self.raft, policy)
        self.controller = ControllerComponent(
            self.node,
            self.raft,
            self.metadata,
            CONFIG,
            rng=random.Random(3),
            request_wait_ms=request_wait_ms,
            clock=self.clock,
        )
        self.routes = self.controller.routes()

    def call(self, route: str, body: dict) -> asyncio.Task:
        return asyncio.get_running_loop().create_task(self.routes["/controller/" + route](body))

    async def activate(self) -> None:
        self.raft.elect(1)
        assert self.controller.controller.is_active

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)

    async def register_brokers(self, *ids: int) -> dict[int, int]:
        epochs = {}
        for b in ids:
            task = self.call(
                "broker_registration",
                {
                    "broker_id": b,
                    "cluster_id": "test-cluster",
                    "incarnation_id": f"inc-{b}",
                    "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9100 + b}],
                },
            )
            await self.settle()
            self.raft.commit()
            epochs[b] = (await task)["broker_epoch"]
        for b in ids:
            task = self.call(
                "broker_heartbeat",
                {"broker_id": b, "broker_epoch": epochs[b], "current_metadata_offset": self.metadata.committed_offset},
            )
            await self.settle()
            self.raft.commit()
            assert (await task)["is_fenced"] is False
        return epochs


def topic_body(name: str, partitions: int = 3, rf: int = 2) -> dict:
    return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf}]}


async def test_activates_when_raft_announces_its_leadership_and_answers_right_away(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    before = shell.call("create_topics", topic_body("t", 1, 1))  # no leader yet: NOT_CONTROLLER, no hint
    with pytest.raises(KafkaError) as info:
        await before
    assert info.value.code == ErrorCode.NOT_CONTROLLER
    shell.raft.elect(1)  # announced after everything before the epoch is applied
    assert shell.controller.controller.is_active and shell.controller.status()["active"] is True
    (result,) = (await shell.call("create_topics", topic_body("t", 1, 1)))["topics"]
    assert result["error"] == "INVALID_REPLICATION_FACTOR"  # no broker registered: answered, not hung


async def test_answers_wait_for_their_records_and_everything_before_them_to_commit(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    await shell.activate()
    await shell.register_brokers(1, 2, 3)
    create = shell.call("create_topics", topic_body("orders"))
    await shell.settle()
    assert not create.done()
    # The uncommitted image already knows the topic: a second create is refused before the first commits,
    # and that answer (which wrote nothing) still waits: it depends on the create that is not committed yet.
    again = shell.call("create_topics", topic_body("orders"))
    await shell.settle()
    assert not again.done()
    shell.raft.commit()
    (created,) = (await create)["topics"]
    assert created["error_code"] == 0 and uuid.UUID(created["topic_id"])
    assert (await again)["topics"][0]["error"] == "TOPIC_ALREADY_EXISTS"
    # Reads answer from the committed image, at once when nothing is pending.
    described = await shell.call(
        "describe_configs", {"resources": [{"resource_type": "topic", "resource_name": "orders"}]}
    )
    (resource,) = described["resources"]
    assert resource["error_code"] == 0 and any(c["name"] == "retention_ms" for c in resource["configs"])
    image = shell.metadata.image
    assert image.topic("orders") is not None and len(image.topic("orders").partitions) == 3
    assert shell.controller.status()["pending_responses"] == 0


async def test_losing_leadership_answers_waiting_requests_not_controller_with_the_new_address(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    await shell.activate()
    await shell.register_brokers(1, 2)
    pending = shell.call("create_topics", topic_body("t"))
    await shell.settle()
    shell.raft.drop_uncommitted()  # the new leader truncates what we appended
    shell.raft.elect(2)
    with pytest.raises(KafkaError) as info:
        await pending
    assert info.value.code == ErrorCode.NOT_CONTROLLER
    assert info.value.details == {"leader_id": 2, "leader_address": "127.0.0.1:9002"}
    with pytest.raises(KafkaError) as later:
        await shell.call("create_topics", topic_body("u"))
    assert later.value.code == ErrorCode.NOT_CONTROLLER and later.value.details["leader_address"] == "127.0.0.1:9002"
    assert shell.controller.status()["active"] is False
    with pytest.raises(KafkaError) as quorum:
        await shell.routes["/controller/describe_quorum"]({})
    assert quorum.value.code == ErrorCode.NOT_CONTROLLER and quorum.value.details["leader_id"] == 2


async def test_a_leader_again_after_a_truncation_starts_its_offsets_from_the_committed_log(tmp_path: Path) -> None:
    """Records appended in an old epoch and truncated away must not hold later answers back."""
    shell = Shell(tmp_path)
    await shell.activate()
    await shell.register_brokers(1, 2)
    lost = [shell.call("create_topics", topic_body(f"lost{i}")) for i in range(3)]
    await shell.settle()
    shell.raft.drop_uncommitted()  # another leader truncates them
    shell.raft.elect(2)
    for task in lost:
        with pytest.raises(KafkaError):
            await task
    shell.raft.elect(1)  # leader again, with a log end below our old appends
    # Nothing is pending: an answer without records goes out at once ...
    answer = await shell.call("create_topics", topic_body("missing", 0))
    assert answer["topics"][0]["error"] == "INVALID_PARTITIONS"
    # ... and a new write is deferred at its own (lower) offset and released by its commit.
    task = shell.call("create_topics", topic_body("lost0"))
    await shell.settle()
    shell.raft.commit()
    assert (await task)["topics"][0]["error_code"] == 0


async def test_a_refused_append_renounces_then_claims_again_behind_a_noop(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    await shell.activate()
    await shell.register_brokers(1, 2)
    shell.raft.fail_appends = ErrorCode.NOT_ENOUGH_REPLICAS
    with pytest.raises(KafkaError) as info:
        await shell.call("create_topics", topic_body("t"))
    assert info.value.code == ErrorCode.NOT_CONTROLLER
    assert info.value.details["leader_address"] == "127.0.0.1:9001"  # still us: retry here
    assert not shell.controller.controller.is_active
    waiting = shell.call("create_topics", topic_body("t"))  # waits (bounded) for the claim
    shell.raft.fail_appends = None
    deadline = time.monotonic() + 10  # the claim is retried after CLAIM_RETRY_MS; a loaded machine may be late
    while shell.raft.entries[-1].offset < shell.raft.delivered:
        assert time.monotonic() < deadline, "the controller never retried its claim"
        await asyncio.sleep(0.01)
    (noop,) = [decode_entry(e.data) for e in shell.raft.entries[shell.raft.delivered :]]
    assert noop == [NoOpRecord()] and not shell.controller.controller.is_active
    shell.raft.commit()
    assert shell.controller.controller.is_active
    await shell.settle()
    shell.raft.commit()
    assert (await waiting)["topics"][0]["error_code"] == 0


async def test_requests_time_out_bounded_when_nothing_commits(tmp_path: Path) -> None:
    shell = Shell(tmp_path, request_wait_ms=50)
    await shell.activate()
    await shell.register_brokers(1)
    shell.clock.now += 1  # the handler's deadline uses the injected clock; asyncio.timeout uses real time
    with pytest.raises(KafkaError) as info:
        await shell.call("create_topics", topic_body("t", 1, 1))
    assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
    assert shell.controller.status()["pending_responses"] == 1  # released when it commits
    shell.raft.commit()
    assert shell.controller.status()["pending_responses"] == 0


async def test_tick_fences_a_silent_broker_and_moves_its_leaderships(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    await shell.activate()
    epochs = await shell.register_brokers(1, 2, 3)
    create = shell.call("create_topics", topic_body("t", 6, 3))
    await shell.settle()
    shell.raft.commit()
    await create
    assert shell.controller.status()["fenced_brokers"] == {1: False, 2: False, 3: False}
    shell.clock.now += CONFIG.broker_session_timeout_ms - 1
    for b in (1, 2):  # brokers 1 and 2 keep heartbeating; 3 went silent
        task = shell.call(
            "broker_heartbeat",
            {"broker_id": b, "broker_epoch": epochs[b], "current_metadata_offset": shell.metadata.committed_offset},
        )
        await shell.settle()
        shell.raft.commit()
        await task
    shell.clock.now += 2
    shell.controller._tick()
    fence = [decode_entry(e.data)[0] for e in shell.raft.entries[shell.raft.delivered :]]
    assert fence[0] == FenceBrokerRecord(3, epochs[3])
    shell.raft.commit()
    assert shell.controller.status()["fenced_brokers"] == {1: False, 2: False, 3: True}
    for p in shell.metadata.image.topic("t").partitions:
        assert p.leader != 3 and 3 not in p.isr


async def test_malformed_bodies_answer_invalid_request_and_the_shell_keeps_serving(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    await shell.activate()
    with pytest.raises(KafkaError) as info:
        await shell.call("create_topics", {"topics": [{"name": "x", "num_partitions": "many"}]})
    assert info.value.code == ErrorCode.INVALID_REQUEST and "num_partitions" in info.value.message
    task = shell.call("create_topics", {"topics": [{"name": "bad name!"}]})
    await shell.settle()
    shell.raft.commit()
    assert (await task)["topics"][0]["error"] == "INVALID_TOPIC_EXCEPTION"


async def test_describe_quorum_from_raft_status(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    await shell.activate()
    answer = await shell.routes["/controller/describe_quorum"]({})
    end = shell.raft.log_end_offset
    assert answer["leader_id"] == 1 and answer["epoch"] == 1 and answer["high_watermark"] == shell.raft.high_watermark
    assert answer["voters"] == [
        {"node_id": 1, "log_end_offset": end, "lag": 0, "last_fetch_ms_ago": 0},
        {"node_id": 2, "log_end_offset": end - 1, "lag": 1, "last_fetch_ms_ago": 40},
    ]
    assert answer["observers"] == [{"node_id": 7, "log_end_offset": 0, "lag": end, "last_fetch_ms_ago": None}]
    assert describe_quorum({}) == {"leader_id": None, "epoch": -1, "high_watermark": -1, "voters": [], "observers": []}


async def test_start_runs_timers_and_stop_renounces(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    await shell.controller.start()
    await shell.activate()
    await shell.controller.stop(graceful=True)
    assert not shell.controller.controller.is_active and shell.controller._timer is None


async def test_snapshots_every_n_records_and_a_restart_loads_the_same_image(tmp_path: Path) -> None:
    shell = Shell(tmp_path, policy=SnapshotPolicy(max_new_record_bytes=1 << 30, max_new_records=20))
    await shell.metadata.start()
    await shell.activate()
    await shell.register_brokers(1, 2, 3)
    for i in range(4):
        task = shell.call("create_topics", topic_body(f"t{i}", 5, 3))
        await shell.settle()
        shell.raft.commit()
        await task
    if shell.metadata._snapshot_task is not None:
        await shell.metadata._snapshot_task
    assert shell.raft.snapshots, "no snapshot after 20+ records"
    snapshot_id, payload = shell.raft.snapshots[-1]
    snapshot_image = MetadataImage.decode(payload)
    assert snapshot_id == (snapshot_image.offset + 1, snapshot_image.epoch)
    assert shell.metadata.status()["last_snapshot_offset"] == snapshot_id.offset
    # A cold restart: the snapshot, then the committed log after it, into a fresh metadata component.
    node = FakeNode(1, tmp_path)
    restarted = MetadataComponent(node, FakeRaft(1))
    shell.raft.replay_to(restarted)
    assert restarted.image == shell.metadata.image
    assert restarted.status()["offset"] == shell.metadata.committed_offset
    await shell.metadata.stop(graceful=True)


def test_loader_skips_a_record_that_does_not_replay_and_counts_it(tmp_path: Path) -> None:
    node = FakeNode(1, tmp_path)
    raft = FakeRaft(1)
    metadata = MetadataComponent(node, raft)
    raft.elect(1)
    raft.schedule_atomic_append(1, [b"\xff\x00", encode_record(FenceBrokerRecord(9, 1)), encode_record(NoOpRecord())])
    raft.commit()
    status = metadata.status()
    assert status["replay_errors"] == 2 and status["offset"] == 3
    assert "offset 2" in status["last_error"]


def test_split_payloads_keeps_order_and_the_byte_bound() -> None:
    payloads = [bytes(10)] * 7
    assert split_payloads(payloads, 1000) == [payloads]
    chunks = split_payloads(payloads, 60)  # two entries of 10 + 16 bytes each fit
    assert [len(c) for c in chunks] == [2, 2, 2, 1] and [p for c in chunks for p in c] == payloads
    assert split_payloads([bytes(100)], 10) == [[bytes(100)]]  # a single oversized entry still goes alone


@pytest.mark.parametrize("count", [1, 2, 23, 24, 255, 256, 70_000])
def test_encode_entries_packs_records_into_bounded_entries_that_decode_in_order(count: int) -> None:
    records = [FenceBrokerRecord(i, i + 1) for i in range(count)]
    entries = encode_entries(records, 64 * 1024)
    assert [r for e in entries for r in decode_entry(e)] == records
    assert all(len(e) <= 64 * 1024 + 16 for e in entries)
    if count == 1:
        assert entries == [encode_record(records[0])]  # a lone record is just the record
    one_big = encode_entries(records, 1 << 30)
    assert len(one_big) == 1 and decode_entry(one_big[0]) == records


async def test_a_large_fencing_is_a_few_entries(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    await shell.activate()
    await shell.register_brokers(1, 2, 3)
    task = shell.call("create_topics", topic_body("big", 3000, 3))
    await shell.settle()
    before = len(shell.raft.entries)
    shell.raft.commit()
    await task
    assert before - shell.raft.delivered < 40  # 3,001 records in a handful of entries
    assert shell.metadata.image.topic("big") is not None and len(shell.metadata.image.topic("big").partitions) == 3000
