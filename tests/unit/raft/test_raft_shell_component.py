"""RaftComponent end to end inside one process: three components on real loopback sockets, real files.

Election, commits delivered to listeners in log order, the leader announced
only after its listener caught up, NOT_LEADER with the hint, read barriers,
snapshots with trimming, a restart that replays its snapshot and committed
log, a follower brought back by FetchSnapshot, and a graceful resignation.
Every wait is bounded; nothing asserts on elapsed time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import cbor2
import pytest
from aiohttp import web

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import RpcClient, make_app
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.log import OffsetAndEpoch
from kraftpy.raft.shell.component import CommittedBatch, RaftComponent, follower_flush_in_loop
from kraftpy.raft.shell.durable_log import METADATA_LOG_DIR
from kraftpy.storage.scan import walk_headers
from tests.ports import PortReservation

CONFIG = RaftConfig(
    election_timeout_ms=100,
    election_backoff_max_ms=100,
    fetch_timeout_ms=600,  # as a local cluster: no false elections when the machine is busy
    fetch_max_wait_ms=100,
    request_timeout_ms=500,
    append_linger_ms=0,
)


class Counter:
    """A test state machine: counts applied records and keeps the commit log it saw."""

    def __init__(self) -> None:
        self.applied: list[bytes] = []
        self.batches: list[CommittedBatch] = []
        self.loaded: list[OffsetAndEpoch] = []
        self.leaders: list[tuple[int | None, int]] = []
        self.next_offset = 0
        self.applied_at_announce: dict[int, int] = {}

    def handle_commit(self, batch: CommittedBatch) -> None:
        assert batch.base_offset >= self.next_offset  # in log order, never twice
        self.batches.append(batch)
        self.applied.extend(batch.records)
        self.next_offset = batch.last_offset + 1

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, payload: bytes) -> None:
        self.loaded.append(snapshot_id)
        self.applied = list(cbor2.loads(payload))
        self.next_offset = snapshot_id.offset

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self.leaders.append((leader_id, epoch))
        if leader_id is not None:
            self.applied_at_announce[epoch] = self.next_offset


class Cluster:
    def __init__(self, root: Path, size: int = 3, *, follower_flush_in_loop: bool = False) -> None:
        self.root = root
        self.follower_flush_in_loop = follower_flush_in_loop
        self._ports = PortReservation(size)  # held until close: a restarted node binds its port again
        self.voters = {i + 1: ("127.0.0.1", port) for i, port in enumerate(self._ports.ports)}
        self.nodes: dict[int, RaftComponent] = {}
        self.machines: dict[int, Counter] = {}
        self.runners: dict[int, web.AppRunner] = {}
        self.rpcs: list[RpcClient] = []

    async def start(self, node_id: int) -> RaftComponent:
        rpc = RpcClient(request_timeout_ms=CONFIG.request_timeout_ms)
        self.rpcs.append(rpc)
        component = RaftComponent(
            node_id=node_id,
            cluster_id="test-cluster",
            data_dir=self.root / f"node{node_id}",
            voters=self.voters,
            config=CONFIG,
            rpc=rpc,
            on_fatal=lambda: None,
            follower_flush_in_loop=self.follower_flush_in_loop,
        )
        machine = Counter()
        component.register_listener(machine)
        runner = web.AppRunner(make_app(component.routes()))
        await runner.setup()
        await web.TCPSite(runner, *self.voters[node_id]).start()
        await component.start()
        self.nodes[node_id], self.machines[node_id], self.runners[node_id] = component, machine, runner
        return component

    async def stop(self, node_id: int, graceful: bool = False) -> None:
        await self.nodes.pop(node_id).stop(graceful)
        await self.runners.pop(node_id).cleanup()

    async def close(self) -> None:
        for node_id in list(self.nodes):
            await self.stop(node_id)
        for rpc in self.rpcs:
            await rpc.close()
        self._ports.release()

    def leader(self) -> RaftComponent | None:
        leaders = [c for c in self.nodes.values() if c.is_leader]
        return leaders[0] if len(leaders) == 1 else None


async def wait_for(predicate: Callable[[], object], timeout_s: float = 10.0, what: str = "condition") -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


async def commit(leader: RaftComponent, *records: bytes) -> int:
    return await leader.append_and_wait(list(records), timeout_ms=5000)


@pytest.fixture
async def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    try:
        for node_id in c.voters:
            await c.start(node_id)
        yield c
    finally:
        await c.close()


async def test_elects_one_leader_and_commits_in_log_order_everywhere(cluster: Cluster) -> None:
    await wait_for(cluster.leader, what="a leader")
    leader = cluster.leader()
    assert leader is not None
    last = await commit(leader, b"a", b"b")  # one atomic append
    for i in range(20):
        last = await commit(leader, f"r{i}".encode())
    await wait_for(lambda: all(m.next_offset == last + 1 for m in cluster.machines.values()))
    expected = [b"a", b"b", *(f"r{i}".encode() for i in range(20))]
    for machine in cluster.machines.values():
        assert machine.applied == expected
        # An atomic append is never split across handle_commit calls; a call may hold several appends
        # (a run of committed entries: a follower that learns the commit late gets a and b with r0).
        assert any(b.records[i : i + 2] == [b"a", b"b"] for b in machine.batches for i in range(len(b.records)))
    # the leader's listener heard of its leadership only once it had applied up to the epoch start
    machine = cluster.machines[leader.node_id]
    assert machine.leaders[-1] == (leader.node_id, leader.epoch)
    status = leader.status()
    assert status["state"] == "leader" and status["high_watermark"] == last + 1
    # a follower may learn the commit with the last entry itself and apply it before its next
    # fetch (the one that acknowledges that entry) reaches the leader: wait for that fetch
    await wait_for(
        lambda: [v["log_end_offset"] for v in leader.status()["voters"]] == [last + 1] * 3,
        what="every voter's acknowledgement of the last entry",
    )


def batch_ranges(data_dir: Path) -> list[tuple[int, int]]:
    """(base offset, last offset) of every batch in a node's metadata log segments, from the files."""
    ranges = []
    for segment in sorted((data_dir / METADATA_LOG_DIR).glob("*.log")):
        with segment.open("rb") as f:  # a walk ends where the active segment's preallocated space begins
            ranges.extend((span.base_offset, span.last_offset) for span in walk_headers(f.fileno(), 0, 1 << 62))
    return ranges


async def test_proposals_made_in_one_loop_turn_share_one_batch_on_disk(cluster: Cluster) -> None:
    """Appends made without an await between them are written as one batch (one write, one
    answer per parked fetch for all of them); an append made alone is not held back."""
    await wait_for(cluster.leader, what="a leader")
    leader = cluster.leader()
    assert leader is not None
    together = [leader.schedule_atomic_append(leader.epoch, [f"t{i}".encode()]) for i in range(3)]
    await asyncio.sleep(0)  # the next loop turn
    last = await commit(leader, b"alone")
    assert together == [last - 3, last - 2, last - 1]
    ranges = batch_ranges(cluster.root / f"node{leader.node_id}")
    assert (together[0], together[-1]) in ranges, ranges
    assert (last, last) in ranges, ranges
    await wait_for(lambda: all(m.next_offset == last + 1 for m in cluster.machines.values()))
    for machine in cluster.machines.values():
        assert machine.applied[-4:] == [b"t0", b"t1", b"t2", b"alone"]


async def test_followers_refuse_appends_and_reads_with_the_leader_hint(cluster: Cluster) -> None:
    await wait_for(cluster.leader)
    leader = cluster.leader()
    assert leader is not None
    await commit(leader, b"x")
    follower = next(c for c in cluster.nodes.values() if not c.is_leader)
    await wait_for(lambda: follower.leader_id == leader.node_id)
    with pytest.raises(KafkaError) as info:
        follower.schedule_atomic_append(follower.epoch, [b"no"])
    assert info.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert info.value.details["leader_id"] == leader.node_id
    host, port = cluster.voters[leader.node_id]
    assert info.value.details["leader_address"] == f"{host}:{port}"
    with pytest.raises(KafkaError) as info:
        leader.schedule_atomic_append(leader.epoch - 1, [b"stale epoch"])
    assert info.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(KafkaError) as info:
        await follower.read_barrier(1000)
    assert info.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_read_barrier_covers_every_acknowledged_write(cluster: Cluster) -> None:
    await wait_for(cluster.leader)
    leader = cluster.leader()
    assert leader is not None
    last = await commit(leader, b"w1")
    index = await leader.read_barrier(2000)
    assert index >= last + 1
    assert leader.applied_offset >= index


async def test_a_single_voter_answers_a_read_barrier_at_once(tmp_path: Path) -> None:
    """A lone voter confirms its leadership inside read_index() itself: the answer must not be lost
    before read_barrier registers for it (it was, and every such read timed out)."""
    single = Cluster(tmp_path, size=1)
    try:
        leader = await single.start(1)
        await wait_for(lambda: leader.is_leader, what="the lone voter leads")
        last = await commit(leader, b"w1")
        index = await leader.read_barrier(10_000)
        assert index >= last + 1 and leader.applied_offset >= index
    finally:
        await single.close()


async def test_snapshot_trims_the_log_and_a_lagging_follower_installs_it(cluster: Cluster) -> None:
    await wait_for(cluster.leader)
    leader = cluster.leader()
    assert leader is not None
    lagging = next(i for i, c in cluster.nodes.items() if not c.is_leader)
    await commit(leader, b"before")
    await wait_for(lambda: cluster.machines[lagging].next_offset == leader.applied_offset)
    await cluster.stop(lagging)
    last = 0
    for i in range(30):
        last = await commit(leader, f"while-down-{i}".encode())
    for node_id, component in cluster.nodes.items():
        machine = cluster.machines[node_id]
        await wait_for(lambda c=component: c.applied_offset == last + 1)
        snapshot_id = OffsetAndEpoch(last + 1, component.epoch)
        component.create_snapshot(snapshot_id, cbor2.dumps(machine.applied))
        assert component.status()["log_start_offset"] == last + 1
    restarted = await cluster.start(lagging)
    machine = cluster.machines[lagging]
    await wait_for(lambda: restarted.applied_offset == last + 1, what="catch-up by snapshot")
    assert machine.loaded[-1] == OffsetAndEpoch(last + 1, leader.epoch)
    assert machine.applied == cluster.machines[leader.node_id].applied
    after = await commit(leader, b"after the snapshot")
    await wait_for(lambda: machine.next_offset == after + 1)
    assert machine.applied[-1] == b"after the snapshot"


async def test_a_restarted_node_replays_its_snapshot_and_committed_log_before_it_hears_the_leader(
    cluster: Cluster,
) -> None:
    await wait_for(cluster.leader)
    leader = cluster.leader()
    assert leader is not None
    for i in range(5):
        await commit(leader, f"s{i}".encode())
    follower_id = next(i for i, c in cluster.nodes.items() if not c.is_leader)
    follower = cluster.nodes[follower_id]
    await wait_for(lambda: follower.applied_offset == leader.applied_offset)
    follower.create_snapshot(
        OffsetAndEpoch(follower.applied_offset, follower.epoch), cbor2.dumps(cluster.machines[follower_id].applied)
    )
    last = 0
    for i in range(5):
        last = await commit(leader, f"t{i}".encode())
    await wait_for(lambda: follower.applied_offset == last + 1)
    await cluster.stop(follower_id)  # closing the log checkpoints the high watermark it exposed
    for node_id in list(cluster.nodes):
        await cluster.stop(node_id)  # nobody to learn the high watermark from
    restarted = await cluster.start(follower_id)
    machine = cluster.machines[follower_id]
    assert machine.loaded and machine.applied[: 5 + 5] == [
        *(f"s{i}".encode() for i in range(5)),
        *(f"t{i}".encode() for i in range(5)),
    ]
    assert restarted.applied_offset >= last + 1


async def test_graceful_resignation_hands_leadership_over(cluster: Cluster) -> None:
    await wait_for(cluster.leader)
    old = cluster.leader()
    assert old is not None
    await commit(old, b"before")
    epoch = old.epoch
    await old.resign()
    assert not old.is_leader
    await wait_for(lambda: cluster.leader() is not None and cluster.leader() is not old, what="a successor")
    new = cluster.leader()
    assert new is not None and new.epoch > epoch
    await commit(new, b"after")
    await wait_for(lambda: cluster.machines[old.node_id].applied[-1:] == [b"after"])


async def test_a_listener_may_snapshot_inside_handle_commit(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        for node_id in cluster.voters:
            await cluster.start(node_id)
        await wait_for(cluster.leader)
        leader = cluster.leader()
        assert leader is not None
        machine = cluster.machines[leader.node_id]
        taken: list[OffsetAndEpoch] = []
        original = machine.handle_commit

        def snapshotting(batch: CommittedBatch) -> None:
            original(batch)
            snapshot_id = OffsetAndEpoch(batch.last_offset + 1, batch.epoch)
            leader.create_snapshot(snapshot_id, cbor2.dumps(machine.applied))
            taken.append(snapshot_id)

        machine.handle_commit = snapshotting  # type: ignore[method-assign]
        last = await commit(leader, b"snap me")
        assert taken[-1] == OffsetAndEpoch(last + 1, leader.epoch)
        assert leader.status()["log_start_offset"] == last + 1
    finally:
        await cluster.close()


async def test_a_listener_that_fails_stops_the_raft_layer(
    tmp_path: Path, reserve_ports: Callable[[int], list[int]]
) -> None:
    stops: list[bool] = []
    (port,) = reserve_ports(1)
    component = RaftComponent(
        node_id=1,
        cluster_id="solo",
        data_dir=tmp_path,
        voters={1: ("127.0.0.1", port)},
        config=CONFIG,
        rpc=RpcClient(),
        on_fatal=lambda: stops.append(True),
    )

    class Broken(Counter):
        def handle_commit(self, batch: CommittedBatch) -> None:
            raise RuntimeError("state machine bug")

    component.register_listener(Broken())
    await component.start()
    try:
        await wait_for(lambda: component.is_leader)  # a single voter elects itself
        with pytest.raises(KafkaError):
            await component.append_and_wait([b"boom"], 2000)
        assert stops == [True]
        assert component.status()["state"] == "failed"
    finally:
        await component.stop(graceful=True)


async def test_an_observer_follows_the_log_and_never_counts(
    tmp_path: Path, reserve_ports: Callable[[int], list[int]]
) -> None:
    cluster = Cluster(tmp_path)
    (observer_port,) = reserve_ports(1)
    observer = RaftComponent(
        node_id=9,
        cluster_id="test-cluster",
        data_dir=tmp_path / "observer",
        voters=cluster.voters,  # the voter set; node 9 is not in it
        config=CONFIG,
        rpc=RpcClient(),
    )
    machine = Counter()
    observer.register_listener(machine)
    runner = web.AppRunner(make_app(observer.routes()))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", observer_port).start()
    try:
        for node_id in cluster.voters:
            await cluster.start(node_id)
        await observer.start()
        await wait_for(cluster.leader)
        leader = cluster.leader()
        assert leader is not None
        last = await commit(leader, b"seen by the observer")
        await wait_for(lambda: machine.next_offset == last + 1)
        assert machine.applied == [b"seen by the observer"]
        status = observer.status()
        assert status["is_voter"] is False and status["state"] == "follower"
        assert [o["node_id"] for o in leader.status()["observers"]] == [9]
        # a majority of voters down: the observer cannot help commit
        others = [i for i in cluster.voters if i != leader.node_id]
        for node_id in others:
            await cluster.stop(node_id)
        with pytest.raises(KafkaError):
            await leader.append_and_wait([b"no quorum"], 500)
    finally:
        await observer.stop(graceful=False)
        await runner.cleanup()
        await cluster.close()


async def start_all(cluster: Cluster) -> RaftComponent:
    """Start every voter of `cluster`; its leader, once there is one."""
    for node_id in cluster.voters:
        await cluster.start(node_id)
    await wait_for(cluster.leader, what="a leader")
    leader = cluster.leader()
    assert leader is not None
    return leader


@pytest.mark.parametrize("in_loop", [False, True], ids=["flush-thread", "in-loop"])
async def test_a_followers_fsync_runs_where_its_node_says(tmp_path: Path, in_loop: bool) -> None:
    """A dedicated controller's follower fsyncs in its event loop (no thread hand-off on the
    commit's path); a node that is also a broker keeps the flush thread, so a slow fsync never
    stops its Kafka clients. Commits reach every node either way."""
    cluster = Cluster(tmp_path, follower_flush_in_loop=in_loop)
    try:
        leader = await start_all(cluster)
        flushed_on: list[str] = []
        for component in cluster.nodes.values():
            if component is not leader:
                log, flush = component._log, component._log.flush

                def recorded(up_to_offset: int | None = None, _flush=flush) -> None:
                    flushed_on.append(threading.current_thread().name)
                    _flush(up_to_offset)

                log.flush = recorded  # type: ignore[method-assign]
        last = await commit(leader, *(f"r{i}".encode() for i in range(3)))
        for i in range(10):
            last = await commit(leader, f"s{i}".encode())
        await wait_for(lambda: all(m.next_offset > last for m in cluster.machines.values()), what="applied everywhere")
        assert flushed_on, "the followers fsynced"
        loop_thread = threading.current_thread().name
        assert all((name == loop_thread) is in_loop for name in flushed_on), flushed_on
    finally:
        await cluster.close()


@pytest.mark.parametrize("in_loop", [False, True], ids=["flush-thread", "in-loop"])
async def test_a_followers_failed_fsync_stops_its_raft_layer(tmp_path: Path, in_loop: bool) -> None:
    """After a failed fsync the kernel may have dropped the pages it could not write, so the
    follower stops rather than retry (as in the flush thread), also when it fsyncs in the loop."""
    cluster = Cluster(tmp_path, follower_flush_in_loop=in_loop)
    try:
        leader = await start_all(cluster)
        follower = next(c for c in cluster.nodes.values() if c is not leader)

        def failing(up_to_offset: int | None = None) -> None:
            raise OSError(5, "Input/output error")

        follower._log.flush = failing  # type: ignore[method-assign]
        await commit(leader, b"x")  # the other follower makes the majority
        await wait_for(lambda: follower.status()["state"] == "failed", what="the follower stopped")
    finally:
        await cluster.close()


def test_only_a_dedicated_controller_fsyncs_in_its_loop() -> None:
    assert follower_flush_in_loop(("controller",))
    assert not follower_flush_in_loop(("broker", "controller"))
    assert not follower_flush_in_loop(("broker",))
