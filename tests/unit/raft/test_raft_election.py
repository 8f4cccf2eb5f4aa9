"""Vote granting: the pure rules, then a node's answers and the order of its actions
(the vote is persisted before the answer that carries it leaves)."""

from __future__ import annotations

import random

from kraftpy.protocol.errors import ErrorCode
from kraftpy.raft.actions import PersistQuorumState, Send
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.election import (
    VoteTally,
    can_grant_prevote,
    can_grant_vote,
    election_backoff_ms,
    election_timeout_ms,
    log_is_up_to_date,
    successor_backoff_ms,
)
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    VoteRequest,
    VoteResponse,
)
from kraftpy.raft.quorum_state import QuorumState, Role
from tests.unit.raft.test_raft_support import CLUSTER, drain, make_log, make_node, sent


def test_up_to_date_compares_last_epoch_then_end_offset() -> None:
    assert log_is_up_to_date(3, 5, 2, 100)  # a higher last epoch wins over a longer log
    assert not log_is_up_to_date(2, 100, 3, 5)
    assert log_is_up_to_date(3, 5, 3, 5)
    assert not log_is_up_to_date(3, 4, 3, 5)


def test_vote_rules() -> None:
    base = {"candidate_id": 2, "candidate_epoch": 5, "epoch": 5, "voted_for": None, "leader_id": None, "log_ok": True}
    assert can_grant_vote(**base)
    assert can_grant_vote(**{**base, "voted_for": 2}), "repeating the same vote is fine"
    assert not can_grant_vote(**{**base, "voted_for": 3}), "one vote per epoch"
    assert not can_grant_vote(**{**base, "leader_id": 3}), "the epoch already has a leader"
    assert not can_grant_vote(**{**base, "log_ok": False})
    assert not can_grant_vote(**{**base, "candidate_epoch": 4})


def test_prevote_rules() -> None:
    base = {"candidate_epoch": 6, "epoch": 5, "log_ok": True, "is_leader": False, "has_live_leader": False}
    assert can_grant_prevote(**base)
    assert not can_grant_prevote(**{**base, "has_live_leader": True})
    assert not can_grant_prevote(**{**base, "is_leader": True})
    assert not can_grant_prevote(**{**base, "log_ok": False})
    assert not can_grant_prevote(**{**base, "candidate_epoch": 5})


def test_election_timeout_is_in_t_2t() -> None:
    rng = random.Random(1)
    config = RaftConfig()
    draws = [election_timeout_ms(config, rng) for _ in range(2000)]
    assert min(draws) >= 1000 and max(draws) < 2000
    assert max(draws) - min(draws) > 900


def test_election_backoff_is_randomised_up_to_a_doubling_cap() -> None:
    # retry 20 ms, at most 1000: attempt k waits in [1, 20 * 2**k], never past the maximum
    rng = random.Random(2)
    config = RaftConfig()
    for attempt, cap in [(0, 20), (1, 40), (3, 160), (5, 640), (6, 1000), (40, 1000)]:
        draws = [election_backoff_ms(config, rng, attempt) for _ in range(2000)]
        assert min(draws) >= 1 and max(draws) <= cap, (attempt, min(draws), max(draws))
        assert max(draws) > cap * 0.9 and min(draws) < cap * 0.1 + 1, (attempt, min(draws), max(draws))


def test_successor_backoff_lets_the_best_successor_run_first() -> None:
    config = RaftConfig()
    assert [successor_backoff_ms(config, p) for p in range(-1, 8)] == [0, 0, 40, 80, 160, 320, 640, 1000, 1000]
    assert successor_backoff_ms(config, 10**6) == 1000


def test_tally_won_and_lost() -> None:
    tally = VoteTally(frozenset({1, 2, 3, 4, 5}))
    tally.record(1, True)
    tally.record(2, True)
    tally.record(2, False)  # a duplicate answer counts once
    assert not tally.won and not tally.lost
    tally.record(3, False)
    tally.record(4, False)
    assert not tally.lost
    tally.record(5, False)
    assert tally.lost
    tally.record(9, True)  # not a voter
    assert not tally.won


def vote(node, candidate, epoch, last_epoch, end, pre=False, now=0):
    node.handle(VoteRequest(CLUSTER, candidate, node.node_id, 77, epoch, last_epoch, end, pre), now)


def test_vote_is_persisted_before_the_answer() -> None:
    node, log = make_node(1)
    vote(node, 2, 1, 0, 0)
    actions = drain(node, log)
    persists = [i for i, a in enumerate(actions) if isinstance(a, PersistQuorumState)]
    answers = [i for i, a in enumerate(actions) if isinstance(a, Send)]
    assert actions[persists[-1]] == PersistQuorumState(QuorumState(1, 2, None))
    assert persists[-1] < answers[0]
    (answer,) = sent(actions, VoteResponse)
    assert answer.granted and answer.epoch == 1


def test_one_vote_per_epoch_and_restart_keeps_it() -> None:
    node, log = make_node(1)
    vote(node, 2, 1, 0, 0)
    drain(node, log)
    vote(node, 3, 1, 0, 0)
    (answer,) = sent(drain(node, log), VoteResponse)
    assert not answer.granted
    restarted, _ = make_node(1, log=log, state=node._persisted)
    vote(restarted, 3, 1, 0, 0)
    (answer,) = sent(drain(restarted, log), VoteResponse)
    assert not answer.granted, "the vote survives the restart"


def test_vote_refused_for_a_stale_log() -> None:
    node, log = make_node(1, log=make_log(1, 1, 2), state=QuorumState(2))
    vote(node, 2, 3, 1, 10)  # longer log, but its last epoch is older
    actions = drain(node, log)
    (answer,) = sent(actions, VoteResponse)
    assert not answer.granted
    assert node.epoch == 3, "a real vote request of a higher epoch still moves the voter up"
    vote(node, 3, 3, 2, 3)
    (answer,) = sent(drain(node, log), VoteResponse)
    assert answer.granted


def test_prevote_changes_nothing() -> None:
    node, log = make_node(1, state=QuorumState(4))
    vote(node, 2, 5, 0, 0, pre=True)
    actions = drain(node, log)
    assert not [a for a in actions if isinstance(a, PersistQuorumState)]
    (answer,) = sent(actions, VoteResponse)
    assert answer.granted and answer.pre_vote and node.epoch == 4 and node.voted_for is None


def test_prevote_refused_while_the_leader_is_live() -> None:
    node, log = make_node(2, state=QuorumState(4, None, 1), now_ms=0)
    drain(node, log)
    node.handle(FetchResponse(CLUSTER, 1, 2, node._fetch_inflight, 4, 1, fetch_offset=0, high_watermark=0), 100)
    drain(node, log, now_ms=100)
    vote(node, 3, 5, 0, 0, pre=True, now=1000)
    (answer,) = sent(drain(node, log, now_ms=1000), VoteResponse)
    assert not answer.granted, "heard from the leader 900 ms ago, within the fetch timeout"
    node.tick(2201)  # fetch timeout (+ at most 100 ms of jitter): it runs a pre-vote itself
    drain(node, log, now_ms=2201)
    assert node.role is Role.PROSPECTIVE
    vote(node, 3, 5, 0, 0, pre=True, now=2300)
    (answer,) = sent(drain(node, log, now_ms=2300), VoteResponse)
    assert answer.granted


def test_end_quorum_epoch_lets_the_successor_run_at_once() -> None:
    node, log = make_node(2, state=QuorumState(4, None, 1))
    drain(node, log)
    node.handle(EndQuorumEpochRequest(CLUSTER, 1, 2, 0, 4, 1, (2, 3)), 10)
    drain(node, log, now_ms=10)
    assert node.next_deadline_ms() == 10
    node.tick(10)
    actions = drain(node, log, now_ms=10)
    assert node.role is Role.PROSPECTIVE
    assert len(sent(actions, VoteRequest)) == 2


def test_begin_quorum_epoch_makes_a_follower() -> None:
    node, log = make_node(3, state=QuorumState(2, 3, None))
    drain(node, log)
    node.handle(BeginQuorumEpochRequest(CLUSTER, 1, 3, 0, 3, 1), 5)
    actions = drain(node, log, now_ms=5)
    assert node.role is Role.FOLLOWER and node.leader_id == 1 and node.epoch == 3
    assert actions[0] == PersistQuorumState(QuorumState(3, None, 1))


def test_restarted_leader_comes_back_resigned() -> None:
    node, _ = make_node(1, state=QuorumState(7, 1, 1))
    assert node.role is Role.RESIGNED
    vote(node, 2, 7, 9, 9)
    (answer,) = sent(node.take_actions(), VoteResponse)
    assert not answer.granted


def test_a_follower_never_votes_in_the_epoch_whose_leader_it_follows() -> None:
    # It learned of leader 2 without voting (BeginQuorumEpoch): a vote for 3 in the same epoch
    # could elect a second leader of epoch 4.
    node, log = make_node(1, state=QuorumState(4, None, 2))
    drain(node, log)
    assert node.role is Role.FOLLOWER and node.voted_for is None
    vote(node, 3, 4, 9, 9)
    actions = drain(node, log)
    (answer,) = sent(actions, VoteResponse)
    assert not answer.granted and node.voted_for is None and node.leader_id == 2
    assert not [a for a in actions if isinstance(a, PersistQuorumState)]


def test_a_refused_fetch_names_the_leader_only_when_one_is_known() -> None:
    follower, log = make_node(1, state=QuorumState(4, None, 2))
    drain(follower, log)
    follower.handle(FetchRequest(CLUSTER, 3, 1, 9, 4, 0, 0, 0), 0)
    (answer,) = sent(drain(follower, log), FetchResponse)
    assert answer.error is ErrorCode.NOT_LEADER_OR_FOLLOWER and answer.leader_id == 2
    unattached, log = make_node(1, state=QuorumState(4))
    drain(unattached, log)
    unattached.handle(FetchRequest(CLUSTER, 3, 1, 9, 4, 0, 0, 0), 0)
    (answer,) = sent(drain(unattached, log), FetchResponse)
    assert answer.error is ErrorCode.NOT_LEADER_OR_FOLLOWER and answer.leader_id is None


def test_messages_of_another_cluster_are_refused() -> None:
    node, log = make_node(1)
    node.handle(VoteRequest("other-cluster", 2, 1, 5, 9, 9, 9, False), 0)
    actions = drain(node, log)
    assert not [a for a in actions if isinstance(a, PersistQuorumState)]
    (answer,) = sent(actions, VoteResponse)
    assert answer.error is ErrorCode.INCONSISTENT_CLUSTER_ID and not answer.granted
    assert node.epoch == 0


def test_observer_never_votes_nor_runs() -> None:
    node, log = make_node(9, voters=(1, 2, 3))
    node.tick(100_000)
    actions = drain(node, log, now_ms=100_000)
    assert node.role is Role.UNATTACHED and not sent(actions, VoteRequest)
    vote(node, 2, 1, 0, 0)
    (answer,) = sent(drain(node, log), VoteResponse)
    assert not answer.granted and answer.error is ErrorCode.INCONSISTENT_VOTER_SET


def candidate_of_epoch_5():
    """Node 1, a candidate of epoch 5 (it won its pre-vote and voted for itself)."""
    node, log = make_node(1, state=QuorumState(4))
    node.tick(5000)
    drain(node, log, now_ms=5000)
    assert node.role is Role.PROSPECTIVE
    for voter in (2, 3):
        node.handle(VoteResponse(CLUSTER, voter, 1, node._election_round, 4, None, True, True), 5000)
    drain(node, log, now_ms=5000)
    assert node.role is Role.CANDIDATE and node.epoch == 5
    return node, log


def test_a_candidate_waits_for_its_election_deadline() -> None:
    node, log = candidate_of_epoch_5()
    deadline = node.next_deadline_ms()
    node.tick(deadline - 1)
    drain(node, log, now_ms=deadline - 1)
    assert node.role is Role.CANDIDATE and node.epoch == 5


def test_a_candidate_told_of_its_epochs_leader_follows_it() -> None:
    node, log = candidate_of_epoch_5()
    node.handle(VoteResponse(CLUSTER, 2, 1, node._election_round, 5, 3, False, False), 5001)
    drain(node, log, now_ms=5001)
    assert node.role is Role.FOLLOWER and node.leader_id == 3 and node.epoch == 5


def test_a_candidate_asks_again_only_once_the_request_timeout_passed() -> None:
    node, log = candidate_of_epoch_5()
    node.tick(5001)
    assert not sent(drain(node, log, now_ms=5001), VoteRequest)
    retry_at = 5000 + node.config.request_timeout_ms
    node.tick(retry_at)
    assert sorted(m.dst for m in sent(drain(node, log, now_ms=retry_at), VoteRequest)) == [2, 3]
