"""The real controller's slow paths on a real cluster: unclean election after session expiry, FetchSnapshot catch-up.

One `kraftpy cluster start --nodes 5` cluster for the module (five voters,
so two nodes can be down while the controller still acts), restarted once
with `metadata_snapshot_max_new_record_bytes` small, so the quorum snapshots
and trims its log every few records. Brokers are killed with SIGKILL and
expire through their real broker sessions; nothing is fenced or elected by
hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from kraftpy.client import Consumer, Producer, TopicPartition
from kraftpy.tools.commands.cluster import spawn_node
from tests.integration.test_cluster_support import LocalCluster, wait_for

pytestmark = pytest.mark.slow

SETTINGS = {"metadata_snapshot_max_new_record_bytes": 2048}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("catchup") / "cluster", nodes=5)
    try:
        c.start_with(SETTINGS)
        yield c
    finally:
        c.stop()


def partition(cluster: LocalCluster, topic: str) -> dict:
    return cluster.describe(topic)["partitions"][0]


def start_node(cluster: LocalCluster, node_id: int) -> None:
    """Start one stopped node as `cluster start` would (it starts them all)."""
    layout = cluster.layout()
    spawn_node(layout, next(n for n in layout.nodes if n.node_id == node_id))


def fenced(cluster: LocalCluster, node_id: int) -> bool | None:
    nodes = {n["node_id"]: n for n in cluster.health()["nodes"]}
    return nodes[node_id]["fenced"]


async def produce(bootstrap: str, topic: str, values: list[bytes], acks: str) -> None:
    async with Producer(bootstrap, acks=acks, linger_ms=0) as producer:
        for value in values:
            await (await producer.send(topic, value, partition=0))


async def read_values(bootstrap: str, topic: str) -> list[bytes]:
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        end = (await consumer.end_offsets([tp]))[tp]
        consumer.assign([tp])
        values: list[bytes] = []
        for _ in range(100):
            if len(values) >= end:
                break
            values.extend(r.value for r in await consumer.poll(timeout_ms=200))
        return values


def test_unclean_election_through_the_real_controller_after_session_expiry(cluster: LocalCluster) -> None:
    cluster.ok("topics", "create", "u", "--partitions", "1", "--replication-factor", "2")
    bootstrap = cluster.layout().kafka_bootstrap_servers
    asyncio.run(produce(bootstrap, "u", [b"everyone-has-%d" % i for i in range(10)], acks="all"))
    wait_for("both replicas in sync", lambda: len(partition(cluster, "u")["isr"]) == 2, timeout_s=60)
    leader = partition(cluster, "u")["leader"]
    (follower,) = [n for n in partition(cluster, "u")["replicas"] if n != leader]
    survivor = next(n for n in cluster.layout().nodes if n.node_id == leader).kafka_address
    # The follower dies; its session expires and the controller shrinks the ISR to the leader.
    cluster.kill(follower)
    wait_for("the ISR shrunk to the leader", lambda: partition(cluster, "u")["isr"] == [leader], timeout_s=60)
    asyncio.run(produce(survivor, "u", [b"only-the-leader-has-%d" % i for i in range(5)], acks="1"))
    # The leader dies too, then only the out-of-sync replica comes back. Nobody in the ISR is alive.
    cluster.kill(leader)
    start_node(cluster, follower)
    # `is True`, not `is not False`: while no controller answers (the killed leader may have been the active
    # one), health cannot say and reports None, which is no fencing at all.
    wait_for("the old leader fenced", lambda: fenced(cluster, leader) is True, timeout_s=60)
    wait_for("the follower unfenced", lambda: fenced(cluster, follower) is False, timeout_s=60)
    # The fencing and the leadership move are one controller decision; the node answering `describe` may
    # replay it a moment later. Clean election means: no leader, and the ISR empty (its last member is
    # now an eligible leader replica, KIP-966: it would lead again once back, the follower never).
    state = wait_for("the partition leaderless", lambda: (p := partition(cluster, "u"))["leader"] in (-1, None) and p)
    assert state["isr"] == [], state
    # The operator chooses availability (kafka-leader-election.sh --election-type unclean): an out-of-sync
    # replica leads.
    cluster.ok("topics", "elect-leaders", "--type", "unclean", "u", "--partition", "0")
    elected = wait_for("an unclean election", lambda: (p := partition(cluster, "u"))["leader"] == follower and p, 60)
    assert elected["isr"] == [follower]
    # The trade-off, as documented: what only the old leader had is gone, from every replica once it returns.
    start_node(cluster, leader)
    wait_for("both in sync again", lambda: len(partition(cluster, "u")["isr"]) == 2, timeout_s=90)
    values = asyncio.run(read_values(bootstrap, "u"))
    assert values == [b"everyone-has-%d" % i for i in range(10)]


def test_a_node_far_behind_catches_up_by_fetch_snapshot(cluster: LocalCluster) -> None:
    lagging = 5
    cluster.ok("cluster", "start", "--dir", str(cluster.dir))  # every node up, whatever the test before left
    before = cluster.status(lagging)
    assert before is not None
    end_when_stopped = before["raft"]["log_end_offset"]
    cluster.kill(lagging)
    for i in range(30):  # enough records for several snapshots, each trimming the leader's log behind it
        cluster.ok("topics", "create", f"snap-{i}", "--partitions", "2", "--replication-factor", "2")

    def leader_trimmed_past_it() -> list | None:
        statuses = [cluster.status(n) for n in (1, 2, 3)]
        starts = [s and (s["raft"]["log_start_offset"], s["raft"]["log_end_offset"]) for s in statuses]
        print(f"log [start, end) of voters 1-3: {starts}; stopped node ended at {end_when_stopped}")
        return starts if all(s is not None and s[0] > end_when_stopped for s in starts) else None

    wait_for("the live voters' logs start past the stopped node's end", leader_trimmed_past_it, timeout_s=60)
    cluster.ok("cluster", "start", "--dir", str(cluster.dir), "--timeout-s", "60")

    def caught_up() -> dict | None:
        status = cluster.status(lagging)
        return status if status and status["metadata"]["topics"] >= 30 else None

    status = wait_for("the restarted node caught up", caught_up, timeout_s=60)
    # Its log now starts above where it ended: the entries between were never in its log, only in a snapshot.
    assert status["raft"]["log_start_offset"] > end_when_stopped
    assert status["metadata"]["snapshots_loaded"] >= 1
    kafka_address = next(n.kafka_address for n in cluster.layout().nodes if n.node_id == lagging)
    assert kafka_address is not None
    names = set(cluster.ok("topics", "list", "--json", "--bootstrap-server", kafka_address).json()["topics"])
    assert {f"snap-{i}" for i in range(30)} <= names
