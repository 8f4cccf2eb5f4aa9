"""A forged Raft request cannot end the quorum (issue 11, section 4), on three real node processes.

The attack: a `/raft/begin_quorum_epoch` naming the current leader with an epoch at the top of the
int32 range, sent to two voters. Before the fix they accepted it, persisted it, and the next leader
could not write its epoch (int32 in every batch header): every voter stopped, and every restart
failed again on the persisted state. Now an epoch beyond int32, or more than MAX_EPOCH_JUMP above
the receiver's, is INVALID_REQUEST; the highest epoch a request may bring is only an election.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT32_MAX
from kraftpy.raft import codec
from kraftpy.raft.messages import BeginQuorumEpochRequest, to_dict
from kraftpy.raft.node import MAX_EPOCH_JUMP
from tests.integration.raft_procs import ProcCluster

pytestmark = pytest.mark.slow


@pytest.fixture
async def cluster(tmp_path: Path):
    procs = ProcCluster(tmp_path / "c")
    procs.start_all()
    try:
        await commit_one(procs, "first")
        for node_id in (1, 2, 3):  # every node up (a leader needs only two of them)
            await procs.wait_applied(node_id, 1)
        yield procs
    finally:
        await procs.close()


async def forge_begin_quorum_epoch(cluster: ProcCluster, target: int, leader: int, epoch: int) -> dict:
    request = BeginQuorumEpochRequest(cluster.cluster_id, leader, target, 0, epoch, leader)
    return await cluster.rpc.call(
        cluster.address(target), codec.ROUTES[BeginQuorumEpochRequest], to_dict(request), raise_errors=False
    )


async def commit_one(cluster: ProcCluster, tag: str) -> int:
    """Append through whoever leads now (the leader may change under us); the committed offset."""
    for _ in range(50):
        leader = await cluster.wait_leader()
        try:
            return (await cluster.append(leader, [tag.encode()]))["last_offset"]
        except KafkaError:
            continue
    raise AssertionError(f"no commit of {tag}")


async def test_a_forged_top_epoch_is_refused_and_the_quorum_keeps_working(cluster: ProcCluster) -> None:
    leader = await cluster.wait_leader()
    await commit_one(cluster, "before")
    targets = [n for n in (1, 2, 3) if n != leader]
    for target in targets:
        answer = await forge_begin_quorum_epoch(cluster, target, leader, INT32_MAX)
        assert answer["error_code"] == ErrorCode.INVALID_REQUEST, answer
        assert "epoch" in answer["message"]
    last = await commit_one(cluster, "after")
    for node_id in (1, 2, 3):
        await cluster.wait_applied(node_id, last + 1)
    assert sorted(cluster.alive()) == [1, 2, 3]

    for node_id in (1, 2, 3):  # and every node restarts on what it persisted
        cluster.kill(node_id)
    cluster.start_all()
    last = await commit_one(cluster, "restarted")
    for node_id in (1, 2, 3):
        state = await cluster.wait_applied(node_id, last + 1)
        assert state["raft"]["epoch"] < 1000
    assert sorted(cluster.alive()) == [1, 2, 3]


async def test_the_highest_accepted_epoch_is_an_election_and_restarts_work(cluster: ProcCluster) -> None:
    leader = await cluster.wait_leader()
    await commit_one(cluster, "before")
    epoch = (await cluster.state(leader))["raft"]["epoch"] + MAX_EPOCH_JUMP
    for target in (n for n in (1, 2, 3) if n != leader):
        answer = await forge_begin_quorum_epoch(cluster, target, leader, epoch)
        assert answer["error_code"] in (ErrorCode.NONE, ErrorCode.INVALID_REQUEST), answer
    last = await commit_one(cluster, "after")
    for node_id in (1, 2, 3):
        await cluster.wait_applied(node_id, last + 1)
    assert sorted(cluster.alive()) == [1, 2, 3]

    for node_id in (1, 2, 3):  # every node restarts on what it persisted
        cluster.kill(node_id)
    cluster.start_all()
    last = await commit_one(cluster, "restarted")
    for node_id in (1, 2, 3):
        state = await cluster.wait_applied(node_id, last + 1)
        assert state["raft"]["epoch"] <= INT32_MAX
    assert sorted(cluster.alive()) == [1, 2, 3]
