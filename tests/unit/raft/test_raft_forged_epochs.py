"""Forged Raft requests cannot move a voter to an epoch the quorum could not elect in, nor trip the
core's safety checks (issue 11, section 4). Pure core and codec checks; the real-cluster attack is
tests/integration/test_edge_forged_raft.py."""

from __future__ import annotations

import pytest

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT32_MAX
from kraftpy.raft import codec
from kraftpy.raft.messages import BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest, VoteRequest, to_dict
from kraftpy.raft.node import MAX_EPOCH_JUMP
from kraftpy.raft.quorum_state import QuorumState, Role
from tests.unit.raft.test_raft_leader import elected
from tests.unit.raft.test_raft_support import CLUSTER, drain, make_node


@pytest.mark.parametrize(
    "request_",
    [
        BeginQuorumEpochRequest(CLUSTER, 2, 1, 0, 5 + MAX_EPOCH_JUMP + 1, 2),
        EndQuorumEpochRequest(CLUSTER, 2, 1, 0, INT32_MAX, 2, (1,)),
        VoteRequest(CLUSTER, 2, 1, 9, INT32_MAX, 0, 0, False),
        VoteRequest(CLUSTER, 2, 1, 9, INT32_MAX, 0, 0, True),
        FetchRequest(CLUSTER, 2, 1, 9, 5 + MAX_EPOCH_JUMP + 1, 0, 0, 500),
    ],
    ids=lambda m: type(m).__name__,
)
def test_a_request_may_not_jump_the_epoch_too_far(request_) -> None:
    node, log = make_node(1, state=QuorumState(5))
    drain(node, log)
    refused = node.screen(request_)
    assert refused is not None and refused.code is ErrorCode.INVALID_REQUEST and "epoch" in refused.message
    node.handle(request_, 10)
    drain(node, log)
    assert node.epoch == 5  # nothing persisted, nothing changed


def test_the_largest_allowed_jump_is_only_a_new_epoch() -> None:
    node, log = make_node(1, state=QuorumState(5))
    request = BeginQuorumEpochRequest(CLUSTER, 2, 1, 0, 5 + MAX_EPOCH_JUMP, 2)
    assert node.screen(request) is None
    node.handle(request, 10)
    drain(node, log)
    assert (node.epoch, node.role, node.leader_id) == (5 + MAX_EPOCH_JUMP, Role.FOLLOWER, 2)


def test_a_second_leader_claimed_for_the_leaders_own_epoch_is_refused_not_fatal() -> None:
    node, log, _ = elected()
    forged = BeginQuorumEpochRequest(CLUSTER, 2, 1, 0, node.epoch, 2)
    assert node.screen(forged) is not None
    node.handle(forged, 6000)  # used to raise RaftInvariantError (two leaders in one epoch): fatal
    drain(node, log, now_ms=6000)
    assert node.role is Role.LEADER


def test_a_voter_at_the_top_epoch_waits_instead_of_running_for_an_epoch_beyond_int32() -> None:
    node, log = make_node(1, state=QuorumState(INT32_MAX))
    for now in (5_000, 10_000, 20_000):
        node.tick(now)
        drain(node, log, now_ms=now)
    assert node.epoch == INT32_MAX and node.role is Role.UNATTACHED


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("epoch", INT32_MAX + 1),
        ("epoch", 1 << 70),
        ("src", INT32_MAX + 1),
        ("leader_id", -1),
        ("correlation_id", 1 << 64),
        ("cluster_id", "c" * 40_000),
        ("epoch", True),
        ("leader_id", "2"),
    ],
)
def test_begin_quorum_epoch_fields_are_held_to_their_width(field: str, value: object) -> None:
    body = {**to_dict(BeginQuorumEpochRequest(CLUSTER, 2, 1, 0, 3, 2)), field: value}
    with pytest.raises(KafkaError) as info:
        codec.decode_request("/raft/begin_quorum_epoch", body)
    assert info.value.code is ErrorCode.INVALID_REQUEST and field in info.value.message
