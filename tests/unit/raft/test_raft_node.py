"""Node-level contracts with its shell: the shell-contract check, snapshots served in chunks
and installed by a follower, reads confirmed by a round of fetches, config validation."""

from __future__ import annotations

import pytest

from kraftpy.protocol.errors import ErrorCode
from kraftpy.raft.actions import (
    AppendEntries,
    CommitAdvanced,
    Flush,
    InstallSnapshot,
    ReadResolved,
    TrimLog,
    WriteSnapshotChunk,
)
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.log import OffsetAndEpoch
from kraftpy.raft.log_view import ShellContractError
from kraftpy.raft.messages import (
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)
from kraftpy.raft.quorum_state import QuorumState
from tests.unit.raft.test_raft_leader import elected, fetch
from tests.unit.raft.test_raft_support import CLUSTER, drain, make_log, make_node, sent


def test_shell_must_apply_log_actions_before_the_next_input() -> None:
    node, _log, _ = elected()
    node.append([b"x"], 6000)
    node.tick(6100)
    actions = node.take_actions()
    assert any(isinstance(a, AppendEntries) for a in actions)
    with pytest.raises(ShellContractError):
        node.tick(6200)  # the AppendEntries was never applied


def test_follower_fetches_only_from_a_flushed_position() -> None:
    node, log = make_node(2, state=QuorumState(1, None, 1))
    (first,) = sent(drain(node, log), FetchRequest)
    entries = make_log(1, 1, 1).entries()
    node.handle(FetchResponse(CLUSTER, 1, 2, first.correlation_id, 1, 1, fetch_offset=0, high_watermark=2,
                              entries=tuple(entries)), 10)  # fmt: skip
    actions = drain(node, log, flush=False, now_ms=10)
    assert [type(a) for a in actions] == [AppendEntries, Flush]
    assert not sent(actions, FetchRequest), "no fetch (an acknowledgement) before the flush"
    log.flush(3)
    node.on_flushed(3, 12)
    actions = drain(node, log, now_ms=12)
    assert CommitAdvanced(2) in actions, "the high watermark is exposed once the entries are durable"
    (second,) = sent(actions, FetchRequest)
    assert second.fetch_offset == 3 and second.last_fetched_epoch == 1


def leader_with_snapshot():
    """Leader 1 of epoch 2 with a snapshot at offset 4 ("0123456789") and its log trimmed to it."""
    leader, leader_log, _ = elected(log=make_log(1, 1, 1, 1))
    for offset, src in ((5, 2), (5, 3)):
        fetch(leader, src, offset, 2, 5001, corr=src)
        drain(leader, leader_log, now_ms=5001)
    assert leader.high_watermark == 5
    snapshot_id = leader.snapshot_id_at(4)
    leader_log.create_snapshot(snapshot_id, b"0123456789")
    leader.on_snapshot_created(snapshot_id, 5002)
    assert TrimLog(4) in drain(leader, leader_log, now_ms=5002)
    assert leader_log.log_start_offset == 4
    return leader, leader_log, snapshot_id


def test_snapshot_is_served_in_chunks_and_installed() -> None:
    leader, leader_log, snapshot_id = leader_with_snapshot()
    follower, follower_log = make_node(3, state=QuorumState(2, None, 1), snapshot_chunk_bytes=4)
    request = sent(drain(follower, follower_log), FetchRequest)[0]
    now = 5003
    for _ in range(10):
        leader.handle(request, now)
        (response,) = sent(drain(leader, leader_log, now_ms=now))
        follower.handle(response, now)
        actions = drain(follower, follower_log, now_ms=now)
        requests = sent(actions)
        if any(isinstance(a, InstallSnapshot) for a in actions):
            break
        request = requests[0]
        now += 1
    chunks = [a for a in actions if isinstance(a, WriteSnapshotChunk)]
    assert chunks[-1].position == 8
    assert follower_log.log_start_offset == 4 and follower_log.snapshot_data(snapshot_id) == b"0123456789"
    assert follower.high_watermark == 4
    (next_fetch,) = requests
    assert isinstance(next_fetch, FetchRequest) and next_fetch.fetch_offset == 4
    assert next_fetch.last_fetched_epoch == snapshot_id.epoch == 1


def test_a_snapshot_other_than_the_latest_is_not_served() -> None:
    leader, leader_log, snapshot_id = leader_with_snapshot()
    older = OffsetAndEpoch(snapshot_id.offset - 1, snapshot_id.epoch)
    leader.handle(FetchSnapshotRequest(CLUSTER, 2, 1, 5, leader.epoch, older, 0, 100), 5003)
    (answer,) = sent(drain(leader, leader_log, now_ms=5003), FetchSnapshotResponse)
    assert answer.error is ErrorCode.SNAPSHOT_NOT_FOUND and answer.data == b""


def test_a_snapshot_chunk_of_another_snapshot_is_not_written() -> None:
    leader, leader_log, snapshot_id = leader_with_snapshot()
    follower, follower_log = make_node(3, state=QuorumState(2, None, 1), snapshot_chunk_bytes=4)
    request = sent(drain(follower, follower_log), FetchRequest)[0]
    leader.handle(request, 5003)
    follower.handle(sent(drain(leader, leader_log, now_ms=5003))[0], 5003)  # points it at the snapshot
    (snapshot_request,) = sent(drain(follower, follower_log, now_ms=5003), FetchSnapshotRequest)
    other = OffsetAndEpoch(snapshot_id.offset + 1, snapshot_id.epoch)
    forged = FetchSnapshotResponse(
        CLUSTER, 1, 3, snapshot_request.correlation_id, 2, 1, snapshot_id=other, position=0, size=4, data=b"evil"
    )
    follower.handle(forged, 5004)
    actions = drain(follower, follower_log, now_ms=5004)
    assert not [a for a in actions if isinstance(a, WriteSnapshotChunk | InstallSnapshot)]


def test_fetch_snapshot_of_an_unknown_snapshot() -> None:
    leader, log, _ = elected()
    leader.handle(FetchSnapshotRequest(CLUSTER, 2, 1, 5, leader.epoch, OffsetAndEpoch(3, 1), 0, 100), 5001)
    (answer,) = sent(drain(leader, log, now_ms=5001), FetchSnapshotResponse)
    assert answer.error is ErrorCode.SNAPSHOT_NOT_FOUND


def test_read_index_waits_for_a_round_of_fetches_after_the_read() -> None:
    leader, log, _ = elected()
    fetch(leader, 2, 1, 1, 5001)  # commits the leader-change entry
    drain(leader, log, now_ms=5001)
    fetch(leader, 2, 1, 1, 5002, corr=2)  # parked
    drain(leader, log, now_ms=5002)
    read_id = leader.read_index(5003)
    actions = drain(leader, log, now_ms=5003)
    assert not [a for a in actions if isinstance(a, ReadResolved)]
    (answer,) = sent(actions, FetchResponse)  # the parked fetch is answered at once with the round
    assert answer.leader_round == 1
    fetch(leader, 3, 1, 1, 5004, corr=3)  # a fetch that was sent before it saw the round: no proof
    assert not [a for a in drain(leader, log, now_ms=5004) if isinstance(a, ReadResolved)]
    leader.handle(FetchRequest(CLUSTER, 2, 1, 4, 1, 1, 1, 500, 1), 5005)
    assert ReadResolved(read_id, 1) in drain(leader, log, now_ms=5005)


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="election_timeout_ms must be positive, got 0"):
        RaftConfig(election_timeout_ms=0)
    with pytest.raises(ValueError, match=r"check_quorum_factor must be at least 1\.0"):
        RaftConfig(check_quorum_factor=0.5)
    assert RaftConfig().check_quorum_timeout_ms == 3000


def test_every_tick_consumes_its_due_timers() -> None:
    """Regression (found by the simulator with a 500 ms request timeout): a resigned leader whose
    EndQuorumEpoch was acknowledged by all kept reporting a past deadline, so a shell spun on it."""
    from kraftpy.raft.messages import EndQuorumEpochRequest, EndQuorumEpochResponse

    leader, log, _ = elected()
    leader.config = RaftConfig(request_timeout_ms=500)
    leader.resign(5001)
    requests = sent(drain(leader, log, now_ms=5001), EndQuorumEpochRequest)
    assert [r.preferred_successors for r in requests] == [(2, 3), (2, 3)]
    for request in requests:
        leader.handle(EndQuorumEpochResponse(CLUSTER, request.dst, 1, 0, 1, 1), 5002)
        drain(leader, log, now_ms=5002)
    for now in (5600, 5700):
        leader.tick(now)
        drain(leader, log, now_ms=now)
        assert leader.next_deadline_ms() > now
