"""Raft roles as objects: a transition replaces the role object (persisting first), and the
epoch rule runs once per message, before the role sees it."""

from __future__ import annotations

import pytest

from kraftpy.protocol.errors import ErrorCode
from kraftpy.raft.actions import PersistQuorumState, RoleChanged, Send
from kraftpy.raft.log import Entry
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from kraftpy.raft.quorum_state import QuorumState, Role
from kraftpy.raft.roles import Candidate, Follower, Leader, Prospective, RaftInvariantError, Resigned, Unattached
from tests.unit.raft.test_raft_support import CLUSTER, drain, make_log, make_node, sent


def test_each_role_is_its_own_object_and_a_transition_replaces_it() -> None:
    node, log = make_node(1, state=QuorumState(1, None, 2))
    follower = node.state
    assert isinstance(follower, Follower) and follower.fetch_inflight is not None
    drain(node, log)
    node.tick(5000)  # the leader is silent: a pre-vote
    assert isinstance(node.state, Prospective) and not hasattr(node.state, "fetch_inflight")
    drain(node, log, now_ms=5000)
    round_ = node.state.round
    node.handle(VoteResponse(CLUSTER, 2, 1, round_, 1, None, True, True), 5000)
    assert isinstance(node.state, Candidate) and node.state.round != round_
    drain(node, log, now_ms=5000)
    node.handle(VoteResponse(CLUSTER, 2, 1, node.state.round, 2, None, True, False), 5000)
    assert isinstance(node.state, Leader) and node.state.state.epoch == 2
    drain(node, log, now_ms=5000)
    node.resign(5001)
    resigned = node.state
    assert isinstance(resigned, Resigned) and resigned.end_pending == {2, 3}
    assert [r.role for r in (follower, resigned)] == [Role.FOLLOWER, Role.RESIGNED]


def test_every_transition_persists_before_it_announces_or_sends() -> None:
    node, log = make_node(1, log=make_log(1), state=QuorumState(1))

    def step() -> list:
        actions = node.take_actions()
        for action in actions:
            log.apply(action)  # the log writes only: the flush of the leader's entry stays pending
        return actions

    step()
    steps = []
    node.tick(5000)
    steps.append(step())  # prospective: nothing to persist
    node.handle(VoteResponse(CLUSTER, 2, 1, node._election_round, 1, None, True, True), 5000)
    steps.append(step())  # candidate of epoch 2
    node.handle(VoteResponse(CLUSTER, 2, 1, node._election_round, 2, None, True, False), 5000)
    steps.append(step())  # leader
    node.handle(BeginQuorumEpochRequest(CLUSTER, 3, 1, 0, 3, 3), 5001)
    steps.append(step())  # follower of 3 in epoch 3
    for actions in steps[1:]:
        kinds = [type(a) for a in actions]
        assert kinds.index(PersistQuorumState) < kinds.index(RoleChanged) < kinds.index(Send), kinds
    assert [a.state for a in steps[-1] if isinstance(a, PersistQuorumState)] == [QuorumState(3, None, 3)]


def test_a_newer_epoch_moves_the_node_before_the_role_sees_the_message() -> None:
    node, log = make_node(1, state=QuorumState(4, None, 2))
    drain(node, log)
    # a fetch of epoch 6 from a voter: unattached in 6, then refused as a non-leader
    node.handle(FetchRequest(CLUSTER, 3, 1, 9, 6, 0, 0, 500), 10)
    actions = drain(node, log, now_ms=10)
    assert isinstance(node.state, Unattached) and node.epoch == 6
    (answer,) = sent(actions, FetchResponse)
    assert (answer.epoch, answer.error, answer.leader_id) == (6, ErrorCode.NOT_LEADER_OR_FOLLOWER, None)
    # an EndQuorumEpoch of epoch 7 makes its sender our leader, then counts as its resignation
    node.handle(EndQuorumEpochRequest(CLUSTER, 3, 1, 0, 7, 3, (1,)), 20)
    actions = drain(node, log, now_ms=20)
    assert isinstance(node.state, Follower) and node.leader_id == 3
    assert node.next_deadline_ms() == 20, "the first preferred successor runs at once"
    assert sent(actions, EndQuorumEpochResponse)[0].epoch == 7


def test_an_older_epoch_is_answered_once_and_changes_nothing() -> None:
    node, log = make_node(1, state=QuorumState(5, None, 2))
    drain(node, log)
    before = node.state
    node.handle(BeginQuorumEpochRequest(CLUSTER, 3, 1, 0, 4, 3), 10)
    node.handle(VoteRequest(CLUSTER, 3, 1, 7, 4, 9, 9, False), 10)
    node.handle(FetchRequest(CLUSTER, 3, 1, 8, 4, 0, 0, 500), 10)
    actions = drain(node, log, now_ms=10)
    assert node.state is before and node.epoch == 5 and not [a for a in actions if isinstance(a, PersistQuorumState)]
    begin, vote, fetch = (m for m in sent(actions) if m.dst == 3)
    assert isinstance(begin, BeginQuorumEpochResponse) and begin.error is ErrorCode.FENCED_LEADER_EPOCH
    assert isinstance(vote, VoteResponse) and not vote.granted and vote.epoch == 5
    assert isinstance(fetch, FetchResponse) and fetch.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert all(m.epoch == 5 for m in (begin, vote, fetch))


def test_a_response_that_moves_the_node_is_not_handled_by_its_new_role() -> None:
    node, log = make_node(1, log=make_log(1), state=QuorumState(1))
    drain(node, log)
    node.tick(5000)
    drain(node, log, now_ms=5000)
    # a pre-vote answer from a voter already in epoch 3: unattached in 3, the grant is not counted
    node.handle(VoteResponse(CLUSTER, 2, 1, node._election_round, 3, None, True, True), 5000)
    assert isinstance(node.state, Unattached) and node.epoch == 3
    # a fetch answer nobody asked for carries no epoch news
    node.handle(FetchResponse(CLUSTER, 2, 1, 12345, 9, 2), 5001)
    assert node.epoch == 3


def following(now_ms: int = 0):
    """Node 2, a follower of leader 1 in epoch 4, with its first fetch in flight."""
    node, log = make_node(2, state=QuorumState(4, None, 1), now_ms=now_ms)
    drain(node, log, now_ms=now_ms)
    assert node.role is Role.FOLLOWER and node._fetch_inflight is not None
    return node, log


def answer(node, **fields) -> FetchResponse:
    return FetchResponse(CLUSTER, 1, 2, node._fetch_inflight, 4, 1, fetch_offset=0, **fields)


def test_a_fetch_answer_with_a_gap_in_its_entries_is_not_appended() -> None:
    node, log = following()
    node.handle(answer(node, entries=(Entry(0, 4, b"a"), Entry(2, 4, b"c")), high_watermark=0), 10)
    actions = drain(node, log, now_ms=10)
    assert log.end_offset == 0 and not sent(actions, FetchRequest), "appended, or fetched again at once"


def test_entries_of_an_epoch_beyond_the_followers_are_an_invariant_failure() -> None:
    node, log = following()
    with pytest.raises(RaftInvariantError):
        node.handle(answer(node, entries=(Entry(0, 5, b"a"),), high_watermark=0), 10)
    assert log.end_offset == 0


def test_end_quorum_epoch_from_a_voter_that_does_not_lead_is_ignored() -> None:
    node, log = following()
    deadline = node.next_deadline_ms()
    node.handle(EndQuorumEpochRequest(CLUSTER, 3, 2, 0, 4, 3, (2, 1)), 10)
    drain(node, log, now_ms=10)
    assert node.next_deadline_ms() == deadline, "a voter that does not lead ended the leader's epoch"
    node.handle(EndQuorumEpochRequest(CLUSTER, 1, 2, 0, 4, 1, (2, 3)), 20)  # the leader's own does
    drain(node, log, now_ms=20)
    assert node.next_deadline_ms() == 20


def test_an_answer_from_another_node_with_the_fetch_in_flights_id_is_not_claimed() -> None:
    node, log = following()
    stray = FetchResponse(CLUSTER, 3, 2, node._fetch_inflight, 4, 1, fetch_offset=0, entries=(Entry(0, 4, b"x"),))
    node.handle(stray, 10)
    drain(node, log, now_ms=10)
    assert log.end_offset == 0 and node._fetch_inflight is not None


def test_no_role_moves_on_before_its_deadline() -> None:
    unattached, log = make_node(1, state=QuorumState(4))
    deadline = unattached.next_deadline_ms()
    unattached.tick(deadline - 1)
    drain(unattached, log, now_ms=deadline - 1)
    assert unattached.role is Role.UNATTACHED
    resigned, log = make_node(1, state=QuorumState(7, 1, 1))  # a restarted leader comes back resigned
    resigned.tick(1)
    drain(resigned, log, now_ms=1)
    assert resigned.role is Role.RESIGNED
