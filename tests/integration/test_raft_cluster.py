"""Three real node processes on loopback: election, commits, SIGKILL of the leader, catch-up by log and
by snapshot (FetchSnapshot), graceful handover with EndQuorumEpoch, refusal of a damaged quorum-state.

Each node is `python -m tests.integration.raft_kv_node` (the Raft component and a
hash-chain state machine), so the state two nodes report is equal only if they
applied the same committed records in the same order. Every wait is bounded;
every process is ended by pid in the fixture's teardown.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from kraftpy.raft.shell import quorum_state_file
from kraftpy.raft.shell.durable_log import METADATA_LOG_DIR
from tests.integration.raft_procs import ProcCluster

pytestmark = pytest.mark.slow


@pytest.fixture
async def make_cluster(tmp_path: Path):
    clusters: list[ProcCluster] = []

    async def make(**settings: object) -> ProcCluster:
        cluster = ProcCluster(tmp_path / f"c{len(clusters)}", settings=settings)
        clusters.append(cluster)
        cluster.start_all()
        return cluster

    try:
        yield make
    finally:
        for cluster in clusters:
            await cluster.close()


async def commit(cluster: ProcCluster, leader: int, n: int, tag: str) -> int:
    last = -1
    for i in range(n):
        answer = await cluster.append(leader, [f"{tag}-{i}".encode()])
        last = answer["last_offset"]
    return last


async def same_state(cluster: ProcCluster, nodes: list[int], offset: int) -> dict:
    states = [await cluster.wait_applied(n, offset) for n in nodes]
    assert len({(s["count"], s["digest"]) for s in states}) == 1, states
    return states[0]


async def test_commit_survive_sigkill_of_the_leader_and_catch_up_by_log(make_cluster) -> None:
    cluster = await make_cluster()
    leader = await cluster.wait_leader()
    last = await commit(cluster, leader, 20, "first")
    assert (await same_state(cluster, [1, 2, 3], last + 1))["count"] == 20

    cluster.kill(leader)
    survivors = [n for n in (1, 2, 3) if n != leader]
    new_leader = await cluster.wait_leader(among=survivors)
    last = await commit(cluster, new_leader, 10, "after-kill")
    state = await same_state(cluster, survivors, last + 1)
    assert state["count"] == 30

    cluster.start(leader)  # the old leader comes back and catches up from its log position
    restarted = await cluster.wait_applied(leader, last + 1)
    assert (restarted["count"], restarted["digest"]) == (state["count"], state["digest"])
    assert restarted["loaded_snapshots"] == 0
    assert restarted["raft"]["epoch"] > 1 and restarted["raft"]["state"] == "follower"


async def test_a_node_behind_the_trimmed_logs_catches_up_by_snapshot(make_cluster) -> None:
    cluster = await make_cluster()
    leader = await cluster.wait_leader()
    last = await commit(cluster, leader, 5, "early")
    await same_state(cluster, [1, 2, 3], last + 1)
    lagging = next(n for n in (1, 2, 3) if n != leader)
    cluster.kill(lagging)
    lagging_end = last + 1
    last = await commit(cluster, leader, 40, "while-down")
    others = [n for n in (1, 2, 3) if n != lagging]
    await same_state(cluster, others, last + 1)
    for node_id in others:
        await cluster.call(node_id, "/kv/snapshot", {})
        state = await cluster.state(node_id)
        assert state is not None and state["raft"]["log_start_offset"] > lagging_end  # trimmed past it

    cluster.start(lagging)
    caught_up = await cluster.wait_applied(lagging, last + 1)
    assert caught_up["loaded_snapshots"] == 1  # by FetchSnapshot, not by log
    after = await commit(cluster, leader, 3, "after")
    state = await same_state(cluster, [1, 2, 3], after + 1)
    assert state["count"] == 48


async def test_graceful_stop_of_the_leader_hands_over_with_end_quorum_epoch(make_cluster) -> None:
    # Followers would wait 20 s before running on their own: a new leader within the bounded wait
    # below can only come from the EndQuorumEpoch the stopping leader sends.
    cluster = await make_cluster(controller_quorum_fetch_timeout_ms=20_000)
    leader = await cluster.wait_leader()
    last = await commit(cluster, leader, 5, "before")
    await same_state(cluster, [1, 2, 3], last + 1)
    epoch = (await cluster.state(leader))["raft"]["epoch"]

    cluster.signal(leader, signal.SIGTERM)
    assert cluster.wait_exit(leader, timeout_s=15) == 0
    survivors = [n for n in (1, 2, 3) if n != leader]
    new_leader = await cluster.wait_leader(timeout_s=8, among=survivors)
    state = await cluster.state(new_leader)
    assert state["raft"]["epoch"] == epoch + 1
    last = await commit(cluster, new_leader, 3, "after")
    await same_state(cluster, survivors, last + 1)
    assert "resigned" in cluster.log_path(leader).read_text()


async def test_a_damaged_quorum_state_file_is_refused_with_a_clear_message(make_cluster) -> None:
    cluster = await make_cluster()
    leader = await cluster.wait_leader()
    last = await commit(cluster, leader, 2, "x")
    victim = next(n for n in (1, 2, 3) if n != leader)
    # A commit needs two of the three: on a loaded machine the victim may not have learned the epoch
    # yet, and then has no quorum-state file to damage. Having applied the entries, it follows the leader.
    await cluster.wait_applied(victim, last + 1)
    cluster.kill(victim)
    path = cluster.data_dir(victim) / METADATA_LOG_DIR / quorum_state_file.FILE_NAME
    path.write_bytes(path.read_bytes().replace(b'"leaderEpoch": ', b'"leaderEpoch": 9'))
    cluster.start(victim)
    assert cluster.wait_exit(victim, timeout_s=30) != 0
    log = cluster.log_path(victim).read_text()
    assert "quorum-state fails its CRC check" in log
